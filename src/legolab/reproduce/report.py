"""Measured summaries of run directories, and the reports: ``FIG.md`` per figure, an index per scale."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter
from pathlib import Path

from ..io import write_json, write_text
from ..training.rundir import read_metrics
from ..training.step import machine_name
from .figures import FAILS, HOLDS, PASS, UNTESTABLE, Verdict

SCALE_NOTES = {
    "cpu": "**Scaled down (CPU scale).** 6-layer, 64-wide pre-LN encoders (ALBERT: one shared layer) trained "
           "with the CPU recipe of `docs/cpu_recipe.md`: a kernel-7 convolution on each attention input, "
           "guidance of head 0 toward the association map annealed away by step 6,000, deep and operand "
           "supervision (Task 2 also an association scaffold, gone by step 12,000); "
           "8,000 steps of 32 fresh sentences (Task 2: 16,000); 2,000 test sentences. The paper: 12 layers, "
           "768 wide, post-LN, Adam 5e-5, batch 1,000, 200 epochs of 120,000 sentences, no aids.",
    # Figs. 6, 7 and 12 compare initialisations of the MiniLM shape, which the 6 x 64 recipe's attention aids would blur
    "cpu-minilm": "**Scaled down (CPU scale).** The MiniLM shape (BERT, 6 layers, 384 wide, 12 heads, post-LN, "
                  "word pieces) trained with the cpu/minilm config: AdamW 1e-4, batch 32, no dropout, deep and "
                  "operand supervision, none of the 6 x 64 recipe's attention aids (convolution, guidance, scaffold), "
                  "which would teach the attention that the initialisations are compared on; 1,000 test sentences. "
                  "The paper: BERT-base, Adam 5e-5, batch 1,000, 200 epochs of 120,000 sentences, no aids.",
    "paper": "**Paper scale.** The paper's setting (appendix B.2): 12 layers, 768 wide, Adam 5e-5, batch 1,000, "
             "cosine schedule, 200 epochs of 10^4 n sentences.",
}


def run_machines(records: list[dict]) -> list[str]:
    """The machines a run's records were measured on, in order (a resumed run may have moved)."""
    return list(dict.fromkeys(r["machine"] for r in records if "machine" in r))


def count_machines(runs: list[list[str]]) -> dict[str, int]:
    """machine -> how many of the runs trained on it (a run that moved counts on each; a run from
    before records named their machine counts as unrecorded)."""
    return dict(Counter(m for machines in runs for m in machines or ["an unrecorded machine"]))


def training_cost(runs: list[list[dict]]) -> tuple[float, dict[str, int]]:
    """Runs' records -> their training time, summed, and ``count_machines`` of them."""
    return sum(rs[-1].get("time", 0.0) for rs in runs if rs), count_machines([run_machines(rs) for rs in runs])


def run_summary(run_dir: Path) -> dict:
    from ..training.runs import run_config

    cfg = run_config(run_dir)
    records = read_metrics(run_dir)
    if not records:
        raise ValueError(f"{run_dir}: no evaluations recorded")
    n = len(records[-1]["test_acc_per_index"])
    first = [next((r["step"] for r in records if r["test_acc_per_index"][i] >= PASS), None) for i in range(n)]
    dip = (0.0, 0)
    for i in range(n):  # the largest fall of a variable after it first passed 90%
        peak, passed = 0.0, False
        for r in records:
            a = r["test_acc_per_index"][i]
            if passed and peak - a > dip[0]:
                dip = (peak - a, i)
            peak, passed = max(peak, a), passed or a >= 0.9
    return {"final": records[-1]["test_acc_per_index"], "first_pass": first, "dip": dip, "step": records[-1]["step"],
            "supervised": list(cfg.train.supervised_indices(n)), "chance": 1 / cfg.make_task().num_classes,
            "time": records[-1]["time"], "machines": run_machines(records)}


