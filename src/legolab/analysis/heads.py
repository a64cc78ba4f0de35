"""Attention-head scores (the paper's Fig. 7 and appendix F).

For an attention map A (rows: queries, sum to 1) of one head on one sentence:

association   mean over query tokens (the task's ``query`` role; LEGO: variable names) that occur
              twice of the mass on the other occurrence(s) of the same token, the diagonal
              excluded (a variable's use <-> its assignment);
manipulation  mean over tokens of the mass within ``window`` positions of the diagonal (the
              local, convolution-like operator);
shift         how shift-invariant the local pattern is: 1 - mean total-variation distance between
              each row's renormalised local profile A[i, i-w..i+w] and the mean profile (1 for a
              band, lower for position-specific patterns);
broadcast     mean over tokens of the mass on the task's boundary tokens (LEGO: BOS and EOS).

A head is called an association head when association >= ASSOCIATION_HEAD (0.5: half its mass
on the matching token, against ~2/T for uniform attention), a manipulation head when
manipulation >= MANIPULATION_HEAD (0.7) and shift >= SHIFT_HEAD (0.7). Thresholds are
conventions, documented in docs/analysis.md.
"""

from __future__ import annotations

import torch

from .base import Analysis, Option, Source, register_analysis

ASSOCIATION_HEAD = 0.5
MANIPULATION_HEAD = 0.7
SHIFT_HEAD = 0.7


