"""BERT- and ALBERT-style encoders (hidden states) and the token-classification head beside them.

BERT: token + learned position embeddings -> LayerNorm -> n_layers blocks, each
    post-LN (BERT):  x = LN(x + Attn(x));     x = LN(x + FFN(x))
    pre-LN:          x = x + Attn(LN(x));     x = x + FFN(LN(x))   (final LN after the stack)
ALBERT: one block whose weights are shared by all n_layers applications, and a factorised
    embedding (d_embed < d_model, projected up).

``depth`` overrides the number of block applications per call: stochastic depth trains the
weight-tied model at depths drawn per batch, and evaluation may run deeper than training.

Hook names follow TransformerLens: ``blocks.{l}.hook_resid_pre`` (l = 0 is the embedding
output), ``blocks.{l}.hook_resid_post``, ``blocks.{l}.attn.hook_pattern``; only the names asked
for are computed and kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .attention import ATTENTIONS, ActivationCache, Context
from .tokenizer import check_tokenizer

ARCHS = ("bert", "albert")
NORMS = ("post", "pre")
ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}
# a block's hooks that need every token of it (the read-out path computes only read-out tokens)
LAST_BLOCK_HOOKS = ("hook_resid_post", "attn.hook_pattern", "attn.hook_attn_scores")


@dataclass
class ModelConfig:
    arch: str = "bert"                 # bert | albert (one shared block applied n_layers times)
    n_layers: int = 6
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 0                      # 0: 4 * d_model
    d_embed: int = 0                   # ALBERT's factorised embedding size; 0: d_model
    max_len: int = 512
    norm: str = "post"                 # post (BERT, ALBERT) | pre
    dropout: float = 0.0
    attn_dropout: float = 0.0
    ln_eps: float = 1e-12
    init_std: float = 0.02             # N(0, init_std) weights (BERT: 0.02)
    embed_std: float = 0.0             # N(0, embed_std) token and position embeddings; 0: init_std.
                                       # Seed 004's model keeps torch's N(0, 1): symbols it never
                                       # trains on then look like the ones it did (docs/tasks.md)
    residual_init: float = 1.0         # init std of the maps that write into the residual stream
                                       # (attention output, FFN down), as a multiple of init_std;
                                       # 0 starts every block as the identity
    tokenizer: str = "compact"         # compact (the task's ids) | wordpiece (bert-base-uncased's) | hf:PATH
                                       # (a local checkpoint's vocabulary): models/tokenizer.py
    activation: str = "gelu"           # gelu (exact, BERT) | gelu_tanh (ALBERT's gelu_new) | relu
    attention: str = "standard"        # standard | lego-v0 | lego-v1 (section 5)
    attn_impl: str = "auto"            # auto (CPU: math to train or in bf16; else sdpa) | math | sdpa: the kernel only
    identity_scaled: bool = False      # seed 004's two trainable scalars per head
    identity_mult: float = 1.0         # fixed multiplier of a and b (seed 004's *_id_mult): Adam moves them
                                       # identity_mult times faster
    conv: int = 0                      # kernel of a depthwise, non-causal convolution added to every
                                       # block's input before attention (Canon-A); 0: off
    lego_kernel: int = 5               # LEGO attention: width of the depthwise convolution
    lego_heads: int = 0                # LEGO v1: ordinary softmax heads beside the 3 hard-coded maps;
                                       # 0: n_heads // 4 (3 of BERT-base's 12, as in the paper)

    # flags removed with their experiments (no effect on the plateau: docs/cpu_recipe.md); run
    # directories that recorded them at these values still load
    retired: ClassVar[dict] = {"positions": "learned", "pos_init": 1.0, "mimetic_init": False, "identity_init": 0.0}

    def validate(self) -> None:
        def need(ok: bool, key: str, why: str):
            if not ok:
                raise ConfigError(f"model.{key}: {why}, got {getattr(self, key)!r}")

        need(self.arch in ARCHS, "arch", f"must be one of {', '.join(ARCHS)}")
        need(self.norm in NORMS, "norm", f"must be one of {', '.join(NORMS)}")
        need(self.attention in ATTENTIONS, "attention", f"must be one of {', '.join(ATTENTIONS)}")
        need(check_tokenizer(self.tokenizer), "tokenizer", "must be compact, wordpiece or hf:PATH")
        need(self.activation in ACTIVATIONS, "activation", f"must be one of {', '.join(ACTIVATIONS)}")
        need(self.attn_impl in ("auto", "math", "sdpa"), "attn_impl", "must be auto, math or sdpa")
        for key in ("n_layers", "d_model", "n_heads", "max_len"):
            need(isinstance(getattr(self, key), int) and getattr(self, key) >= 1, key, "must be a positive integer")
        for key in ("d_ff", "d_embed"):
            need(isinstance(getattr(self, key), int) and getattr(self, key) >= 0, key, "must be a non-negative integer")
        need(self.d_model % self.n_heads == 0, "n_heads", f"must divide d_model={self.d_model}")
        for key in ("dropout", "attn_dropout"):
            need(0.0 <= getattr(self, key) < 1.0, key, "must be in [0, 1)")
        need(self.ln_eps > 0, "ln_eps", "must be positive")
        need(self.init_std > 0, "init_std", "must be positive")
        need(self.embed_std >= 0, "embed_std", "must be non-negative (0: init_std)")
        need(self.residual_init >= 0, "residual_init", "must be non-negative")
        need(self.conv == 0 or (self.conv > 0 and self.conv % 2 == 1), "conv", "must be 0 (off) or a positive odd kernel width")
        need(self.lego_kernel >= 1 and self.lego_kernel % 2 == 1, "lego_kernel", "must be a positive odd integer")
        need(0 <= self.lego_heads <= self.n_heads, "lego_heads", f"must be between 0 and n_heads={self.n_heads}")
        need(self.d_embed == 0 or self.arch == "albert", "d_embed", "a factorised embedding is ALBERT's (arch: albert)")
        # combinations that would build and silently do nothing (lego-v0 has no softmax heads)
        v0 = self.attention == "lego-v0"
        need(self.identity_mult == 1.0 or self.identity_scaled, "identity_mult", "scales identity-scaled attention's "
             "scalars: needs identity_scaled=true")
        need(self.identity_mult > 0, "identity_mult", "must be positive")
        need(self.attn_impl == "auto" or not v0, "attn_impl", "picks the softmax kernel: lego-v0 has no softmax heads")
        need(self.attention != "standard" or self.lego_kernel == 5, "lego_kernel",
             "is LEGO attention's: needs attention=lego-v0 or lego-v1")
        need(self.attention == "lego-v1" or self.lego_heads == 0, "lego_heads",
             "counts LEGO v1's softmax heads: needs attention=lego-v1")

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def ordinary_heads(self) -> int:
        """Softmax heads of LEGO v1."""
        return self.lego_heads or max(1, self.n_heads // 4)

    @property
    def embed(self) -> int:
        return self.d_embed or self.d_model


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, cfg.embed)
        self.pos = nn.Embedding(cfg.max_len, cfg.embed)
        self.norm = nn.LayerNorm(cfg.embed, eps=cfg.ln_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.embed, cfg.d_model) if cfg.embed != cfg.d_model else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        x = self.drop(self.norm(self.tok(tokens) + self.pos.weight[:T]))
        return self.proj(x) if self.proj is not None else x


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu"):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.act = ACTIVATIONS[activation]

    def forward(self, x):
        return self.down(self.act(self.up(x)))


def make_attention(cfg: ModelConfig) -> nn.Module:
    return ATTENTIONS[cfg.attention](cfg)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.attn = make_attention(cfg)
        self.ffn = FeedForward(cfg.d_model, cfg.ff, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.conv = nn.Conv1d(cfg.d_model, cfg.d_model, cfg.conv, padding=cfg.conv // 2, groups=cfg.d_model) if cfg.conv else None

    @torch.no_grad()
    def initialise(self, cfg: ModelConfig) -> None:
        """After BERT's init: the scale of the two maps that write into the residual stream
        (0: the block starts as the identity)."""
        if cfg.residual_init != 1.0:
            for proj in (self.attn.out, self.ffn.down):
                proj.weight.normal_(0, cfg.init_std * cfg.residual_init) if cfg.residual_init else proj.weight.zero_()

    def forward(self, x: torch.Tensor, ctx: Context, name: str, positions: torch.Tensor | None = None) -> torch.Tensor:
        """All tokens, or with ``positions`` (B, P) only the read-out tokens (B, P, d): a last
        block whose other outputs nobody reads needs queries, FFN and norms at P tokens only."""
        a = self._mix(self.norm1(x) if self.pre_norm else x, ctx)
        residual = x if positions is None else _gather(x, positions)
        y = residual + self.drop(self.attn(a, ctx, f"{name}.attn", positions))
        if self.pre_norm:
            return y + self.drop(self.ffn(self.norm2(y)))
        y = self.norm1(y)
        return self.norm2(y + self.drop(self.ffn(y)))

    def _mix(self, a: torch.Tensor, ctx: Context) -> torch.Tensor:
        """The attention input plus its depthwise convolution (Canon-A): a free local read, so
        one attention composition per chain step suffices."""
        if self.conv is None:
            return a
        valid = ctx.valid()
        ac = a if valid is None else a * valid
        return a + self.conv(ac.transpose(1, 2)).transpose(1, 2)


class Encoder(nn.Module):
    """The encoder body: embeddings, blocks, final norm -> hidden states. Heads sit beside it:
    ``TokenClassifier`` here, the masked-LM head in training/pretrain.py."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, input_map: torch.Tensor | None = None,
                 special_ids: tuple[int, ...] = (), initialise: bool = True):
        """``input_map`` (task vocabulary -> embedding row) lets a model with another vocabulary
        (WordPiece) read task ids; analyses keep seeing the task's own ids. ``special_ids`` are
        the BOS and EOS ids that LEGO attention broadcasts from. A subclass that adds a head
        passes ``initialise=False`` and calls ``initialise()`` once its head exists."""
        super().__init__()
        cfg.validate()
        self.cfg, self.special_ids = cfg, special_ids
        self.vocab_size = vocab_size if input_map is None else len(input_map)
        self.register_buffer("input_map", input_map, persistent=input_map is not None)
        self.embed = Embeddings(cfg, vocab_size)
        n_distinct = 1 if cfg.arch == "albert" else cfg.n_layers
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(n_distinct))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps) if cfg.norm == "pre" else None
        if initialise:
            self.initialise()

    @torch.no_grad()
    def initialise(self) -> None:
        cfg = self.cfg
        self.apply(lambda m: _init_weights(m, cfg.init_std))
        for block in self.blocks:
            block.initialise(cfg)
        if cfg.embed_std:
            for table in (self.embed.tok, self.embed.pos):
                table.weight.normal_(0, cfg.embed_std)

    @property
    def tied(self) -> bool:
        return self.cfg.arch == "albert"

    def max_depth(self) -> int | None:
        """Deepest allowed ``depth``: any for the weight-tied model, n_layers otherwise."""
        return None if self.tied else self.cfg.n_layers

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None, depth: int | None = None,
                cache: ActivationCache | None = None, key_padding: torch.Tensor | None = None,
                scaffold: float = 0.0, readout_path: bool = True) -> torch.Tensor:
        """Hidden states after the last block (and the final norm): (B, T, d), or (B, P, d) at
        ``positions`` (B, P).

        ``key_padding`` (B, T, True at padding) is only needed when a batch holds padding.
        ``readout_path``: with ``positions``, the last block runs its queries, feed-forward and
        norms at the read-out tokens only (exact, ~12% cheaper); a cache that asks for one of
        that block's hooks gets the full block, other hooks leave the path as it is.
        """
        depth = self.cfg.n_layers if depth is None else depth
        if depth < 1 or (not self.tied and depth > self.cfg.n_layers):
            raise ValueError(f"depth {depth} is outside 1..{self.max_depth() or 'any'}")
        if tokens.shape[1] > self.cfg.max_len:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds max_len {self.cfg.max_len}")
        bos, eos = self.special_ids if len(self.special_ids) == 2 else (-1, -1)  # -1: a task without boundary tokens
        ctx = Context(tokens, key_padding, cache, scaffold=scaffold, bos_id=bos, eos_id=eos)
        x = self.embed(tokens if self.input_map is None else self.input_map[tokens])
        if ctx.wants("blocks.0.hook_resid_pre"):
            cache["blocks.0.hook_resid_pre"] = x
        last = f"blocks.{depth - 1}"
        readout_only = readout_path and positions is not None and not (
            cache is not None and any(cache.wants(f"{last}.{hook}") for hook in LAST_BLOCK_HOOKS))
        for layer in range(depth):
            name = f"blocks.{layer}"
            block = self.blocks[0 if self.tied else layer]
            x = block(x, ctx, name, positions if readout_only and name == last else None)
            if ctx.wants(f"{name}.hook_resid_post"):
                cache[f"{name}.hook_resid_post"] = x
        if positions is not None and not readout_only:
            x = _gather(x, positions)
        return self.final_norm(x) if self.final_norm is not None else x

    def normed_at(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Any layer's residual stream (B, T, d) at ``positions``, through the final norm."""
        h = _gather(hidden, positions)
        return self.final_norm(h) if self.final_norm is not None else h

    def run_with_cache(self, tokens, names, **kwargs) -> tuple[torch.Tensor, ActivationCache]:
        """(this model's output, the activations named by ``names``): only those are computed and kept."""
        cache = ActivationCache(names)
        return self(tokens, cache=cache, **kwargs), cache

    def activations(self, tokens, names, **kwargs) -> ActivationCache:
        """The activations named by ``names`` alone (the encoder runs, no head)."""
        cache = ActivationCache(names)
        Encoder.forward(self, tokens, cache=cache, **kwargs)
        return cache

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.embed.tok.weight.numel() + self.embed.pos.weight.numel()
        return n


class TokenClassifier(Encoder):
    """The encoder and a linear read-out of a class at each given position (LEGO: a variable's value)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, num_classes: int, input_map: torch.Tensor | None = None,
                 special_ids: tuple[int, ...] = ()):
        super().__init__(cfg, vocab_size, input_map, special_ids, initialise=False)
        self.num_classes = num_classes
        self.head = nn.Linear(cfg.d_model, num_classes)
        self.initialise()  # after the head exists: one draw order for every weight

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, **kwargs) -> torch.Tensor:
        """Logits (B, P, classes) at ``positions`` (B, P); keywords as ``Encoder.forward``."""
        return self.head(super().forward(tokens, positions, **kwargs))

    def hidden(self, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
        """Hidden states (B, T, d) of every token."""
        return Encoder.forward(self, tokens, **kwargs)

    def readout(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The classifier applied to any layer's residual stream (B, T, d) at ``positions``."""
        return self.head(self.normed_at(hidden, positions))


def build_model(cfg: ModelConfig, task) -> TokenClassifier:
    """The encoder for ``task``: its own vocabulary, or WordPiece ids through an input map."""
    specials = tuple(task.special_ids)
    if cfg.attention.startswith("lego") and len(specials) != 2:
        raise ConfigError(f"model.attention={cfg.attention}: LEGO attention broadcasts from two boundary tokens "
                          f"(BOS, EOS); task {task.name!r} has {len(specials)}")
    if cfg.tokenizer != "compact":
        from .tokenizer import input_map

        ids, size = input_map(task, cfg.tokenizer)
        return TokenClassifier(cfg, size, task.num_classes, input_map=ids, special_ids=specials)
    return TokenClassifier(cfg, len(task.vocab), task.num_classes, special_ids=specials)


def _gather(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, 1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def _init_weights(m: nn.Module, std: float) -> None:
    # BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm.
    if isinstance(m, (nn.Linear, nn.Embedding, nn.Conv1d)):
        nn.init.normal_(m.weight, std=std)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
