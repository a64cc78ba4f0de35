"""One command per paper figure: ``legolab reproduce FIG|FIG,FIG|all [key=value ...] [--scale cpu|paper]``.

A figure is a set of variants (``figures.py``), trained as runs (``runs.py``: reused when finished,
resumed when interrupted, so the command can be killed and started again), then summarised and
judged against the paper's claim in ``reports/FIG-SCALE/FIG.md`` (``report.py``). Figures that
read other figures' runs or train none are in ``analyses.py``. At paper scale launch it under
torchrun: every run is data-parallel.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import LegoError
from .analyses import (
    ANALYSIS_FUNCTIONS,
    ANALYSIS_RUNS,
    TEMPLATE_MODELS,
    TEMPLATE_SIZES,
    TEMPLATE_TASKS,
    fig4_runs,
    fig7_runs,
    template_runs,
)
from .figures import ANALYSES, ANALYSIS_CLAIMS, FIGURES, ORDER, UNTESTABLE, check_figure
from .report import SCALE_NOTES, accuracy_table, count_machines, first_pass_table, summarise, write_index, write_report
from .runs import Run, ensure_run, finished, mimic_settings, one_line, runs_for, train_runs

__all__ = ["ANALYSES", "FIGURES", "ORDER", "Run", "SCALE_NOTES", "TEMPLATE_MODELS", "TEMPLATE_SIZES", "TEMPLATE_TASKS",
           "ensure_run", "figure_runs", "mimic_settings", "reproduce", "runs_for", "template_runs"]

TITLES = {**{f: FIGURES[f].title for f in FIGURES}, **ANALYSES}
# Fig. 5's sweep over test depths draws its own sample, so its report must name the size.
DEPTH_SWEEP_SENTENCES = 2000


def figure_runs(fig: str, scale: str, seeds: int, pretrained: str | None = None, overrides: list[str] = (),
                mimic_steps: int | None = None) -> list[tuple[str, Run]]:
    """(label, Run) of a training figure at ``scale``."""
    return runs_for(FIGURES[fig].variant_labels(scale), scale, seeds, pretrained, list(overrides), mimic_steps)


def reproduce(fig: str, scale: str = "cpu", seeds: int = 3, runs_root: str = "runs", out_root: str = "reports",
              pretrained: str | None = None, log=print, threads: int = 0, mimic_steps: int | None = None,
              jobs: int = 1, overrides: list[str] = (), command: str = "", train: bool = True) -> Path:
    """Train what ``fig`` needs and write its report. ``all`` or a comma-separated list
    (``fig15,fig16``): every run of those figures first, in one pool, then each report and the
    index. ``train=False`` writes the reports from the runs that finished. Returns the report
    (``FIG.md``) or, for several figures, the index page."""
    if scale not in ("cpu", "paper"):
        raise LegoError(f"--scale: cpu or paper, got {scale!r}")
    for flag, value, low in (("--seeds", seeds, 1), ("--threads", threads, 0), ("--mimic-steps", mimic_steps or 1, 1),
                             ("--jobs", jobs, 1)):
        if value < low:
            raise LegoError(f"{flag}: must be at least {low}, got {value}")
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise LegoError(f"{bad[0]!r}: overrides are key=value (e.g. train.steps=2000)")
    command = command or f"legolab reproduce {fig} --scale {scale} --seeds {seeds}"
    kwargs = dict(scale=scale, seeds=seeds, runs_root=runs_root, out_root=out_root, pretrained=pretrained, log=log,
                  threads=threads, mimic_steps=mimic_steps, jobs=jobs, overrides=overrides, command=command,
                  train=train)
    names = ORDER if fig == "all" else list(dict.fromkeys(fig.split(",")))
    for name in names:
        check_figure(name)
    if len(names) == 1:
        return _one(names[0], **kwargs)
    # every training run of the set first, so that --jobs keeps every lane busy
    every = []
    for name in names:
        try:
            if name in FIGURES:
                every += [run for _, run in figure_runs(name, scale, seeds, pretrained, overrides, mimic_steps)]
            elif name in ANALYSIS_RUNS:
                every += [run for _, run in ANALYSIS_RUNS[name](scale, seeds)]
        except LegoError:
            pass  # the figure's own report says why
    train_runs(every, Path(runs_root), log, jobs, threads, train)
    for name in names:
        if name in ("templates", "listops") and scale != "cpu":
            continue
        try:
            log(f"wrote {_one(name, **kwargs)}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except NoRunsToReport as e:  # the report it has, if any, stays
            log(str(e))
        except Exception as e:  # a figure that cannot run is named on the index, the others go on
            reason = one_line(e)
            log(f"{name}: {reason}")
            _write_refusal(name, reason, **kwargs)
    return write_index(Path(out_root), scale, ORDER, TITLES)


class NoRunsToReport(LegoError):
    """--report-only found none of a figure's runs finished: writing would replace its report with a blank one."""


def _runs_read(fig, scale, seeds, pretrained, overrides, mimic_steps) -> list[Run]:
    """The runs ``fig``'s report is made from (Fig. 7's fine-tuned rows: Fig. 6's seed 0); none for Fig. 9."""
    if fig in FIGURES:
        pairs = figure_runs(fig, scale, seeds, pretrained, overrides, mimic_steps)
    elif fig in ANALYSIS_RUNS:
        pairs = ANALYSIS_RUNS[fig](scale, seeds)
    elif fig == "fig4":
        pairs = fig4_runs(scale, seeds, pretrained)
    elif fig == "fig7":
        pairs = fig7_runs(scale, pretrained)
    else:
        pairs = []
    return [run for _, run in pairs]


