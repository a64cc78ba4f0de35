"""The analysis contract (see the package's docstring): options, inputs, the registry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class Option:
    """A command-line option of an analysis (``--name``)."""
    type: type
    default: object
    help: str
    positive: bool = False   # must be > 0 (else >= 0 for numbers)


@dataclass(frozen=True)
class Source:
    """What every analysis is given besides the model and task."""
    name: str                    # the run directory or checkpoint, as given
    depth: int                   # layers to apply
    supervised: tuple[int, ...]  # the indices the model was trained on (empty before fine-tuning)
    seed: int


class Analysis:
    name: ClassVar[str]
    help: ClassVar[str]
    options: ClassVar[dict[str, Option]] = {}

    def run(self, model, task, source: Source, **options) -> dict:
        """The findings as JSON-able data."""
        raise NotImplementedError

    def write(self, report: dict, out_dir: Path, title: str) -> list[Path]:
        """Files under ``out_dir`` (JSON and figures); returns their paths."""
        raise NotImplementedError

    def show(self, report: dict) -> None:
        """A summary for the terminal."""


ANALYSES: dict[str, type[Analysis]] = {}


def register_analysis(cls: type[Analysis]) -> type[Analysis]:
    for attr in ("name", "help"):
        if not hasattr(cls, attr):
            raise TypeError(f"analysis class {cls.__name__} has no {attr}")
    ANALYSES[cls.name] = cls
    return cls
