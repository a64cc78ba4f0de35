"""Shared by the benchmarks: wall time of a call, repeated."""

from __future__ import annotations

import statistics
import time


def best_of(fn, repeats: int) -> tuple[float, float]:
    """(best, median) wall time of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)
