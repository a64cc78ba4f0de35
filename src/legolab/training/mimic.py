"""Mimicking initialisation (section 4.2.2, appendix B.3).

A randomly initialised model is trained, on random LEGO sentences and without labels, so that in
every layer head 0 matches the manipulation target and head 1 the association target:

  manipulation  weights 1, 2, 4, 2, 1 on offsets -2..2 around the diagonal (clipped at the edges),
                + 1e-3 everywhere, rows normalised;
  association   1 where positions i != j hold the same token, + 1e-3, rows normalised.

The loss is sum over layers of KL(p || target) for the two heads, with p = the head's attention
smoothed by the same 1e-3, averaged over rows and sentences: the direction and smoothing of the
paper's public code. The other heads are free. The result is saved as a run directory whose
``checkpoints/last.safetensors`` ``train.init`` can load.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..errors import LegoError
from ..io import write_jsonl, write_text
from ..models import build_model
from ..tasks import make_task
from .checkpoint import save_checkpoint
from .config import RunConfig
from .objectives.recipe import SMOOTH, association_target, kl_to_target
from .rundir import RunDir
from .schedule import lr_factor

BAND = (1.0, 2.0, 4.0, 2.0, 1.0)


def manipulation_target(T: int, device="cpu") -> torch.Tensor:
    offsets = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    t = torch.zeros(T, T)
    for off, w in zip(range(-2, 3), BAND):
        t[offsets == off] = w
    t = t + SMOOTH
    return (t / t.sum(-1, keepdim=True)).to(device)


def mimic_loss(model, tokens: torch.Tensor, depth: int | None = None) -> torch.Tensor:
    depth = depth or model.cfg.n_layers
    cache = model.activations(tokens, ["blocks.*.attn.hook_pattern"], depth=depth)
    manip, assoc = manipulation_target(tokens.shape[1], tokens.device), association_target(tokens)
    loss = 0.0
    for layer in range(depth):
        p = cache[f"blocks.{layer}.attn.hook_pattern"]
        loss = loss + kl_to_target(p[:, 0], manip) + kl_to_target(p[:, 1], assoc)
    return loss


def mimic(cfg: RunConfig, out_dir: str | Path, steps: int = 1000, batch_size: int = 64, lr: float | None = None,
          log_every: int = 50, log=print, residual_init: float = 0.0) -> list[dict]:
    """Train the mimicking objective for ``steps`` and save the initialisation in ``out_dir``.

    The model starts with its residual branches at ``residual_init`` (default 0): deeper layers
    then see clean token identities and learn their association heads too, which from BERT's
    initialisation only layer 0 did in our runs (docs/cpu_recipe.md). ``lr`` defaults to Adam at
    1e-2 below 256 wide and 3e-3 from there.
    """
    import dataclasses

    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, residual_init=residual_init))
    lr = lr or (1e-2 if cfg.model.d_model < 256 else 3e-3)
    if cfg.model.attention != "standard" or cfg.model.n_heads < 2:
        raise LegoError("mimic: needs standard softmax attention with at least 2 heads per layer")
    rd = RunDir.create(out_dir)  # published only once the initialisation is complete
    try:
        records = _mimic(cfg, rd, steps, batch_size, lr, log_every, log)
        rd.publish()
        return records
    except BaseException:
        rd.discard()
        raise
    finally:
        rd.close()


def _mimic(cfg: RunConfig, rd: RunDir, steps: int, batch_size: int, lr: float, log_every: int, log) -> list[dict]:
    if steps < 1 or batch_size < 1 or not lr > 0:
        raise LegoError(f"mimic: steps and batch size must be positive and lr a positive number "
                        f"(got {steps}, {batch_size}, {lr})")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.train.threads or torch.get_num_threads())
    task = make_task(cfg.task.get("name", "lego"), cfg.task_config(), seed=cfg.seed)
    model = build_model(cfg.model, task)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, 0, "cosine"))  # training/schedule.py
    held_out = torch.from_numpy(task.sample("mimic-test", range(200)).tokens).long()
    records, t0 = [], time.perf_counter()
    for step in range(1, steps + 1):
        tokens = torch.from_numpy(task.sample("mimic", range((step - 1) * batch_size, step * batch_size)).tokens).long()
        loss = mimic_loss(model, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                held = float(mimic_loss(model, held_out))
            model.train()
            records.append({"step": step, "loss": loss.item(), "held_out_loss": held, "time": time.perf_counter() - t0})
            log(f"mimic step {step:>6d}/{steps}  loss {loss.item():.4f}  held-out {held:.4f}")
    write_text(rd / "config.yaml", cfg.to_yaml())
    write_jsonl(rd / "mimic.jsonl", records)
    save_checkpoint(rd / "checkpoints" / "last.safetensors", model,
                    {"step": steps, "mimic": True, "config": cfg.to_dict()}, rng=False)
    return records
