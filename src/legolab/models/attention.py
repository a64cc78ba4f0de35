"""Attention layers. Every variant takes the block's (normalised) input ``x`` and a ``Context``
and returns the per-token update, so a block can swap one for another.

- ``SelfAttention``: BERT's multi-head softmax attention. The fast path is
  ``F.scaled_dot_product_attention``; when an analysis asks for ``hook_pattern`` the
  probabilities softmax(QK^T / sqrt(d_head)) are computed explicitly and cached.
  ``identity_scaled=True`` adds the two per-head scalars of Boix-Adsera et al. (seed 004):
  scores += a_h * x x^T (diagonal zeroed) and output += sum_h b_h * (A_h x), both initialised
  to 0, each times a fixed ``identity_mult`` (the seed's ``wkwq_id_mult`` / ``wvwo_id_mult``:
  under Adam, a multiplier m makes the scalars move m times faster).
- ``LegoAttention``: the paper's section 5 module (see its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


class ActivationCache(dict):
    """Activations by hook name, filled only for the names asked for.

    ``names`` is a list of exact names or fnmatch patterns (``blocks.*.attn.hook_pattern``).
    """

    def __init__(self, names):
        super().__init__()
        import fnmatch

        self._exact = {n for n in names if not any(c in n for c in "*?[")}
        self._patterns = [n for n in names if n not in self._exact]
        self._match = fnmatch.fnmatchcase

    def wants(self, name: str) -> bool:
        return name in self._exact or any(self._match(name, p) for p in self._patterns)


def same_token_mask(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T) bool, True where position j != i holds position i's token (the association map's
    support: LEGO attention, the scaffold and the mimicking target all start from it)."""
    T = tokens.shape[1]
    return (tokens[:, :, None] == tokens[:, None, :]) & ~torch.eye(T, dtype=torch.bool, device=tokens.device)


@dataclass
class Context:
    """What every layer of one forward pass shares."""

    tokens: torch.Tensor                      # (B, T) input ids
    key_padding: torch.Tensor | None = None   # (B, T) True at padding, or None if there is none
    cache: ActivationCache | None = None
    shared: dict = field(default_factory=dict)  # per-input maps built once for all layers (LEGO attention)
    scaffold: float = 0.0                     # training only: + this on head 0's scores where the key
                                              # holds the query's token (an association scaffold)
    bos_id: int = 1                           # token ids of BOS and EOS (LEGO attention's broadcast maps)
    eos_id: int = 2

    def wants(self, name: str) -> bool:
        return self.cache is not None and self.cache.wants(name)

    def valid(self) -> torch.Tensor | None:
        """(B, T, 1) float, 1 at real tokens, or None if there is no padding."""
        if self.key_padding is None:
            return None
        if "valid" not in self.shared:
            self.shared["valid"] = (~self.key_padding).unsqueeze(-1).float()
        return self.shared["valid"]

    def same_token(self) -> torch.Tensor:
        """(B, T, T) float, 1 where position j != i holds position i's token."""
        if "same_token" not in self.shared:
            self.shared["same_token"] = same_token_mask(self.tokens).float()
        return self.shared["same_token"]

    def attn_mask(self) -> torch.Tensor | None:
        """Boolean (B, 1, 1, T) mask, True where a key may be attended to."""
        if self.key_padding is None:
            return None
        if "attn_mask" not in self.shared:
            self.shared["attn_mask"] = ~self.key_padding[:, None, None, :]
        return self.shared["attn_mask"]


