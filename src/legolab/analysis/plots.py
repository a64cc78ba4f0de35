"""Paper-style figures from run directories (matplotlib, drawn off-screen)."""

from __future__ import annotations

from pathlib import Path

from ..errors import LegoError
from ..io import atomic_path
from ..training.runs import run_config, run_metrics


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(run_dirs: list[str], out: str | None = None, x: str = "epoch") -> Path:
    """One panel per run with test accuracy per chain variable over training (the paper's Fig. 3),
    and a last panel with the final accuracy per chain index of every run side by side."""
    plt = _pyplot()
    runs = []
    for d in run_dirs:
        cfg, records = run_config(d), run_metrics(d)
        if not records:
            raise LegoError(f"{d}: no evaluations recorded yet (metrics.jsonl is empty)")
        runs.append((Path(d), cfg, records))
    k = len(runs)
    fig, axes = plt.subplots(1, k + 1, figsize=(4.2 * (k + 1), 3.6), squeeze=False)
    axes = axes[0]
    cmap = plt.get_cmap("viridis")
    for ax, (path, cfg, records) in zip(axes, runs):
        n = len(records[0]["test_acc_per_step"])
        supervised = set(cfg.train.supervised_steps(n))
        xs = [r[x] for r in records]
        for i in range(n):
            ys = [r["test_acc_per_step"][i] for r in records]
            ax.plot(xs, ys, color=cmap(i / max(1, n - 1)), lw=1.4, ls="-" if i in supervised else "--", label=f"#{i}")
        ax.set_title(f"{cfg.name}", fontsize=10)
        ax.set_xlabel(x)
        ax.set_ylim(0.4, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(fontsize=6, ncol=2, title="variable (dashed: unsupervised)", title_fontsize=6, loc="lower right")
    ax = axes[-1]
    for path, cfg, records in runs:
        accs = records[-1]["test_acc_per_step"]
        ax.plot(range(len(accs)), accs, marker="o", ms=3, label=cfg.name)
    ax.set_title("final test accuracy per chain index", fontsize=10)
    ax.set_xlabel("chain index")
    ax.set_ylim(0.4, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out_path = Path(out) if out else (runs[0][0] / "accuracy.png" if k == 1 else Path("accuracy.png"))
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return out_path
