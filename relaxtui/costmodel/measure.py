"""Measuring decode costs on this machine: per-token step time, c_rel, and the verify-cost curve v(k).

SPEC §3: c_rel = drafter per-token decode time / verifier per-token decode time; v(k) = time of one
verifier batch of k tokens / time of one single-token step. On a CPU v(k) grows with k, so we measure.
Each measurement decodes after a short warm context and rolls the cache back, leaving the model as found.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from relaxtui.decoding.backend import Backend


def _median_time(model: Backend, tokens: Sequence[int], repeats: int) -> float:
    start = model.n_past
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        model.decode(list(tokens), logits_rows=range(len(tokens)))
        times.append(time.perf_counter() - began)
        model.rollback(start)
    return statistics.median(times)


def step_time(model: Backend, *, context: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8), repeats: int = 8,
              warmup: int = 2) -> float:
    """Median seconds of one single-token decode (all logits returned, as the loop does)."""
    model.reset()
    model.decode(list(context))
    _median_time(model, [context[-1]], warmup)
    seconds = _median_time(model, [context[-1]], repeats)
    model.reset()
    return seconds


def verify_curve(model: Backend, k_max: int, *, context: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8),
                 repeats: int = 6) -> list[float]:
    """v(k) for k = 1..k_max: batch time over single-step time (v(1) = 1 by definition)."""
    model.reset()
    model.decode(list(context))
    _median_time(model, [context[-1]] * k_max, 2)
    single = _median_time(model, [context[-1]], repeats)
    curve = [_median_time(model, [context[-1]] * k, repeats) / single for k in range(1, k_max + 1)]
    model.reset()
    curve[0] = 1.0
    return curve


def measure_c_rel(verifier: Backend, drafter_model: Backend, *, repeats: int = 8) -> float:
    return step_time(drafter_model, repeats=repeats) / step_time(verifier, repeats=repeats)


def hardware_description() -> str:
    """CPU model and core count, for a saved profile's `hardware` field."""
    import os
    import platform
    from pathlib import Path

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores (llama.cpp CPU)"
