"""Run configuration: one YAML file with sections ``task``, ``model`` and ``train``, plus dotted
command-line overrides (``train.lr=3e-3``). Unknown keys, wrong types and invalid values fail
before any work with one line naming the key.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..models.encoder import ModelConfig
from ..tasks import TASKS, make_task, task_config
from .objectives import OBJECTIVES, ramp
from .schedule import SCHEDULES

DTYPES = ("auto", "fp32", "bf16")
LOGS = ("text", "tensorboard")


@dataclass
class TrainConfig:
    # supervision: the first n_tr chain indices (LEGO: chain variables; 0: all), or an explicit list of
    # chain indices. Unset: the task's default (LEGO: the paper's 6)
    n_tr: int | None = None
    supervise: list[int] | None = None
    # data: a fixed training set of train_size sentences, or 0 for fresh sentences every step;
    # a fixed test set. Unset: the task's defaults (LEGO: the paper's 10^4 * n and 10^3 * n).
    train_size: int | None = None
    test_size: int | None = None
    # a validation stream (its own split) that chooses the "best" checkpoint; test is only reported.
    # Unset: min(test_size, 1000)
    valid_size: int | None = None
    # curriculum over length (fresh data, tasks with length variants): stage i is
    # curriculum_steps[i] optimiser steps on examples of length curriculum_n[i] (LEGO: clauses),
    # then training continues at the task's full length
    curriculum_n: list[int] | None = None
    curriculum_steps: list[int] | None = None
    # mixed lengths (fresh data, tasks with length variants): every batch draws one length
    # uniformly from [n_min, the task's length], so short batches cost less and need no padding;
    # 0: all batches at full length
    n_min: int = 0
    batch_size: int = 128
    epochs: int = 10                  # passes over the training set (fresh data: eval intervals)
    steps: int = 0                    # if > 0, train this many steps instead of epochs
    eval_every: int = 0               # steps between evaluations; 0: once per epoch
    eval_batch_size: int = 1000
    # optimisation
    lr: float = 1e-3
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    warmup: float = 0.0               # fraction of all steps (< 1) or a number of steps (>= 1)
    schedule: str = "cosine"          # cosine | linear | constant, after warmup
    min_lr: float = 0.0               # the schedule's floor, as a fraction of lr
    clip: float = 1.0                 # gradient-norm clipping; 0: off
    # stochastic depth (weight-tied model): depth drawn per batch from [depth_min, depth_max]
    depth_min: int = 0
    depth_max: int = 0
    eval_depth: int = 0               # 0: model.n_layers
    # initialisation: random | a run directory or checkpoint file | hf:PATH | minilm
    init: str = "random"
    # association guidance: an auxiliary loss pulling head 0 of every layer toward the association
    # map (the mimicking objective), weight ``guide`` for guide_steps steps, then linearly to 0
    # over as many again; afterwards the model trains on the task loss alone
    guide: float = 0.0
    guide_steps: int = 0
    # deep supervision: the classifier also read after every earlier block, the mean of those
    # losses weighted ``deep`` (0: off), so each value is computed as early as depth allows
    deep: float = 0.0
    # operand supervision (fresh data): also read the value of each clause's operand variable at
    # its operand token, weighted aux_operand, for supervised chain indices only
    aux_operand: float = 0.0
    # association scaffold: + scaffold on head 0's attention scores where the key holds the
    # query's token, for scaffold_steps steps, then linearly to 0 over as many again
    scaffold: float = 0.0
    scaffold_steps: int = 0
    # further registered objectives (training/objectives.py), name -> constant weight
    objectives: dict[str, float] | None = None
    # runtime
    device: str = "auto"              # auto | cpu | cuda | cuda:K
    dtype: str = "fp32"               # fp32 | bf16 (autocast, fp32 weights and loss) | auto (bf16 where
                                      # the device has bf16 matrix units, else fp32)
    compile: bool = False
    threads: int = 0                  # CPU threads per process; 0: all cores / processes
    log: str = "text"                 # text (train.log in the run directory) | tensorboard (also events)

    def validate(self, task, model: ModelConfig) -> None:
        """Against the task's indices and capabilities (``task``: a built task, see tasks.base)."""
        from ..tasks import supports

        def bad(key, why):
            raise ConfigError(f"train.{key}: {why}, got {getattr(self, key)!r}")

        n, steps = task.num_indices, f"the task's {task.num_indices} indices"
        if not 0 <= self.n_tr <= n:
            bad("n_tr", f"must be between 0 and {n}, {steps}")
        if self.supervise is not None:
            if not self.supervise or any(not isinstance(i, int) or not 0 <= i < n for i in self.supervise):
                bad("supervise", f"must be a non-empty list of chain indices in 0..{n - 1}")
        lengths = supports(task, "with_length")
        for key in ("curriculum_n", "n_min"):
            if getattr(self, key) and not lengths:
                bad(key, f"task {task.name!r} has no length variants")
        if self.aux_operand and not supports(task, "operand_readouts"):
            bad("aux_operand", f"task {task.name!r} has no operand read-outs")
        for key in ("batch_size", "eval_batch_size"):
            if getattr(self, key) < 1:
                bad(key, "must be a positive integer")
        for key in ("train_size", "epochs", "steps", "eval_every", "test_size", "valid_size", "threads"):
            if getattr(self, key) < 0:
                bad(key, "must be non-negative")
        if self.test_size < 1:
            bad("test_size", "must be positive")
        if self.valid_size < 1:
            bad("valid_size", "must be positive")
        if self.steps == 0 and self.epochs == 0:
            bad("epochs", "one of train.epochs and train.steps must be positive")
        if 0 < self.train_size < self.batch_size:
            bad("train_size", f"must be at least batch_size={self.batch_size} (or 0 for fresh data)")
        if self.train_size == 0 and self.steps == 0 and self.eval_every == 0:
            bad("eval_every", "fresh data (train_size 0) with epochs needs eval_every (steps per epoch)")
        if (self.curriculum_n is None) != (self.curriculum_steps is None):
            bad("curriculum_n", "set both curriculum_n and curriculum_steps (or neither)")
        if self.curriculum_n is not None:
            if len(self.curriculum_n) != len(self.curriculum_steps) or not self.curriculum_n:
                bad("curriculum_steps", "must list one step count per curriculum_n entry")
            if any(not 1 <= k <= n for k in self.curriculum_n):
                bad("curriculum_n", f"lengths must be in 1..{n}, {steps}")
            if any(s < 1 for s in self.curriculum_steps):
                bad("curriculum_steps", "must be positive")
            if self.train_size:
                bad("train_size", "a curriculum draws fresh sentences: set train_size to 0")
        if self.n_min and not 1 <= self.n_min <= n:
            bad("n_min", f"must be between 1 and {n}, {steps} (0: off)")
        if self.n_min and self.train_size:
            bad("train_size", "mixed lengths (n_min) draw fresh sentences: set train_size to 0")
        if not self.lr > 0:
            bad("lr", "must be positive")
        if self.weight_decay < 0:
            bad("weight_decay", "must be non-negative")
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                bad(key, "must be in [0, 1)")
        if self.warmup < 0:
            bad("warmup", "must be non-negative")
        if self.schedule not in SCHEDULES:
            bad("schedule", f"must be one of {', '.join(SCHEDULES)}")
        if not 0 <= self.min_lr <= 1:
            bad("min_lr", "must be a fraction of lr in [0, 1]")
        if self.clip < 0:
            bad("clip", "must be non-negative")
        if (self.depth_min == 0) != (self.depth_max == 0):
            bad("depth_min", "set both depth_min and depth_max (or neither)")
        if self.depth_min and not 1 <= self.depth_min <= self.depth_max:
            bad("depth_max", f"must be >= depth_min={self.depth_min} >= 1")
        tied = model.arch == "albert"
        if self.depth_max and not tied and self.depth_max > model.n_layers:
            bad("depth_max", f"an untied model has only model.n_layers={model.n_layers} layers")
        if self.eval_depth < 0 or (self.eval_depth and not tied and self.eval_depth > model.n_layers):
            bad("eval_depth", f"must be between 1 and {model.n_layers} for an untied model (0: n_layers)")
        if self.guide < 0:
            bad("guide", "must be non-negative (0: off)")
        if self.guide and self.guide_steps < 1:
            bad("guide_steps", "association guidance (train.guide) needs a positive number of steps")
        if self.guide and (model.attention != "standard" or model.n_heads < 2):
            bad("guide", "guides head 0 of ordinary softmax attention: needs model.attention=standard and 2+ heads")
        if self.deep < 0:
            bad("deep", "must be non-negative (0: off)")
        if self.aux_operand < 0:
            bad("aux_operand", "must be non-negative (0: off)")
        if self.aux_operand and self.train_size:
            bad("train_size", "operand supervision (aux_operand) draws fresh sentences: set train_size to 0")
        for name, weight in (self.objectives or {}).items():
            if name not in OBJECTIVES or OBJECTIVES[name].weight is not None:
                free = [k for k, o in OBJECTIVES.items() if o.weight is None]
                own = f"; {name} has its own field: train.{name}" if name in OBJECTIVES else ""
                bad("objectives", f"{name!r} is not an objective set here (registered without a field of their own: "
                                  f"{', '.join(free) or 'none'}){own}")
            if weight < 0:
                bad("objectives", f"{name}: weights must be non-negative")
        if self.scaffold < 0:
            bad("scaffold", "must be non-negative (0: off)")
        if self.scaffold and self.scaffold_steps < 1:
            bad("scaffold_steps", "the association scaffold (train.scaffold) needs a positive number of steps")
        if self.scaffold and model.attention != "standard":
            bad("scaffold", "biases head 0 of ordinary softmax attention: needs model.attention=standard")
        if self.log not in LOGS:
            bad("log", f"must be one of {', '.join(LOGS)}")
        if self.dtype not in DTYPES:
            bad("dtype", f"must be one of {', '.join(DTYPES)}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            bad("device", "must be auto, cpu, cuda or cuda:K")

    def chain_length(self, step: int, n: int, seed: int = 0) -> int:
        """The sentence length of the batch at ``step``: the curriculum's stage, a draw from
        [n_min, n], or task.n. A function of (config, seed, step) alone."""
        s = step
        for k, length in zip(self.curriculum_n or [], self.curriculum_steps or []):
            if s < length:
                return k
            s -= length
        if self.n_min:
            import numpy as np

            return int(np.random.default_rng([seed, step, 0x1E]).integers(self.n_min, n + 1))
        return n

    def scaffold_bias(self, step: int) -> float:
        return ramp(self.scaffold, self.scaffold_steps, step)

    def steps_per_epoch(self) -> int:
        """Steps of one pass over the fixed training set; fresh data: eval_every."""
        return self.train_size // self.batch_size if self.train_size else self.eval_every

    def total_steps(self) -> int:
        return self.steps or self.epochs * self.steps_per_epoch()

    def supervised_indices(self, n: int) -> list[int]:
        if self.supervise is not None:
            return sorted(set(self.supervise))
        return list(range(self.n_tr or n))


def validate_name_and_seed(name: str, seed: int) -> None:
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        raise ConfigError(f"name: must be a plain directory name, got {name!r}")
    if not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed: must be an integer in 0..2**32-1, got {seed!r}")


@dataclass
class RunConfig:
    name: str = "run"
    seed: int = 0
    task: dict = field(default_factory=lambda: {"name": "lego", "group": "sign", "n": 12})
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @property
    def task_name(self) -> str:
        return self.task.get("name", "lego")

    def task_config(self):
        values = dict(self.task)
        return task_config(values.pop("name", "lego"), **values)

    def make_task(self):
        """The run's task, seeded with the run's seed."""
        return make_task(self.task_name, self.task_config(), seed=self.seed)

    def validate(self) -> None:
        validate_name_and_seed(self.name, self.seed)
        task = self.make_task()
        defaults = task.default_sizes()
        for key in ("train_size", "test_size", "n_tr"):
            if getattr(self.train, key) is None:
                setattr(self.train, key, defaults[key])
        if self.train.valid_size is None:
            self.train.valid_size = min(self.train.test_size, 1000)
        self.model.validate()
        self.train.validate(task, self.model)
        if task.seq_len > self.model.max_len:
            raise ConfigError(f"model.max_len: {self.model.max_len} is shorter than the task's examples "
                              f"({task.seq_len} tokens)")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["task"] = {"name": self.task.get("name", "lego"), **asdict(self.task_config())}
        return d

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---- building from plain values ---------------------------------------------------------------
def _coerce(value, tp, key: str):
    """Coerce a YAML or command-line value to a dataclass field's type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none")):
            return None
        return _coerce(value, args[0], key)
    if origin is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping such as {{name: 0.5}}, got {value!r}")
        kt, vt = typing.get_args(tp)
        return {_coerce(k, kt, key): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, typing.get_args(tp)[0], key) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(f)
    if tp is float:
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if not math.isfinite(f):
            raise ConfigError(f"{key}: must be a finite number, got {value!r}")
        return f
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _build(cls, values: dict, prefix: str):
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {values!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    kwargs = {}
    retired = getattr(cls, "retired", {})
    for key, value in values.items():
        if key in retired:
            if _coerce(value, type(retired[key]), prefix + key) != retired[key]:
                raise ConfigError(f"{prefix}{key}: removed (it had no effect: docs/cpu_recipe.md); "
                                  f"only its old default {retired[key]!r} is accepted, got {value!r}")
            continue
        if key not in known:
            raise ConfigError(f"{prefix}{key}: unknown key (known: {', '.join(sorted(known))})")
        kwargs[key] = _coerce(value, hints[key], prefix + key)
    return cls(**kwargs)


def _task_values(values) -> dict:
    if not isinstance(values, dict):
        raise ConfigError(f"task: expected a mapping, got {values!r}")
    values = dict(values)
    name = values.get("name", "lego")
    if name not in TASKS:
        raise ConfigError(f"task.name: unknown task {name!r} (known: {', '.join(TASKS)})")
    cls = TASKS[name].config_class
    built = _build(cls, {k: v for k, v in values.items() if k != "name"}, "task.")
    return {"name": name, **asdict(built)}


def config_from_dict(data: dict) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError("config: expected a mapping with sections task, model, train")
    known = {f.name for f in fields(RunConfig)}
    for key in data:
        if key not in known:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(sorted(known))})")
    cfg = RunConfig(
        name=_coerce(data.get("name", "run"), str, "name"),
        seed=_coerce(data.get("seed", 0), int, "seed"),
        task=_task_values(data.get("task", {})),
        model=_build(ModelConfig, data.get("model") or {}, "model."),
        train=_build(TrainConfig, data.get("train") or {}, "train."),
    )
    cfg.validate()
    return cfg


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """``section.key=value`` (or ``name=...``, ``seed=...``) on top of a config mapping."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, such as train.lr=3e-3")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) == 1:
            data[parts[0]] = value
        elif len(parts) == 2:
            section = data.setdefault(parts[0], {})
            if not isinstance(section, dict):
                raise ConfigError(f"override {item!r}: {parts[0]} is not a section")
            section[parts[1]] = yaml.safe_load(value) if parts[0] == "task" else value
        else:
            raise ConfigError(f"override {item!r}: keys have at most one dot (section.key)")
    return data


