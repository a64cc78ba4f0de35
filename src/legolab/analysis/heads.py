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
