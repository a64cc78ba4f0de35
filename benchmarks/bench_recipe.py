"""Time to accuracy: train candidate configs one after another and report, per candidate and per
supervised variable, the training sentences and wall seconds at which test accuracy first passed
the threshold (95%), plus seconds per 1,000 training sentences. Writes a JSON report.

    python benchmarks/bench_recipe.py                                  # the shipped CPU recipes
    python benchmarks/bench_recipe.py --seeds 0 1 2 --out recipe.json
    python benchmarks/bench_recipe.py -c base=configs/cpu/bert.yaml \\
        -c "noconv=configs/cpu/bert.yaml model.conv=0" --give-up 200000

A candidate is ``NAME=CONFIG [key=value ...]``. Each run stops as soon as every supervised
variable has passed the threshold, when its step budget ends, or (``--give-up S``) once S
sentences have gone by with chain variable #2 still below 60%: a candidate that has not left
the plateau by then is not a recipe. Runs go to a temporary directory unless ``--runs`` is given.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from legolab.training.config import load_config
from legolab.training.trainer import train

SHIPPED = {
    "cpu/bert": "configs/cpu/bert.yaml",
    "cpu/albert": "configs/cpu/albert.yaml",
    "cpu/bert-d3": "configs/cpu/bert-d3.yaml",
}


def first_pass(records: list[dict], i: int, threshold: float):
    for r in records:
        a = r["test_acc_per_index"][i]
        if a is not None and a >= threshold:
            return r
    return None


def run_candidate(name: str, spec: str, seed: int, args, root: Path) -> dict:
    path, *overrides = shlex.split(spec)
    overrides += [f"seed={seed}"] + ([f"train.threads={args.threads}"] if args.threads else [])
    cfg = load_config(path, overrides)
    cfg.name = f"{name.replace('/', '-')}-s{seed}"
    supervised = cfg.train.supervised_indices(cfg.task_config().n)

    def stop(r: dict) -> bool:
        accs = r["test_acc_per_index"]
        if all(accs[i] is not None and accs[i] >= args.threshold for i in supervised):
            return True
        stuck = len(accs) > 2 and 2 in supervised and accs[2] < 0.6
        return bool(args.give_up and r["sentences"] >= args.give_up and stuck)

    t0 = time.perf_counter()
    records = train(cfg, root / cfg.name, progress=False, stop=stop)
    wall = time.perf_counter() - t0
    last = records[-1]
    passed = {}
    for i in supervised:
        r = first_pass(records, i, args.threshold)
        passed[i] = None if r is None else {"sentences": r["sentences"], "seconds": r["time"], "step": r["step"]}
    return {
        "candidate": name, "spec": spec, "seed": seed,
        "solved": all(v is not None for v in passed.values()),
        "passed": passed,
        "final_acc_per_index": last["test_acc_per_index"],
        "sentences": last["sentences"], "train_seconds": last["time"], "wall_seconds": round(wall, 1),
        "seconds_per_1k_sentences": round(1000 * last["time"] / max(last["sentences"], 1), 4),
    }


def print_table(results: list[dict], threshold: float) -> None:
    print(f"\nsentences (k) / training seconds at which test accuracy first passed {threshold:.0%}; '-' never")
    for res in results:
        cells = " ".join(f"#{i}:" + ("-" if v is None else f"{v['sentences'] / 1000:.0f}k/{v['seconds']:.0f}s")
                         for i, v in res["passed"].items())
        print(f"{res['candidate']:>16s} s{res['seed']}  {'SOLVED' if res['solved'] else 'not   '}  {cells}  "
              f"({res['seconds_per_1k_sentences']:.2f} s per 1k sentences)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--candidate", action="append", metavar="NAME=CONFIG [k=v ...]",
                    help="a candidate (repeatable); default: the shipped CPU recipes")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--give-up", type=int, default=0, metavar="SENTENCES",
                    help="stop a run whose #2 is still below 60%% after this many sentences (0: never)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0: the config's)")
    ap.add_argument("--runs", type=Path, default=None, help="keep run directories here (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=Path("recipe.json"))
    args = ap.parse_args(argv)
    if args.candidate:
        candidates = dict(c.split("=", 1) for c in args.candidate)
    else:
        candidates = SHIPPED
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.runs or Path(tmp)
        for name, spec in candidates.items():
            for seed in args.seeds:
                res = run_candidate(name, spec, seed, args, root)
                results.append(res)
                print_table([res], args.threshold)
                args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:],
                                                "results": results}, indent=1))
    print_table(results, args.threshold)
    print(f"report: {args.out}")


if __name__ == "__main__":
    main()
