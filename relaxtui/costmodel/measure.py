"""Measuring decode costs on this machine: per-token step time, c_rel, and the verify-cost curve v(k).

docs/metrics.md: c_rel = drafter per-token decode time / verifier per-token decode time; v(k) = time of one
verifier batch of k tokens / time of one single-token step. On a CPU v(k) grows with k, so we measure.
Each measurement decodes after a short warm context and rolls the cache back, leaving the model as found.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

from relaxtui.costmodel.timing import measure, rewinder, step_timings
from relaxtui.decoding.drafting import Drafter
from relaxtui.engine.api import Model


def _median_time(model: Model, tokens: Sequence[int], repeats: int) -> float:
    """Median seconds of decoding ``tokens`` (rolled back each time), through the self-checking timer."""
    back = rewinder(model)

    def once() -> None:
        model.decode_rows([0], [list(tokens)])
        back()

    return measure(once, repeats=repeats, warmup=1).median


def step_time(model: Model, *, context: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8), repeats: int = 8,
              warmup: int = 2) -> float:
    """Median seconds of one single-token decode (all logits returned, as the loop does), warmed up, outliers
    dropped (`timing.step_timings`)."""
    return step_timings([model], repeats=repeats, warmup=warmup, context=context)[0].median


def verify_curve(model: Model, k_max: int, *, context: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8),
                 repeats: int = 6) -> list[float]:
    """v(k) for k = 1..k_max: batch time over single-step time (v(1) = 1 by definition)."""
    model.clear(0)
    model.decode(0, list(context))
    back = rewinder(model)
    model.decode_rows([0], [[context[-1]] * k_max])  # warm-up: the largest block's buffers
    back()
    single = _median_time(model, [context[-1]], repeats)
    curve = [_median_time(model, [context[-1]] * k, repeats) / single for k in range(1, k_max + 1)]
    model.clear(0)
    curve[0] = 1.0
    return curve


def drafter_step_time(drafter: Drafter, *, context: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8), repeats: int = 8,
                      warmup: int = 2) -> float:
    """Median seconds of one raw drafter step (``Drafter.step``, sequence 0) after a short warm context."""
    context = list(context)
    drafter.release(0)
    drafter.begin(0, [*context, context[-1]])  # its cache holds the context
    seconds = measure(lambda: drafter.step(0, context), repeats=repeats, warmup=warmup).median
    drafter.release(0)
    return seconds


def measure_c_rel(verifier: Model, drafter: Drafter, *, repeats: int = 8) -> float:
    return drafter_step_time(drafter, repeats=repeats) / step_time(verifier, repeats=repeats)


def hardware_description() -> str:
    """CPU model and core count, for a saved profile's `hardware` field (printable: see ``printable``)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return printable(f"{model}, {os.cpu_count()} cores (llama.cpp CPU)")


def printable(text: str, limit: int = 200) -> str:
    """Machine-reported text (host name, /proc/cpuinfo, file names) as a saved profile may hold it: printable
    characters only, cut at ``limit`` — so `--profile` reads back what `--save-profile` wrote."""
    return "".join(ch for ch in text if ch.isprintable())[:limit]
