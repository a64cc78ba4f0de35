"""Wall time of `reproduce --jobs` lanes: runs in the figures' order vs longest first, one pool vs one per figure.

Computed, not measured: each finished run's own training time (metrics.jsonl, evaluation left
out) is dealt to the lanes as the process pool deals them (each free lane takes the next run).
Prints each schedule's wall time in seconds and its ratio to the figures' order, one command
per figure.

    python benchmarks/bench_jobs_order.py fig15 fig16 --seed 2 [--lanes 2 --runs runs]
"""

from __future__ import annotations

import argparse
import heapq
from pathlib import Path

from legolab.io import read_jsonl
from legolab.reproduce import figure_runs
from legolab.reproduce.runs import work


def wall(times: list[float], lanes: int) -> float:
    ends = [0.0] * lanes
    for t in times:
        heapq.heappush(ends, heapq.heappop(ends) + t)
    return max(ends)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figures", nargs="+")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--runs", default="runs")
    args = p.parse_args()

    per_figure = []
    for fig in args.figures:
        runs = [r for _, r in figure_runs(fig, "cpu", args.seed + 1) if r.name.endswith(f"-s{args.seed}")]
        per_figure.append(list({r.name: r for r in runs}.values()))
    pooled = list({r.name: r for runs in per_figure for r in runs}.values())
    trained = {r.name: read_jsonl(Path(args.runs) / r.name / "metrics.jsonl")[-1]["time"] for r in pooled}

    def seconds(run) -> float:
        return trained[run.name]

    baseline = sum(wall([seconds(r) for r in runs], args.lanes) for runs in per_figure)
    rows = [
        ("one command per figure, figure order", baseline),
        ("one command per figure, longest first",
         sum(wall([seconds(r) for r in sorted(runs, key=work, reverse=True)], args.lanes) for runs in per_figure)),
        ("one pool, figure order", wall([seconds(r) for r in pooled], args.lanes)),
        ("one pool, longest first", wall([seconds(r) for r in sorted(pooled, key=work, reverse=True)], args.lanes)),
    ]
    print(f"{len(pooled)} runs, seed {args.seed}, {sum(seconds(r) for r in pooled):,.0f} s of training summed, "
          f"{args.lanes} lanes")
    for name, t in rows:
        print(f"{name:40s} {t:8,.0f} s  {t / baseline:5.2f}x")


if __name__ == "__main__":
    main()
