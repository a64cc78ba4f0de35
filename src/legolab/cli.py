"""The ``legolab`` command line. Each subcommand is a small function; heavy imports (torch) happen
inside the commands that need them, so ``legolab solve`` answers at once.

Every user error ends in one line ``legolab: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from .errors import Interrupted, LegoError
from .io import log_line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + error
        self.exit(2, f"{self.prog}: error: {message}\n")


# ---- data ---------------------------------------------------------------------------------
def cmd_tasks(args) -> int:
    from dataclasses import fields

    from .groups import GROUPS
    from .tasks import TASKS

    print("tasks:")
    for name, cls in TASKS.items():
        options = ", ".join(f"{f.name}={f.default!r}" for f in fields(cls.config_class))
        print(f"  {name:10s} {(cls.__doc__ or cls.__module__).strip().splitlines()[0]}")
        print(f"  {'':10s} options: {options}")
    print("groups (--group):")
    for name, desc in GROUPS.items():
        print(f"  {name:16s} {desc}")
    return 0


def _check_non_negative(args, *names: str, positive: tuple[str, ...] = ()) -> None:
    for name in names + positive:
        value = getattr(args, name)
        if value is not None and (value < 0 or (name in positive and value == 0)):
            flag = "--" + name.replace("_", "-")
            raise LegoError(f"{flag}: must be {'positive' if name in positive else 'non-negative'}, got {value}")
    if getattr(args, "seed", None) is not None and args.seed >= 2**32:
        raise LegoError(f"--seed: must be below 2**32, got {args.seed}")


def cmd_configs(args) -> int:
    from .training.config import shipped_configs

    print("shipped configs (legolab train NAME [key=value ...]):")
    for name, path in shipped_configs().items():
        first = next((line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
        print(f"  {name:18s} {first if len(first) <= 90 else first[:87] + '...'}")
    return 0


def _task_values(name: str, pairs: list[str], **flags) -> dict:
    """A task's config values from ``key=value`` pairs (``task.`` optional) and shorthand flags
    (--group, --n, ...; None when not given)."""
    import yaml

    values = {k: v for k, v in flags.items() if v is not None}
    for item in pairs:
        if "=" not in item:
            raise LegoError(f"unexpected argument {item!r}: task options look like n=8 or task.group=d3")
        key, value = item.split("=", 1)
        values[key.strip().removeprefix("task.")] = yaml.safe_load(value)
    return {"name": name, **values}


def _make_task(values: dict, seed: int):
    from .tasks import make_task, task_config

    values = dict(values)
    name = values.pop("name")
    return make_task(name, task_config(name, **values), seed=seed)


def cmd_generate(args) -> int:
    import numpy as np

    from .io import atomic_path

    _check_non_negative(args, "count", "start", "seed")
    task = _make_task(_task_values(args.task, args.options, group=args.group, n=args.n, n_vars=args.n_vars,
                                   n_min=args.n_min), args.seed)
    task.format_example(task.sample(args.split, [0]), 0, args.notation)  # options the task refuses fail now

    def lines(lo: int, hi: int):
        batch = task.sample(args.split, np.arange(lo, hi))
        for i in range(len(batch)):
            if args.format == "jsonl":
                yield json.dumps({"index": lo + i, **task.describe_example(batch, i, args.notation)}) + "\n"
            else:
                yield task.format_example(batch, i, args.notation) + "\n"

    def write(out) -> None:
        """Chunk by chunk: constant memory however large --count is; a bar on a terminal."""
        from rich.console import Console
        from rich.progress import Progress

        chunk, end = 10_000, args.start + args.count
        with Progress(console=Console(stderr=True), disable=not sys.stderr.isatty() or args.count <= chunk,
                      transient=True) as bar:
            job = bar.add_task("generating", total=args.count)
            for lo in range(args.start, end, chunk):
                out.write("".join(lines(lo, min(lo + chunk, end))))
                bar.update(job, advance=min(chunk, end - lo))

    if args.out:
        from pathlib import Path

        if Path(args.out).is_dir():
            raise LegoError(f"--out {args.out}: is a directory; give a file name")
        with atomic_path(args.out) as tmp, open(tmp, "w") as f:
            write(f)
        print(f"wrote {args.count} sentences to {args.out}", file=sys.stderr)
    else:
        write(sys.stdout)
    return 0


def cmd_solve(args) -> int:
    """One example as the argument: its answers in full (LEGO: the chain, one variable per line).
    ``-``: one example per stdin line (text after a tab is ignored, so ``generate`` output feeds
    back), answered in ``generate``'s text format."""
    from .errors import ParseError
    from .tasks import supports

    task = _make_task(_task_values(args.task, args.options, group=args.group), 0)
    if not supports(task, "solve_text"):
        raise LegoError(f"--task {args.task}: this task has no text form to solve")
    if args.sentence != "-":
        print(task.solve_text(args.sentence, verbose=True))
        return 0
    out = []
    for number, line in enumerate(sys.stdin, 1):
        sentence = line.split("\t", 1)[0].strip()
        if not sentence:
            continue
        try:
            out.append(task.solve_text(sentence) + "\n")
        except ParseError as e:
            raise ParseError(f"line {number}: {e}") from None
        if len(out) >= 10_000:
            sys.stdout.write("".join(out))
            out.clear()
    sys.stdout.write("".join(out))
    return 0


