"""Paper-style figures from data (matplotlib, drawn off-screen); nothing here reads run directories."""

from __future__ import annotations

from pathlib import Path

from ..errors import LegoError
from ..io import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(runs: list[tuple[str, set[int], list[dict]]], out: str | Path, x: str = "epoch") -> Path:
    """One panel per run with test accuracy per index over training (the paper's Fig. 3), and a
    last panel with the final accuracy per index of every run side by side. ``runs``: (name,
    supervised steps, evaluation records) each, as ``training.runs.run_curves`` reads them."""
    plt = _pyplot()
    for name, _, records in runs:
        if not records:
            raise LegoError(f"{name}: no evaluations recorded yet (metrics.jsonl is empty)")
    k = len(runs)
    fig, axes = plt.subplots(1, k + 1, figsize=(4.2 * (k + 1), 3.6), squeeze=False)
    axes = axes[0]
    cmap = plt.get_cmap("viridis")
    # Task 2 has chance 1/6: keep every curve in view
    bottom = max(0.0, min(0.4, min(a for _, _, rs in runs for r in rs for a in r["test_acc_per_index"]) - 0.05))
    for ax, (name, supervised, records) in zip(axes, runs):
        n = len(records[0]["test_acc_per_index"])
        xs = [r[x] for r in records]
        for i in range(n):
            ys = [r["test_acc_per_index"][i] for r in records]
            ax.plot(xs, ys, color=cmap(i / max(1, n - 1)), lw=1.4, ls="-" if i in supervised else "--", label=f"#{i}")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(x)
        ax.set_ylim(bottom, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(fontsize=6, ncol=2, title="step (dashed: unsupervised)", title_fontsize=6, loc="lower right")
    ax = axes[-1]
    for name, _, records in runs:
        accs = records[-1]["test_acc_per_index"]
        ax.plot(range(len(accs)), accs, marker="o", ms=3, label=name)
    ax.set_title("final test accuracy per index", fontsize=10)
    ax.set_xlabel("step (chain index)")
    ax.set_ylim(bottom, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out)


def _save(fig, out: str | Path) -> Path:
    plt = _pyplot()
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(out)


def plot_head_scores(scores: dict, out: str | Path, title: str = "") -> Path:
    """A layers x heads heatmap per score."""
    plt = _pyplot()
    keys = list(scores)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.3 * len(keys), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        m = scores[key].numpy()
        im = ax.imshow(m, vmin=0, vmax=1, cmap="magma", aspect="auto")
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(m.shape[1]))
        ax.set_yticks(range(m.shape[0]))
        ax.tick_params(labelsize=6)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)
    return Path(out)


def plot_attention_maps(maps: list[tuple[str, object]], labels: list[str], out: str | Path) -> Path:
    """Full attention maps of chosen heads on one sentence, axes labelled with its tokens."""
    plt = _pyplot()
    k = len(maps)
    cols = min(k, 3)
    rows = (k + cols - 1) // cols
    size = max(4.0, 0.12 * len(labels))
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False)
    for ax in axes.ravel()[k:]:
        ax.axis("off")
    for ax, (title, m) in zip(axes.ravel(), maps):
        ax.imshow(m, cmap="Blues", vmin=0)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(labels)))
        ax.set_yticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=5, rotation=90)
        ax.set_yticklabels(labels, fontsize=5)
    return _save(fig, out)


def plot_probe_grid(grid, out: str | Path, supervised: set[int] = frozenset(), title: str = "") -> Path:
    """Probe accuracy, layers x chain index."""
    plt = _pyplot()
    L1, n = grid.shape
    fig, ax = plt.subplots(figsize=(0.45 * n + 2, 0.35 * L1 + 1.6))
    im = ax.imshow(grid.numpy(), vmin=0.5, vmax=1, cmap="viridis", origin="lower", aspect="auto")
    for layer in range(L1):
        for i in range(n):
            ax.text(i, layer, f"{100 * float(grid[layer, i]):.0f}", ha="center", va="center", fontsize=6,
                    color="white" if grid[layer, i] < 0.8 else "black")
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"#{i}{'*' if i in supervised else ''}" for i in range(n)], fontsize=7)
    ax.set_yticks(range(L1))
    ax.set_yticklabels(["emb"] + [str(i + 1) for i in range(L1 - 1)], fontsize=7)
    ax.set_xlabel("chain index (* supervised)")
    ax.set_ylabel("layer")
    ax.set_title(title or "linear probe accuracy", fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return _save(fig, out)


def plot_curves(series: dict[str, tuple[list, list]], out: str | Path, xlabel: str, ylabel: str) -> Path:
    """One line per label: label -> (xs, ys)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, out)


def plot_error_vs_samples(panels: dict[str, dict[str, dict]], out: str | Path) -> Path:
    """One panel per task: test error against training samples (log x), one line per model with
    its min-max band. ``panels``: task -> model -> {"sizes", "mean_error", "min_error", "max_error"}."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    for ax, (task, models) in zip(axes[0], panels.items()):
        for model, s in models.items():
            ax.plot(s["sizes"], s["mean_error"], marker="o", label=model)
            ax.fill_between(s["sizes"], s["min_error"], s["max_error"], alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training samples (= training symbols)")
        ax.set_ylabel("test error, unseen symbols")
        ax.set_title(task, fontsize=10)
        ax.set_ylim(-0.02, 0.62)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, out)


def plot_operator_accuracy(summary: dict[str, dict[str, dict]], out: str | Path) -> Path:
    """Grouped bars: accuracy per operator of the models trained on it alone and jointly, with
    min-max over seeds. ``summary``: "alone" | "joint" -> operator -> {"mean", "min", "max"}."""
    plt = _pyplot()
    ops = list(dict.fromkeys(op for kind in summary.values() for op in kind))
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    for k, (kind, label) in enumerate((("alone", "trained alone"), ("joint", "trained jointly"))):
        rows = summary.get(kind, {})
        xs = [i + 0.38 * (k - 0.5) for i, op in enumerate(ops) if op in rows]
        s = [rows[op] for op in ops if op in rows]
        ax.bar(xs, [r["mean"] for r in s], width=0.36, label=label,
               yerr=[[r["mean"] - r["min"] for r in s], [r["max"] - r["mean"] for r in s]], capsize=3)
    ax.axhline(0.1, color="gray", lw=0.8, ls="--", label="chance")
    ax.set_xticks(range(len(ops)), ops)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1.18)  # room for the legend above the bars
    ax.legend(fontsize=8, ncol=3, loc="upper center")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, out)
