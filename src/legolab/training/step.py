"""The optimiser and the training step: the hot path, kept lean."""

from __future__ import annotations

from pathlib import Path

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


def bf16_matrix_units(device: torch.device) -> bool:
    """Whether bf16 matmuls run on dedicated units here (CPU: AMX or AVX512-BF16; CUDA: sm80+)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_dtype(name: str, device: torch.device) -> tuple[torch.dtype | None, str | None]:
    """(autocast dtype or None for fp32, a line to print when ``auto`` falls back to fp32)."""
    if name == "bf16":
        return torch.bfloat16, None
    if name == "auto":
        if bf16_matrix_units(device):
            return torch.bfloat16, None
        return None, f"train.dtype=auto: no bf16 matrix units on this {device.type}, training in fp32"
    return None, None


def supervised_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, normaliser) -> torch.Tensor:
    """Cross-entropy summed over supervised read-outs, divided by ``normaliser``."""
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (per * mask.flatten()).sum() / normaliser


def make_train_step(model: nn.Module, opt: torch.optim.Optimizer, compile: bool = False, autocast_dtype=None):
    """Returns step(tokens, positions, targets, mask, depth, clip, normaliser=None) -> (loss, logits).

    ``mask`` (B, P) marks supervised read-outs; the loss is their summed cross-entropy divided by
    ``normaliser`` (default: their count), so data-parallel ranks can share one global count.
    ``guide`` > 0 adds that multiple of the association-guidance loss (``guidance_loss``).
    """
    forward = torch.compile(model, dynamic=False) if compile else model
    base = getattr(model, "module", model)  # under DDP, the encoder itself
    device_type = next(model.parameters()).device.type

    def step(tokens, positions, targets, mask, depth=None, clip: float = 0.0, normaliser=None, key_padding=None,
             guide: float = 0.0, scaffold: float = 0.0, deep: float = 0.0):
        norm = mask.sum().clamp(min=1) if normaliser is None else normaliser
        with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            if guide or deep or scaffold:  # eager: a compiled graph would be rebuilt for every ramp value
                from ..models.attention import ActivationCache

                names = [SCORES] * bool(guide) + [RESIDUALS] * bool(deep)
                cache = ActivationCache(names) if names else None
                logits = model(tokens, positions, depth=depth, key_padding=key_padding, cache=cache, scaffold=scaffold)
            else:
                logits = forward(tokens, positions, depth=depth, key_padding=key_padding)
            if deep:  # the same classifier read after every earlier block
                hidden = [v for k, v in cache.items() if k.endswith("hook_resid_post")][:-1]
                early = [base.readout(h, positions) for h in hidden]
        loss = supervised_loss(logits.float(), targets, mask, norm)
        if deep and early:
            loss = loss + deep / len(early) * sum(supervised_loss(e.float(), targets, mask, norm) for e in early)
        if guide:
            loss = loss + guide * guidance_loss(cache, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        return loss.detach(), logits.detach()

    return step


SCORES = "blocks.*.attn.hook_attn_scores"
RESIDUALS = "blocks.*.hook_resid_post"
SMOOTH = 1e-3


def association_target(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T): each position's attention spread evenly over the other positions holding its
    token (the paper's association map), smoothed by 1e-3 so that a unique token's row is uniform."""
    from ..models.attention import same_token_mask

    t = same_token_mask(tokens).float() + SMOOTH
    return t / t.sum(-1, keepdim=True)


def kl_to_target(pattern: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows and sentences of KL(p || target), p smoothed like the target."""
    p = pattern.float() + SMOOTH
    p = p / p.sum(-1, keepdim=True)
    return (p * (p.log() - target.log())).sum(-1).mean()


def guidance_loss(cache: dict, tokens: torch.Tensor, head: int = 0) -> torch.Tensor:
    """Sum over layers of KL(head ``head``'s attention || association target): the mimicking
    objective (section 4.2.2) used as an auxiliary loss while the task is learned. It reads the
    head's *learned* scores (``hook_attn_scores``, before the scaffold's bias), so that the head's
    own queries and keys learn the association the scaffold provides, and keep it once the
    scaffold is gone (docs/cpu_recipe.md)."""
    target = association_target(tokens)
    scores = [v for k, v in cache.items() if k.endswith("attn.hook_attn_scores")]
    return sum(kl_to_target(s[:, head].float().softmax(-1), target) for s in scores)
