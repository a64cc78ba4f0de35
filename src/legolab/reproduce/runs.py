"""The training runs behind a figure: resolve them, check leftovers, train, resume or reuse.

A run is named ``{scale}-{label}-s{seed}``. Two labels whose configs are equal at a scale share
one run (fig15's n = 12 is fig3's ``bert``), under the first label of ``catalogue``'s order.
A run directory of a run's name is reused only if it holds that config; any other is refused,
before anything trains. Independent runs can train side by side (``jobs``), each in its own
process with its share of the threads. Fig. 10's masked-LM runs (``Run.pretrain``) take the same
path with training/pretrain.py's config and loop.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Interrupted, LegoError
from ..io import log_line, read_jsonl
from ..training.rundir import read_metrics
from .figures import STEMS, catalogue


@dataclass
class Run:
    name: str
    config: str
    overrides: list[str] = field(default_factory=list)
    mimic: dict | None = None  # settings of the mimicking stage that initialises the run
    pretrain: bool = False  # a masked-LM pretraining run (training/pretrain.py, fig10), not a LEGO one


def mimic_settings(scale: str, arch: str, steps: int | None = None) -> dict:
    """CPU scale: 400 steps of 32 from zeroed residual branches, Adam at 1e-2 / 3e-3 (what makes
    every layer learn its heads in minutes; fig6 / fig18 carry the zero-residual control). Paper
    scale: the public code's values, Adam 5e-5 from BERT's initialisation, 1,000 steps of 200
    sentences for BERT and 5,000 for ALBERT, with its dropout 0.1. (CPU scale: ``mimic``'s default
    dropout, 0.1 from 256 wide and the run's below, which is what each width fits best.)"""
    if scale == "cpu":
        return {"steps": steps or 400, "batch_size": 32, "lr": None, "residual_init": 0.0, "dropout": None}
    return {"steps": steps or (5000 if arch == "albert" else 1000), "batch_size": 200, "lr": 5e-5,
            "residual_init": 1.0, "dropout": 0.1}


def _config_for(scale: str, label: str, extra: list[str], pretrained: str | None) -> tuple[str, list[str]]:
    v = catalogue(scale)[label]
    config, base = STEMS[scale][v.stem]
    overrides = [*base, *v.overrides]
    if v.pretrained:
        if scale == "paper" and not pretrained:
            raise LegoError(f"{label} at paper scale needs --pretrained hf:PATH (a local bert-base-uncased)")
        overrides.append(f"train.init={pretrained if scale == 'paper' else 'minilm'}")  # cpu/minilm's shape
    overrides += list(extra)
    if v.budget != 1:  # of the config as asked, so that shrunk runs (tests, smoke runs) stay shrunk
        from ..training.config import load_config

        t = load_config(config, overrides).train
        overrides += [f"train.steps={t.steps * v.budget}", f"train.eval_every={t.eval_every * v.budget}"] if t.steps \
            else [f"train.epochs={t.epochs * v.budget}"]
    return config, overrides


def canonical_labels(scale: str, labels: list[str], extra: list[str] = (), pretrained: str | None = None) -> dict[str, str]:
    """label -> the label whose run it uses: the first label of the catalogue with an equal config."""
    from ..training.config import load_config

    known, seen, out = catalogue(scale), {}, {}
    for label in known:  # catalogue order decides which name a shared run gets
        config, overrides = _config_for(scale, label, extra, pretrained or "hf:pretrained")
        key = (repr(load_config(config, overrides).to_dict()), known[label].mimic)
        seen.setdefault(key, label)
        if label in labels:
            out[label] = seen[key]
    return out


def runs_for(fig_labels: list[str], scale: str, seeds: int, pretrained: str | None = None,
             extra: list[str] = (), mimic_steps: int | None = None) -> list[tuple[str, Run]]:
    """(label, Run) for every label and seed; labels that share a config share the Run."""
    from ..training.config import load_config

    known = catalogue(scale)
    canon = canonical_labels(scale, fig_labels, extra, pretrained)
    out = []
    for label in fig_labels:
        config, overrides = _config_for(scale, canon[label], extra, pretrained)
        mimic = None
        if known[label].mimic:
            mimic = mimic_settings(scale, load_config(config, overrides).model.arch, mimic_steps)
        for seed in range(seeds):
            out.append((label, Run(f"{scale}-{canon[label]}-s{seed}", config, overrides + [f"seed={seed}"], mimic)))
    return out


def finished(run_dir: Path, pretrain: bool = False) -> bool:
    if not (run_dir / "config.yaml").is_file():
        return False
    from ..training.runs import run_config

    records = read_metrics(run_dir)
    steps = _read_pretrain(run_dir).pretrain.steps if pretrain else run_config(run_dir).train.total_steps()
    return bool(records) and records[-1]["step"] >= steps


def _read_pretrain(run_dir: Path):
    from ..training.pretrain import load_pretrain_config

    return load_pretrain_config(run_dir / "config.yaml", [])


def _not_finished(run_dir: Path) -> str:
    """Why --report-only leaves a run out: never started, or stopped part-way (and where)."""
    if not (run_dir / "config.yaml").is_file():
        return "not trained yet (--report-only)"
    records = read_metrics(run_dir)
    done = f"last evaluation at step {records[-1]['step']:,}" if records else "no evaluation yet"
    return f"started but not finished, {done}; the same command without --report-only continues it"


def _asked(run: Run, runs_root: Path):
    from ..training.config import load_config

    if run.pretrain:
        from ..training.pretrain import load_pretrain_config

        return load_pretrain_config(run.config, [*run.overrides, f"name={run.name}"]), run.overrides
    overrides = list(run.overrides)
    if run.mimic:
        overrides.append(f"train.init={runs_root / f'{run.name}-mimic-init'}")
    return load_config(run.config, overrides + [f"name={run.name}"]), overrides


def work(run: Run) -> float:
    """A run's compute, roughly: steps x sentences x layers x tokens x width squared (with its
    mimicking stage). Only its order matters: ``--jobs`` starts the longest runs first, so that
    no lane is left training the last long run alone."""
    c, _ = _asked(run, Path())
    if run.pretrain:
        return c.pretrain.steps * c.pretrain.batch_size * c.model.n_layers * c.pretrain.seq_len * c.model.d_model ** 2
    sentences = c.train.total_steps() * c.train.batch_size
    if run.mimic:
        sentences += run.mimic["steps"] * run.mimic["batch_size"]
    return sentences * c.model.n_layers * c.task.get("n", 12) * c.model.d_model ** 2


def check_leftovers(runs: list[Run], runs_root: Path) -> None:
    """Refuse, before anything trains, a run directory or mimicking stage that holds another
    config than asked (or a stage of other steps)."""
    from ..training.config import load_config
    from ..training.mimic import stage_config

    for run in runs:
        if run.pretrain:
            refuse_another_config(runs_root / run.name, _asked(run, runs_root)[0], "a pretraining run",
                                  read=_read_pretrain, ignore=("pretrain.threads",))
            continue
        refuse_another_config(runs_root / run.name, _asked(run, runs_root)[0], "a run")
        if run.mimic:
            mimic_dir = runs_root / f"{run.name}-mimic-init"
            held = _mimic_steps(mimic_dir)
            if held is not None and held != run.mimic["steps"]:
                raise LegoError(f"{mimic_dir} holds a mimicking stage of {held} steps, "
                                f"not {run.mimic['steps']}: move it away or pass --mimic-steps to match")
            asked = stage_config(load_config(run.config, run.overrides), run.mimic["residual_init"],
                                 run.mimic.get("dropout"))
            refuse_another_config(mimic_dir, asked, "a mimicking stage")


def refuse_another_config(run_dir: Path, asked, what: str, read=None, ignore: tuple[str, ...] | None = None) -> None:
    """One line if ``run_dir`` holds a config other than ``asked`` (read by ``read``: a training
    run's by default; ``ignore``: the changes a resume may make)."""
    from ..training.config import diff_configs
    from ..training.runs import run_config
    from ..training.trainer import RESUMABLE_CHANGES

    if not (run_dir / "config.yaml").is_file():
        return
    changes = diff_configs((read or run_config)(run_dir), asked, ignore=RESUMABLE_CHANGES if ignore is None else ignore)
    if changes:
        raise LegoError(f"{run_dir} holds {what} of another config ({'; '.join(changes[:3])}"
                        f"{f'; {len(changes) - 3} more' if len(changes) > 3 else ''}): move it away, "
                        "or give reproduce another --runs directory")


def _mimic_steps(mimic_dir: Path) -> int | None:
    """The steps of the mimicking stage in ``mimic_dir`` (complete or interrupted), if any."""
    import json

    from safetensors import safe_open

    from ..training.mimic import PARTIAL

    partial = mimic_dir / "checkpoints" / PARTIAL
    if partial.is_file():  # its metadata only: a MiniLM stage's tensors are ~100 MB
        try:
            with safe_open(str(partial), "pt") as f:
                return int(json.loads((f.metadata() or {}).get("legolab", "{}")).get("mimic", {}).get("steps", -1))
        except Exception:  # unreadable: mimic() itself says what is wrong when it resumes
            return None
    records = read_jsonl(mimic_dir / "mimic.jsonl") if (mimic_dir / "mimic.jsonl").is_file() else []
    return records[-1]["step"] if records else None


def ensure_run(run: Run, runs_root: Path, log) -> Path:
    """Train, resume or reuse one run (its mimicking stage first, where it has one)."""
    from ..training.trainer import start_or_resume

    run_dir = runs_root / run.name
    if finished(run_dir, run.pretrain):
        log(f"{run.name}: done, reused")
        return run_dir
    asked, overrides = _asked(run, runs_root)
    if run.pretrain:
        from ..training.pretrain import pretrain

        resume = (run_dir / "checkpoints" / "last.safetensors").is_file()
        log(f"{run.name}: {'resuming' if resume else 'pretraining'}")
        pretrain(asked, run_dir, resume=resume, log=log)
        return run_dir
    mimic_dir = runs_root / f"{run.name}-mimic-init"
    mimicked = mimic_dir / "checkpoints" / "last.safetensors"
    if run.mimic and not mimicked.is_file():
        from ..training.config import load_config
        from ..training.mimic import PARTIAL, mimic

        if int(os.environ.get("RANK", "0")) == 0:  # under torchrun one process mimics, the others wait
            if mimic_dir.exists() and not (mimic_dir / "checkpoints" / PARTIAL).is_file():
                shutil.rmtree(mimic_dir)  # a stage that never checkpointed starts over
            log(f"{run.name}: mimicking stage ({run.mimic['steps']} steps)")
            mimic(load_config(run.config, run.overrides), mimic_dir, log=log, **run.mimic)
        else:
            import time

            while not mimicked.is_file():
                time.sleep(5)
    if (run_dir / "checkpoints" / "last.safetensors").is_file():
        log(f"{run.name}: resuming")
        threads = [o for o in overrides if o.startswith("train.threads=")]  # the one change a resume may make
        start_or_resume(None, threads, resume_dir=run_dir, progress=None)
    else:
        if run_dir.exists():  # started but never checkpointed: start over
            shutil.rmtree(run_dir)
        log(f"{run.name}: training")
        start_or_resume(run.config, overrides, runs_root=runs_root, name=run.name, progress=None)
    return run_dir


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}" if not isinstance(e, LegoError) else (text[0] if text else "")


