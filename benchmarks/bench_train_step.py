"""Training-step throughput (tokens/s) of legolab's BERT against transformers'
BertForTokenClassification at the same shape, eager and sdpa, on CPU, side by side in one run.

Same layers/width/heads/FFN, sequence length 62 (n = 12), same batch, AdamW, loss on the 12
read-out tokens. Also prints the model FLOP utilisation against this machine's measured fp32
matmul peak.

    python benchmarks/bench_train_step.py [--layers 6 --width 64 --heads 4 --batch 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from legolab.models import Encoder, ModelConfig
from legolab.tasks import LegoConfig, LegoTask
from legolab.training.step import make_optimizer, make_train_step


def matmul_peak(threads: int, size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
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
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="alternate the contenders this many times")
    ap.add_argument("--compile", action="store_true", help="also time legolab with torch.compile")
    args = ap.parse_args()
    from transformers import BertConfig, BertForTokenClassification

    torch.manual_seed(0)
    task = LegoTask(LegoConfig(n=args.n))
    batch = task.sample("train", range(args.batch))
    tokens = torch.from_numpy(batch.tokens).long()
    positions = torch.from_numpy(batch.positions).long()
    targets = torch.from_numpy(batch.targets).long()
    B, T = tokens.shape
    labels = torch.full((B, T), -100, dtype=torch.long)
    labels.scatter_(1, positions, targets)

    contenders = {}
    for impl in ("eager", "sdpa"):
        hf_cfg = BertConfig(vocab_size=len(task.vocab), hidden_size=args.width, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, intermediate_size=4 * args.width,
                            max_position_embeddings=512, num_labels=task.num_classes,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation=impl)
        hf = BertForTokenClassification(hf_cfg).train()
        hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4)
        contenders[f"transformers {impl}"] = (lambda m=hf, o=hf_opt: hf_step(m, o, tokens, labels))
    cfg = ModelConfig(n_layers=args.layers, d_model=args.width, n_heads=args.heads)
    for compiled in ([False, True] if args.compile else [False]):
        model = Encoder(cfg, len(task.vocab), task.num_classes).train()
        opt = make_optimizer(model, lr=1e-4, weight_decay=0.0)
        step = make_train_step(model, opt, compile=compiled)
        mask = torch.ones_like(targets, dtype=torch.bool)
        contenders["legolab" + (" compiled" if compiled else "")] = (
            lambda s=step, m=mask: s(tokens, positions, targets, m, depth=None, clip=1.0))

    threads = torch.get_num_threads()
    peak = matmul_peak(threads)
    times = {name: [] for name in contenders}
    for fn in contenders.values():  # warm up (and compile) once
        measure(fn, 3, 1)
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            times[name] += measure(fn, 1, args.steps)
    flops = step_flops(args.layers, args.width, 4 * args.width, T, B, args.n, task.num_classes)
    print(f"shape: {args.layers} layers, width {args.width}, {args.heads} heads, batch {B}, seq {T}; "
          f"{threads} threads; fp32 matmul peak {peak / 1e9:.0f} GFLOP/s; {flops / 1e9:.2f} GFLOP per step")
    print(f"{'contender':24s} {'ms/step':>9s} {'tokens/s':>10s} {'MFU':>6s}")
    best_hf = None
    for name, ts in times.items():
        med = statistics.median(ts)
        tps = B * T / med
        if name.startswith("transformers"):
            best_hf = max(best_hf or 0, tps)
        print(f"{name:24s} {med * 1e3:9.1f} {tps:10,.0f} {flops / med / peak:6.1%}")
    for name, ts in times.items():
        if name.startswith("legolab"):
            print(f"{name} / faster transformers: {B * T / statistics.median(ts) / best_hf:.2f}x")


if __name__ == "__main__":
    main()