SHIPPED = Path(__file__).resolve().parent.parent / "configs"


def shipped_configs() -> dict[str, Path]:
    """The configs inside the package, by name: ``cpu/bert`` -> .../legolab/configs/cpu/bert.yaml."""
    return {str(p.relative_to(SHIPPED).with_suffix("")): p for p in sorted(SHIPPED.glob("*/*.yaml"))}


def config_path(name: str | Path) -> Path:
    """A config file: a path that exists, else a name (``cpu/bert``, or ``configs/cpu/bert.yaml``
    run from anywhere) looked up in ./configs/ (a project's own configs come first), then among
    the configs shipped in the package."""
    path = Path(name)
    if path.is_file():
        return path
    key = str(name).removesuffix(".yaml").removeprefix("configs/")
    local = Path("configs") / f"{key}.yaml"
    if local.is_file():
        return local
    shipped = shipped_configs()
    if key in shipped:
        return shipped[key]
    raise ConfigError(f"config {str(name)!r}: no such file and no shipped config of that name "
                      f"(shipped: {', '.join(shipped)}; `legolab configs` lists them)")


def read_config_file(name: str | Path) -> dict:
    """The mapping in a config file (path or shipped name), its name defaulting to the file's."""
    path = config_path(name)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(path)!r}: not valid YAML ({str(e).splitlines()[0]})") from None
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"config file {str(path)!r}: cannot be read as text ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r}: expected a mapping with sections task, model, train, "
                          f"got a YAML {type(data).__name__}")
    data.setdefault("name", path.stem)
    return data


def load_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    data = read_config_file(path) if path is not None else {}
    cfg = config_from_dict(apply_overrides(data, list(overrides)))
    if cfg.train.steps and any(o.split("=", 1)[0].strip() == "train.epochs" for o in overrides):
        raise ConfigError(f"train.epochs: has no effect while train.steps={cfg.train.steps} is set; "
                          "add train.steps=0 to train by epochs")
    return cfg


def diff_configs(a: RunConfig, b: RunConfig, ignore: tuple[str, ...] = ()) -> list[str]:
    """Dotted keys whose values differ, as 'key: a -> b'."""
    out = []
    da, db = a.to_dict(), b.to_dict()
    for section in da:
        va, vb = da[section], db.get(section)
        if isinstance(va, dict):
            for k in sorted(set(va) | set(vb or {})):
                key = f"{section}.{k}"
                if key not in ignore and va.get(k) != (vb or {}).get(k):
                    out.append(f"{key}: {va.get(k)!r} -> {(vb or {}).get(k)!r}")
        elif section not in ignore and va != vb:
            out.append(f"{section}: {va!r} -> {vb!r}")
    return out


