"""Reading run directories back: the config, the model at a checkpoint, the metrics."""

from __future__ import annotations

from pathlib import Path

from ..errors import LegoError
from ..models import build_model
from ..tasks import make_task
from .checkpoint import load_model_weights, model_weights, read_checkpoint
from .config import RunConfig, load_config
from .rundir import read_metrics


def run_config(run_dir: str | Path) -> RunConfig:
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise LegoError(f"{run_dir}: not a run directory (no config.yaml)")
    return load_config(run_dir / "config.yaml")


def load_run(run_dir: str | Path, checkpoint: str = "best", device="cpu"):
    """(config, task, model in eval mode) of a run directory at its best or last checkpoint."""
    run_dir = Path(run_dir)
    cfg = run_config(run_dir)
    path = run_dir / "checkpoints" / f"{checkpoint}.safetensors"
    if not path.is_file():
        raise LegoError(f"{run_dir}: no {checkpoint} checkpoint yet (checkpoints/{checkpoint}.safetensors)")
    task = cfg.make_task()
    model = build_model(cfg.model, task)
    tensors, _ = read_checkpoint(path)
    load_model_weights(model, model_weights(tensors), str(path))
    return cfg, task, model.to(device).eval()


def run_metrics(run_dir: str | Path) -> list[dict]:
    run_dir = Path(run_dir)
    run_config(run_dir)
    return read_metrics(run_dir / "metrics.jsonl")


def run_curves(run_dir: str | Path) -> tuple[str, set[int], list[dict]]:
    """(name, supervised indices, evaluation records) of a run: what ``plots.plot_runs`` draws."""
    cfg, records = run_config(run_dir), run_metrics(run_dir)
    n = len(records[0]["test_acc_per_index"]) if records else 0
    return Path(run_dir).name, set(cfg.train.supervised_indices(n)), records


def load_source(source: str, checkpoint: str = "last", task: dict | None = None, seed: int = 0):
    """A run directory, or a pretrained checkpoint (``minilm``, ``hf:PATH``) before fine-tuning,
    then read on ``task`` (``{"name": ..., **config values}``; default: LEGO, sign group, n = 12).
    Returns (run config or None, task, model)."""
    if source == "minilm" or source.startswith("hf:"):
        from ..models.hf import checkpoint_tokenizer, load_pretrained_into, model_config_from_hf, read_hf_config, resolve
        from ..tasks import task_config

        model_cfg = model_config_from_hf(read_hf_config(resolve(source)), tokenizer=checkpoint_tokenizer(source))
        values = dict(task or {"name": "lego"})
        name = values.pop("name", "lego")
        task = make_task(name, task_config(name, **values), seed=seed)
        model = build_model(model_cfg, task)
        load_pretrained_into(model, source, task)
        return None, task, model.eval()
    return load_run(source, checkpoint)