def summarise(groups: dict[str, list[Path]]) -> dict:
    """label -> final test accuracy per chain index (mean, min, max over seeds), the step each
    index first reached PASS (mean; None where a seed never did) and in how many seeds it did,
    the largest dip, times."""
    out = {}
    for label, dirs in groups.items():
        runs = [run_summary(d) for d in dirs]
        per = list(zip(*[r["final"] for r in runs]))
        firsts = list(zip(*[r["first_pass"] for r in runs]))
        out[label] = {
            "seeds": len(runs), "mean": [statistics.fmean(v) for v in per], "min": [min(v) for v in per],
            "max": [max(v) for v in per],
            "first_pass": [None if None in f else statistics.fmean(f) for f in firsts],
            "reached": [sum(x is not None for x in f) for f in firsts],
            "max_dip": max(r["dip"] for r in runs), "supervised": runs[0]["supervised"], "chance": runs[0]["chance"],
            "steps": runs[0]["step"], "train_time_s": [r["time"] for r in runs],
            "machines": [r["machines"] for r in runs],
        }
    return out


def accuracy_table(summary: dict) -> str:
    n = max(len(s["mean"]) for s in summary.values())
    rows = ["| variant | seeds | " + " | ".join(f"#{i}" for i in range(n)) + " | train time (s) |", "|" + "---|" * (n + 3)]
    for label, s in summary.items():
        cells = [f"{100 * m:.0f}" + ("*" if i in s["supervised"] else "") + (f" ({100 * lo:.0f}-{100 * hi:.0f})" if s["seeds"] > 1 else "")
                 for i, (m, lo, hi) in enumerate(zip(s["mean"], s["min"], s["max"]))]
        cells += [""] * (n - len(cells))
        rows.append(f"| {label} | {s['seeds']} | " + " | ".join(cells) + f" | {statistics.fmean(s['train_time_s']):.0f} |")
    return "\n".join(rows) + "\n"


def first_pass_table(summary: dict) -> str:
    n = max(len(s["mean"]) for s in summary.values())
    rows = ["| variant | " + " | ".join(f"#{i}" for i in range(n)) + " | largest dip |", "|" + "---|" * (n + 2)]
    for label, s in summary.items():
        cells = ["-" if f is None else f"{f:.0f}" for f in s["first_pass"]] + [""] * (n - len(s["first_pass"]))
        dip, at = s["max_dip"]
        rows.append(f"| {label} | " + " | ".join(cells) + (f" | {100 * dip:.0f} points (#{at}) |" if dip >= 0.01 else " | none |"))
    return "\n".join(rows) + "\n"


def verdict_table(verdicts: list[Verdict]) -> str:
    rows = ["| part of the claim | verdict | evidence |", "|---|---|---|"]
    rows += [f"| {part} | **{verdict}** | {evidence} |" for part, verdict, evidence in verdicts]
    return "\n".join(rows) + "\n"


def write_report(out: Path, fig: str, scale: str, title: str, claim: str, verdicts: list[Verdict], body: str,
                 note: str, command: str, started: float, data: dict, train_time: float | None = None,
                 setting: str | None = None) -> Path:
    """``out/FIG.md`` and ``out/summary.json``; returns the report's path. ``setting``: the key of
    ``SCALE_NOTES`` that says how the figure's LEGO runs were scaled (None: it has none, ``note``
    says it all); ``data["machines"]`` (from ``count_machines``) says where the runs trained."""
    wall = time.time() - started
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    timing = f"wall time of this command {wall:,.0f} s on {machine_name()}"
    if train_time is not None:
        on = "; ".join(f"{m} ({k} run{'s' if k > 1 else ''})" for m, k in data.get("machines", {}).items())
        timing += f" (training time of its runs, summed: {train_time:,.0f} s{', on ' + on if on else ''}; " \
                  "finished runs are reused)"
    if setting:
        setting = SCALE_NOTES[setting] + (f" This figure: {note}." if note else "")
    else:
        setting = f"**Setting.** {note}." if note else ""
    text = (f"# {fig} ({scale} scale): {title}\n\n**The paper's claim.** {claim}\n\n{verdict_table(verdicts)}\n"
            f"{setting}\n\n{body.rstrip()}\n\n---\n`{command}`, {date}, {timing}.\n")
    write_json(out / "summary.json", {**data, "verdicts": [list(v) for v in verdicts], "command": command,
                                      "date": date, "wall_s": wall, "train_time_s": train_time})
    path = out / f"{fig}.md"
    write_text(path, text)
    return path


