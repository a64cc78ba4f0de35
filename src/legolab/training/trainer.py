"""The training loop: one function, top to bottom (nanoGPT style).

A run directory ``runs/<name>/`` holds
    config.yaml      the resolved configuration
    metrics.jsonl    one record per evaluation (rewritten atomically)
    checkpoints/last.safetensors, checkpoints/best.safetensors
Every file is written atomically. ``resume`` continues from ``last`` and, on CPU, ends with
exactly the metrics of an uninterrupted run: batches, depths and dropout masks are functions of
(seed, step) or restored RNG state.

Data-parallel training: launched by ``torchrun``, each rank takes an equal slice of every global
batch and DistributedDataParallel averages gradients; the loss is normalised by the global count
of supervised read-outs, so K ranks compute the same update as one process.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import torch

from ..errors import LegoError
from ..io import read_jsonl, write_jsonl, write_text
from ..models import Encoder, build_model
from ..tasks import make_task
from .checkpoint import load_model_weights, model_weights, read_checkpoint, restore_training_state, save_checkpoint
from .config import RunConfig, diff_configs, load_config
from .data import TensorBatch, epoch_permutation, sample_depth
from .evaluate import evaluate
from .step import make_optimizer, make_train_step, resolve_dtype

# Keys that may differ when resuming: they change where and how fast, not what is computed.
RESUMABLE_CHANGES = ("train.threads",)


# ---- set-up helpers -----------------------------------------------------------------------
class Distributed:
    """Rank information; a single process is world size 1."""

    def __init__(self, device_pref: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device_pref == "auto":
            device_pref = "cuda" if torch.cuda.is_available() else "cpu"
        if device_pref.startswith("cuda") and not torch.cuda.is_available():
            raise LegoError("train.device: CUDA was asked for but torch sees no GPU")
        if device_pref == "cuda" and self.world > 1:
            device_pref = f"cuda:{local}"
        self.device = torch.device(device_pref)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            import torch.distributed as dist

            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, t: torch.Tensor) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(t)

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()  # no rank leaves (taking the store with it) while another still talks
            dist.destroy_process_group()


def lr_factor(step: int, total: int, cfg) -> float:
    warm = int(cfg.warmup) if cfg.warmup >= 1 else round(cfg.warmup * total)
    if step < warm:
        return (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    if cfg.schedule == "cosine":
        shape = 0.5 * (1 + math.cos(math.pi * p))
    elif cfg.schedule == "linear":
        shape = 1 - p
    else:
        shape = 1.0
    return cfg.min_lr + (1 - cfg.min_lr) * shape


def initialise(model: Encoder, init: str, task) -> str:
    """Apply ``train.init``; returns a description of what was loaded."""
    if init == "random":
        return "random initialisation"
    if init == "minilm" or init.startswith("hf:"):
        from ..models.hf import load_pretrained_into

        return load_pretrained_into(model, init, task)
    path = Path(init)
    if path.is_dir():
        path = path / "checkpoints" / "last.safetensors"
        if not path.is_file():
            raise LegoError(f"train.init: run directory {init!r} has no checkpoint (checkpoints/last.safetensors)")
    tensors, meta = read_checkpoint(path)
    if meta.get("kind") == "pretrain":  # a masked-LM encoder: everything but the task's head
        from .pretrain import encoder_weights_from_pretraining

        weights = encoder_weights_from_pretraining(tensors)
        own = model.state_dict()
        weights.update({k: v for k, v in own.items() if k.startswith("head.") or k == "input_map"})
        if model.input_map is None:
            raise LegoError(f"train.init {init!r}: a pretrained masked-LM reads word pieces: set model.tokenizer: wordpiece")
        load_model_weights(model, weights, f"train.init {init!r}")
        return f"masked-LM pretrained encoder from {path}"
    load_model_weights(model, model_weights(tensors), f"train.init {init!r}")
    return f"weights from {path}"


# ---- the loop -----------------------------------------------------------------------------
def train(cfg: RunConfig, run_dir: str | Path, resume: bool = False, progress: bool | None = None,
          stop=None) -> list[dict]:
    """Train (or resume) the run in ``run_dir``; returns the metric records. ``stop(record)``,
    called after every evaluation, ends the run early when it returns true (a time-to-accuracy
    benchmark's stopping rule); the last checkpoint is then at that evaluation."""
    run_dir = Path(run_dir)
    tc = cfg.train
    dist = Distributed(tc.device)
    try:
        return _train(cfg, run_dir, resume, progress, dist, stop)
    finally:
        dist.close()


def _train(cfg: RunConfig, run_dir: Path, resume: bool, progress, dist: Distributed, stop=None) -> list[dict]:
    tc, device = cfg.train, dist.device
    torch.set_num_threads(tc.threads or max(1, (os.cpu_count() or 1) // dist.world))
    torch.manual_seed(cfg.seed)
    if tc.batch_size % dist.world:
        raise LegoError(f"train.batch_size: {tc.batch_size} is not divisible by the {dist.world} processes")

    task_cfg = cfg.task_config()
    task = make_task(cfg.task.get("name", "lego"), task_cfg, seed=cfg.seed)
    n = task.num_steps
    model = build_model(cfg.model, task).to(device)
    init_note = initialise(model, tc.init, task) if not resume else "resumed"
    opt = make_optimizer(model, tc.lr, tc.weight_decay, (tc.beta1, tc.beta2))

    # data: the test set is sharded across ranks; a fixed training set lives on every rank
    test = TensorBatch.from_batch(task.sample("test", range(tc.test_size)))[dist.rank::dist.world]
    fixed = TensorBatch.from_batch(task.sample("train", range(tc.train_size)), device) if tc.train_size else None
    steps_per_epoch, total = tc.steps_per_epoch(), tc.total_steps()
    eval_every = tc.eval_every or steps_per_epoch
    supervised = torch.zeros(n, dtype=torch.bool)
    supervised[tc.supervised_steps(n)] = True
    supervised = supervised.to(device)
    variable_length = getattr(task_cfg, "n_min", None) is not None
    eval_depth = tc.eval_depth or None
    stages = {n: task}

    def stage_task(k: int):
        """The task at chain length k (a curriculum stage); same vocabulary, own random stream."""
        if k not in stages:
            fixed_length = {"n": k, **({"n_min": None} if hasattr(task_cfg, "n_min") else {})}
            stages[k] = make_task(cfg.task.get("name", "lego"), dataclasses.replace(task_cfg, **fixed_length),
                                  seed=cfg.seed * 1_000_003 + k)
        return stages[k]

    # state: fresh, or the last checkpoint
    step, records, best, elapsed = 0, [], None, 0.0
    if resume:
        ckpt = run_dir / "checkpoints" / "last.safetensors"
        if not ckpt.is_file():
            raise LegoError(f"{run_dir}: nothing to resume, no checkpoint yet (checkpoints/last.safetensors)")
        tensors, meta = read_checkpoint(ckpt)
        load_model_weights(model, model_weights(tensors), str(ckpt))
        restore_training_state(tensors, meta, opt, device)
        step, best, elapsed = meta["step"], meta.get("best"), meta.get("elapsed", 0.0)
        records = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["step"] <= step]
    elif dist.main:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", cfg.to_yaml())
        write_jsonl(run_dir / "metrics.jsonl", [])

    wrapped = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    dtype, dtype_note = resolve_dtype(tc.dtype, device)
    if dtype_note and dist.main:
        print(dtype_note, file=sys.stderr)
    train_step = make_train_step(wrapped, opt, compile=tc.compile, autocast_dtype=dtype)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, tc), last_epoch=step - 1)

    reporter = Reporter(cfg, model, total, supervised.cpu(), init_note, dist.main, progress, step, records)
    acc_sums = torch.zeros(3, device=device)  # loss sum, correct, count over supervised read-outs
    local = tc.batch_size // dist.world
    t0 = time.perf_counter()
    order, order_epoch = None, -1
    while step < total:
        # the global batch of this step, then this rank's slice of it
        if fixed is not None:
            epoch, within = divmod(step, steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = epoch_permutation(cfg.seed, epoch, len(fixed)).to(device), epoch
            idx = order[within * tc.batch_size:(within + 1) * tc.batch_size]
            batch = fixed[idx[dist.rank * local:(dist.rank + 1) * local]]
            global_steps = fixed.steps[idx]
        else:
            lo = step * tc.batch_size
            source = stage_task(tc.chain_length(step, n, cfg.seed))
            raw = source.sample("train", range(lo + dist.rank * local, lo + (dist.rank + 1) * local))
            batch = TensorBatch.from_batch(raw)
            global_steps = None
        batch = batch.to(device)
        mask = (batch.steps >= 0) & supervised[batch.steps.clamp(min=0)]
        aux = None
        if tc.aux_operand:  # extra read-outs after the task's own; weights instead of a boolean mask
            aux = [torch.from_numpy(a).to(device) for a in source.operand_readouts(raw)]
            aux_mask = (aux[2] >= 0) & supervised[aux[2].clamp(min=0)]
        if dist.world > 1:  # every rank divides by the global count; DDP averages, so scale by world
            total_count = _global_count(global_steps, supervised) if global_steps is not None else _all_count(mask, dist)
            count = total_count / dist.world
        else:
            count = None
        depth = sample_depth(cfg.seed, step, tc.depth_min, tc.depth_max) if tc.depth_max else None
        positions, targets, weights = batch.positions, batch.targets, mask
        if aux is not None:
            P = positions.shape[1]
            positions, targets = torch.cat([positions, aux[0]], 1), torch.cat([targets, aux[1]], 1)
            weights = torch.cat([mask.float(), tc.aux_operand * aux_mask.float()], 1)
            count = mask.sum().clamp(min=1) if count is None else count
        loss, logits = train_step(batch.tokens, positions, targets, weights, depth=depth, clip=tc.clip,
                                  normaliser=count, key_padding=batch.key_padding() if variable_length else None,
                                  guide=tc.guide_weight(step), scaffold=tc.scaffold_bias(step), deep=tc.deep)
        if aux is not None:
            logits = logits[:, :P]
        sched.step()
        step += 1
        with torch.no_grad():
            m = mask.sum()
            acc_sums += torch.stack([loss * (m if count is None else count),  # this rank's loss sum
                                     ((logits.argmax(-1) == batch.targets) & mask).sum(), m.float()])
        reporter.on_step(step, float(loss) if reporter.live else None)

        if step % eval_every == 0 or step == total:
            elapsed += time.perf_counter() - t0
            dist.all_reduce(acc_sums)
            result = evaluate(model, test, n, depth=eval_depth, batch_size=tc.eval_batch_size, device=device,
                              reduce=dist.all_reduce, autocast_dtype=dtype)
            loss_sum, correct, count_sum = acc_sums.tolist()
            acc_sums.zero_()
            if not math.isfinite(loss_sum):  # never save diverged weights over good ones
                reporter.finish(records)
                kept = f"the last good checkpoint is step {records[-1]['step']}" if records else "no checkpoint was written"
                raise LegoError(f"{run_dir}: the training loss became non-finite before step {step}; {kept}")
            record = {
                "step": step, "epoch": round(step / steps_per_epoch, 6), "sentences": step * tc.batch_size,
                "time": round(elapsed, 3), "lr": sched.get_last_lr()[0],
                "train_loss": loss_sum / max(count_sum, 1),
                "train_acc": correct / max(count_sum, 1),
                "test_acc": result["acc"], "test_loss": result["loss"],
                "test_acc_supervised": _mean([a for a, s in zip(result["acc_per_step"], supervised.tolist()) if s]),
                "test_acc_per_step": result["acc_per_step"], "test_loss_per_step": result["loss_per_step"],
            }
            records.append(record)
            is_best = best is None or record["test_acc_supervised"] > best
            if is_best:
                best = record["test_acc_supervised"]
            if dist.main:
                # metrics first: a kill in between leaves a record past the checkpoint, which resume drops
                write_jsonl(run_dir / "metrics.jsonl", records)
                state = {"step": step, "best": best, "elapsed": elapsed, "config": cfg.to_dict()}
                if is_best:
                    save_checkpoint(run_dir / "checkpoints" / "best.safetensors", model, state, rng=False)
                save_checkpoint(run_dir / "checkpoints" / "last.safetensors", model, state, opt)
            reporter.on_eval(record)
            if stop is not None and stop(record):
                break
            t0 = time.perf_counter()
    reporter.finish(records)
    return records


def _global_count(global_steps: torch.Tensor, supervised: torch.Tensor) -> torch.Tensor:
    s = global_steps.to(supervised.device)
    return ((s >= 0) & supervised[s.clamp(min=0)]).sum().clamp(min=1).float()


def _all_count(mask: torch.Tensor, dist: Distributed) -> torch.Tensor:
    c = mask.sum().float()
    dist.all_reduce(c)
    return c.clamp(min=1)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


# ---- progress and the final table ----------------------------------------------------------
class Reporter:
    """A progress bar with the live per-variable test accuracy (a line per evaluation when the
    output is not a terminal), and a table at the end. Silent on ranks other than 0."""

    def __init__(self, cfg, model, total, supervised, init_note, main, progress, step, records):
        from rich.console import Console

        self.cfg, self.total, self.supervised = cfg, total, supervised
        self.console = Console(stderr=True)
        self.main = main
        self.live = main and (progress if progress is not None else self.console.is_terminal)
        self.progress = None
        if not main:
            return
        n_params = model.num_parameters()
        self.console.print(f"[bold]{cfg.name}[/]: {cfg.model.arch} {cfg.model.n_layers}x{cfg.model.d_model}, "
                           f"{cfg.model.n_heads} heads, {n_params:,} parameters "
                           f"({model.num_parameters(exclude_embeddings=True):,} without embeddings); "
                           f"{total:,} steps of {cfg.train.batch_size}; {init_note}")
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[acc]}"),
                                     console=self.console, transient=False)
            last = records[-1]["test_acc_per_step"] if records else None
            self.task = self.progress.add_task("train", total=total, completed=step, acc=self._acc_text(last))
            self.progress.start()

    def _acc_text(self, accs) -> str:
        if not accs:
            return "test acc per variable: -"
        cells = []
        for i, a in enumerate(accs):
            if a is None:
                continue
            color = "green" if a >= 0.99 else ("yellow" if a >= 0.75 else "red")
            mark = "" if self.supervised[i] else "[dim]"
            cells.append(f"{mark}[{color}]{round(100 * a):3d}[/]")
        return "acc% #0..: " + " ".join(cells)

    def on_step(self, step: int, loss) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, description=f"loss {loss:.3f}" if loss is not None else "train")

    def on_eval(self, r: dict) -> None:
        if not self.main:
            return
        if self.progress is not None:
            self.progress.update(self.task, acc=self._acc_text(r["test_acc_per_step"]))
        else:
            accs = " ".join("  -" if a is None else f"{round(100 * a):3d}" for a in r["test_acc_per_step"])
            print(f"step {r['step']:>7d}  epoch {r['epoch']:7.2f}  {r['time']:7.1f}s  train_acc {r['train_acc']:.3f}  "
                  f"test_acc {r['test_acc']:.3f}  per variable % {accs}", file=sys.stderr, flush=True)

    def finish(self, records) -> None:
        if not self.main:
            return
        if self.progress is not None:
            self.progress.stop()
        if not records:
            return
        from rich.table import Table

        last = records[-1]
        best = max(records, key=lambda r: r["test_acc_supervised"] or 0)
        t = Table(title=f"{self.cfg.name}: test accuracy per chain variable "
                        f"(step {last['step']:,}, {last['time']:.0f} s training)")
        t.add_column("variable")
        t.add_column("supervised")
        t.add_column("final acc", justify="right")
        t.add_column("final loss", justify="right")
        t.add_column(f"at best (step {best['step']:,})", justify="right")
        for i, (a, l, b) in enumerate(zip(last["test_acc_per_step"], last["test_loss_per_step"], best["test_acc_per_step"])):
            if a is None:
                continue
            t.add_row(f"#{i}", "yes" if self.supervised[i] else "", f"{a:.3f}", f"{l:.3f}", f"{b:.3f}")
        self.console.print(t)


