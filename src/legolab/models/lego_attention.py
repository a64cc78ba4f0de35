"""LEGO attention (section 5, appendix C): a drop-in replacement for a layer's attention.

Three pathways, summed into the layer's update:

(a) hard-coded global maps, computed once per input from the token ids and shared by all
    layers, with no queries or keys: association (each position attends uniformly to the other
    positions holding the same token), and broadcast to the BOS and EOS tokens (the paper's
    [CLS]/[SEP] maps). Each layer learns only a value map per hard-coded head (d -> d_head) and
    the output map.
(b) ordinary softmax heads (LEGO v1: ``lego_heads`` of them, default n_heads // 4: 3 of
    BERT-base's 12), d_head wide each.
(c) local manipulation: a depthwise temporal convolution (``lego_kernel`` wide, default 5, the
    width of the mimicking target) over the sequence, on the layer's input, added to the output.

v0 = (a) + (c); v1 = (a) + (b) + (c). The hard-coded heads and the ordinary heads are
concatenated (d_head wide each) and mapped back to d by one output matrix; the convolution is
added after it. The maps are never materialised on the fast path: association is a segment mean
over equal tokens (sort + scatter), broadcast is a mean over BOS/EOS positions, so v0 costs time
linear in sequence length. With ``identity_scaled`` the ordinary heads get seed 004's a*x x^T
score term, and every head (hard-coded ones too) the b*(A x) skip term.

These choices (kernel 5, d_head-wide hard-coded heads, depthwise-only convolution on the block
input) are ours: the paper's text is available here only as a summary. They are options.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Context, _auto_impl, identity_scores, register_attention, same_token_mask

HARD = ("association", "bos", "eos")


def group_ids(tokens: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
    """(B, T) id of each position's equal-token group within its sequence (padding: singletons)."""
    B, T = tokens.shape
    keys = tokens.long()
    if key_padding is not None:  # padding never matches anything
        keys = torch.where(key_padding, -1 - torch.arange(T, device=tokens.device), keys)
    sorted_keys, order = keys.sort(dim=1, stable=True)
    starts = torch.ones_like(sorted_keys, dtype=torch.long)
    starts[:, 1:] = (sorted_keys[:, 1:] != sorted_keys[:, :-1]).long()
    gid_sorted = starts.cumsum(1) - 1
    return torch.empty_like(gid_sorted).scatter_(1, order, gid_sorted)


def hard_maps_dense(tokens: torch.Tensor, bos_id: int, eos_id: int, key_padding=None) -> torch.Tensor:
    """The three hard-coded maps as dense (B, 3, T, T) row-stochastic matrices (for analysis and tests).
    Rows with nothing to attend to (a token occurring once) are zero."""
    B, T = tokens.shape
    valid = torch.ones_like(tokens, dtype=torch.bool) if key_padding is None else ~key_padding
    same = same_token_mask(tokens)
    same &= valid[:, :, None] & valid[:, None, :]
    maps = []
    for m in (same, (tokens == bos_id)[:, None, :].expand(B, T, T), (tokens == eos_id)[:, None, :].expand(B, T, T)):
        m = m.float() * valid[:, :, None]
        maps.append(m / m.sum(-1, keepdim=True).clamp(min=1))
    return torch.stack(maps, 1)