def cmd_demo(args) -> int:
    import shutil
    from pathlib import Path

    from .groups import get_group
    from .tasks import LegoConfig, LegoTask
    from .tasks.lego_text import format_sentence, parse_sentence, solve
    from .training.trainer import start_or_resume

    print("== LEGO sentences (Task 1: sign group; Task 2: D3), n = 6, with the solver's answers in chain order")
    for group in ("sign", "d3"):
        task = LegoTask(LegoConfig(group=group, n=6), seed=0)
        batch = task.sample("test", range(2))
        for i in range(2):
            text = format_sentence(task.clauses(batch.tokens[i]))
            chain = solve(parse_sentence(text, get_group(group)), task.group)
            print(f"  {text:50s} -> " + " ".join(f"{v}={task.group.value_names[x]}" for v, x in chain))
    from .training.config import config_path

    config = config_path(args.config)
    run_dir = Path(args.runs) / "demo"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # the demo always starts afresh
    print(f"\n== training {config} until every supervised variable passes 95% test accuracy (a few minutes "
          "on 2 cores); the bar shows test accuracy per chain variable, supervised ones bright")
    overrides = ["train.test_size=1000"] + ([f"train.steps={args.steps}"] if args.steps else [])

    def solved(record) -> bool:
        accs = record["test_acc_per_index"]
        return all(a is not None and a >= 0.95 for a in accs[:6])

    start_or_resume(str(config), overrides, runs_root=args.runs, name="demo", stop=solved)
    print(f"\nrun directory: {run_dir} (legolab eval {run_dir} --n 16; legolab plot {run_dir})")
    return 0


# ---- training -------------------------------------------------------------------------------
def _split_config_args(items: list[str]) -> tuple[str | None, list[str]]:
    """``[CONFIG.yaml] [key=value ...]``."""
    config, overrides = None, []
    for i, item in enumerate(items):
        if "=" in item:
            overrides.append(item)
        elif i == 0:
            config = item
        else:
            raise LegoError(f"unexpected argument {item!r}: overrides look like train.lr=3e-3")
    return config, overrides


def cmd_train(args) -> int:
    from .training.trainer import start_or_resume

    config, overrides = _split_config_args(args.config)
    if config is None and args.resume is None:
        raise LegoError("give a config file (a file, or a shipped config such as cpu/bert: `legolab configs` lists them) or --resume RUN")
    if args.init:
        overrides.append(f"train.init={args.init}")
    start_or_resume(config, overrides, runs_root=args.runs, resume_dir=args.resume, name=args.name,
                    progress=False if args.no_progress else None)
    return 0