def report_seeds(data: dict) -> str:
    """The seeds a report rests on: its variants' counts (a range where runs are missing), else
    the analysis's own count (0, a figure that could not run: none), else its command's --seeds."""
    counts = {s["seeds"] for s in (data.get("summary") or {}).values() if isinstance(s, dict) and "seeds" in s}
    if counts:
        return f"{min(counts)}" if len(counts) == 1 else f"{min(counts)}-{max(counts)}"
    if isinstance(data.get("seeds"), int):
        return str(data["seeds"] or "none")
    asked = re.search(r"--seeds (\d+)", data.get("command", ""))
    return asked.group(1) if asked else ""


def _duration(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def write_index(out_root: Path, scale: str, order: list[str], titles: dict[str, str]) -> Path:
    """``index-{scale}.md``: every figure with its verdicts, from the reports that exist."""
    rows = ["| figure | what | verdicts | seeds | training, summed over runs | one seed on 2 cores, at least | report |",
            "|---|---|---|---|---|---|---|"]
    counts = {HOLDS: 0, FAILS: 0, UNTESTABLE: 0}
    fits = []  # per figure that trains: could one seed fit the 30-minute goal on 2 cores?
    for fig in order:
        summary = out_root / f"{fig}-{scale}" / "summary.json"
        if not summary.is_file():
            rows.append(f"| {fig} | {titles[fig]} | not run | | | | |")
            continue
        data = json.loads(summary.read_text())
        if "verdicts" not in data:  # a report of an earlier format, before verdicts
            rows.append(f"| {fig} | {titles[fig]} | no verdict (an earlier report) | | | | [{fig}-{scale}/]({fig}-{scale}/) |")
            continue
        verdicts = data["verdicts"]
        for _, v, _ in verdicts:
            counts[v] = counts.get(v, 0) + 1
        cell = "<br>".join(f"{v}: {part}" for part, v, _ in verdicts) or "no verdict"
        t = data.get("train_time_s") or 0
        cost = _duration(t) if t else "none"
        seeds = report_seeds(data)
        most = int(seeds.split("-")[-1]) if seeds[-1:].isdigit() else 0
        per_seed = t / 2 / most if t and most else 0
        if per_seed:
            fits.append(per_seed <= 30 * 60)
        rows.append(f"| {fig} | {titles[fig]} | {cell} | {seeds} | {cost} | {_duration(per_seed) if per_seed else ''} | "
                    f"[{fig}.md]({fig}-{scale}/{fig}.md) ({data.get('date', '')}) |")
    head = (f"# Reproductions at {scale} scale\n\nWritten by `legolab reproduce` after each figure; "
            f"`legolab reproduce all --scale {scale}` runs them all. Training time is the runs' own "
            "(evaluation left out), summed: with `--jobs 2` on 2 cores a figure's wall time is about half of it. "
            "One seed on 2 cores is that sum per seed, halved: a lower bound (two lanes packed perfectly; "
            "evaluation adds about 15%). "
            + (f"{len(fits) - sum(fits)} of the {len(fits)} figures that train cannot meet the goal of 30 minutes "
               "on 2 cores even at one seed: their bound is above it. " if scale == "cpu" and fits else "")
            + "Verdicts so far: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".\n\n")
    path = out_root / f"index-{scale}.md"
    write_text(path, head + "\n".join(rows) + "\n")
    return path
