"""The optimiser and the training step: the hot path, kept lean."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..models.attention import ActivationCache
from .objectives import OBJECTIVES, StepContext, supervised_loss


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


def machine_name(device: torch.device | None = None) -> str:
    """The CPU's or GPU's model name; a CPU says when it lacks bf16 units (the same recipe runs
    2-3x slower there, so a time needs its machine)."""
    device = device or torch.device("cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = "cpu"
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return name if bf16_matrix_units(device) else f"{name} without bf16 units"


def machine_label(device: torch.device, dtype: torch.dtype | None = None, world: int = 1) -> str:
    """What a run's times were measured on, e.g. "AMD EPYC without bf16 units, 1 thread, fp32"."""
    label = f"{world} x " if world > 1 else ""
    label += machine_name(device)
    if device.type == "cpu":
        threads = torch.get_num_threads()
        label += f", {threads} thread{'s' if threads > 1 else ''}"
    return f"{label}, {'bf16' if dtype == torch.bfloat16 else 'fp32'}"


def resolve_dtype(name: str, device: torch.device) -> tuple[torch.dtype | None, str | None]:
    """(autocast dtype or None for fp32, a line to print when ``auto`` falls back to fp32)."""
    if name == "bf16":
        return torch.bfloat16, None
    if name == "auto":
        if bf16_matrix_units(device):
            return torch.bfloat16, None
        return None, f"train.dtype=auto: no bf16 matrix units on this {device.type}, training in fp32"
    return None, None


def make_train_step(model: nn.Module, opt: torch.optim.Optimizer, compile: bool = False, autocast_dtype=None):
    """Returns step(tokens, positions, targets, mask, depth, clip, normaliser=None, ...) -> (loss, logits).

    ``mask`` (B, P) weighs the read-outs (0: unsupervised); the loss is their summed cross-entropy
    divided by ``normaliser`` (default: the mask's sum), so data-parallel ranks can share one
    global count, plus the term of each objective in ``objectives`` (name -> weight at this step,
    see ``objectives.py``). ``scaffold``: the association scaffold's bias at this step.
    """
    forward = torch.compile(model, dynamic=False) if compile else model
    base = getattr(model, "module", model)  # under DDP, the encoder itself
    device_type = next(model.parameters()).device.type

    def step(tokens, positions, targets, mask, depth=None, clip: float = 0.0, normaliser=None, key_padding=None,
             objectives: dict[str, float] | None = None, scaffold: float = 0.0):
        norm = mask.sum().clamp(min=1) if normaliser is None else normaliser
        active = [(OBJECTIVES[name], w) for name, w in (objectives or {}).items() if w]
        terms = []
        with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            if active or scaffold:  # eager: a compiled graph would be rebuilt for every ramp value
                hooks = [h for o, _ in active for h in o.hooks]
                cache = ActivationCache(hooks) if hooks else None
                logits = model(tokens, positions, depth=depth, key_padding=key_padding, cache=cache, scaffold=scaffold)
                ctx = StepContext(base, tokens, positions, targets, mask, norm, logits, cache if cache is not None else {})
                terms = [o.loss(ctx, w) for o, w in active]
            else:
                logits = forward(tokens, positions, depth=depth, key_padding=key_padding)
        loss = supervised_loss(logits.float(), targets, mask, norm)
        for term in terms:
            if term is not None:
                loss = loss + term
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        return loss.detach(), logits.detach()

    return step