_stopped_by: int | None = None  # in a worker: the signal that stopped it; later runs are refused
_running: str | None = None      # in a worker: the run under way (the trainer has its own handler)
_stop_event = None               # in a worker: set by the parent once it was signalled


def _worker_start(stop_event=None) -> None:
    """A signal between runs must not kill the worker (that breaks the pool and the other runs)."""
    import signal

    global _stop_event
    _stop_event = stop_event

    def stop(signum, frame):
        global _stopped_by
        _stopped_by = signum
        if _running:  # between the stages of a run (each stage handles signals itself)
            raise Interrupted(signum, f"{_running}: stopped before training")

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, stop)


def _worker(run: Run, runs_root: str) -> str:
    import signal

    global _stopped_by, _running
    # the parent's event also covers a signal the trainer absorbed on a run's last step, which
    # finished that run and left this worker free to take the next one
    if _stopped_by is not None or (_stop_event is not None and _stop_event.is_set()):
        raise Interrupted(_stopped_by or signal.SIGTERM, f"{run.name}: not started")  # the parent sends SIGTERM
    _running = run.name
    try:
        return str(ensure_run(run, Path(runs_root), log_line))
    except Interrupted as e:
        _stopped_by = e.signum
        raise
    finally:
        _running = None


def _stop_message(signum: int, stopped: list[Interrupted]) -> str:
    import signal

    where = [str(e).split(", checkpoint saved")[0] for e in stopped] or ["no run was training"]
    return (f"reproduce stopped ({signal.Signals(signum).name}); " + "; ".join(where[:4])
            + (f"; {len(where) - 4} more" if len(where) > 4 else "")
            + ". The same reproduce command continues where each run stopped")


