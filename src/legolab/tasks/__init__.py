"""Task registry: a task name maps to its task class (which names its config class).

Every module of this package is imported here, and each task module registers itself with
``@register_task``: adding a task is one new file (plus its configs and tests).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import fields

from ..errors import ConfigError
from .base import Batch, Task, Vocab, supports

TASKS: dict[str, type[Task]] = {}


def register_task(task_class: type[Task]) -> type[Task]:
    """Class decorator: make ``task_class`` known by its ``name`` (a later one replaces it)."""
    for attr in ("name", "config_class"):
        if not hasattr(task_class, attr):
            raise TypeError(f"task class {task_class.__name__} has no {attr}")
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
    if name not in TASKS:
        raise ConfigError(f"task.name: unknown task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[name](config, seed=seed)


for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in ("base",):
        importlib.import_module(f"{__name__}.{_module}")

from .lego import LegoConfig, LegoTask  # noqa: E402  (re-exported: the paper's task)

__all__ = ["TASKS", "Batch", "LegoConfig", "LegoTask", "Task", "Vocab", "make_task", "register_task", "supports",
           "task_config"]