def _one(fig, scale, seeds, runs_root, out_root, pretrained, log, threads, mimic_steps, jobs, overrides, command,
         train) -> Path:
    started = time.time()
    main = int(os.environ.get("RANK", "0")) == 0
    out, root = Path(out_root) / f"{fig}-{scale}", Path(runs_root)
    if not train:
        read = _runs_read(fig, scale, seeds, pretrained, overrides, mimic_steps)
        if read and not any(finished(root / r.name, r.pretrain) for r in read):
            report = out / f"{fig}.md"
            raise NoRunsToReport(f"{fig}: --report-only found none of its {len(read)} runs finished under {root}/, so "
                                 + (f"{report} is left as it was" if report.is_file() else "it has no report")
                                 + " (train them without --report-only)")
    if fig in FIGURES:
        labelled = figure_runs(fig, scale, seeds, pretrained, overrides, mimic_steps)
        results = train_runs([r for _, r in labelled], root, log, jobs, threads, train)
        if not main:
            return out / f"{fig}.md"
        verdicts, body, data, note, train_time = _training_figure(fig, scale, labelled, results, out)
    else:
        if overrides:
            raise LegoError(f"{fig}: key=value overrides apply to training figures only")
        if not main:
            return out / f"{fig}.md"
        verdicts, body, data, note, train_time = ANALYSIS_FUNCTIONS[fig](
            scale=scale, root=root, out=out, log=log, pretrained=pretrained, seeds=seeds, jobs=jobs, threads=threads,
            train=train)
    figure = FIGURES.get(fig)
    note = note or (figure.notes.get(scale, "") if figure else "")
    if overrides:
        note = "; ".join(x for x in (note, f"every run also took `{' '.join(overrides)}`") if x)
    claim = figure.claim if figure else ANALYSIS_CLAIMS[fig]
    path = write_report(out, fig, scale, TITLES[fig], claim, verdicts, body, note, command, started, data, train_time,
                        setting=_setting(fig, scale))
    write_index(Path(out_root), scale, ORDER, TITLES)
    return path


def _setting(fig: str, scale: str) -> str | None:
    """The key of ``SCALE_NOTES`` for ``fig``'s runs: None where it has no LEGO runs."""
    if fig in ("fig9", "fig10", "templates", "listops"):
        return None
    return "cpu-minilm" if scale == "cpu" and fig in ("fig6", "fig7", "fig12") else scale


def _training_figure(fig, scale, labelled, results, out):
    from ..analysis.plots import plot_runs
    from ..training.runs import run_curves

    groups: dict[str, list[Path]] = {}
    problems = []
    for label, run in labelled:
        res = results[run.name]
        if isinstance(res, Path) and finished(res):
            groups.setdefault(label, []).append(res)
        else:
            problems.append(f"- {label}, {run.name}: {res if isinstance(res, str) else 'did not finish'}")
    summary = summarise(groups)
    verdicts = FIGURES[fig].verdicts(scale, summary)
    body = []
    if summary:
        plot_runs([run_curves(d[0]) for d in groups.values()], out / "accuracy.png")
        body += ["Final test accuracy (%) per chain index, mean (min-max) over seeds; * supervised.",
                 accuracy_table(summary),
                 "Step at which each chain index first reached 95% test accuracy (mean over seeds; - never), and the "
                 "largest fall of a variable's accuracy after it first passed 90%:", first_pass_table(summary),
                 "![accuracy per variable over training, seed 0 of each variant](accuracy.png)"]
    if fig == "fig5" and groups:
        sweep = _depth_sweep(groups)
        summary["depth_sweep"] = sweep
        body.append(f"Accuracy (%) per chain index at each test depth (seed 0, on a separate sample of\n"
                    f"{DEPTH_SWEEP_SENTENCES:,} sentences, so depth 12 differs from the table above by a few points):\n\n" + "\n".join(
            f"- {label}, depth {depth}: " + " ".join(f"{100 * a:.0f}" for a in accs)
            for label, rows in sweep.items() for depth, accs in rows.items()))
    if problems:
        body.append("Runs missing from this report:\n\n" + "\n".join(problems))
    runs = {label: [str(d) for d in dirs] for label, dirs in groups.items()}
    trained = [s for k, s in summary.items() if k != "depth_sweep"]
    train_time = sum(sum(s["train_time_s"]) for s in trained)
    machines = count_machines([m for s in trained for m in s["machines"]])
    return verdicts, "\n\n".join(body), {"summary": summary, "runs": runs, "problems": problems,
                                          "machines": machines}, "", train_time


def _depth_sweep(groups) -> dict:
    import torch

    from ..training.data import TensorBatch
    from ..training.evaluate import evaluate
    from ..training.runs import load_run

    sweep = {}
    for label, dirs in groups.items():
        _, task, model = load_run(dirs[0], "last")
        data = TensorBatch.from_batch(task.sample("depth-sweep", range(DEPTH_SWEEP_SENTENCES)))
        sweep[label] = {}
        for depth in (4, 6, 8, 10, 12, 14, 16, 20):
            with torch.no_grad():
                sweep[label][depth] = evaluate(model, data, task.num_indices, depth=depth)["acc_per_index"]
    return sweep


def _write_refusal(fig, reason, scale, out_root, command, **_):
    """A figure that could not run at all still gets a report saying why."""
    check_figure(fig)
    figure = FIGURES.get(fig)
    write_report(Path(out_root) / f"{fig}-{scale}", fig, scale, TITLES[fig], figure.claim if figure else ANALYSIS_CLAIMS[fig],
                 [("the figure", UNTESTABLE, reason)], "", "", command, time.time(), {"seeds": 0},
                 setting=_setting(fig, scale))

