"""Training objectives besides the task's own loss, in a registry: a new one is one file here.

Each optimiser step's loss is the supervised cross-entropy of the read-outs plus, for every
registered objective whose weight at that step is non-zero, the term it returns. An objective
names the activations it reads (hook patterns, as ``models.attention.ActivationCache`` takes
them); only those are cached, and only on steps that use them.

Weights: ``train.objectives`` maps a registered name to a constant weight
(``train.objectives={entropy: 0.1}``); the CPU recipe's two built-ins have their own
fields and schedules (``train.deep``; ``train.guide`` for ``guide_steps`` steps, then a ramp),
in ``recipe.py``. Every module of this package is imported here, so a new objective is one new
file that registers itself:

    @register_objective("entropy", hooks=("blocks.*.attn.hook_pattern",))
    def attention_entropy(ctx: StepContext, weight: float) -> torch.Tensor:
        patterns = [v for k, v in ctx.cache.items() if k.endswith("hook_pattern")]
        return weight * sum(-(p * p.clamp_min(1e-9).log()).sum(-1).mean() for p in patterns)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class StepContext:
    """What an objective may read at one optimiser step (under the step's autocast)."""
    model: nn.Module             # the encoder with its head (``hidden`` / ``readout``), unwrapped from DDP
    tokens: torch.Tensor         # (B, T)
    positions: torch.Tensor      # (B, P) read-out positions
    targets: torch.Tensor        # (B, P)
    mask: torch.Tensor           # (B, P) weight of each read-out in the task loss (0: unsupervised)
    normaliser: torch.Tensor     # what the task loss divides its sum by
    logits: torch.Tensor         # (B, P, classes) the model's read-outs
    cache: dict                  # the activations the step's objectives asked for


@dataclass(frozen=True)
class Objective:
    name: str
    loss: Callable[[StepContext, float], torch.Tensor | None]   # the weighted term, or None (nothing to add)
    hooks: tuple[str, ...] = ()
    weight: Callable[[object, int], float] | None = None        # (train config, step) -> weight; None: train.objectives


OBJECTIVES: dict[str, Objective] = {}


def register_objective(name: str, hooks: tuple[str, ...] = (), weight: Callable[[object, int], float] | None = None):
    """Register ``loss(ctx, weight) -> term`` under ``name``. Terms are added in registration order."""
    def add(loss):
        if name in OBJECTIVES:
            raise ValueError(f"objective {name!r} is already registered")
        OBJECTIVES[name] = Objective(name, loss, tuple(hooks), weight)
        return loss
    return add


def objective_weights(train, step: int) -> dict[str, float]:
    """The non-zero objective weights at optimiser ``step`` of a run trained with ``train``."""
    weights = {}
    for name, objective in OBJECTIVES.items():
        w = objective.weight(train, step) if objective.weight else (train.objectives or {}).get(name, 0.0)
        if w:
            weights[name] = w
    return weights


def ramp(weight: float, steps: int, step: int) -> float:
    """``weight`` for ``steps`` steps, then linearly to 0 over as many again."""
    if not weight or step >= 2 * steps:
        return 0.0
    return weight * min(1.0, 2.0 - step / steps)


def supervised_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, normaliser) -> torch.Tensor:
    """Cross-entropy summed over supervised read-outs, divided by ``normaliser``."""
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (per * mask.flatten()).sum() / normaliser


for _module in pkgutil.iter_modules(__path__):  # each module registers its objectives
    importlib.import_module(f"{__name__}.{_module.name}")
