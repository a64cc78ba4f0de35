"""One command per paper figure: ``legolab reproduce FIG [--scale cpu|paper] [--seeds N]``.

Each figure is a list of runs (a config file plus overrides, one per seed) and a finishing step
that draws the figure and writes a summary to ``reports/FIG/``. Runs that finished are reused,
runs that were interrupted are resumed, so the command can be killed and started again. At paper
scale launch it under torchrun: every run is data-parallel.
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .errors import LegoError
from .io import read_jsonl, write_json, write_text


@dataclass
class Run:
    name: str
    config: str
    overrides: list[str] = field(default_factory=list)
    mimic: bool = False  # initialise from a mimicking pretraining of the same config first


@dataclass
class Figure:
    title: str
    variants: dict[str, tuple[str, list[str]]]   # label -> (config stem, overrides)
    seeded: bool = True
    mimic: tuple[str, ...] = ()                   # labels initialised by mimicking


# The shipped config (training/config.py: config_path) behind each kind of run, per scale. At
# paper scale the MiniLM-shaped runs of Fig. 6 are BERT-base reading word pieces, so that random,
# pretrained (--pretrained, a local bert-base-uncased) and mimicking starts share one model.
CONFIGS = {
    "cpu": {"bert": "cpu/bert", "albert": "cpu/albert", "minilm": "cpu/minilm", "pretrain": "cpu/pretrain"},
    "paper": {"bert": "paper/bert-base", "albert": "paper/albert-base", "minilm": "paper/bert-base"},
}
STEM_OVERRIDES = {("paper", "minilm"): ["model.tokenizer=wordpiece"]}


def _cfg(scale: str, stem: str) -> str:
    if stem not in CONFIGS[scale]:
        raise LegoError(f"no {scale}-scale config for the {stem} runs (there are: {', '.join(CONFIGS[scale])})")
    return CONFIGS[scale][stem]


SHORTCUT = "train.supervise=[0,1,2,3,4,11]"
MIMIC_STEPS = 400
# LEGO attention hard-codes the association the CPU recipe's scaffold and guidance provide
NO_SCAFFOLD = ["train.scaffold=0", "train.guide=0"]
# Run labels are global: figures that need the same run (fig3's BERT is also the baseline of the
# LEGO-attention comparison) share it. label -> (config stem, overrides)
FIGURES = {
    "fig3": Figure("BERT vs ALBERT (random init): test accuracy per variable, n=12, n_tr=6",
                   {"bert": ("bert", []), "albert": ("albert", [])}),
    # like for like, as in the paper: both applied 12 times at test; one trained at depth 12,
    # the other at depths drawn from 6..12
    "fig5": Figure("ALBERT with stochastic depth 6..12 vs fixed depth 12, both evaluated at depth 12",
                   {"albert-depth12": ("albert", ["model.n_layers=12"]),
                    "albert-stochastic-depth": ("albert", ["@stochastic_depth"])}),
    "fig6": Figure("random vs pretrained vs mimicking initialisation (MiniLM architecture at CPU scale)",
                   {"minilm-random": ("minilm", []), "minilm-pretrained": ("minilm", ["@pretrained"]),
                    "minilm-mimic": ("minilm", [])}, mimic=("minilm-mimic",)),
    "fig11": Figure("shortcut: supervising #0..#4 and #11 vs #0..#4",
                    {"bert-0to4": ("bert", ["train.n_tr=5"]), "bert-0to4+11": ("bert", [SHORTCUT]),
                     "albert-0to4": ("albert", ["train.n_tr=5"]), "albert-0to4+11": ("albert", [SHORTCUT])}),
    "fig18": Figure("Task 2 (D3): BERT, ALBERT, mimicking BERT",
                    {"d3-bert": ("bert", ["task.group=d3"]), "d3-albert": ("albert", ["task.group=d3"]),
                     "d3-mimic-bert": ("bert", ["task.group=d3"])}, mimic=("d3-mimic-bert",)),
    "lego-attention": Figure("BERT vs LEGO attention v0/v1 vs identity-scaled BERT on Task 1",
                             {"bert": ("bert", []), "lego-v0": ("bert", ["model.attention=lego-v0", *NO_SCAFFOLD]),
                              "lego-v1": ("bert", ["model.attention=lego-v1", *NO_SCAFFOLD]),
                              "identity-scaled": ("bert", ["model.identity_scaled=true"])}),
}
ANALYSES = {
    "fig4": "per-layer probes of the fig3 runs (seed 0)",
    "fig7": "attention head scores of pretrained MiniLM before fine-tuning, and of the fig6 runs",
    "fig9": "inference FLOPs, size and latency: BERT vs LEGO v0 vs v1",
    "fig10": "masked-LM pretraining: BERT vs LEGO v0 vs v1 validation loss",
    "templates": "seed 004: test error on unseen symbols vs training samples, standard vs identity-scaled attention",
}

# seed 004's sweep: training samples = training alphabet size; both models share the recipe
TEMPLATE_TASKS = ("aba-abb", "same-different")
TEMPLATE_SIZES = (16, 64, 256, 1024, 4096)
TEMPLATE_MODELS = {"standard": [], "identity": ["model.identity_scaled=true", "model.identity_mult=100"]}
TEMPLATE_ERROR = 0.1  # the data-reduction threshold on mean test error

# scale-specific meaning of the @-overrides
SPECIAL = {
    ("cpu", "@stochastic_depth"): ["train.depth_min=6", "train.depth_max=12", "train.eval_depth=12"],
    ("paper", "@stochastic_depth"): ["train.depth_min=6", "train.depth_max=12", "train.eval_depth=12"],
    ("cpu", "@pretrained"): ["train.init=minilm"],
}


def runs_for(fig: str, scale: str, seeds: int, pretrained: str | None) -> list[tuple[str, Run]]:
    figure = FIGURES[fig]
    out = []
    for label, (stem, overrides) in figure.variants.items():
        resolved = list(STEM_OVERRIDES.get((scale, stem), []))
        for o in overrides:
            if o.startswith("@"):
                if o == "@pretrained" and scale == "paper":
                    if not pretrained:
                        raise LegoError(f"{fig} at paper scale needs --pretrained hf:PATH (a local bert-base-uncased)")
                    resolved.append(f"train.init={pretrained}")
                    continue
                resolved += SPECIAL[(scale, o)]
            else:
                resolved.append(o)
        for seed in range(seeds if figure.seeded else 1):
            name = f"{scale}-{label}-s{seed}"
            out.append((label, Run(name, _cfg(scale, stem), resolved + [f"seed={seed}"], label in figure.mimic)))
    return out


def _finished(run_dir: Path) -> bool:
    if not (run_dir / "config.yaml").is_file():
        return False
    from .training.runs import run_config

    records = read_jsonl(run_dir / "metrics.jsonl")
    return bool(records) and records[-1]["step"] >= run_config(run_dir).train.total_steps()


def ensure_run(run: Run, runs_root: Path, log, mimic_steps: int = MIMIC_STEPS) -> Path:
    """Train, resume or reuse one run. A run directory of the same name is reused only if its
    config is the one asked for; otherwise reproduce refuses, naming the difference."""
    from .training.config import diff_configs, load_config
    from .training.runs import run_config
    from .training.trainer import RESUMABLE_CHANGES, start_or_resume

    run_dir = runs_root / run.name
    overrides = list(run.overrides)
    mimic_dir = runs_root / f"{run.name}-mimic-init"
    if run.mimic:
        overrides.append(f"train.init={mimic_dir}")
    asked = load_config(run.config, overrides + [f"name={run.name}"])
    if (run_dir / "config.yaml").is_file():
        changes = diff_configs(run_config(run_dir), asked, ignore=RESUMABLE_CHANGES)
        if changes:
            raise LegoError(f"{run_dir} holds a run of another config ({'; '.join(changes[:3])}"
                            f"{f'; {len(changes) - 3} more' if len(changes) > 3 else ''}): move it away, "
                            "or give reproduce another --runs directory")
    if _finished(run_dir):
        log(f"{run.name}: done, reused")
        return run_dir
    if run.mimic and not (mimic_dir / "checkpoints" / "last.safetensors").is_file():
        from .training.mimic import mimic

        if mimic_dir.exists():
            shutil.rmtree(mimic_dir)
        mimic(load_config(run.config, run.overrides), mimic_dir, steps=mimic_steps, batch_size=32, log=log)
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


def summarise(groups: dict[str, list[Path]]) -> dict:
    """Final test accuracy per chain index: mean and min..max over seeds, per variant."""
    out = {}
    for label, dirs in groups.items():
        finals = [read_jsonl(d / "metrics.jsonl")[-1] for d in dirs]
        per = list(zip(*[f["test_acc_per_step"] for f in finals]))
        out[label] = {
            "seeds": len(dirs),
            "mean_acc_per_step": [statistics.fmean(v) for v in per],
            "min_acc_per_step": [min(v) for v in per],
            "max_acc_per_step": [max(v) for v in per],
            "train_time_s": [f["time"] for f in finals],
            "steps": finals[0]["step"],
        }
    return out


def markdown_table(summary: dict) -> str:
    n = len(next(iter(summary.values()))["mean_acc_per_step"])
    head = "| variant | seeds | " + " | ".join(f"#{i}" for i in range(n)) + " | train time (s) |"
    rows = [head, "|" + "---|" * (n + 3)]
    for label, s in summary.items():
        cells = [f"{100 * m:.0f}" + (f" ({100 * lo:.0f}-{100 * hi:.0f})" if s["seeds"] > 1 else "")
                 for m, lo, hi in zip(s["mean_acc_per_step"], s["min_acc_per_step"], s["max_acc_per_step"])]
        t = statistics.fmean(s["train_time_s"])
        rows.append(f"| {label} | {s['seeds']} | " + " | ".join(cells) + f" | {t:.0f} |")
    return "\n".join(rows) + "\n"


def reproduce(fig: str, scale: str = "cpu", seeds: int = 3, runs_root: str = "runs", out_root: str = "reports",
              pretrained: str | None = None, log=print, threads: int = 0, mimic_steps: int = MIMIC_STEPS) -> Path:
    import os

    if fig not in FIGURES and fig not in ANALYSES:
        raise LegoError(f"unknown figure {fig!r} (known: {', '.join([*FIGURES, *ANALYSES])})")
    if scale not in ("cpu", "paper"):
        raise LegoError(f"--scale: cpu or paper, got {scale!r}")
    for flag, value, low in (("--seeds", seeds, 1), ("--threads", threads, 0), ("--mimic-steps", mimic_steps, 1)):
        if value < low:
            raise LegoError(f"{flag}: must be at least {low}, got {value}")
    main = int(os.environ.get("RANK", "0")) == 0
    out = Path(out_root) / f"{fig}-{scale}"
    root = Path(runs_root)
    if fig in FIGURES:
        groups: dict[str, list[Path]] = {}
        for label, run in runs_for(fig, scale, seeds, pretrained):
            if threads:
                run.overrides.append(f"train.threads={threads}")
            groups.setdefault(label, []).append(ensure_run(run, root, log, mimic_steps))
        if main:
            _finish_training_figure(fig, scale, groups, out)
    elif main:
        _finish_analysis(fig, scale, seeds, root, out, pretrained, log, threads)
    return out


def _finish_training_figure(fig: str, scale: str, groups: dict[str, list[Path]], out: Path) -> None:
    from .analysis.plots import plot_runs

    plot_runs([str(d[0]) for d in groups.values()], str(out / "accuracy.png"))
    summary = summarise(groups)
    if fig == "fig5":
        summary["depth_sweep"] = _depth_sweep(groups)
    write_json(out / "summary.json", summary)
    text = f"# {fig} ({scale} scale): {FIGURES[fig].title}\n\nFinal test accuracy (%) per chain index, " \
           f"mean (min-max) over seeds.\n\n" + markdown_table({k: v for k, v in summary.items() if k != "depth_sweep"})
    if fig == "fig5":
        text += "\nAccuracy (%) per chain index when evaluated at other depths (seed 0):\n\n"
        for label, rows in summary["depth_sweep"].items():
            for depth, accs in rows.items():
                text += f"- {label}, depth {depth}: " + " ".join(f"{100 * a:.0f}" for a in accs) + "\n"
    write_text(out / "summary.md", text)


def _depth_sweep(groups) -> dict:
    import torch

    from .training.data import TensorBatch
    from .training.evaluate import evaluate
    from .training.runs import load_run

    sweep = {}
    for label, dirs in groups.items():
        _, task, model = load_run(dirs[0], "last")
        data = TensorBatch.from_batch(task.sample("depth-sweep", range(2000)))
        sweep[label] = {}
        for depth in (4, 6, 8, 10, 12, 14, 16, 20):
            with torch.no_grad():
                sweep[label][depth] = evaluate(model, data, task.num_steps, depth=depth)["acc_per_step"]
    return sweep


def _finish_analysis(fig, scale, seeds, root, out, pretrained, log, threads=0) -> None:
    import torch

    from .analysis import plots

    if fig == "fig4":
        from .analysis.probe import probe_grid
        from .training.runs import load_run

        result = {}
        for label in ("bert", "albert"):
            run = dict(runs_for("fig3", scale, 1, pretrained))[label]  # seed 0 of fig3
            run_dir = ensure_run(run, root, log)
            cfg, task, model = load_run(run_dir, "last")
            grid = probe_grid(model, task, depth=cfg.train.eval_depth or None)
            plots.plot_probe_grid(grid, out / f"probe-{label}.png", set(cfg.train.supervised_steps(task.num_steps)),
                                  title=f"{label}: probe accuracy")
            result[label] = grid.tolist()
        write_json(out / "probe.json", result)
    elif fig == "fig7":
        from .analysis.heads import score_model
        from .training.runs import load_source

        source = "minilm" if scale == "cpu" else (pretrained or "minilm")
        _, task, model = load_source(source)
        tokens = torch.from_numpy(task.sample("analysis", range(200)).tokens).long()
        scores = score_model(model, task, tokens)
        plots.plot_head_scores(scores, out / "head_scores.png", title=f"{source} before fine-tuning")
        result = {"pretrained": {k: v.tolist() for k, v in scores.items()}}
        # ... and after fine-tuning: seed 0 of every fig6 run that exists
        for label, run in runs_for("fig6", scale, 1, pretrained):
            if _finished(root / run.name):
                _, task, model = load_source(str(root / run.name))
                scores = score_model(model, task, tokens)
                plots.plot_head_scores(scores, out / f"head_scores-{label}.png", title=f"{run.name} after training")
                result[label] = {k: v.tolist() for k, v in scores.items()}
        write_json(out / "head_scores.json", result)
    elif fig == "templates":
        _templates_sweep(scale, seeds, root, out, log, threads)
    elif fig == "fig9":
        from .analysis.flops import report

        rows = report("bert-base", ["bert", "lego-v0", "lego-v1"], 64, [512, 2048, 8192], 1, 8192)
        write_json(out / "flops.json", rows)
    elif fig == "fig10":
        from .training.pretrain import load_pretrain_config, pretrain

        curves = {}
        for att in ("standard", "lego-v0", "lego-v1"):
            name = f"{scale}-pretrain-{att}"
            run_dir = root / name
            records = read_jsonl(run_dir / "metrics.jsonl")
            run = load_pretrain_config(_cfg(scale, "pretrain"), [f"model.attention={att}", f"name={name}"]
                                       + ([f"pretrain.threads={threads}"] if threads else []))
            if not records or records[-1]["step"] < run.pretrain.steps:
                pretrain(run, run_dir, resume=(run_dir / "checkpoints" / "last.safetensors").is_file(), log=log)
                records = read_jsonl(run_dir / "metrics.jsonl")
            curves[att] = records
        plt = plots._pyplot()
        fig_, ax = plt.subplots(figsize=(5, 3.6))
        for att, rs in curves.items():
            ax.plot([r["step"] for r in rs], [r["val_loss"] for r in rs], label=att)
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (masked LM)")
        ax.legend()
        ax.grid(alpha=0.3)
        plots._save(fig_, out / "val_loss.png")
        write_json(out / "curves.json", curves)
    log(f"wrote {out}")


def template_runs(scale: str, seeds: int) -> list[tuple[tuple[str, str, int], Run]]:
    if scale != "cpu":
        raise LegoError("templates: the seed's sweep is CPU-sized already; run it with --scale cpu")
    out = []
    for task in TEMPLATE_TASKS:
        for model, overrides in TEMPLATE_MODELS.items():
            for n in TEMPLATE_SIZES:
                for seed in range(seeds):
                    out.append(((task, model, n), Run(f"cpu-template-{task}-{model}-n{n}-s{seed}", "cpu/template",
                                                      [f"task.templates={task}", f"task.train_symbols={n}",
                                                       f"train.batch_size={min(64, n)}", *overrides, f"seed={seed}"])))
    return out


def _templates_sweep(scale, seeds, root, out, log, threads) -> None:
    """Train every (task, model, size, seed), then test error at the best-validation evaluation
    (validation symbols are a third alphabet), curves with a log x axis, and the data reduction."""
    import time

    t0 = time.perf_counter()
    errors: dict[tuple[str, str, int], list[float]] = {}
    for key, run in template_runs(scale, seeds):
        if threads:
            run.overrides.append(f"train.threads={threads}")
        records = read_jsonl(ensure_run(run, root, log) / "metrics.jsonl")
        best = max(records, key=lambda r: r["valid_acc"])
        errors.setdefault(key, []).append(1 - best["test_acc"])
    summary, lines = {}, []
    for task in TEMPLATE_TASKS:
        summary[task] = {}
        for model in TEMPLATE_MODELS:
            rows = {n: errors[(task, model, n)] for n in TEMPLATE_SIZES}
            first = next((n for n in TEMPLATE_SIZES if statistics.fmean(rows[n]) <= TEMPLATE_ERROR), None)
            summary[task][model] = {"sizes": list(TEMPLATE_SIZES), "mean_error": [statistics.fmean(rows[n]) for n in TEMPLATE_SIZES],
                                    "min_error": [min(rows[n]) for n in TEMPLATE_SIZES],
                                    "max_error": [max(rows[n]) for n in TEMPLATE_SIZES], f"first_n_error<={TEMPLATE_ERROR}": first}
        a, b = (summary[task][m][f"first_n_error<={TEMPLATE_ERROR}"] for m in ("standard", "identity"))
        if a and b:
            reduction = f"{a / b:.0f}x"
        elif b:
            reduction = f"> {TEMPLATE_SIZES[-1] / b:.0f}x (standard never reaches it within the sweep)"
        else:
            reduction = "none (identity-scaled never reaches it)"
        summary[task]["data_reduction"] = reduction
        lines.append(f"| {task} | " + " | ".join(
            " / ".join(f"{100 * m:.0f} ({100 * lo:.0f}-{100 * hi:.0f})" for m, lo, hi in
                       zip(*(summary[task][model][k] for k in ("mean_error", "min_error", "max_error"))))
            for model in TEMPLATE_MODELS) + f" | {reduction} |")
    _template_plot(summary, out)
    wall = time.perf_counter() - t0
    write_json(out / "summary.json", {**summary, "seeds": seeds, "wall_s": wall})
    sizes = ", ".join(map(str, TEMPLATE_SIZES))
    write_text(out / "summary.md", f"# templates (cpu scale): {ANALYSES['templates']}\n\n"
               f"Test error (%) on unseen symbols at the best-validation evaluation, mean (min-max) over {seeds} seeds, "
               f"at {sizes} training samples (= training symbols). Data reduction: ratio of the smallest sizes "
               f"reaching mean error <= {TEMPLATE_ERROR:.0%}. Wall time {wall:.0f} s.\n\n"
               "| task | standard | identity-scaled (a, b per head, x100) | data reduction |\n|---|---|---|---|\n"
               + "\n".join(lines) + "\n")


def _template_plot(summary: dict, out: Path):
    from .analysis import plots

    plt = plots._pyplot()
    fig, axes = plt.subplots(1, len(TEMPLATE_TASKS), figsize=(4.4 * len(TEMPLATE_TASKS), 3.4), squeeze=False)
    for ax, task in zip(axes[0], TEMPLATE_TASKS):
        for model, s in summary[task].items():
            if not isinstance(s, dict):
                continue
            ax.plot(s["sizes"], s["mean_error"], marker="o", label=model)
            ax.fill_between(s["sizes"], s["min_error"], s["max_error"], alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training samples (= training symbols)")
        ax.set_ylabel("test error, unseen symbols")
        ax.set_title(task, fontsize=10)
        ax.set_ylim(-0.02, 0.62)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    plots._save(fig, out / "error_vs_samples.png")