def same_token_mask(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T) True where positions i != j hold the same token."""
    same = tokens[:, :, None] == tokens[:, None, :]
    same &= ~torch.eye(tokens.shape[1], dtype=torch.bool, device=tokens.device)
    return same


def head_scores(pattern: torch.Tensor, tokens: torch.Tensor, variable: torch.Tensor, special: torch.Tensor,
                window: int = 2) -> dict[str, torch.Tensor]:
    """Scores of every head in ``pattern`` (B, H, T, T) -> dict of (H,) tensors.

    ``variable`` (B, T) marks variable tokens (association queries); ``special`` (B, T) marks BOS/EOS.
    Padding should be excluded by the caller through ``variable``/``special`` and zero rows.
    """
    B, H, T, _ = pattern.shape
    p = pattern.float()
    same = same_token_mask(tokens)
    queries = variable & same.any(-1)                                        # (B, T)
    assoc_mass = (p * same[:, None]).sum(-1)                                  # (B, H, T)
    assoc = (assoc_mass * queries[:, None]).sum((0, 2)) / queries.sum().clamp(min=1)

    offsets = torch.arange(T)[None, :] - torch.arange(T)[:, None]            # j - i
    local = (offsets.abs() <= window).to(p.device)
    manip = (p * local).sum(-1).mean((0, 2))

    # local profiles: rows far enough from the edges to have the whole window
    rows = torch.arange(window, T - window)
    cols = rows[:, None] + torch.arange(-window, window + 1)[None, :]
    prof = p[:, :, rows[:, None], cols]                                       # (B, H, R, 2w+1)
    prof = prof / prof.sum(-1, keepdim=True).clamp(min=1e-9)
    mean_prof = prof.mean((0, 2), keepdim=True)
    shift = 1 - 0.5 * (prof - mean_prof).abs().sum(-1).mean((0, 2))

    broadcast = (p * special[:, None, None, :]).sum(-1).mean((0, 2))
    return {"association": assoc, "manipulation": manip, "shift": shift, "broadcast": broadcast}


def classify(scores: dict[str, float]) -> str:
    if scores["association"] >= ASSOCIATION_HEAD:
        return "association"
    if scores["manipulation"] >= MANIPULATION_HEAD and scores["shift"] >= SHIFT_HEAD:
        return "manipulation"
    return ""


@torch.no_grad()
def score_model(model, task, tokens: torch.Tensor, depth: int | None = None, window: int = 2, batch_size: int = 100):
    """Scores of every head of every layer: dict of (layers, heads) tensors, averaged over tokens."""
    depth = depth or model.cfg.n_layers
    roles = task.token_roles()
    var_ids = torch.tensor(roles["query"], dtype=torch.long)
    special_ids = torch.tensor(roles["special"], dtype=torch.long)
    sums, count = None, 0
    for lo in range(0, len(tokens), batch_size):
        x = tokens[lo:lo + batch_size].long()
        cache = model.activations(x, ["blocks.*.attn.hook_pattern"], depth=depth)
        variable, special = torch.isin(x, var_ids), torch.isin(x, special_ids)
        per_layer = [head_scores(cache[f"blocks.{layer}.attn.hook_pattern"], x, variable, special, window)
                     for layer in range(depth)]
        batch = {k: torch.stack([s[k] for s in per_layer]) * len(x) for k in per_layer[0]}
        sums = batch if sums is None else {k: sums[k] + batch[k] for k in sums}
        count += len(x)
    return {k: v / count for k, v in sums.items()}


def head_report(model, task, tokens: torch.Tensor, depth: int | None = None, window: int = 2) -> dict:
    """Every head's scores and kind: {"depth", "sentences", "scores" (name -> layers x heads),
    "heads" (one row per head), "counts" (association / manipulation / heads)}."""
    depth = depth or model.cfg.n_layers
    scores = score_model(model, task, tokens, depth=depth, window=window)
    L, H = scores["association"].shape
    rows = []
    for layer in range(L):
        for head in range(H):
            s = {k: float(v[layer, head]) for k, v in scores.items()}
            rows.append({"layer": layer, "head": head, **s, "kind": classify(s)})
    kinds = [r["kind"] for r in rows]
    return {"depth": depth, "sentences": len(tokens), "scores": {k: v.tolist() for k, v in scores.items()}, "heads": rows,
            "counts": {"association": kinds.count("association"), "manipulation": kinds.count("manipulation"), "heads": L * H}}


def write_head_report(report: dict, out_dir, name: str = "head_scores", title: str = "") -> list:
    """``{name}.json`` and the heat maps ``{name}.png``."""
    from pathlib import Path

    from ..io import write_json
    from .plots import plot_head_scores

    out_dir = Path(out_dir)
    write_json(out_dir / f"{name}.json", report)
    plot_head_scores({k: torch.tensor(v) for k, v in report["scores"].items()}, out_dir / f"{name}.png", title=title)
    return [out_dir / f"{name}.json", out_dir / f"{name}.png"]


def chosen_heads(rows: list[dict], spec: str | None, layers: int, heads: int) -> list[tuple[int, int]]:
    """``spec`` ("0.1,2.3") as (layer, head) pairs, or by default the two best association heads
    and the best shift-invariant manipulation head."""
    from ..errors import LegoError

    if spec is None:
        return [(r["layer"], r["head"]) for r in sorted(rows, key=lambda r: -r["association"])[:2]] + \
               [(r["layer"], r["head"]) for r in sorted(rows, key=lambda r: -r["manipulation"] * r["shift"])[:1]]
    try:
        picked = [tuple(int(x) for x in h.split(".")) for h in spec.split(",")]
    except ValueError:
        picked = [()]
    if any(len(h) != 2 for h in picked):
        raise LegoError(f"--heads: expected LAYER.HEAD pairs such as 0.1,2.3, got {spec!r}")
    for layer, head in picked:
        if not (0 <= layer < layers and 0 <= head < heads):
            raise LegoError(f"--heads: no head {layer}.{head} (layers 0..{layers - 1}, heads 0..{heads - 1})")
    return picked



@register_analysis
class AttentionHeads(Analysis):
    name, help = "attention", "score every head: association, manipulation, broadcast"
    options = {"count": Option(int, 200, "sentences to average over", positive=True),
               "window": Option(int, 2, "manipulation window: |i - j| <= window"),
               "heads": Option(str, None, "heads to draw in full, as LAYER.HEAD,... (default: the top scorers)")}

    def run(self, model, task, source: Source, count: int = 200, window: int = 2, heads: str | None = None) -> dict:
        tokens = torch.from_numpy(task.sample("analysis", range(count)).tokens).long()
        report = {"source": source.name, **head_report(model, task, tokens, depth=source.depth, window=window)}
        L, H = len(report["scores"]["association"]), len(report["scores"]["association"][0])
        chosen = chosen_heads(report["heads"], heads, L, H)
        with torch.no_grad():
            cache = model.activations(tokens[:1], ["blocks.*.attn.hook_pattern"], depth=source.depth)
        report["maps"] = {"tokens": task.vocab.decode(tokens[0]),
                          "heads": {f"layer {l} head {h}": cache[f"blocks.{l}.attn.hook_pattern"][0, h].tolist()
                                    for l, h in chosen}}
        return report

    def write(self, report: dict, out_dir, title: str) -> list:
        import numpy as np

        from .plots import plot_attention_maps

        maps = report["maps"]
        files = write_head_report({k: v for k, v in report.items() if k != "maps"}, out_dir, title=title)
        plot_attention_maps([(k, np.array(v)) for k, v in maps["heads"].items()], maps["tokens"],
                            out_dir / "attention_maps.png")
        return files + [out_dir / "attention_maps.png"]

    def show(self, report: dict) -> None:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{report['source']}: attention heads (association >= {ASSOCIATION_HEAD}; "
                        f"manipulation >= {MANIPULATION_HEAD} with shift >= {SHIFT_HEAD})")
        for c in ("layer", "head", "association", "manipulation", "shift", "broadcast", "kind"):
            t.add_column(c, justify="left" if c == "kind" else "right")
        for r in report["heads"]:
            t.add_row(str(r["layer"]), str(r["head"]),
                      *(f"{r[k]:.2f}" for k in ("association", "manipulation", "shift", "broadcast")), r["kind"])
        Console().print(t)
        c = report["counts"]
        print(f"{c['association']} association and {c['manipulation']} manipulation heads of {c['heads']}")
