"""Task batches as tensors, and the order in which training sees them.

Everything here is a pure function of (seed, step): a resumed run draws exactly the batches an
uninterrupted run would have drawn, with no sampler state to save.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..tasks.base import Batch


@dataclass
class TensorBatch:
    tokens: torch.Tensor     # (B, T) int32
    positions: torch.Tensor  # (B, P) int64
    targets: torch.Tensor    # (B, P) int64
    index: torch.Tensor      # (B, P) int64, -1 at padding

    @staticmethod
    def from_batch(b: Batch, device="cpu") -> TensorBatch:
        return TensorBatch(torch.from_numpy(b.tokens).to(device),
                           *(torch.from_numpy(a.astype(np.int64)).to(device) for a in (b.positions, b.targets, b.index)))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, idx) -> TensorBatch:
        return TensorBatch(self.tokens[idx], self.positions[idx], self.targets[idx], self.index[idx])

    def to(self, device) -> TensorBatch:
        return TensorBatch(*(t.to(device, non_blocking=True) for t in (self.tokens, self.positions, self.targets, self.index)))

    def key_padding(self, pad_id: int = 0) -> torch.Tensor | None:
        """(B, T) True at padding, or None for a batch without any (the common, fast case)."""
        mask = self.tokens == pad_id
        return mask if bool(mask.any()) else None


def epoch_permutation(seed: int, epoch: int, size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(size, generator=g)


def sample_depth(seed: int, step: int, low: int, high: int) -> int:
    """Stochastic depth: uniform in [low, high], a function of (seed, step) alone."""
    return int(np.random.default_rng([seed, step, 0x5D]).integers(low, high + 1))
