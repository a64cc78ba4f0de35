"""Accuracy and loss per reasoning step (LEGO: per chain index)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .data import TensorBatch


@torch.no_grad()
def evaluate(model, data: TensorBatch, num_indices: int, depth: int | None = None, batch_size: int = 1000,
             device="cpu", reduce=None, autocast_dtype=None) -> dict:
    """Per-index accuracy and loss of ``model`` on ``data``.

    ``reduce`` sums the raw counts across data-parallel ranks (each holds a shard of ``data``).
    """
    was_training = model.training
    model.eval()
    sums = torch.zeros(3, num_indices, dtype=torch.float64, device=device)  # correct, loss, count
    for lo in range(0, len(data), batch_size):
        b = data[lo:lo + batch_size].to(device)
        with torch.autocast(torch.device(device).type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(b.tokens, b.positions, depth=depth, key_padding=b.key_padding()).float()
        loss = F.cross_entropy(logits.flatten(0, 1), b.targets.flatten(), reduction="none")
        correct = (logits.argmax(-1) == b.targets).flatten()
        index = b.index.flatten()
        valid = index >= 0
        idx = index[valid]
        sums[0].index_add_(0, idx, correct[valid].double())
        sums[1].index_add_(0, idx, loss[valid].double())
        sums[2].index_add_(0, idx, torch.ones_like(idx, dtype=torch.float64))
    if reduce is not None:
        reduce(sums)
    model.train(was_training)
    correct, loss, count = sums.cpu()
    seen = count > 0
    return {
        "acc": float(correct.sum() / count.sum()),
        "loss": float(loss.sum() / count.sum()),
        "acc_per_index": [float(c / n) if n else None for c, n in zip(correct, count)],
        "loss_per_index": [float(s / n) if n else None for s, n in zip(loss, count)],
        "count_per_index": [int(n) for n in count],
        "indices_seen": int(seen.sum()),
    }