def _check_depth(depth: int | None, model) -> None:
    """--depth: 1..n_layers for an untied model, any positive depth for a tied one."""
    if depth is not None and (depth < 1 or (not model.tied and depth > model.cfg.n_layers)):
        raise LegoError(f"--depth: an untied model has depths 1..{model.cfg.n_layers}" if not model.tied
                        else "--depth: must be positive")


def cmd_eval(args) -> int:
    import torch

    from .tasks import supports
    from .training.data import TensorBatch
    from .training.evaluate import evaluate
    from .training.runs import load_run

    _check_non_negative(args, "seed", "threads", positive=("count",))
    cfg, task, model = load_run(args.run, args.checkpoint)
    # the run's task with any changed options, drawn from the evaluation seed
    new_task = _make_task({**cfg.task, **_task_values(cfg.task_name, args.options, group=args.group, n_vars=args.n_vars)},
                          args.seed)
    if args.n is not None:
        if not supports(new_task, "with_length"):
            raise LegoError(f"--n: task {cfg.task_name!r} has no length variants")
        new_task = new_task.with_length(args.n)
    if len(new_task.vocab) != model.vocab_size or new_task.num_classes != model.num_classes:
        raise LegoError(f"{args.run}: the model reads {model.vocab_size} token ids and predicts {model.num_classes} classes; "
                        f"this task has {len(new_task.vocab)} and {new_task.num_classes}")
    if new_task.seq_len > cfg.model.max_len:
        raise LegoError(f"the task's examples have {new_task.seq_len} tokens, more than the model's max_len {cfg.model.max_len}")
    _check_depth(args.depth, model)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    data = TensorBatch.from_batch(new_task.sample("test", range(args.count)))
    depth = args.depth or cfg.train.eval_depth or None
    r = evaluate(model, data, new_task.num_indices, depth=depth)
    task_values = {"name": cfg.task_name, **_config_values(new_task)}
    if args.json:
        print(json.dumps({"run": args.run, "checkpoint": args.checkpoint, "task": task_values, "depth": depth, **r}))
        return 0
    supervised = set(cfg.train.supervised_indices(task.num_indices))
    described = " ".join(f"{k}={v}" for k, v in task_values.items() if v is not None)
    print(f"{args.run} ({args.checkpoint}) on {described}, {args.count} test examples, "
          f"depth {depth or cfg.model.n_layers}: accuracy {r['acc']:.4f}")
    print(f"{new_task.index_name:9s} supervised  accuracy    loss")
    for i, (a, l) in enumerate(zip(r["acc_per_index"], r["loss_per_index"])):
        if a is None:
            print(f"#{i:<8d} {'yes' if i in supervised else '':10s} {'-':>9s} {'-':>7s}")
        else:
            print(f"#{i:<8d} {'yes' if i in supervised else '':10s} {a:9.4f} {l:7.4f}")
    return 0


def _config_values(task) -> dict:
    from dataclasses import asdict

    return asdict(task.config)


def cmd_plot(args) -> int:
    from pathlib import Path

    from .analysis.plots import plot_runs
    from .training.runs import run_curves

    default = Path(args.runs[0]) / "accuracy.png" if len(args.runs) == 1 else "accuracy.png"
    out = plot_runs([run_curves(d) for d in args.runs], args.out or default)
    print(f"wrote {out}")
    return 0


# ---- looking inside -------------------------------------------------------------------------
def _out_dir(args):
    from pathlib import Path

    if args.out:
        return Path(args.out)
    if args.source == "minilm" or args.source.startswith("hf:"):
        return Path("analysis") / args.source.replace("hf:", "").strip("/").replace("/", "_")
    return Path(args.source) / "analysis"


