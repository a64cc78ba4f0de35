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

import importlib.util
import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch

from ..errors import Interrupted, LegoError
from ..io import log_line, write_jsonl, write_text
from ..models import Encoder, build_model
from .checkpoint import load_model_weights, model_weights, read_checkpoint, restore_training_state, save_checkpoint
from .config import RunConfig, config_from_dict, diff_configs, load_config
from .data import TensorBatch, epoch_permutation, sample_depth
from .evaluate import evaluate
from .objectives import objective_weights
from .rundir import RunDir, _refuse_existing, migrate_records, read_metrics
from .schedule import lr_factor
from .step import machine_label, make_optimizer, make_train_step, resolve_dtype

# Keys that may differ when resuming: they change where and how fast, not what is computed.
RESUMABLE_CHANGES = ("train.threads", "train.log")


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
    benchmark's stopping rule); the last checkpoint is then at that evaluation.

    A new run is built under a temporary name and appears as ``run_dir`` once it has started, so
    a start that fails leaves nothing behind; the directory stays locked while the run lives.
    SIGINT and SIGTERM end the run with a checkpoint at the current step (``Interrupted``)."""
    run_dir = Path(run_dir)
    if cfg.train.log == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise LegoError("train.log=tensorboard needs the tensorboard package: pip install 'legolab[tensorboard]'")
    main_rank = int(os.environ.get("RANK", "0")) == 0
    rd = (RunDir.resume(run_dir) if resume else RunDir.create(run_dir)) if main_rank else None
    try:
        dist = Distributed(cfg.train.device)
        try:
            with _Signals() as signals:
                return _train(cfg, rd, run_dir, resume, progress, dist, stop, signals)
        finally:
            dist.close()
    except BaseException:
        if rd is not None:
            rd.discard()  # removes the directory only if it was never published
        raise
    finally:
        if rd is not None:
            rd.close()


def _train(cfg: RunConfig, rd: RunDir | None, run_dir: Path, resume: bool, progress, dist: Distributed, stop,
           signals) -> list[dict]:
    tc, device = cfg.train, dist.device
    torch.set_num_threads(tc.threads or max(1, (os.cpu_count() or 1) // dist.world))
    torch.manual_seed(cfg.seed)
    if tc.batch_size % dist.world:
        raise LegoError(f"train.batch_size: {tc.batch_size} is not divisible by the {dist.world} processes")

    task = cfg.make_task()
    n = task.num_indices
    check_memory(cfg, task, device)
    model = build_model(cfg.model, task).to(device)
    init_note = initialise(model, tc.init, task) if not resume else "resumed"
    opt = make_optimizer(model, tc.lr, tc.weight_decay, (tc.beta1, tc.beta2))

    # data: test (reported) and validation (selects "best") sets, sharded across ranks; a fixed
    # training set lives on every rank. Training sentences that also occur in either held-out set
    # get no supervision (their read-outs are dropped) and are counted in the records.
    test_raw, valid_raw = task.sample("test", range(tc.test_size)), task.sample("valid", range(tc.valid_size))
    held_out = {row.tobytes() for row in test_raw.tokens} | {row.tobytes() for row in valid_raw.tokens}
    test = TensorBatch.from_batch(test_raw)[dist.rank::dist.world]
    valid = TensorBatch.from_batch(valid_raw)[dist.rank::dist.world]
    del test_raw, valid_raw
    fixed, fixed_held = None, None
    if tc.train_size:
        raw = task.sample("train", range(tc.train_size))
        fixed_held = torch.from_numpy(_rows_in(raw.tokens, held_out))
        raw.index[fixed_held.numpy()] = -1
        fixed = TensorBatch.from_batch(raw, device)
        del raw
    steps_per_epoch, total = tc.steps_per_epoch(), tc.total_steps()
    eval_every = tc.eval_every or steps_per_epoch
    supervised = torch.zeros(n, dtype=torch.bool)
    supervised[tc.supervised_indices(n)] = True
    supervised = supervised.to(device)
    eval_depth = tc.eval_depth or None
    stages = {n: task}

    def stage_task(k: int):
        """The task at length k (a curriculum stage); same vocabulary, own random stream."""
        if k not in stages:
            stages[k] = task.with_length(k, seed=cfg.seed * 1_000_003 + k)
        return stages[k]

    # state: fresh, or the last checkpoint
    step, records, best, elapsed, overlap = 0, [], None, 0.0, 0
    acc_sums = torch.zeros(4, device=device)  # loss sum, correct, count over supervised read-outs; overlap
    if resume:
        ckpt = run_dir / "checkpoints" / "last.safetensors"
        if not ckpt.is_file():
            raise LegoError(f"{run_dir}: nothing to resume, no checkpoint yet (checkpoints/last.safetensors)")
        tensors, meta = read_checkpoint(ckpt)
        if "optimizer_param_groups" not in meta or "step" not in meta:
            raise LegoError(f"{ckpt}: holds no training state (a best or weights-only checkpoint?); cannot resume from it")
        _check_same_config(cfg, meta.get("config"), ckpt)
        load_model_weights(model, model_weights(tensors), str(ckpt))
        restore_training_state(tensors, meta, opt, device)
        step, best, elapsed = meta["step"], meta.get("best"), meta.get("elapsed", 0.0)
        overlap = meta.get("overlap", 0)
        if "acc_sums" in meta:  # an interrupt between evaluations
            acc_sums += torch.tensor(meta["acc_sums"], device=device)
        records = migrate_records(meta["records"]) if "records" in meta else _records_up_to(run_dir / "metrics.jsonl", step)
        if dist.main:  # the checkpoint is the truth: a cut or extended metrics file is repaired
            write_jsonl(rd / "metrics.jsonl", records)
    elif dist.main:
        write_text(rd / "config.yaml", cfg.to_yaml())
        write_jsonl(rd / "metrics.jsonl", [])
        # a step-0 checkpoint, then the name: from here on the run can be resumed
        save_checkpoint(rd / "checkpoints" / "last.safetensors", model,
                        {"step": 0, "best": None, "elapsed": 0.0, "overlap": 0, "config": cfg.to_dict(), "records": []}, opt)
        rd.publish()

    wrapped = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    dtype, dtype_note = resolve_dtype(tc.dtype, device)
    if dtype_note and dist.main:
        log_line(dtype_note)
    train_step = make_train_step(wrapped, opt, compile=tc.compile, autocast_dtype=dtype)
    machine = machine_label(device, dtype, dist.world)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, tc.warmup, tc.schedule, tc.min_lr), last_epoch=step - 1)

    reporter = Reporter(cfg, model, total, supervised.cpu(), init_note, dist.main, progress, step, records, rd,
                        index_name=task.index_name)
    local = tc.batch_size // dist.world
    t0 = time.perf_counter()
    order, order_epoch = None, -1

    def save(kind: str, state: dict) -> None:
        if kind == "best":
            save_checkpoint(rd / "checkpoints" / "best.safetensors", model, state, rng=False)
        else:
            save_checkpoint(rd / "checkpoints" / "last.safetensors", model, {**state, "records": records}, opt)

    try:
        while step < total:
            # the global batch of this step, then this rank's slice of it
            if fixed is not None:
                epoch, within = divmod(step, steps_per_epoch)
                if epoch != order_epoch:
                    order, order_epoch = epoch_permutation(cfg.seed, epoch, len(fixed)).to(device), epoch
                idx = order[within * tc.batch_size:(within + 1) * tc.batch_size]
                mine = idx[dist.rank * local:(dist.rank + 1) * local]
                batch = fixed[mine]
                held = fixed_held[mine.cpu()]
                global_index = fixed.index[idx]
            else:
                lo = step * tc.batch_size
                source = stage_task(tc.chain_length(step, n, cfg.seed))
                raw = source.sample("train", range(lo + dist.rank * local, lo + (dist.rank + 1) * local))
                held = torch.from_numpy(_rows_in(raw.tokens, held_out))
                if held.any():
                    raw.index[held.numpy()] = -1
                batch = TensorBatch.from_batch(raw)
                global_index = None
            batch = batch.to(device)
            mask = (batch.index >= 0) & supervised[batch.index.clamp(min=0)]
            aux = None
            if tc.aux_operand:  # extra read-outs after the task's own; weights instead of a boolean mask
                aux = [torch.from_numpy(a).to(device) for a in source.operand_readouts(raw)]
                if held.any():
                    aux[2][held.to(device)] = -1
                aux_mask = (aux[2] >= 0) & supervised[aux[2].clamp(min=0)]
            if dist.world > 1:  # every rank divides by the global count; DDP averages, so scale by world
                total_count = _global_count(global_index, supervised) if global_index is not None else _all_count(mask, dist)
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
                                      normaliser=count, key_padding=batch.key_padding(),
                                      objectives=objective_weights(tc, step), scaffold=tc.scaffold_bias(step))
            if aux is not None:
                logits = logits[:, :P]
            sched.step()
            step += 1
            with torch.no_grad():
                m = mask.sum()
                acc_sums += torch.stack([loss * (m if count is None else count),  # this rank's loss sum
                                         ((logits.argmax(-1) == batch.targets) & mask).sum(), m.float(),
                                         held.sum().to(device).float()])
            reporter.on_step(step, float(loss) if reporter.live else None)

            if step % eval_every == 0 or step == total:
                elapsed += time.perf_counter() - t0
                dist.all_reduce(acc_sums)
                result = evaluate(model, test, n, depth=eval_depth, batch_size=tc.eval_batch_size, device=device,
                                  reduce=dist.all_reduce, autocast_dtype=dtype)
                valid_result = evaluate(model, valid, n, depth=eval_depth, batch_size=tc.eval_batch_size, device=device,
                                       reduce=dist.all_reduce, autocast_dtype=dtype)
                loss_sum, correct, count_sum, new_overlap = acc_sums.tolist()
                acc_sums.zero_()
                if not math.isfinite(loss_sum):  # never save diverged weights over good ones
                    kept = f"the last good checkpoint is step {records[-1]['step']}" if records else "no checkpoint was written"
                    raise LegoError(f"{run_dir}: the training loss became non-finite before step {step}; {kept}")
                overlap += int(new_overlap)
                record = {
                    "step": step, "epoch": round(step / steps_per_epoch, 6), "sentences": step * tc.batch_size,
                    "time": round(elapsed, 3), "lr": sched.get_last_lr()[0],
                    "train_loss": loss_sum / max(count_sum, 1),
                    "train_acc": correct / max(count_sum, 1),
                    "train_overlap": overlap,
                    "valid_acc": valid_result["acc"],
                    "valid_acc_supervised": _supervised_mean(valid_result, supervised),
                    "test_acc": result["acc"], "test_loss": result["loss"],
                    "test_acc_supervised": _supervised_mean(result, supervised),
                    "test_acc_per_index": result["acc_per_index"], "test_loss_per_index": result["loss_per_index"],
                    "machine": machine,
                }
                records.append(record)
                is_best = best is None or record["valid_acc_supervised"] > best
                if is_best:
                    best = record["valid_acc_supervised"]
                if dist.main:
                    # metrics first: a kill in between leaves a record past the checkpoint, which resume drops
                    write_jsonl(rd / "metrics.jsonl", records)
                    state = {"step": step, "best": best, "elapsed": elapsed, "overlap": overlap, "config": cfg.to_dict()}
                    if is_best:
                        save("best", state)
                    save("last", state)
                reporter.on_eval(record)
                if stop is not None and stop(record):
                    break
                t0 = time.perf_counter()
            elif signals.caught_by_any(dist):
                elapsed += time.perf_counter() - t0
                if dist.main:
                    save("last", {"step": step, "best": best, "elapsed": elapsed, "overlap": overlap,
                                  "config": cfg.to_dict(), "acc_sums": acc_sums.tolist()})
                reporter.finish(records, stopped_at=step)
                raise Interrupted(signals.caught, f"{run_dir}: stopped at step {step:,} of {total:,} "
                                  f"({signal.Signals(signals.caught).name}), checkpoint saved; continue with: "
                                  f"legolab train --resume {run_dir}")
    finally:
        reporter.close()
    reporter.finish(records)
    return records


def _supervised_mean(result: dict, supervised: torch.Tensor):
    return _mean([a for a, s in zip(result["acc_per_index"], supervised.tolist()) if s])


def _rows_in(tokens: np.ndarray, rows: set) -> np.ndarray:
    """Which rows of a token array also occur in ``rows`` (a set of row bytes): a bool array."""
    return np.fromiter((r.tobytes() in rows for r in tokens), dtype=bool, count=len(tokens))


def _records_up_to(path: Path, step: int) -> list[dict]:
    """Metric records of a checkpoint that predates records in checkpoints."""
    return [r for r in read_metrics(path) if r.get("step", 0) <= step]


def _check_same_config(cfg: RunConfig, saved: dict | None, ckpt: Path) -> None:
    """config.yaml must still be the config the checkpoint was trained with."""
    if saved is None:
        return
    try:
        trained = config_from_dict(saved)
    except LegoError as e:
        raise LegoError(f"{ckpt}: the config stored in the checkpoint is not valid here ({e})") from None
    changes = diff_configs(trained, cfg, ignore=RESUMABLE_CHANGES)
    if changes:
        raise LegoError(f"{ckpt.parent.parent}/config.yaml differs from the config its checkpoint was trained with "
                        f"({'; '.join(changes)}); restore it or start a new run")


def check_memory(cfg: RunConfig, task, device) -> None:
    """Refuse sizes this machine cannot hold, before any is allocated (a rough upper estimate)."""
    tc, mc = cfg.train, cfg.model
    one = task.sample("test", range(1))
    per_sentence = one.tokens.nbytes + 3 * 8 * one.positions.size
    T, available = one.tokens.shape[1], available_memory()
    needs = {
        "test_size": 2 * per_sentence * tc.test_size,
        "valid_size": 2 * per_sentence * tc.valid_size,
        "train_size": 3 * per_sentence * tc.train_size,
    }
    if device.type == "cpu":  # activations kept for backward: ~16 d-wide and 3 T-wide tensors per layer
        layer = tc.batch_size * T * (16 * mc.d_model + 3 * mc.n_heads * T) * 4
        needs["batch_size"] = layer * max(mc.n_layers, tc.depth_max, tc.eval_depth) + tc.batch_size * 4 * per_sentence
        needs["eval_batch_size"] = tc.eval_batch_size * T * (4 * mc.d_model + 2 * mc.n_heads * T) * 4
    for key, need in needs.items():
        if need > available:
            raise LegoError(f"train.{key}: {getattr(tc, key):,} sentences need about {need / 2**30:,.1f} GiB of memory, "
                            f"this machine has {available / 2**30:,.1f} GiB available")


def available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _Signals:
    """SIGINT / SIGTERM set a flag the loop checks after each step (a second SIGINT interrupts at
    once). Only in the main thread, where Python delivers signals."""

    def __init__(self):
        self.caught, self._old = None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._on)
        return self

    def _on(self, signum, frame):
        if self.caught is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.caught = signum

    def caught_by_any(self, dist: Distributed) -> bool:
        if dist.world == 1:
            return self.caught is not None
        flag = torch.tensor([0.0 if self.caught is None else float(self.caught)], device=dist.device)
        dist.all_reduce(flag)  # every rank stops at the same step
        if flag.item() and self.caught is None:
            self.caught = signal.SIGTERM
        return bool(flag.item())

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)


def _global_count(global_index: torch.Tensor, supervised: torch.Tensor) -> torch.Tensor:
    s = global_index.to(supervised.device)
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

    def __init__(self, cfg, model, total, supervised, init_note, main, progress, step, records, rd=None, index_name="step"):
        from rich.console import Console

        self.cfg, self.total, self.supervised, self.rd, self.index_name = cfg, total, supervised, rd, index_name
        self.console = Console(stderr=True)
        self.main = main
        self.live = main and (progress if progress is not None else self.console.is_terminal)
        self.progress = None
        self.tensorboard = None
        if not main:
            return
        n_params = model.num_parameters()
        header = (f"{cfg.name}: {cfg.model.arch} {cfg.model.n_layers}x{cfg.model.d_model}, "
                  f"{cfg.model.n_heads} heads, {n_params:,} parameters "
                  f"({model.num_parameters(exclude_embeddings=True):,} without embeddings); "
                  f"{total:,} steps of {cfg.train.batch_size}; {init_note}")
        self.console.print(f"[bold]{cfg.name}[/]{header[len(cfg.name):]}", soft_wrap=True)  # whole in a log file
        self._log(("resumed at step " + f"{step:,}: " if step else "") + header)
        if cfg.train.log == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(rd.work / "tensorboard"), purge_step=step + 1 if step else None)
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[acc]}"),
                                     console=self.console, transient=False)
            last = records[-1]["test_acc_per_index"] if records else None
            self.task = self.progress.add_task("train", total=total, completed=step, acc=self._acc_text(last))
            self.progress.start()

    def _log(self, line: str) -> None:
        if self.rd is not None:
            self.rd.log(line)

    def _acc_text(self, accs) -> str:
        if not accs:
            return f"test acc per {self.index_name}: -"
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
        accs = " ".join("  -" if a is None else f"{round(100 * a):3d}" for a in r["test_acc_per_index"])
        line = (f"step {r['step']:>7d}  epoch {r['epoch']:7.2f}  {r['time']:7.1f}s  train_acc {r['train_acc']:.3f}  "
                f"valid_acc {r['valid_acc']:.3f}  test_acc {r['test_acc']:.3f}  per {self.index_name} % {accs}")
        self._log(line)
        if self.tensorboard is not None:
            w, step = self.tensorboard, r["step"]
            for key in ("train_loss", "train_acc", "valid_acc", "test_acc", "test_loss", "lr"):
                w.add_scalar(key, r[key], step)
            for i, a in enumerate(r["test_acc_per_index"]):
                if a is not None:
                    w.add_scalar(f"test_acc_per_{self.index_name}/{i}", a, step)
            w.flush()
        if self.progress is not None:
            self.progress.update(self.task, acc=self._acc_text(r["test_acc_per_index"]))
        else:
            log_line(line)

    def close(self) -> None:
        """Stop the live bar (restoring the cursor) and the TensorBoard writer; idempotent."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None

    def finish(self, records, stopped_at: int | None = None) -> None:
        """The final table: last evaluation, and test accuracy where validation accuracy was best;
        ``stopped_at``: the step an interrupt stopped the run at, which the log must not call finished."""
        self.close()
        if not self.main or not records:
            return
        from rich.table import Table

        last = records[-1]
        best = max(records, key=lambda r: r.get("valid_acc_supervised") or 0)
        t = Table(title=f"{self.cfg.name}: test accuracy per {self.index_name} "
                        f"(step {last['step']:,}, {last['time']:.0f} s training)")
        t.add_column(self.index_name)
        t.add_column("supervised")
        t.add_column("final acc", justify="right")
        t.add_column("final loss", justify="right")
        t.add_column(f"at best valid (step {best['step']:,})", justify="right")
        for i, (a, l, b) in enumerate(zip(last["test_acc_per_index"], last["test_loss_per_index"], best["test_acc_per_index"])):
            if a is None:
                continue
            t.add_row(f"#{i}", "yes" if self.supervised[i] else "", f"{a:.3f}", f"{l:.3f}", f"{b:.3f}")
        self.console.print(t)
        end = f"finished at step {last['step']:,}" if stopped_at is None else \
            f"stopped at step {stopped_at:,} (last evaluation at step {last['step']:,})"
        self._log(f"{end}: test accuracy per {self.index_name} "
                  + " ".join(f"#{i} {a:.3f}" for i, a in enumerate(last["test_acc_per_index"]) if a is not None)
                  + f"; best validation at step {best['step']:,}")


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
            saved.train.threads, saved.train.log = asked.train.threads, asked.train.log
        return train(saved, run_dir, resume=True, progress=progress, stop=stop)
    cfg = load_config(config_path, overrides)
    if name is not None:
        cfg.name = name
        cfg.validate()
    run_dir = Path(runs_root) / cfg.name
    # every rank checks before the process group forms, so none can see rank 0's new files
    _refuse_existing(run_dir)
    return train(cfg, run_dir, resume=False, progress=progress, stop=stop)
