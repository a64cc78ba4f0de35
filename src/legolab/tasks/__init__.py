"""Task registry: a task name maps to its config class and its task class.

Later tasks (ListOps with per-node values, templates with unseen symbols) register here and
plug into the same data -> model -> evaluation pipeline through the interface in ``base``.
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import ConfigError
from .base import Batch, Task, Vocab
from .lego import LegoConfig, LegoTask

TASKS: dict[str, type] = {LegoTask.name: LegoTask}


def register_task(task_class: type) -> type:
    TASKS[task_class.name] = task_class
    return task_class


def task_config(name: str, **values):
    """Build and validate a task's config from plain values (unknown keys are an error)."""
    if name not in TASKS:
        raise ConfigError(f"task.name: unknown task {name!r} (known: {', '.join(TASKS)})")
    cls = TASKS[name].config_class
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"task.{key}: unknown key for task {name!r} (known: {', '.join(sorted(known))})")
    config = cls(**values)
    config.validate()
    return config


def make_task(name: str, config, seed: int = 0) -> Task:
    return TASKS[name](config, seed=seed)


__all__ = ["TASKS", "Batch", "LegoConfig", "LegoTask", "Task", "Vocab", "make_task", "register_task", "task_config"]