def _analysis_task(args) -> dict | None:
    """The task a pretrained source is read on; None for a run directory (its own task)."""
    values = _task_values(args.task, args.options, group=args.group, n=args.n)
    if args.source == "minilm" or args.source.startswith("hf:"):
        return values
    if set(values) - {"name"} or args.task != "lego":
        raise LegoError(f"{args.source}: a run directory is analysed on its own task; task options are for minilm/hf:PATH")
    return None


def _analysis_depth(args, cfg, model) -> int:
    _check_depth(args.depth, model)
    return args.depth or (cfg.train.eval_depth if cfg else 0) or model.cfg.n_layers


def cmd_analyze(args) -> int:
    import torch

    from .analysis import ANALYSES, Source
    from .training.runs import load_source

    analysis = ANALYSES[args.analysis]()
    numbers = [k for k, o in analysis.options.items() if o.type in (int, float)]
    _check_non_negative(args, "seed", "threads", *[k for k in numbers if not analysis.options[k].positive],
                        positive=tuple(k for k in numbers if analysis.options[k].positive))
    cfg, task, model = load_source(args.source, args.checkpoint, _analysis_task(args), args.seed)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    depth = _analysis_depth(args, cfg, model)
    supervised = tuple(cfg.train.supervised_indices(task.num_indices)) if cfg else ()
    source = Source(args.source, depth, supervised, args.seed)
    report = analysis.run(model, task, source, **{k: getattr(args, k) for k in analysis.options})
    out = _out_dir(args)
    files = analysis.write(report, out, f"{args.source}: {analysis.help} (depth {depth})")
    analysis.show(report)
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def cmd_mimic(args) -> int:
    from pathlib import Path

    from .training.config import load_config
    from .training.mimic import mimic

    config, overrides = _split_config_args(args.config)
    if config is None:
        raise LegoError("give a config file for the model to initialise (a file, or a shipped config such as cpu/bert)")
    cfg = load_config(config, overrides)
    name = args.name or f"mimic-{cfg.name}"
    out = Path(args.runs) / name
    mimic(cfg, out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, dropout=args.dropout,
          log=log_line)
    print(f"wrote {out}; train from it with: legolab train {config} train.init={out}")
    return 0


def cmd_flops(args) -> int:
    import torch

    from .analysis.flops import PRESETS, report
    from .io import write_json

    if args.model not in PRESETS:
        raise LegoError(f"--model: unknown preset {args.model!r} (known: {', '.join(PRESETS)})")
    try:
        seqs = sorted({int(s) for s in args.seq.split(",")})
    except ValueError:
        raise LegoError(f"--seq: expected comma-separated lengths, got {args.seq!r}") from None
    if min(seqs) < 4 or args.batch < 1:
        raise LegoError("--seq and --batch must be positive (sequences of at least 4 tokens)")
    _check_non_negative(args, "threads", "latency_batch")
    attentions = ["standard", "lego-v0", "lego-v1"] if args.attention == "all" else [args.attention]
    torch.set_num_threads(args.threads or torch.get_num_threads())
    rows = report(args.model, attentions, args.batch, seqs, args.latency_batch, args.latency_max_seq)
    base = {r["seq"]: r["flops"] for r in rows if r["attention"] == "standard"}
    print(f"{args.model}: inference FLOPs for {args.batch} sequences (FlopCounterMode, exact attention path, "
          "embeddings excluded); latency: " + (f"median CPU forward at batch {args.latency_batch}, "
          f"{torch.get_num_threads()} threads" if args.latency_batch else "not measured"))
    print(f"{'attention':10s} {'seq':>6s} {'GFLOP':>10s} {'vs std':>8s} {'params':>8s} {'no emb.':>8s} {'latency':>9s}")
    for r in rows:
        rel = f"{r['flops'] / base[r['seq']]:7.2f}x" if r["seq"] in base else ""
        lat = f"{r['latency_s'] * 1e3:7.0f}ms" if r["latency_s"] is not None else "        -"
        print(f"{r['attention']:10s} {r['seq']:6d} {r['flops'] / 1e9:10.1f} {rel:>8s} {r['params'] / 1e6:7.1f}M "
              f"{r['params_no_embeddings'] / 1e6:7.1f}M {lat}")
    if args.json:
        write_json(args.json, {"model": args.model, "rows": rows})
    return 0


