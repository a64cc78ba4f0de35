"""Per-layer linear probes (the paper's Q2, Fig. 4).

For a frozen model, take the hidden state of every layer (the embedding output is layer 0) at the
read-out token of every chain variable, and train a linear classifier per (layer, chain index)
to predict that variable's value. Accuracy on held-out sentences forms a layers x chain-index
grid: in a model that iterates, variable #k becomes decodable around layer k.

All (layer, index) probes train at once as one batched linear map with Adam (full batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def collect_features(model, tokens, positions, steps, num_steps: int, depth: int | None = None, batch_size: int = 200):
    """(layers+1, N, num_steps, d) hidden states at each chain variable's read-out token."""
    depth = depth or model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(depth)]
    out = []
    for lo in range(0, len(tokens), batch_size):
        x, pos, st = tokens[lo:lo + batch_size].long(), positions[lo:lo + batch_size], steps[lo:lo + batch_size]
        _, cache = model.run_with_cache(x, names, depth=depth)
        # order read-outs by chain index: slot of chain index c
        order = torch.argsort(st.masked_fill(st < 0, num_steps), dim=1)[:, :num_steps]
        chain_pos = torch.gather(pos, 1, order)
        feats = [torch.gather(cache[n], 1, chain_pos[..., None].expand(-1, -1, cache[n].shape[-1])) for n in names]
        out.append(torch.stack(feats))
    return torch.cat(out, dim=1)


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
    """(layers+1, chain index) accuracy of linear probes for each variable's value."""
    from ..training.data import TensorBatch

    model.eval()
    n = task.num_steps
    out = {}
    for split, count in (("probe-train", n_train), ("probe-test", n_test)):
        raw = task.sample(split, range(count))
        b = TensorBatch.from_batch(raw)
        feats = collect_features(model, b.tokens, b.positions, b.steps, n, depth)   # (L+1, N, n, d)
        labels = torch.from_numpy(raw.meta["values"].astype("int64"))               # (N, n) chain order
        L1 = feats.shape[0]
        out[split] = (feats.permute(0, 2, 1, 3).reshape(L1 * n, count, -1),
                      labels.T.unsqueeze(0).expand(L1, n, count).reshape(L1 * n, count))
    acc = train_probes(*out["probe-train"], *out["probe-test"], num_classes=task.num_classes, epochs=epochs, seed=seed)
    return acc.view(-1, n)
