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

import json
import signal
import time
from pathlib import Path

import torch

from ..errors import Interrupted, LegoError
from ..io import read_jsonl, write_jsonl, write_text
from ..models import build_model
from ..tasks import make_task
from .checkpoint import load_model_weights, model_weights, read_checkpoint, restore_training_state, save_checkpoint
from .config import RunConfig
from .objectives.recipe import SMOOTH, association_target, kl_to_target
from .rundir import RunDir
from .schedule import lr_factor
from .step import resolve_dtype

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


WIDE = 256  # from this width the stage trains at lr 3e-3 with dropout 0.1 (below: 1e-2, the run's dropout)


def stage_config(cfg: RunConfig, residual_init: float = 0.0, dropout: float | None = None) -> RunConfig:
    """The run's config as the mimicking stage trains it: residual branches at ``residual_init``,
    hidden and attention dropout at ``dropout``. None: 0.1 from 256 wide, the run's own below.
    Measured (held-out KL after 400 steps of 32, docs/cpu_recipe.md): MiniLM's shape fits far
    better with 0.1 (0.95 against 6.11 without), the CPU recipe's 64-wide encoder far worse
    (6.91 against 2.06)."""
    import dataclasses

    if dropout is None and cfg.model.d_model >= WIDE:
        dropout = 0.1
    model = dataclasses.replace(cfg.model, residual_init=residual_init)
    if dropout is not None:
        model = dataclasses.replace(model, dropout=dropout, attn_dropout=dropout)
    return dataclasses.replace(cfg, model=model)


def mimic(cfg: RunConfig, out_dir: str | Path, steps: int = 1000, batch_size: int = 64, lr: float | None = None,
          log_every: int = 50, log=print, residual_init: float = 0.0, dropout: float | None = None) -> list[dict]:
    """Train the mimicking objective for ``steps`` and save the initialisation in ``out_dir``.

    The model starts with its residual branches at ``residual_init`` (default 0): deeper layers
    then see clean token identities and learn their association heads too, which from BERT's
    initialisation only layer 0 did in our runs (docs/cpu_recipe.md). ``lr`` defaults to Adam at
    1e-2 below 256 wide and 3e-3 from there; ``dropout`` (hidden and attention) to 0.1 from 256
    wide and to the run's below (``stage_config``). It runs in the run's precision
    (``train.dtype``: bf16 autocast where the CPU has bf16 matrix units), as training does.

    SIGINT / SIGTERM stop it with ``checkpoints/partial.safetensors`` saved (``Interrupted``); the
    same call then continues from that step and ends with the weights of an uninterrupted stage.
    """
    cfg = stage_config(cfg, residual_init, dropout)
    lr = lr or (1e-2 if cfg.model.d_model < WIDE else 3e-3)
    if cfg.model.attention != "standard" or cfg.model.n_heads < 2:
        raise LegoError("mimic: needs standard softmax attention with at least 2 heads per layer")
    if steps < 1 or batch_size < 1 or not lr > 0:
        raise LegoError(f"mimic: steps and batch size must be positive and lr a positive number "
                        f"(got {steps}, {batch_size}, {lr})")
    settings = {"steps": steps, "batch_size": batch_size, "lr": lr, "config": cfg.to_dict()}
    partial = Path(out_dir) / "checkpoints" / PARTIAL
    # a new stage is published only once it is complete or checkpointed by a signal
    rd = RunDir.resume(out_dir) if partial.is_file() else RunDir.create(out_dir)
    try:
        records = _mimic(cfg, rd, settings, log_every, log)
        rd.publish()
        return records
    except Interrupted:
        rd.publish()
        raise
    except BaseException:
        rd.discard()
        raise
    finally:
        rd.close()


PARTIAL = "partial.safetensors"  # an interrupted stage: model, optimiser, RNG and step


def _mimic(cfg: RunConfig, rd: RunDir, settings: dict, log_every: int, log) -> list[dict]:
    from .trainer import _Signals

    steps, batch_size, lr = settings["steps"], settings["batch_size"], settings["lr"]
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.train.threads or torch.get_num_threads())
    task = make_task(cfg.task.get("name", "lego"), cfg.task_config(), seed=cfg.seed)
    model = build_model(cfg.model, task)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    done, records = 0, []
    if (rd / "checkpoints" / PARTIAL).is_file():
        done, records = _restore(rd, settings, model, opt)
        log(f"mimic: continuing {rd.path} from step {done:,} of {steps:,}")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, 0, "cosine"),  # training/schedule.py
                                              last_epoch=done - 1)
    held_out = torch.from_numpy(task.sample("mimic-test", range(200)).tokens).long()
    dtype, _ = resolve_dtype(cfg.train.dtype, torch.device("cpu"))  # the run's own precision (bf16 on matrix units)

    def autocast():
        return torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None)

    t0 = time.perf_counter() - (records[-1]["time"] if records else 0.0)
    with _Signals() as signals:
        for step in range(done + 1, steps + 1):
            tokens = torch.from_numpy(task.sample("mimic", range((step - 1) * batch_size, step * batch_size)).tokens).long()
            with autocast():
                loss = mimic_loss(model, tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if step % log_every == 0 or step == steps:
                model.eval()
                with torch.no_grad(), autocast():
                    held = float(mimic_loss(model, held_out))
                model.train()
                records.append({"step": step, "loss": loss.item(), "held_out_loss": held, "time": time.perf_counter() - t0})
                log(f"mimic step {step:>6d}/{steps}  loss {loss.item():.4f}  held-out {held:.4f}")
            if signals.caught is not None and step < steps:
                write_text(rd / "config.yaml", cfg.to_yaml())
                write_jsonl(rd / "mimic.jsonl", records)
                save_checkpoint(rd / "checkpoints" / PARTIAL, model, {"step": step, "mimic": settings}, optimizer=opt)
                raise Interrupted(signals.caught, f"{rd.path}: mimicking stopped at step {step:,} of {steps:,} "
                                                  f"({signal.Signals(signals.caught).name}), checkpoint saved; "
                                                  "the same command continues from there")
    write_text(rd / "config.yaml", cfg.to_yaml())
    write_jsonl(rd / "mimic.jsonl", records)
    save_checkpoint(rd / "checkpoints" / "last.safetensors", model,
                    {"step": steps, "mimic": True, "config": cfg.to_dict()}, rng=False)
    (rd / "checkpoints" / PARTIAL).unlink(missing_ok=True)
    if signals.caught is not None:  # caught at the last step: the stage is whole, nothing more starts
        raise Interrupted(signals.caught, f"{rd.path}: mimicking stage complete, stopped before training")
    return records


def _restore(rd: RunDir, settings: dict, model, opt) -> tuple[int, list[dict]]:
    tensors, meta = read_checkpoint(rd / "checkpoints" / PARTIAL)
    if meta.get("mimic") != json.loads(json.dumps(settings)):
        raise LegoError(f"{rd.path} holds an interrupted mimicking stage of other settings (steps, batch size, lr "
                        f"or model): move it away to start a new one")
    load_model_weights(model, model_weights(tensors), str(rd.path))
    restore_training_state(tensors, meta, opt, "cpu")
    step = int(meta["step"])
    return step, [r for r in read_jsonl(rd / "mimic.jsonl") if r["step"] <= step]