def cmd_pretrain(args) -> int:
    from pathlib import Path

    from .training.pretrain import load_pretrain_config, pretrain

    if args.resume:
        if args.config or args.attention or args.corpus or args.name:
            raise LegoError("pretrain --resume continues with the run's own config.yaml: give no config, "
                            "overrides, --attention, --corpus or --name")
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            raise LegoError(f"{run_dir}: not a run directory (no config.yaml)")
        pretrain(load_pretrain_config(run_dir / "config.yaml", []), run_dir, resume=True, log=log_line)
        return 0
    config, overrides = _split_config_args(args.config)
    if args.attention:
        overrides.append(f"model.attention={args.attention}")
    if args.corpus:
        overrides.append(f"pretrain.corpus={args.corpus}")
    run = load_pretrain_config(config, overrides)
    if args.name:
        run.name = args.name
    pretrain(run, Path(args.runs) / run.name, log=log_line)
    return 0


def cmd_reproduce(args) -> int:
    from .reproduce import reproduce

    out = reproduce(args.figure, args.scale, args.seeds, args.runs, args.out, args.pretrained,
                    log=log_line, threads=args.threads,
                    mimic_steps=args.mimic_steps, jobs=args.jobs, overrides=args.options, command=args.command,
                    train=not args.report_only)
    print(f"wrote {out}")
    return 0


