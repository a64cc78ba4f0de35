"""What every task provides: a vocabulary, batches of token ids with read-out positions, targets
and step indices, and counter-based randomness so that example i of a split is the same however
a dataset is batched or sliced.

A task says what each read-out position must predict (``targets``), where it is read
(``positions``) and which reasoning step it belongs to (``steps``: for LEGO the chain index), so
training can supervise a subset of steps and evaluation can report accuracy per step.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

PAD, BOS, EOS = "[PAD]", "[BOS]", "[EOS]"
# Token ids are int32: half the memory traffic of int64, and torch embeddings take them.
TOKEN_DTYPE = np.int32


class Vocab:
    """Token strings <-> ids. Id 0 is always padding."""

    def __init__(self, tokens: list[str]):
        if len(set(tokens)) != len(tokens):
            raise ValueError("duplicate tokens in vocabulary")
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token: str) -> int:
        return self.ids[token]

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.ids[t] for t in tokens]

    def decode(self, ids) -> list[str]:
        return [self.tokens[int(i)] for i in ids]


@dataclass
class Batch:
    """A batch of examples as numpy arrays (converted to tensors by the training code).
    Token ids are int32; the other arrays may be any small integer type.

    tokens:    (B, T) token ids, PAD-padded
    positions: (B, P) index into T of each read-out token
    targets:   (B, P) class id each read-out must predict
    steps:     (B, P) reasoning step of each read-out (LEGO: chain index), -1 for padding
    meta:      task-specific arrays, e.g. LEGO's chain-order variables and values
    """

    tokens: np.ndarray
    positions: np.ndarray
    targets: np.ndarray
    steps: np.ndarray
    meta: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, sl) -> Batch:
        return Batch(self.tokens[sl], self.positions[sl], self.targets[sl], self.steps[sl],
                     {k: v[sl] for k, v in self.meta.items()})

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        return Batch(*(np.concatenate([getattr(b, f) for b in batches]) for f in ("tokens", "positions", "targets", "steps")),
                     {k: np.concatenate([b.meta[k] for b in batches]) for k in batches[0].meta})


class Task(Protocol):
    """The interface training and analysis rely on."""

    name: ClassVar[str]
    vocab: Vocab
    num_classes: int       # classes a read-out predicts
    num_steps: int         # distinct step indices (LEGO: chain length n)
    seq_len: int           # token length of every example (max length if variable)

    def sample(self, split: str, indices: np.ndarray) -> Batch:
        """Examples ``indices`` of ``split``; example i depends only on (config, split, i)."""
        ...

    def class_names(self) -> list[str]:
        ...


# ---- per-index randomness -----------------------------------------------------------------
# Example i of (seed, split) reads its random words from block i // BLOCK of a PCG64 stream
# keyed by (seed, split, block): a whole batch is drawn with a few vectorised calls, and any
# example can be drawn without drawing the ones before it. random_raw is numpy's stable raw
# bit stream, so the bytes do not depend on the numpy version's sampling algorithms.

BLOCK = 1024


def split_key(split: str) -> int:
    return zlib.crc32(split.encode())


def random_words(seed: int, split: str, indices: np.ndarray, width: int) -> np.ndarray:
    """(len(indices), width) uniform uint64 words; row i depends only on (seed, split, indices[i])."""
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if not len(indices):
        return np.empty((0, width), dtype=np.uint64)
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0:
        raise ValueError("example indices must be non-negative")
    contiguous = hi - lo + 1 == len(indices) and (len(indices) == 1 or bool((np.diff(indices) == 1).all()))
    blocks = np.arange(lo // BLOCK, hi // BLOCK + 1) if contiguous else np.unique(indices // BLOCK)
    raw = np.empty((len(blocks), BLOCK, width), dtype=np.uint64)
    key = split_key(split)
    for i, b in enumerate(blocks.tolist()):
        bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(key, b)))
        raw[i] = bits.random_raw(BLOCK * width).reshape(BLOCK, width)
    if contiguous:  # the common case (a dataset, a training step): a slice, no gather
        start = lo - int(blocks[0]) * BLOCK
        return raw.reshape(-1, width)[start:start + len(indices)]
    return raw[np.searchsorted(blocks, indices // BLOCK), indices % BLOCK]


def random_u32(words: np.ndarray) -> np.ndarray:
    """Split (B, W) 64-bit words into (B, 2W) 32-bit values (as uint64), endianness-independent."""
    return np.concatenate([words >> np.uint64(32), words & np.uint64(0xFFFFFFFF)], axis=1)


def uniform_ints(u32: np.ndarray, k) -> np.ndarray:
    """Map uniform 32-bit values to integers in [0, k) (multiply-shift; bias below k / 2**32)."""
    return ((u32 * np.asarray(k, dtype=np.uint64)) >> np.uint64(32)).astype(np.int64)


def random_permutations(u32: np.ndarray) -> np.ndarray:
    """A uniform random permutation per row from (B, m) 32-bit keys.

    The column index breaks ties, so keys are distinct and every sort algorithm agrees; a tie
    (probability ~m^2 / 2^33 per row) only nudges uniformity, never determinism.
    """
    m = u32.shape[1]
    keys = ((u32 << np.uint64(16)) | np.arange(m, dtype=np.uint64)).view(np.int64)
    return np.argsort(keys, axis=1)
