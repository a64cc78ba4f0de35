"""ListOps generation speed: expressions per second from nothing to token, read-out and label arrays.

legolab's vectorised generator (``task.sample``: whole tree levels of a batch at once) against a
per-expression Python loop written as LRA's ``listops.py`` does it (recursive ``generate_tree``
with the ``random`` module, rejection until the length window, string building, recursive
evaluation), here with the brackets kept and every operator node's value recorded. Both in this
one process; quote the ratio.

    python benchmarks/bench_listops.py [--count 10000] [--baseline-count 10000] [--lra-count 200]
"""

from __future__ import annotations

import argparse
import random

import numpy as np
from timing import best_of

from legolab.tasks import make_task, task_config

OPS = ("MIN", "MAX", "MED", "SM")


def lra_style(count: int, max_depth: int, max_args: int, lo: int, hi: int, rng: random.Random):
    """LRA's generator, one expression at a time (root at depth 0 here, as in legolab's max_depth)."""

    def tree(depth):
        if depth < max_depth and (depth == 0 or rng.random() <= 0.25):
            return (rng.choice(OPS), [tree(depth + 1) for _ in range(rng.randint(2, max_args))])
        return rng.randint(0, 9)

    def length(t):
        return 1 if isinstance(t, int) else 2 + sum(length(c) for c in t[1])

    def text(t):
        return str(t) if isinstance(t, int) else f"[{t[0]} " + " ".join(text(c) for c in t[1]) + " ]"

    def value(t, out):
        if isinstance(t, int):
            return t
        v = [value(c, out) for c in t[1]]
        r = {"MIN": min, "MAX": max, "MED": lambda x: int(np.median(x)), "SM": lambda x: sum(x) % 10}[t[0]](v)
        out.append(r)
        return r

    rows = []
    for _ in range(count):
        while True:
            t = tree(0)
            if lo <= length(t) <= hi:
                break
        nodes = []
        value(t, nodes)
        rows.append((text(t).split(), nodes))
    return rows



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000, help="expressions per legolab call (cpu preset)")
    ap.add_argument("--baseline-count", type=int, default=10_000)
    ap.add_argument("--lra-count", type=int, default=200, help="expressions of the lra preset (0: skip)")
    args = ap.parse_args()
    task = make_task("listops", task_config("listops"))
    task.sample("train", range(1000))  # warm-up
    t_min, t_med = best_of(lambda: task.sample("train", range(args.count)), 5)
    print(f"cpu preset (depth 3, 2..5 args, 4..60 tokens): {args.count:,} expressions in best {t_min:.3f} s, "
          f"median {t_med:.3f} s ({args.count / t_min:,.0f} /s; best of 5)")
    limits = task.config.limits()
    b_min, _ = best_of(lambda: lra_style(args.baseline_count, limits["max_depth"], limits["max_args"], limits["min_length"],
                                         limits["max_length"], random.Random(0)), 2)
    ours, loop = args.count / t_min, args.baseline_count / b_min
    print(f"per-expression Python loop (LRA style): {args.baseline_count:,} in {b_min:.3f} s ({loop:,.0f} /s; best of 2); "
          f"legolab is {ours / loop:,.0f}x faster")
    if args.lra_count:
        lra = make_task("listops", task_config("listops", preset="lra"))
        l_min, l_med = best_of(lambda: lra.sample("test", range(args.lra_count)), 3)
        print(f"lra preset (depth 9, 2..10 args, 501..1999 tokens): {args.lra_count:,} expressions in best {l_min:.3f} s, "
              f"median {l_med:.3f} s ({args.lra_count / l_min:,.0f} /s; best of 3)")


if __name__ == "__main__":
    main()
