"""The CPU recipe's two objectives (docs/cpu_recipe.md): deep supervision and association guidance."""

from __future__ import annotations

import torch

from . import StepContext, ramp, register_objective, supervised_loss

SCORES = "blocks.*.attn.hook_attn_scores"
RESIDUALS = "blocks.*.hook_resid_post"
SMOOTH = 1e-3


@register_objective("deep", hooks=(RESIDUALS,), weight=lambda train, step: train.deep)
def deep_supervision(ctx: StepContext, weight: float) -> torch.Tensor | None:
    """The same classifier read after every earlier block, the mean of those losses: each value
    is then computed as early as depth allows."""
    hidden = [v for k, v in ctx.cache.items() if k.endswith("hook_resid_post")][:-1]
    if not hidden:
        return None
    early = [ctx.model.readout(h, ctx.positions) for h in hidden]
    return weight / len(early) * sum(supervised_loss(e.float(), ctx.targets, ctx.mask, ctx.normaliser) for e in early)


@register_objective("guide", hooks=(SCORES,), weight=lambda train, step: ramp(train.guide, train.guide_steps, step))
def association_guidance(ctx: StepContext, weight: float) -> torch.Tensor:
    return weight * guidance_loss(ctx.cache, ctx.tokens)


def association_target(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T): each position's attention spread evenly over the other positions holding its
    token (the paper's association map), smoothed by 1e-3 so that a unique token's row is uniform."""
    from ...models.attention import same_token_mask

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
