"""The learning-rate schedule every training loop uses: linear warmup, then cosine, linear or
constant down to a floor ``min_lr`` (a fraction of the peak)."""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "linear", "constant")


def lr_factor(step: int, total: int, warmup: float, schedule: str = "cosine", min_lr: float = 0.0) -> float:
    """Multiplier of the peak learning rate at ``step`` (0-based) of ``total``; ``warmup`` is a
    fraction of ``total`` (< 1) or a number of steps (>= 1)."""
    warm = int(warmup) if warmup >= 1 else round(warmup * total)
    if step < warm:
        return (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    if schedule == "cosine":
        shape = 0.5 * (1 + math.cos(math.pi * p))
    elif schedule == "linear":
        shape = 1 - p
    else:
        shape = 1.0
    return min_lr + (1 - min_lr) * shape
