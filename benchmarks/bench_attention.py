"""Training-step time of the attention variants at the CPU recipe's shape, side by side in one run.

BERT vs LEGO attention v0 / v1 vs identity-scaled BERT, each built from `configs/cpu/bert.yaml`
with the override `legolab reproduce lego-attention` uses, trained on the same batches; the
contenders alternate so that machine noise hits them alike. Prints ms per step, sentences/s,
the time of one epoch of the paper's 120k sentences, and the ratio to BERT.

    python benchmarks/bench_attention.py [--threads 2 --steps 30 --rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from legolab.models import build_model
from legolab.tasks import make_task
from legolab.training.config import load_config
from legolab.training.step import make_optimizer, make_train_step

VARIANTS = {"standard": [], "lego-v0": ["model.attention=lego-v0"], "lego-v1": ["model.attention=lego-v1"],
            "identity-scaled": ["model.identity_scaled=true"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/cpu/bert.yaml")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    steps = {}
    for name, overrides in VARIANTS.items():
        cfg = load_config(args.config, overrides)
        task = make_task(cfg.task.get("name", "lego"), cfg.task_config(), seed=0)
        batch = task.sample("train", range(cfg.train.batch_size))
        tensors = [torch.from_numpy(a).long() for a in (batch.tokens, batch.positions, batch.targets)]
        mask = torch.from_numpy(batch.index < cfg.train.n_tr)
        model = build_model(cfg.model, task).train()
        step = make_train_step(model, make_optimizer(model, cfg.train.lr, cfg.train.weight_decay))
        steps[name] = lambda s=step, t=tensors, m=mask, c=cfg.train.clip: s(*t, m, depth=None, clip=c)
    B = cfg.train.batch_size

    times = {name: [] for name in steps}
    for fn in steps.values():  # warm-up
        for _ in range(3):
            fn()
    for _ in range(args.rounds):
        for name, fn in steps.items():
            for _ in range(args.steps):
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    base = statistics.median(times["standard"])
    print(f"{args.config}: batch {B}, {args.threads} threads, median of {args.rounds * args.steps} steps")
    print(f"{'attention':16s} {'ms/step':>8s} {'sent/s':>8s} {'s per 120k':>11s} {'vs std':>8s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:16s} {med * 1e3:8.1f} {B / med:8.0f} {120_000 / B * med:11.0f} {base / med:7.2f}x")


if __name__ == "__main__":
    main()
