"""Per-layer linear probes (the paper's Q2, Fig. 4).

For a frozen model, take the hidden state of every layer (the embedding output is layer 0) at
every read-out token, and train a linear classifier per (layer, chain index) to predict the
read-out's target (LEGO: a variable's value, by chain index). Accuracy on held-out sentences forms a layers x chain-index
grid: in a model that iterates, variable #k becomes decodable around layer k.

All (layer, index) probes train at once as one batched linear map with Adam (full batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import LegoError
from .base import Analysis, Option, Source, register_analysis


@torch.no_grad()
def collect_features(model, tokens, positions, depth: int | None = None, batch_size: int = 200):
    """(layers+1, N, P, d) hidden states at every read-out position (the embedding output first)."""
    depth = depth or model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(depth)]
    out = []
    for lo in range(0, len(tokens), batch_size):
        x, pos = tokens[lo:lo + batch_size].long(), positions[lo:lo + batch_size]
        cache = model.activations(x, names, depth=depth)
        out.append(torch.stack([torch.gather(cache[n], 1, pos[..., None].expand(-1, -1, cache[n].shape[-1])) for n in names]))
    return torch.cat(out, dim=1)


def index_groups(index: torch.Tensor, num_indices: int, count: int | None = None) -> list[torch.Tensor]:
    """For each index, the flat (example, read-out) indices of its read-outs in example
    order, cut to a common count (the smallest, or ``count``) so the probes train as one batch."""
    flat = index.reshape(-1)
    groups = [torch.nonzero(flat == s).squeeze(1) for s in range(num_indices)]
    m = min(len(g) for g in groups) if count is None else count
    return [g[:m] for g in groups]


def train_probes(train_x, train_y, test_x, test_y, num_classes: int, epochs: int = 300, lr: float = 1e-2,
                 weight_decay: float = 1e-4, seed: int = 0) -> torch.Tensor:
    """Linear probes on (G, N, d) features with (N, G) ... labels; returns test accuracy per group.

    ``train_x``: (G, N, d), ``train_y``: (G, N) class ids; the same for test. G probes are independent.
    """
    g = torch.Generator().manual_seed(seed)
    G, N, d = train_x.shape
    mean, std = train_x.mean(1, keepdim=True), train_x.std(1, keepdim=True).clamp(min=1e-6)
    xs, xt = (train_x - mean) / std, (test_x - mean) / std
    W = (torch.randn(G, d, num_classes, generator=g) * 0.01).requires_grad_()
    b = torch.zeros(G, 1, num_classes, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        logits = xs @ W + b
        loss = F.cross_entropy(logits.reshape(-1, num_classes), train_y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pred = (xt @ W + b).argmax(-1)
    return (pred == test_y).float().mean(1)


def probe_grid(model, task, n_train: int = 2000, n_test: int = 1000, depth: int | None = None, seed: int = 0,
               epochs: int = 300) -> torch.Tensor:
    """(layers+1, index) accuracy of linear probes for each read-out's target, by index (LEGO:
    a variable's value by chain index). Indices are balanced: each gets as many read-outs as the
    rarest index has in the training examples."""
    from ..training.data import TensorBatch

    model.eval()
    n = task.num_indices
    data = {}
    for split, count in (("probe-train", n_train), ("probe-test", n_test)):
        b = TensorBatch.from_batch(task.sample(split, range(count)))
        feats = collect_features(model, b.tokens, b.positions, depth).flatten(1, 2)   # (L+1, N*P, d)
        data[split] = feats, b.targets.reshape(-1), b.index
    m = min(len(g) for g in index_groups(data["probe-train"][2], n))
    m_test = min(len(g) for g in index_groups(data["probe-test"][2], n))
    if m == 0 or m_test == 0:
        raise LegoError(f"probe: some step of task {task.name!r} has no read-outs in {n_train} / {n_test} examples; "
                        "probe more examples")
    out = {}
    for split, size in (("probe-train", m), ("probe-test", m_test)):
        feats, targets, steps = data[split]
        idx = torch.stack(index_groups(steps, n, size))                                 # (n, size)
        L1 = feats.shape[0]
        out[split] = (feats[:, idx].reshape(L1 * n, size, -1), targets[idx].unsqueeze(0).expand(L1, n, size).reshape(L1 * n, size))
    acc = train_probes(*out["probe-train"], *out["probe-test"], num_classes=task.num_classes, epochs=epochs, seed=seed)
    return acc.view(-1, n)


def probe_report(model, task, supervised=(), n_train: int = 2000, n_test: int = 1000, depth: int | None = None,
                 seed: int = 0) -> dict:
    """{"depth", "accuracy" (layers + 1 rows, 0 = embeddings; a column per index), "supervised",
    "first_layer" (per index, the first layer whose probe reaches 90%, or None)}."""
    depth = depth or model.cfg.n_layers
    grid = probe_grid(model, task, n_train, n_test, depth=depth, seed=seed)
    first = [next((layer for layer, a in enumerate(grid[:, i].tolist()) if a >= 0.9), None) for i in range(grid.shape[1])]
    return {"depth": depth, "accuracy": grid.tolist(), "supervised": sorted(supervised), "first_layer": first}


def write_probe_report(report: dict, out_dir, name: str = "probe", title: str = "") -> list:
    """``{name}.json`` and the layers x steps grid ``{name}.png``."""
    from pathlib import Path

    from ..io import write_json
    from .plots import plot_probe_grid

    out_dir = Path(out_dir)
    write_json(out_dir / f"{name}.json", report)
    plot_probe_grid(torch.tensor(report["accuracy"]), out_dir / f"{name}.png", set(report["supervised"]),
                    title=title or f"linear probe accuracy (depth {report['depth']})")
    return [out_dir / f"{name}.json", out_dir / f"{name}.png"]



@register_analysis
class Probes(Analysis):
    name, help = "probe", "linear probes per layer and chain index"
    options = {"train": Option(int, 2000, "sentences to fit the probes on", positive=True),
               "test": Option(int, 1000, "held-out sentences", positive=True)}

    def run(self, model, task, source: Source, train: int = 2000, test: int = 1000) -> dict:
        return {"source": source.name, **probe_report(model, task, source.supervised, train, test, source.depth, source.seed)}

    def write(self, report: dict, out_dir, title: str) -> list:
        return write_probe_report(report, out_dir, title=title)

    def show(self, report: dict) -> None:
        print("layer  " + " ".join(f"#{i:<4d}" for i in range(len(report["accuracy"][0]))))
        for layer, row in enumerate(report["accuracy"]):
            print(f"{'emb' if layer == 0 else layer:>5}  " + " ".join(f"{a:5.2f}" for a in row))
