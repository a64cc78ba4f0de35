"""Analyses: each looks inside a trained (or pretrained) model on its task and returns what it
found as plain data, which it can also write as files.

Every module of this package is imported here; an analysis module registers a class with
``@register_analysis``, and ``legolab analyze NAME SOURCE`` runs it on a run directory or a
pretrained checkpoint with the options it declares: adding an analysis is one new file.

    @register_analysis
    class Norms(Analysis):
        name, help = "norms", "residual-stream norm per layer"
        options = {"count": Option(int, 100, "sentences", positive=True)}

        def run(self, model, task, source: Source, count: int) -> dict: ...
        def write(self, report, out_dir, title) -> list[Path]: ...
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import ANALYSES, Analysis, Option, Source, register_analysis

__all__ = ["ANALYSES", "Analysis", "Option", "Source", "register_analysis"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