def train_runs(runs: list[Run], runs_root: Path, log, jobs: int = 1, threads: int = 0,
               train: bool = True) -> dict[str, Path | str]:
    """Every run (once per name), ``jobs`` at a time. name -> run directory, or a one-line
    reason where the run failed (the figure then names it instead of stopping). ``train=False``
    trains nothing: finished runs are reported, the others named."""
    unique = list({r.name: r for r in runs}.values())
    if not train:
        return {r.name: runs_root / r.name if finished(runs_root / r.name, r.pretrain) else _not_finished(runs_root / r.name)
                for r in unique}
    if jobs > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise LegoError("--jobs: runs under torchrun are data-parallel already; use --jobs 1")
    threads = threads or (max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else 0)
    if threads:
        for r in unique:
            key = "pretrain.threads" if r.pretrain else "train.threads"
            r.overrides = [o for o in r.overrides if not o.startswith(f"{key}=")] + [f"{key}={threads}"]
    check_leftovers(unique, runs_root)
    pending = {r.name for r in unique if not finished(runs_root / r.name, r.pretrain)}
    todo = len(pending)
    log(f"{len(unique)} run{'s' if len(unique) > 1 else ''}: {len(unique) - todo} finished (reused), {todo} to train"
        + (f", {min(jobs, todo)} side by side" if jobs > 1 and todo > 1 else ""))
    results: dict[str, Path | str] = {}
    started = time.time()

    def progress(name: str) -> None:  # where a long reproduce stands, once per run it trained
        if name in pending:
            pending.discard(name)
            log(f"{name}: trained; {todo - len(pending)} of {todo} done, {(time.time() - started) / 60:.0f} min in")

    if jobs <= 1 or len(unique) == 1:
        for r in unique:
            try:
                results[r.name] = ensure_run(r, runs_root, log)
                progress(r.name)
            except Interrupted as e:  # a signal stops the whole reproduce, not just this run
                raise Interrupted(e.signum, _stop_message(e.signum, [e])) from None
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # one failed run must not lose the others
                results[r.name] = f"failed: {one_line(e)}"
                log(f"{r.name}: {results[r.name]}")
        return results
    import multiprocessing
    import signal
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    order = [r.name for r in unique]
    unique.sort(key=work, reverse=True)  # longest first; a stable sort keeps the figure's order among equals

    caught: list[int] = []
    context = multiprocessing.get_context("spawn")
    stop_event = context.Event()

    def stop_workers(signum, frame=None):  # each training worker checkpoints; idle ones start nothing new
        caught.append(signum)
        stop_event.set()
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGTERM)

    handled = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, stop_workers) for s in (signal.SIGINT, signal.SIGTERM)} if handled else {}
    stopped: list[Interrupted] = []
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_start,
                                 initargs=(stop_event,)) as pool:
            futures = {pool.submit(_worker, r, str(runs_root)): r.name for r in unique}
            for future in as_completed(futures):
                name = futures[future]
                try:
                    results[name] = Path(future.result())
                    progress(name)
                except Interrupted as e:
                    stopped.append(e)
                    if not caught:  # one worker was signalled: stop the others too
                        stop_workers(e.signum)
                except Exception as e:
                    results[name] = f"failed: {one_line(e)}"
                    log(f"{name}: {results[name]}")
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if caught:
        raise Interrupted(caught[0], _stop_message(caught[0], stopped))
    return {name: results[name] for name in order}
