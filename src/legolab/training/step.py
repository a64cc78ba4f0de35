"""The optimiser and the training step: the hot path, kept lean."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.999), eps: float = 1e-8,
                   fused: bool | None = None) -> torch.optim.Optimizer:
    """AdamW (Adam when weight_decay is 0); matrices decay, biases, norms and scalars do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if fused is None:  # one kernel for the whole update: fewer, larger ops
        fused = all(p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def supervised_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, normaliser) -> torch.Tensor:
    """Cross-entropy summed over supervised read-outs, divided by ``normaliser``."""
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (per * mask.flatten()).sum() / normaliser


def make_train_step(model: nn.Module, opt: torch.optim.Optimizer, compile: bool = False, autocast_dtype=None):
    """Returns step(tokens, positions, targets, mask, depth, clip, normaliser=None) -> (loss, logits).

    ``mask`` (B, P) marks supervised read-outs; the loss is their summed cross-entropy divided by
    ``normaliser`` (default: their count), so data-parallel ranks can share one global count.
    """
    forward = torch.compile(model, dynamic=False) if compile else model
    device_type = next(model.parameters()).device.type

    def step(tokens, positions, targets, mask, depth=None, clip: float = 0.0, normaliser=None, key_padding=None):
        with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = forward(tokens, positions, depth=depth, key_padding=key_padding)
        loss = supervised_loss(logits.float(), targets, mask, mask.sum().clamp(min=1) if normaliser is None else normaliser)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        return loss.detach(), logits.detach()

    return step
