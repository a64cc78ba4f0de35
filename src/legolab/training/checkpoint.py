"""Checkpoints: one safetensors file each, written atomically.

Tensors are the model's weights (``model.<name>``), the optimiser's state (``optim.<i>.<key>``)
and the RNG state (``rng.<device>``); the safetensors header's metadata holds a JSON ``state``
(step, scheduler, optimiser hyper-parameters, best score, config) and ``sha256``, a digest of
every tensor's name, dtype, shape and bytes, verified on load: a flipped byte is refused, never
silently loaded. ``model.*`` alone is what ``--init`` reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import LegoError
from ..io import atomic_path


def save_checkpoint(path: str | Path, model: torch.nn.Module, state: dict, optimizer=None, rng: bool = True) -> None:
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    meta = dict(state)
    if optimizer is not None:
        sd = optimizer.state_dict()
        for i, s in sd["state"].items():
            for key, value in s.items():
                tensors[f"optim.{i}.{key}"] = (value if torch.is_tensor(value) else torch.tensor(value)).contiguous().cpu()
        meta["optimizer_param_groups"] = sd["param_groups"]
    if rng:
        tensors["rng.cpu"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            tensors["rng.cuda"] = torch.cuda.get_rng_state()
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"legolab": json.dumps(meta), "sha256": tensor_digest(tensors)})


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    path = Path(path)
    if not path.is_file():
        raise LegoError(f"no checkpoint at {str(path)!r}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            header = f.metadata() or {}
        meta = json.loads(header.get("legolab", "{}"))
        if not isinstance(meta, dict):
            raise ValueError("its legolab metadata is not a mapping")
    except (SafetensorError, OSError, json.JSONDecodeError, ValueError, RuntimeError) as e:
        raise LegoError(f"{str(path)!r} is not a readable legolab checkpoint ({str(e).splitlines()[0][:200]})") from None
    if "sha256" in header and header["sha256"] != tensor_digest(tensors):
        raise LegoError(f"{str(path)!r} is corrupted: its tensors do not match the checksum stored when it was written")
    return tensors, meta


def model_weights(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}


def load_model_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """Load weights of exactly this model's shape, or fail with one line saying what differs."""
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    extra = sorted(set(weights) - set(own))
    if missing or extra:
        what = f"missing {missing[0]}" if missing else f"unexpected {extra[0]}"
        raise LegoError(f"{source}: checkpoint does not match this model ({what}; "
                        f"{len(missing)} missing, {len(extra)} unexpected tensors)")
    for k, v in weights.items():
        if own[k].shape != v.shape:
            raise LegoError(f"{source}: checkpoint of another shape: {k} is {tuple(v.shape)}, "
                            f"this model has {tuple(own[k].shape)}")
    model.load_state_dict(weights)


def restore_training_state(tensors: dict, meta: dict, optimizer, device) -> None:
    """Optimiser and RNG state for an exact resume."""
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, i, key = k.split(".", 2)
            state.setdefault(int(i), {})[key] = v.to(device) if key != "step" else v
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer_param_groups"]})
        torch.set_rng_state(tensors["rng.cpu"])
    except (KeyError, ValueError, RuntimeError) as e:
        raise LegoError(f"the checkpoint's optimiser or RNG state does not fit this run ({str(e).splitlines()[0][:200]})") from None
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