def identity_scores(x_q: torch.Tensor, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 1, Tq, T) x x^T with the diagonal (each token with itself) zeroed, as in seed 004's
    GPT-2 experiments (mask_diag_wkwq): the term then rewards attending to *other* tokens like
    oneself, not to oneself."""
    s = x_q @ x.transpose(-1, -2)
    rows = torch.arange(x.shape[1], device=x.device).expand(x.shape[0], -1) if positions is None else positions
    self_mask = rows.unsqueeze(-1) == torch.arange(x.shape[1], device=x.device)
    return s.masked_fill(self_mask, 0.0).unsqueeze(1)


def _auto_impl(q: torch.Tensor) -> str:
    """On a CPU: math wherever gradients flow (SDPA's CPU backward is ~6x slower in bf16 and no
    faster in fp32, and the recipe's guidance reads the scores, which SDPA would compute twice)
    and for bf16; SDPA for fp32 inference (~1.25x faster at batch 1,000). On a GPU: SDPA, fused
    and memory-lean. A forward observed through hooks takes the same kernel as one that is not."""
    if q.device.type != "cpu":
        return "sdpa"
    return "math" if q.dtype == torch.bfloat16 or torch.is_grad_enabled() else "sdpa"


# model.attention -> a factory (ModelConfig -> module with forward(x, ctx, name, positions)
# and an ``out`` projection). A new variant is one file that registers itself; models/__init__.py
# imports it.
ATTENTIONS: dict = {}


def register_attention(*names: str):
    def register(factory):
        for name in names:
            ATTENTIONS[name] = factory
        return factory
    return register


class SelfAttention(nn.Module):
    """``impl`` picks the kernel and nothing else does: ``sdpa`` (F.scaled_dot_product_attention,
    the fused kernel GPUs want), ``math`` (softmax(QK^T / sqrt(d_head)) V as plain matmuls: on a
    CPU as fast in fp32 and 6x faster in bf16 backward than SDPA's CPU kernel at LEGO's short
    sequences), or ``auto`` (``_auto_impl``: on a CPU math to train, sdpa for fp32 inference). Asking for ``hook_pattern`` only
    observes: under sdpa the probabilities are computed beside the fused kernel, not instead."""

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0, identity_scaled: bool = False,
                 impl: str = "auto", identity_mult: float = 1.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.attn_dropout = attn_dropout
        self.identity_scaled, self.identity_mult = identity_scaled, identity_mult
        self.impl = impl
        if identity_scaled:
            self.id_qk = nn.Parameter(torch.zeros(n_heads))  # a_h
            self.id_vo = nn.Parameter(torch.zeros(n_heads))  # b_h

    def forward(self, x: torch.Tensor, ctx: Context, name: str, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Update for every token of ``x`` (B, T, D), or only at ``positions`` (B, P), the
        read-out tokens, when the caller needs nothing else from this layer."""
        B, T, D = x.shape
        H, dh = self.n_heads, self.d_head
        if positions is None:
            queries = None
            q, k, v = self.qkv(x).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)  # each (B, H, T, dh)
        else:
            queries = torch.gather(x, 1, positions.unsqueeze(-1).expand(-1, -1, D))
            q = F.linear(queries, self.qkv.weight[:D], self.qkv.bias[:D]).view(B, -1, H, dh).transpose(1, 2)
            k, v = F.linear(x, self.qkv.weight[D:], self.qkv.bias[D:]).view(B, T, 2, H, dh).permute(2, 0, 3, 1, 4)
        x_q = x if queries is None else queries
        T_q = x_q.shape[1]
        mask = ctx.attn_mask()
        p_drop = self.attn_dropout if self.training else 0.0
        want_pattern = ctx.wants(f"{name}.hook_pattern")
        impl = self.impl if self.impl != "auto" else _auto_impl(q)
        if impl == "sdpa" and not (self.identity_scaled or ctx.scaffold):
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop)
            if want_pattern or ctx.wants(f"{name}.hook_attn_scores"):
                # observed beside the fused kernel, with gradients (the guidance loss reads them)
                pattern = self._pattern(q, k, x_q, x, mask, positions, ctx, name)
                if want_pattern:
                    ctx.cache[f"{name}.hook_pattern"] = pattern
            return self.out(z.transpose(1, 2).reshape(B, T_q, D))
        pattern = self._pattern(q, k, x_q, x, mask, positions, ctx, name)
        if want_pattern:
            ctx.cache[f"{name}.hook_pattern"] = pattern
        if p_drop:
            pattern = F.dropout(pattern, p_drop)
        out = self.out((pattern @ v).transpose(1, 2).reshape(B, T_q, D))
        if self.identity_scaled:
            # sum_h b_h A_h x, without materialising (B, H, T, D)
            mixed = torch.einsum("h,bhts->bts", (self.identity_mult * self.id_vo).to(pattern.dtype), pattern)
            out = out + mixed @ x.to(mixed.dtype)
        return out

    def _pattern(self, q, k, x_q, x, mask, positions, ctx=None, name: str = "") -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d_head))
        if ctx is not None and ctx.wants(f"{name}.hook_attn_scores"):
            ctx.cache[f"{name}.hook_attn_scores"] = scores  # learned scores: before scaffold and mask
        if ctx is not None and ctx.scaffold:
            same = ctx.same_token()
            if positions is not None:
                same = torch.gather(same, 1, positions.unsqueeze(-1).expand(-1, -1, same.shape[-1]))
            head0 = torch.zeros(scores.shape[1], 1, 1, dtype=scores.dtype, device=scores.device)
            head0[0] = ctx.scaffold
            scores = scores + head0 * same.unsqueeze(1).to(scores.dtype)
        if self.identity_scaled:
            scores = scores + (self.identity_mult * self.id_qk).view(1, -1, 1, 1) * identity_scores(x_q, x, positions)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(-1)


@register_attention("standard")
def standard_attention(cfg) -> SelfAttention:
    return SelfAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.identity_scaled, cfg.attn_impl, cfg.identity_mult)
