"""Inference FLOPs, size and latency of BERT vs LEGO attention (the paper's Fig. 9).

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on meta tensors (shapes only,
so BERT-base at 64 x 8192 tokens costs nothing to count), with attention on its exact path
(explicit QK^T and AV matmuls: the fused CPU kernel is not counted). The hard-coded maps of LEGO
attention are segment sums and broadcasts, not matmuls: they are not counted, and their cost is
a few additions per value element. ``analytic_flops`` is the closed form the count is checked
against. Embeddings, LayerNorm, softmax and biases are excluded from both; the encoder has no head.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..models import Encoder, ModelConfig
from ..models.tokenizer import BERT_CLS, BERT_SEP, BERT_VOCAB_SIZE

PRESETS = {
    "bert-base": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072),
    "bert-small": dict(n_layers=4, d_model=512, n_heads=8, d_ff=2048),
    "minilm": dict(n_layers=6, d_model=384, n_heads=12, d_ff=1536),
    "cpu": dict(n_layers=6, d_model=64, n_heads=4, d_ff=256),
}
VOCAB = BERT_VOCAB_SIZE
SPECIALS = (BERT_CLS, BERT_SEP)  # what LEGO attention broadcasts from


def model_config(preset: str, attention: str, max_len: int) -> ModelConfig:
    return ModelConfig(**PRESETS[preset], attention=attention, max_len=max_len, dropout=0.0, attn_dropout=0.0)


def analytic_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass, embeddings and classifier excluded."""
    d, T, L, ff = cfg.d_model, seq, cfg.n_layers, cfg.ff
    dh = d // cfg.n_heads
    ffn = 2 * T * 2 * d * ff
    if cfg.attention == "standard":
        attn = 2 * T * 4 * d * d + 2 * 2 * T * T * d
    else:
        h = cfg.ordinary_heads if cfg.attention == "lego-v1" else 0
        heads = 3 + h
        attn = 2 * T * (3 * dh * d) + 2 * T * (heads * dh * d) + 2 * T * d * cfg.lego_kernel
        attn += 2 * T * 3 * h * dh * d + 2 * 2 * T * T * h * dh
    return batch * L * (attn + ffn)


def count_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """FlopCounterMode on meta tensors, exact attention path."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):  # the math kernel: SDPA's fused kernels are not counted
        model = Encoder(replace(cfg, attn_impl="auto" if cfg.attention == "lego-v0" else "math"), VOCAB,
                        special_ids=SPECIALS).eval()
        tokens = torch.randint(0, VOCAB, (batch, seq))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(tokens)
    return counter.get_total_flops()


def parameters(cfg: ModelConfig) -> tuple[int, int]:
    """(all parameters, without the embedding tables) at the BERT vocabulary and 512 positions."""
    with torch.device("meta"):
        m = Encoder(replace(cfg, max_len=512), VOCAB)
    return m.num_parameters(), m.num_parameters(exclude_embeddings=True)


@torch.no_grad()
def latency(cfg: ModelConfig, batch: int, seq: int, repeats: int = 3) -> float:
    """Median seconds of one CPU forward pass (the fast path)."""
    torch.manual_seed(0)
    model = Encoder(cfg, VOCAB, special_ids=SPECIALS).eval()
    tokens = torch.randint(1000, VOCAB, (batch, seq))
    tokens[:, 0], tokens[:, -1] = SPECIALS
    model(tokens)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        model(tokens)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def report(preset: str, attentions: list[str], batch: int, seqs: list[int], latency_batch: int,
           latency_max_seq: int) -> list[dict]:
    rows = []
    max_len = max(seqs)
    for seq in seqs:
        for att in attentions:
            cfg = model_config(preset, att, max_len)
            total, body = parameters(cfg)
            row = {"attention": att, "seq": seq, "batch": batch, "flops": count_flops(cfg, batch, seq),
                   "analytic_flops": analytic_flops(cfg, batch, seq), "params": total, "params_no_embeddings": body,
                   "latency_s": None}
            if latency_batch and seq <= latency_max_seq:
                row["latency_s"] = latency(replace(cfg), latency_batch, seq)
            rows.append(row)
    return rows