# ---- parser -------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(prog="legolab", description="LEGO: a synthetic chain-of-reasoning task for transformers.")
    p.add_argument("--version", action="version", version=f"legolab {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("tasks", help="list tasks and groups")
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("configs", help="list the configs shipped with legolab (usable by name: cpu/bert)")
    s.set_defaults(func=cmd_configs)

    s = sub.add_parser("generate", help="print or write a task's examples with their answers and chain indices")
    s.add_argument("options", nargs="*", metavar="[key=value ...]", help="task options such as n=8 group=d3")
    s.add_argument("--task", default="lego", help="a registered task (`legolab tasks` lists them)")
    s.add_argument("--group", help="LEGO: sign|z2 (Task 1), d3 (Task 2), zK, dK, sK or a Cayley-table file")
    s.add_argument("--n", type=int, help="LEGO: clauses per sentence (default 12)")
    s.add_argument("--n-min", type=int, default=None, help="LEGO: draw each length uniformly from [n-min, n]")
    s.add_argument("--n-vars", type=int, help="LEGO: size of the variable alphabet (default 26)")
    s.add_argument("--count", type=int, default=5)
    s.add_argument("--start", type=int, default=0, help="index of the first example")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--split", default="train", help="random stream: train, test, or any name")
    s.add_argument("--format", choices=["text", "jsonl"], default="text")
    s.add_argument("--notation", choices=["paper", "code"], help="LEGO: paper (default) or code: 'a = val 1 ,' (sign group)")
    s.add_argument("--out", help="write to this file (atomically) instead of stdout")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("train", help="train a model; progress shows test accuracy per chain variable")
    s.add_argument("config", nargs="*", metavar="[CONFIG.yaml] [key=value ...]",
                   help="a config file and dotted overrides such as train.lr=3e-3 model.n_layers=8")
    s.add_argument("--name", help="run name (default: the config's name)")
    s.add_argument("--runs", default="runs", help="directory holding run directories")
    s.add_argument("--resume", metavar="RUN", help="continue a run directory from its last checkpoint")
    s.add_argument("--init", metavar="RUN_OR_FILE", help="initial weights: a run, a checkpoint file, minilm or hf:PATH "
                   "(the same as train.init=...)")
    s.add_argument("--no-progress", action="store_true", help="a line per evaluation instead of a live bar")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("eval", help="evaluate a run's checkpoint, possibly on other lengths, groups or task options")
    s.add_argument("run")
    s.add_argument("options", nargs="*", metavar="[key=value ...]", help="changed task options, such as group=z3")
    s.add_argument("--n", type=int, help="length (LEGO: clauses; default: the training length)")
    s.add_argument("--n-vars", type=int, help="LEGO: variable alphabet size (default: the training one)")
    s.add_argument("--group", help="LEGO: another group of the same order")
    s.add_argument("--depth", type=int, help="layers to apply (ALBERT: any depth)")
    s.add_argument("--checkpoint", choices=["best", "last"], default="last")
    s.add_argument("--count", type=int, default=2000, help="test sentences")
    s.add_argument("--seed", type=int, default=12345, help="seed of the evaluation sentences")
    s.add_argument("--threads", type=int, default=0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("plot", help="paper-style figures: accuracy per variable over training, final accuracy per variable")
    s.add_argument("runs", nargs="+", metavar="RUN")
    s.add_argument("--out", default=None, help="PNG path (default: RUN/accuracy.png, or accuracy.png for several runs)")
    s.set_defaults(func=cmd_plot)

    from .analysis import ANALYSES

    s = sub.add_parser("analyze", help="look inside: " + ", ".join(a.help.split(":")[0] for a in ANALYSES.values()))
    an = s.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    for name, analysis in ANALYSES.items():
        a = an.add_parser(name, help=analysis.help)
        a.add_argument("source", metavar="RUN", help="a run directory, minilm, or hf:PATH (a pretrained model as is)")
        a.add_argument("--checkpoint", choices=["best", "last"], default="last")
        a.add_argument("--depth", type=int, help="layers to apply (default: the run's eval depth)")
        a.add_argument("options", nargs="*", metavar="[key=value ...]", help="for minilm/hf: task options (n=12 group=d3)")
        a.add_argument("--task", default="lego", help="for minilm/hf: the task to read (default lego)")
        a.add_argument("--group", help="for minilm/hf: the LEGO group (default sign)")
        a.add_argument("--n", type=int, help="for minilm/hf: LEGO chain length (default 12)")
        a.add_argument("--seed", type=int, default=0)
        a.add_argument("--threads", type=int, default=0)
        a.add_argument("--out", help="output directory (default: RUN/analysis)")
        for key, option in analysis.options.items():
            a.add_argument("--" + key.replace("_", "-"), dest=key, type=option.type, default=option.default,
                           help=option.help)
        a.set_defaults(func=cmd_analyze)

    s = sub.add_parser("mimic", help="pretrain attention heads to mimic association and manipulation (an init)")
    s.add_argument("config", nargs="+", metavar="CONFIG.yaml [key=value ...]")
    s.add_argument("--steps", type=int, default=400)
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--lr", type=float, default=None, help="Adam learning rate (default: 1e-2, 3e-3 from 256 wide)")
    s.add_argument("--dropout", type=float, default=None,
                   help="hidden and attention dropout while mimicking (default: 0.1 from 256 wide, the config's below: "
                        "what each fits best)")
    s.add_argument("--name", help="output run name (default: mimic-CONFIGNAME)")
    s.add_argument("--runs", default="runs")
    s.set_defaults(func=cmd_mimic)

    s = sub.add_parser("flops", help="inference FLOPs, size and CPU latency: BERT vs LEGO attention v0/v1")
    s.add_argument("--model", default="bert-base", help="bert-base | bert-small | minilm | cpu")
    s.add_argument("--attention", choices=["standard", "lego-v0", "lego-v1", "all"], default="all",
                   help="standard: BERT's softmax attention (model.attention's values)")
    s.add_argument("--batch", type=int, default=64)
    s.add_argument("--seq", default="512,2048,8192", help="comma-separated sequence lengths")
    s.add_argument("--latency-batch", type=int, default=1, help="batch for the timed forward pass; 0: skip")
    s.add_argument("--latency-max-seq", type=int, default=8192, help="time only sequences up to this length")
    s.add_argument("--threads", type=int, default=0)
    s.add_argument("--json", help="also write the rows to this JSON file")
    s.set_defaults(func=cmd_flops)

    s = sub.add_parser("pretrain", help="masked-LM pretraining on plain text (BERT vs LEGO attention)")
    s.add_argument("config", nargs="*", metavar="[CONFIG.yaml] [key=value ...]")
    s.add_argument("--attention", choices=["standard", "lego-v0", "lego-v1"], help="model.attention")
    s.add_argument("--corpus", help="stdlib (the standard library's docstrings), a .txt file or a directory")
    s.add_argument("--name")
    s.add_argument("--runs", default="runs")
    s.add_argument("--resume", metavar="RUN")
    s.set_defaults(func=cmd_pretrain)

    s = sub.add_parser("reproduce", help="run and draw one of the paper's figures (reuses and resumes runs)")
    s.add_argument("figure", help="all, or one or several (comma-separated, one pool of runs) of: fig3 fig4 fig5 "
                                  "fig6 fig7 fig9 fig10 fig11 fig12 fig15 fig16 fig17 fig18 lego-attention templates "
                                  "listops")
    s.add_argument("options", nargs="*", metavar="[key=value ...]",
                   help="overrides for every run of the figure (e.g. a shrunk model for a smoke test)")
    s.add_argument("--scale", choices=["cpu", "paper"], default="cpu")
    s.add_argument("--seeds", type=int, default=3)
    s.add_argument("--jobs", type=int, default=1, help="runs trained side by side, longest first, each with its share of the cores")
    s.add_argument("--report-only", action="store_true", help="train nothing: report the runs that finished")
    s.add_argument("--runs", default="runs")
    s.add_argument("--out", default="reports")
    s.add_argument("--pretrained", help="paper scale: hf:PATH of a local bert-base-uncased checkpoint")
    s.add_argument("--threads", type=int, default=0, help="CPU threads per run (0: the config's)")
    s.add_argument("--mimic-steps", type=int, default=None,
                   help="steps of the mimicking stage (default: 400 at CPU scale; 1,000 BERT / 5,000 ALBERT at paper scale)")
    s.set_defaults(func=cmd_reproduce)

    s = sub.add_parser("demo", help="show the task and train the CPU recipe until it learns the chain")
    s.add_argument("--config", default="cpu/bert", help="a config file or a shipped config's name")
    s.add_argument("--steps", type=int, default=0, help="step budget (default: the config's)")
    s.add_argument("--runs", default="runs")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("solve", help="solve an example given as text (LEGO: every variable's value in chain order)")
    s.add_argument("sentence", help="e.g. 'a=+1; b=-a; c=+b' or 'a = val 1 , b = not a ,'; - reads stdin")
    s.add_argument("options", nargs="*", metavar="[key=value ...]", help="task options such as group=d3")
    s.add_argument("--task", default="lego", help="a registered task (`legolab tasks` lists them)")
    s.add_argument("--group", help="LEGO: the group (default sign)")
    s.set_defaults(func=cmd_solve)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    args.command = shlex.join(["legolab", *(sys.argv[1:] if argv is None else argv)])  # reports quote it
    # key=value overrides may come after options: `legolab train cfg.yaml --name x train.lr=1e-3`
    if extra:
        listed = getattr(args, "config", None)
        listed = listed if isinstance(listed, list) else getattr(args, "options", None)
        if isinstance(listed, list) and all("=" in e and not e.startswith("-") for e in extra):
            listed += extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args) or 0
    except LegoError as e:
        print(f"legolab: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"legolab: {e}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("legolab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`legolab generate ... | head`): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except MemoryError:
        print("legolab: error: out of memory: ask for fewer sentences or a smaller batch", file=sys.stderr)
        return 2
    except OSError as e:  # a path that cannot be read or written: say which, not how deep it failed
        where = f"{e.filename}: " if e.filename else ""
        print(f"legolab: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
