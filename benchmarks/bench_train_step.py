"""Training-step and inference throughput of legolab's BERT against transformers'
BertForTokenClassification at the same shape, side by side in one run: transformers (eager,
sdpa), legolab fp32 (sdpa kernel, math kernel), legolab bf16 (autocast: fp32 master weights and
loss, bf16 matmuls on the matrix units), the CPU recipe's step (kernel-7 convolution, deep
supervision and association guidance, as in its first 6,000 steps) with the sdpa kernel and with
``auto``, and with ``--compile`` the torch.compile variants.

Same layers/width/heads/FFN, pre-LN, sequence length 62 (n = 12), same batch, AdamW, loss on the
12 read-out tokens. MFU is printed against this machine's measured fp32 and bf16 matmul peaks;
ratios are against legolab fp32 (sdpa), the default before the bf16 path.

    python benchmarks/bench_train_step.py [--layers 6 --width 64 --heads 4 --batch 32] [--compile] [--only recipe]
    python benchmarks/bench_train_step.py --profile "recipe fp32 auto"   # where one contender's step goes
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from legolab.models import ModelConfig, TokenClassifier
from legolab.tasks import LegoConfig, LegoTask
from legolab.training.step import bf16_matrix_units, make_optimizer, make_train_step


def matmul_peak(dtype=torch.float32, size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = min(_time(lambda: a @ b) for _ in range(repeats))
    return 2 * size ** 3 / best


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def step_flops(layers: int, d: int, ff: int, T: int, B: int, P: int, classes: int) -> float:
    """Matmul FLOPs of one forward+backward step (3x forward), embeddings excluded."""
    per_token = layers * (2 * (4 * d * d + 2 * d * ff))          # QKV, out, FFN
    attention = layers * 2 * (2 * T * T * d)                        # scores and A V, per sequence
    head = 2 * P * d * classes
    return 3 * (B * T * per_token + B * attention + B * head)


def hf_step(model, opt, tokens, labels):
    out = model(input_ids=tokens, labels=labels)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    opt.step()


def measure(step, warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        step()
    return [_time(step) for _ in range(steps)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval-batch", type=int, default=1000)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="alternate the contenders this many times")
    ap.add_argument("--compile", action="store_true", help="also time legolab with torch.compile")
    ap.add_argument("--no-hf", action="store_true", help="leave transformers out")
    ap.add_argument("--only", default="", help="time only the contenders whose name contains this (plus the baseline)")
    ap.add_argument("--profile", default="", help="instead of timing: the share of each op in this contender's "
                    "training step (torch.profiler, --steps steps)")
    args = ap.parse_args()

    torch.manual_seed(0)
    task = LegoTask(LegoConfig(n=args.n))
    batch = task.sample("train", range(args.batch))
    tokens = torch.from_numpy(batch.tokens).long()
    positions = torch.from_numpy(batch.positions).long()
    targets = torch.from_numpy(batch.targets).long()
    B, T = tokens.shape
    labels = torch.full((B, T), -100, dtype=torch.long)
    labels.scatter_(1, positions, targets)
    ev = task.sample("test", range(args.eval_batch))
    ev_tokens, ev_positions = torch.from_numpy(ev.tokens).long(), torch.from_numpy(ev.positions).long()

    train_fns, infer_fns = {}, {}
    if not args.no_hf:
        from transformers import BertConfig, BertForTokenClassification

        for impl in ("eager", "sdpa"):
            hf_cfg = BertConfig(vocab_size=len(task.vocab), hidden_size=args.width, num_hidden_layers=args.layers,
                                num_attention_heads=args.heads, intermediate_size=4 * args.width,
                                max_position_embeddings=512, num_labels=task.num_classes,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation=impl)
            hf = BertForTokenClassification(hf_cfg).train()
            hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4)
            train_fns[f"transformers {impl}"] = (lambda m=hf, o=hf_opt: hf_step(m, o, tokens, labels))
            infer_fns[f"transformers {impl}"] = (lambda m=hf: _no_grad(lambda: m.eval()(input_ids=ev_tokens)))
    # (name, kernel, autocast dtype, compiled, CPU recipe: kernel-7 convolution, deep supervision, guidance)
    variants = [("legolab fp32 sdpa", "sdpa", None, False, False), ("legolab fp32 math", "math", None, False, False),
                ("legolab bf16", "math", torch.bfloat16, False, False),
                ("recipe fp32 sdpa", "sdpa", None, False, True), ("recipe fp32 auto", "auto", None, False, True)]
    if args.compile:
        variants += [("legolab fp32 compiled", "math", None, True, False),
                     ("legolab bf16 compiled", "math", torch.bfloat16, True, False)]
    for name, impl, dtype, compiled, recipe in variants:
        cfg = ModelConfig(n_layers=args.layers, d_model=args.width, n_heads=args.heads, norm="pre", attn_impl=impl,
                          conv=7 if recipe else 0)
        model = TokenClassifier(cfg, len(task.vocab), task.num_classes).train()
        opt = make_optimizer(model, lr=1e-4, weight_decay=0.0)
        step = make_train_step(model, opt, compile=compiled, autocast_dtype=dtype)
        mask = torch.ones_like(targets, dtype=torch.bool)
        aids = {"deep": 1.0, "guide": 1.0} if recipe else None
        train_fns[name] = (lambda s=step, m=mask, a=aids: s(tokens, positions, targets, m, depth=None, clip=1.0,
                                                              objectives=a))
        infer_fns[name] = (lambda m=model, d=dtype: _infer(m, ev_tokens, ev_positions, d))

    if args.profile:
        profile(train_fns[args.profile], args.steps)
        return
    if args.only:
        keep = lambda name: args.only in name or name == "legolab fp32 sdpa"  # noqa: E731
        train_fns = {k: v for k, v in train_fns.items() if keep(k)}
        infer_fns = {k: v for k, v in infer_fns.items() if keep(k)}
    threads = torch.get_num_threads()
    # without bf16 matrix units bf16 matmuls are emulated (under 1 GFLOP/s): no peak worth timing
    has_bf16 = bf16_matrix_units(torch.device("cpu"))
    peak32, peak16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16) if has_bf16 else None
    flops = step_flops(args.layers, args.width, 4 * args.width, T, B, args.n, task.num_classes)
    infer_flops = step_flops(args.layers, args.width, 4 * args.width, T, args.eval_batch, args.n, task.num_classes) / 3
    print(f"{time.strftime('%Y-%m-%d')}; {threads} threads; matmul peak (2048^2) fp32 {peak32 / 1e9:.0f} GFLOP/s, "
          + (f"bf16 {peak16 / 1e9:.0f} GFLOP/s" if peak16 else "bf16 not timed: no bf16 matrix units"))
    print(f"shape: {args.layers} layers, width {args.width}, {args.heads} heads, pre-LN, seq {T}; "
          f"training batch {B} ({flops / 1e9:.2f} GFLOP per step), inference batch {args.eval_batch}")
    for title, fns, per, count in (("training step", train_fns, flops, B), ("inference", infer_fns, infer_flops, args.eval_batch)):
        times = {name: [] for name in fns}
        for fn in fns.values():  # warm up (and compile) once
            measure(fn, 3, 1)
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name] += measure(fn, 1, args.steps if title == "training step" else max(2, args.steps // 4))
        med = {name: statistics.median(ts) for name, ts in times.items()}
        base = med["legolab fp32 sdpa"]
        print(f"\n{title}:")
        print(f"{'contender':24s} {'ms':>9s} {'sentences/s':>12s} {'MFU fp32':>9s} {'MFU bf16':>9s} {'vs fp32 sdpa':>13s}")
        for name, m in med.items():
            mfu16 = f"{per / m / peak16:9.1%}" if peak16 else f"{'-':>9s}"
            print(f"{name:24s} {m * 1e3:9.1f} {count / m:12,.0f} {per / m / peak32:9.1%} {mfu16} {base / m:12.2f}x")


def profile(step, steps: int) -> None:
    """Self CPU time per op over ``steps`` training steps, largest first, as a share of the total."""
    from torch.profiler import profile as torch_profile

    measure(step, 3, 1)
    with torch_profile() as prof:
        for _ in range(steps):
            step()
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops)
    print(f"{torch.get_num_threads()} threads; {total / steps / 1e3:.1f} ms of op time per step")
    print(f"{'op':40s} {'share':>6s} {'ms/step':>8s} {'calls/step':>10s}")
    for e in ops[:12]:
        print(f"{e.key[:40]:40s} {e.self_cpu_time_total / total:6.1%} {e.self_cpu_time_total / steps / 1e3:8.2f} "
              f"{e.count / steps:10.0f}")


def _no_grad(fn):
    with torch.no_grad():
        return fn()


def _infer(model, tokens, positions, dtype):
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        return model(tokens, positions)


if __name__ == "__main__":
    main()