# ---- entry points used by the CLI ----------------------------------------------------------
def start_or_resume(config_path, overrides, runs_root="runs", resume_dir=None, name=None, progress=None,
                    stop=None) -> list[dict]:
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        saved_path = run_dir / "config.yaml"
        if not saved_path.is_file():
            raise LegoError(f"{run_dir}: not a run directory (no config.yaml)")
        saved = load_config(saved_path)
        if config_path is not None or overrides:
            asked = load_config(config_path, overrides) if config_path else load_config(saved_path, overrides)
            if name is None:
                asked.name = saved.name
            changes = diff_configs(saved, asked, ignore=RESUMABLE_CHANGES)
            if changes:
                raise LegoError(f"{run_dir} was trained with another config ({changes[0]}"
                                f"{f' and {len(changes) - 1} more' if len(changes) > 1 else ''}); "
                                "resume with the same config or start a new run")
            saved.train.threads = asked.train.threads
        return train(saved, run_dir, resume=True, progress=progress, stop=stop)
    cfg = load_config(config_path, overrides)
    if name:
        cfg.name = name
        cfg.validate()
    run_dir = Path(runs_root) / cfg.name
    # every rank checks before the process group forms, so none can see rank 0's new files
    if (run_dir / "config.yaml").exists():
        raise LegoError(f"{run_dir} already exists: resume it with --resume {run_dir}, or choose another --name")
    return train(cfg, run_dir, resume=False, progress=progress, stop=stop)
