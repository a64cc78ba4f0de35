"""The ``legolab`` command line. Each subcommand is a small function; heavy imports (torch) happen
inside the commands that need them, so ``legolab solve`` answers at once.

Every user error ends in one line ``legolab: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from .errors import LegoError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + error
        self.exit(2, f"{self.prog}: error: {message}\n")


# ---- data ---------------------------------------------------------------------------------
def cmd_tasks(args) -> int:
    from .groups import GROUPS
    from .tasks import TASKS

    print("tasks:")
    for name, cls in TASKS.items():
        print(f"  {name:10s} {(cls.__doc__ or cls.__module__).strip().splitlines()[0]}")
    print("groups (--group):")
    for name, desc in GROUPS.items():
        print(f"  {name:16s} {desc}")
    return 0


def cmd_generate(args) -> int:
    import numpy as np

    from .io import write_text
    from .tasks import LegoTask, task_config
    from .tasks.lego_text import format_sentence

    if args.count < 0 or args.start < 0:
        raise LegoError("--count and --start must be non-negative")
    task = LegoTask(task_config("lego", group=args.group, n=args.n, n_vars=args.n_vars, n_min=args.n_min), seed=args.seed)
    if args.notation == "code" and task.group.names != ("+", "-"):
        raise LegoError("--notation code (val/not) is only defined for the sign group")
    lines = []
    chunk = 10_000
    for lo in range(args.start, args.start + args.count, chunk):
        hi = min(lo + chunk, args.start + args.count)
        batch = task.sample(args.split, np.arange(lo, hi))
        for i in range(len(batch)):
            clauses = task.clauses(batch.tokens[i])
            answers = task.answers(batch, i)
            if args.format == "jsonl":
                m = len(clauses)
                lines.append(json.dumps({
                    "index": lo + i,
                    "sentence": format_sentence(clauses, args.notation),
                    "chain": [v for v, _ in answers],
                    "values": {v: x for v, x in answers},
                    "steps": batch.steps[i, :m].tolist(),
                    "positions": batch.positions[i, :m].tolist(),
                    "ops": [task.group.names[g] for g in batch.meta["ops"][i, :m]],
                    "tokens": batch.tokens[i].tolist(),
                }))
            else:
                lines.append(format_sentence(clauses, args.notation) + "\t" + " ".join(f"{v}:{x}" for v, x in answers))
    text = "".join(line + "\n" for line in lines)
    if args.out:
        write_text(args.out, text)
        print(f"wrote {args.count} sentences to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_solve(args) -> int:
    from .groups import get_group
    from .tasks.lego_text import parse_sentence, solve

    group = get_group(args.group)
    text = sys.stdin.read() if args.sentence == "-" else args.sentence
    for step, (var, value) in enumerate(solve(parse_sentence(text, group), group)):
        print(f"#{step} {var} = {group.value_names[value]}")
    return 0


def cmd_demo(args) -> int:
    from .groups import get_group
    from .tasks import LegoConfig, LegoTask
    from .tasks.lego_text import format_sentence, parse_sentence, solve

    print("== LEGO Task 1 (sign group) and Task 2 (D3), n = 6: sentence, then the answers in chain order")
    for group in ("sign", "d3"):
        task = LegoTask(LegoConfig(group=group, n=6), seed=0)
        batch = task.sample("test", range(2))
        for i in range(2):
            text = format_sentence(task.clauses(batch.tokens[i]))
            chain = solve(parse_sentence(text, get_group(group)), task.group)
            print(f"  {text:40s} -> " + " ".join(f"{v}={task.group.value_names[x]}" for v, x in chain))
    return 0


# ---- parser -------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(prog="legolab", description="LEGO: a synthetic chain-of-reasoning task for transformers.")
    p.add_argument("--version", action="version", version=f"legolab {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("tasks", help="list tasks and groups")
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("generate", help="print or write LEGO sentences with answers and chain indices")
    s.add_argument("--group", default="sign", help="sign|z2 (Task 1), d3 (Task 2), zK, dK, sK or a Cayley-table file")
    s.add_argument("--n", type=int, default=12, help="clauses per sentence")
    s.add_argument("--n-min", type=int, default=None, help="draw each length uniformly from [n-min, n]")
    s.add_argument("--n-vars", type=int, default=26, help="size of the variable alphabet")
    s.add_argument("--count", type=int, default=5)
    s.add_argument("--start", type=int, default=0, help="index of the first example")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--split", default="train", help="random stream: train, test, or any name")
    s.add_argument("--format", choices=["text", "jsonl"], default="text")
    s.add_argument("--notation", choices=["paper", "code"], default="paper", help="code: 'a = val 1 ,' (sign group)")
    s.add_argument("--out", help="write to this file (atomically) instead of stdout")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("demo", help="show the task and train the CPU recipe briefly")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("solve", help="solve a sentence: print every variable's value in chain order")
    s.add_argument("sentence", help="e.g. 'a=+1; b=-a; c=+b' or 'a = val 1 , b = not a ,'; - reads stdin")
    s.add_argument("--group", default="sign")
    s.set_defaults(func=cmd_solve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except LegoError as e:
        print(f"legolab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("legolab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