@register_attention("lego-v0", "lego-v1")
class LegoAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, H = cfg.d_model, cfg.n_heads
        self.d_head = d // H
        self.n_ordinary = cfg.ordinary_heads if cfg.attention == "lego-v1" else 0
        self.n_total = len(HARD) + self.n_ordinary
        dh = self.d_head
        self.value = nn.Linear(d, len(HARD) * dh)
        self.qkv = nn.Linear(d, 3 * self.n_ordinary * dh) if self.n_ordinary else None
        self.out = nn.Linear(self.n_total * dh, d)
        self.conv = nn.Conv1d(d, d, cfg.lego_kernel, padding=cfg.lego_kernel // 2, groups=d)
        self.attn_dropout = cfg.attn_dropout
        self.impl = cfg.attn_impl
        self.identity_scaled, self.identity_mult = cfg.identity_scaled, cfg.identity_mult
        if self.identity_scaled:
            self.id_qk = nn.Parameter(torch.zeros(self.n_ordinary))
            self.id_vo = nn.Parameter(torch.zeros(self.n_total))

    # -- the shared, per-input structure ---------------------------------------------------
    @staticmethod
    def _structure(ctx: Context) -> dict:
        if "lego" not in ctx.shared:
            tokens, pad = ctx.tokens, ctx.key_padding
            gid = group_ids(tokens, pad)
            counts = torch.zeros_like(gid).scatter_add_(1, gid, torch.ones_like(gid))
            partners = (counts.gather(1, gid) - 1).clamp(min=0)           # other occurrences
            ctx.shared["lego"] = {
                "gid": gid,
                "inv_partners": torch.where(partners > 0, 1.0 / partners.clamp(min=1), 0.0).unsqueeze(-1),
                "bos": _column_weights(tokens == ctx.bos_id),
                "eos": _column_weights(tokens == ctx.eos_id),
                "valid": ctx.valid(),
            }
        return ctx.shared["lego"]

    def _hard(self, v: torch.Tensor, s: dict) -> list[torch.Tensor]:
        """The three hard-coded heads applied to values (B, T, dh) each, in O(T dh)."""
        va, vb, ve = v.unbind(2)
        gid = s["gid"].unsqueeze(-1).expand_as(va)
        sums = torch.zeros_like(va).scatter_add_(1, gid, va)
        assoc = (sums.gather(1, gid) - va) * s["inv_partners"]
        # weighted sums over the marked columns (elementwise: O(T dh), as cheap as they are)
        bos = (s["bos"].unsqueeze(-1) * vb).sum(1, keepdim=True).expand_as(vb)
        eos = (s["eos"].unsqueeze(-1) * ve).sum(1, keepdim=True).expand_as(ve)
        outs = [assoc, bos, eos]
        if s["valid"] is not None:
            outs = [o * s["valid"] for o in outs]
        return outs

    def forward(self, x: torch.Tensor, ctx: Context, name: str, positions: torch.Tensor | None = None) -> torch.Tensor:
        B, T, D = x.shape
        dh = self.d_head
        s = self._structure(ctx)
        want_pattern = ctx.wants(f"{name}.hook_pattern")
        v = self.value(x).view(B, T, len(HARD), dh)
        heads = self._hard(v, s)                                           # 3 x (B, T, dh)
        hard = None
        if want_pattern or self.identity_scaled:
            hard = hard_maps_dense(ctx.tokens, ctx.bos_id, ctx.eos_id, ctx.key_padding)
        patterns = [hard] if want_pattern else []
        if self.n_ordinary:
            h = self.n_ordinary
            q, k, vo = self.qkv(x).view(B, T, 3, h, dh).permute(2, 0, 3, 1, 4)
            mask = ctx.attn_mask()
            p_drop = self.attn_dropout if self.training else 0.0
            impl = self.impl if self.impl != "auto" else _auto_impl(q)
            if impl == "sdpa" and not (want_pattern or self.identity_scaled):
                z = F.scaled_dot_product_attention(q, k, vo, attn_mask=mask, dropout_p=p_drop)
            else:
                scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
                if self.identity_scaled:
                    scores = scores + (self.identity_mult * self.id_qk).view(1, h, 1, 1) * identity_scores(x, x)
                if mask is not None:
                    scores = scores.masked_fill(~mask, float("-inf"))
                pattern = scores.softmax(-1)
                patterns.append(pattern)
                z = F.dropout(pattern, p_drop) @ vo if p_drop else pattern @ vo
            heads += list(z.unbind(1))
        if want_pattern:
            ctx.cache[f"{name}.hook_pattern"] = torch.cat(patterns, 1)
        out = self.out(torch.cat(heads, -1))
        if self.identity_scaled:
            maps = hard if not self.n_ordinary else torch.cat([hard, patterns[-1]], 1)
            out = out + torch.einsum("h,bhts->bts", self.identity_mult * self.id_vo, maps) @ x
        xc = x if s["valid"] is None else x * s["valid"]
        out = out + self.conv(xc.transpose(1, 2)).transpose(1, 2)
        if positions is not None:
            out = torch.gather(out, 1, positions.unsqueeze(-1).expand(-1, -1, D))
        return out


def _column_weights(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) weights averaging the marked positions (zero if none)."""
    m = mask.float()
    return m / m.sum(1, keepdim=True).clamp(min=1)
