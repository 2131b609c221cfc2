"""Timings that check themselves: warm-up, repeats with their spread, outliers dropped, implausible results flagged.

A single timed decode on a shared or cold machine can be off by 100x: the first pass over a model pays the page
cache, and a neighbour on a 2-core VM stalls llama.cpp's spinning threads. A median of four such samples once
made `models pair` print a 2929 ms verifier step, a c_rel of 0.01, and recommend a drafter that a rerun ranked
last. Every timed step in relaxtui goes through `measure_many` (or `measure`):

1. **Warm-up** — each action runs ``warmup`` times (default 1) before any sample is taken: for a model, one
   decode of the same shape, so its weights are paged in and its buffers allocated.
2. **Repeats** — at least ``MIN_REPEATS``, timed round-robin across the actions, so drift hits all alike.
3. **Outliers** — a sample further from the median than ``K_OUTLIER`` robust standard deviations
   (``MAD_TO_SIGMA`` x the median absolute deviation) is dropped; samples within ``OUTLIER_FLOOR`` of the median
   are always kept (timer jitter; a MAD of 0).
4. **Spread** — ``(max - min) / median`` of the kept samples. Over ``MAX_SPREAD`` (50%), or when the caller's
   plausibility ``check`` names a problem (a c_rel outside ``C_REL_MIN..C_REL_MAX``, a step more than
   ``STEP_JUMP`` x its warm median), the whole set is measured again, at most ``RETRIES`` times; the tightest
   attempt is kept and, if it is still implausible, flagged ``stable=False`` with the reason — and callers never
   recommend a flagged result.

The clock is injectable, so tests drive all of this with a fake one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from relaxtui.engine.api import Model

K_OUTLIER = 3.5  # robust standard deviations from the median beyond which a sample is an outlier
MAD_TO_SIGMA = 1.4826  # MAD x this estimates the standard deviation of normal noise
OUTLIER_FLOOR = 0.05  # samples within 5% of the median are never outliers (timer jitter, a MAD of 0)
MAX_SPREAD = 0.5  # kept samples spanning more than 50% of their median: not one machine state
RETRIES = 2  # re-measurements of an implausible set before it is flagged
MIN_REPEATS = 3  # with two samples a cold one cannot be told from a warm one
C_REL_MIN, C_REL_MAX = 0.02, 5.0  # a drafter step under 2% or over 5x the verifier's: a disturbed timing
SIZE_RATIO_MARGIN = 10.0  # c_rel may sit this far below the file-size ratio (a tiny drafter for a huge verifier)
STEP_JUMP = 10.0  # a step more than 10x the same model's warm median: the machine was busy or cold
UNSTABLE_ADVICE = "re-run on an idle machine"

Clock = Callable[[], float]
T = TypeVar("T")
Check = Callable[[Sequence["Timing"]], "str | None"]


@dataclass(frozen=True)
class Timing:
    """One timed action: the median of the kept samples (seconds), their range, and whether to trust it."""

    median: float
    low: float  # fastest kept sample
    high: float  # slowest kept sample
    mad: float  # median absolute deviation of all samples of the attempt
    kept: tuple[float, ...]
    dropped: tuple[float, ...] = ()  # outliers, left out of median and spread
    attempts: int = 1  # 1 + re-measurements
    stable: bool = True
    reason: str | None = None  # why it is not stable

    @property
    def spread(self) -> float:
        """Relative range of the kept samples, ``(max - min) / median`` (0 for one sample)."""
        if self.median > 0:
            return (self.high - self.low) / self.median
        return 0.0 if self.high == self.low else float("inf")

    def describe(self, scale: float = 1e3, unit: str = "ms") -> str:
        """``63.2 ms ±4% (8 kept, 1 dropped)``: the median and half the relative range."""
        dropped = f", {len(self.dropped)} dropped" if self.dropped else ""
        return f"{self.median * scale:.1f} {unit} ±{self.spread / 2:.0%} ({len(self.kept)} kept{dropped})"

    def as_dict(self) -> dict[str, object]:
        return {"median_s": self.median, "min_s": self.low, "max_s": self.high, "spread": self.spread,
                "kept": len(self.kept), "dropped": len(self.dropped), "attempts": self.attempts,
                "stable": self.stable, "reason": self.reason}


def outliers(samples: Sequence[float], *, k: float = K_OUTLIER, floor: float = OUTLIER_FLOOR) -> list[bool]:
    """Which samples lie beyond ``max(k · MAD_TO_SIGMA · MAD, floor · median)`` of the median. Fewer than three
    samples: none (two samples are each one MAD from their median, so none ever would be)."""
    if len(samples) < 3:
        return [False] * len(samples)
    middle = statistics.median(samples)
    mad = statistics.median(abs(x - middle) for x in samples)
    limit = max(k * MAD_TO_SIGMA * mad, floor * abs(middle))
    return [abs(x - middle) > limit for x in samples]


def summarize(samples: Sequence[float], *, k: float = K_OUTLIER, floor: float = OUTLIER_FLOOR,
              max_spread: float = MAX_SPREAD) -> Timing:
    """Outliers dropped, median and range of the rest; unstable when that range is over ``max_spread``."""
    if not samples:
        raise ValueError("summarize needs at least one sample")
    mask = outliers(samples, k=k, floor=floor)
    kept = tuple(x for x, out in zip(samples, mask, strict=True) if not out)
    dropped = tuple(x for x, out in zip(samples, mask, strict=True) if out)
    middle = statistics.median(samples)
    timing = Timing(statistics.median(kept), min(kept), max(kept),
                    statistics.median(abs(x - middle) for x in samples), kept, dropped)
    if timing.spread > max_spread:
        return replace(timing, stable=False, reason=f"its samples span {timing.spread:.0%} of their median "
                                                    f"(at most {max_spread:.0%} is steady)")
    return timing


def measure_many(actions: Sequence[Callable[[], object]], *, repeats: int, warmup: int = 1, retries: int = RETRIES,
                 clock: Clock = time.perf_counter, check: Check | None = None,
                 max_spread: float = MAX_SPREAD) -> list[Timing]:
    """Time each action ``repeats`` times round-robin (a, b, c, a, b, c, …) after ``warmup`` untimed calls of
    each; re-measure the whole set while any timing is too wide or ``check`` names a problem (at most
    ``retries`` times), and return the tightest attempt — flagged unstable, with the reason, if it never passed."""
    return run_slices(timing_slices(actions, repeats=repeats, warmup=warmup, retries=retries, clock=clock,
                                    check=check, max_spread=max_spread))


Slices = Generator[None, bool, T]
"""A measurement a slice at a time (``Background``): it yields before each timed action and is sent whether the
models were used by someone else since its last slice (then it sets itself up again, untimed, before going on)."""


def run_slices(slices: Slices[T]) -> T:
    """Every slice now, one after the other (nothing else uses the models meanwhile): the measurement's result."""
    try:
        next(slices)
        while True:
            slices.send(False)
    except StopIteration as end:
        return end.value


def timing_slices(actions: Sequence[Callable[[], object]], *, repeats: int, warmup: int = 1, retries: int = RETRIES,
                  clock: Clock = time.perf_counter, check: Check | None = None, max_spread: float = MAX_SPREAD,
                  resume: Callable[[], None] = lambda: None) -> Slices[list[Timing]]:
    """``measure_many`` a slice at a time: it yields before each action (never inside a timed one) and calls ``resume``
    before going on when it is sent True (the models were used meanwhile: their state is set up again)."""
    def pause() -> Generator[None, bool, None]:
        if (yield):
            resume()

    for _ in range(warmup):
        for action in actions:
            yield from pause()
            action()
    best: list[Timing] | None = None
    best_reason: str | None = None
    attempt = 0
    for attempt in range(1, retries + 2):
        samples: list[list[float]] = [[] for _ in actions]
        for _ in range(max(repeats, MIN_REPEATS)):
            for index, action in enumerate(actions):
                yield from pause()
                started = clock()
                action()
                samples[index].append(clock() - started)
        timings = [summarize(s, max_spread=max_spread) for s in samples]
        reason = next((t.reason for t in timings if not t.stable), None)
        if reason is None and check is not None:
            reason = check(timings)
        if reason is None:
            return [replace(t, attempts=attempt) for t in timings]
        if best is None or _width(timings) < _width(best):
            best, best_reason = timings, reason
    assert best is not None
    if all(t.stable for t in best):  # the set failed the caller's check: every member is suspect
        best = [replace(t, stable=False, reason=best_reason) for t in best]
    return [replace(t, attempts=attempt) for t in best]


def _width(timings: Sequence[Timing]) -> float:
    return max(t.spread for t in timings)


def measure(fn: Callable[[], object], *, repeats: int, warmup: int = 1, retries: int = RETRIES,
            clock: Clock = time.perf_counter, check: Callable[[Timing], str | None] | None = None,
            max_spread: float = MAX_SPREAD) -> Timing:
    """One action through `measure_many`: warm-up, repeats, outliers dropped, re-measured while implausible."""
    joint = (lambda timings: check(timings[0])) if check is not None else None
    return measure_many([fn], repeats=repeats, warmup=warmup, retries=retries, clock=clock, check=joint,
                        max_spread=max_spread)[0]


# -- plausibility rules the callers share ------------------------------------------------------------------------
def c_rel_problem(c_rel: float, size_ratio: float | None = None) -> str | None:
    """Why a drafter/verifier step ratio cannot be one machine's steady state, or None. The lower bound drops
    to a tenth of the two files' size ratio, so a tiny drafter for a huge verifier is not flagged."""
    low = C_REL_MIN if size_ratio is None else min(C_REL_MIN, size_ratio / SIZE_RATIO_MARGIN)
    high = C_REL_MAX if size_ratio is None else max(C_REL_MAX, size_ratio * SIZE_RATIO_MARGIN)
    if low <= c_rel <= high:
        return None
    return f"c_rel {c_rel:.3f} is outside the plausible {low:.3g}..{high:.3g}"


def jump_problem(step: float, warm: float | None, what: str = "verifier step") -> str | None:
    """Why ``step`` (seconds) cannot be the same model as its warm median ``warm``, or None."""
    if warm is None or warm <= 0 or step <= STEP_JUMP * warm:
        return None
    return f"{what} {step * 1e3:.1f} ms is more than {STEP_JUMP:g}x its warm median {warm * 1e3:.1f} ms"


def size_ratio(drafter: object, verifier: object) -> float | None:
    """Drafter file size over verifier file size, for models that have a ``path``; None when unknown."""
    try:
        sizes = [getattr(model, "path").stat().st_size for model in (drafter, verifier)]  # noqa: B009
    except (AttributeError, OSError, TypeError):
        return None
    return sizes[0] / sizes[1] if sizes[1] else None


# -- model steps ----------------------------------------------------------------------------------------------
STEP_CONTEXT = (1, 2, 3, 4, 5, 6, 7, 8)


def rewinder(model: Model, seq: int = 0) -> Callable[[], None]:
    """Puts sequence ``seq`` of ``model`` back where it is now: a rollback on a KV cache; on recurrent memory (which
    cannot roll back past its last decode's snapshots) a checkpoint restored, whose state copy the timing then
    includes."""
    if model.rollback_limit is None:
        start = len(model.tokens_of(seq))
        return lambda: model.rollback(seq, start)
    saved = model.checkpoint(seq)
    return lambda: model.restore(saved)


def step_timings(models: Sequence[Model], *, repeats: int, warmup: int = 1, retries: int = RETRIES,
                 context: Sequence[int] = STEP_CONTEXT, clock: Clock = time.perf_counter,
                 check: Check | None = None) -> list[Timing]:
    """One single-token decode of each model (all logits, as the loop asks for), timed interleaved after a
    prefill of ``context`` and ``warmup`` untimed steps. Leaves every cache empty."""
    context = list(context)

    def step(model: Model) -> Callable[[], None]:
        back = rewinder(model)

        def once() -> None:
            model.decode_rows([0], [[context[-1]]])
            back()
        return once

    for model in models:
        model.clear(0)
        model.decode(0, context)  # the first pass over the weights pays the page cache
    try:
        return measure_many([step(model) for model in models], repeats=repeats, warmup=warmup, retries=retries,
                            clock=clock, check=check)
    finally:
        for model in models:
            model.clear(0)


# -- whole runs (bench) ---------------------------------------------------------------------------------------
RUN_FLOOR = 0.5  # a run within 50% of the typical wall-over-priced ratio is never an outlier (the model's own
# error differs by N by up to ~25% on a CPU; a cold or shared machine is off by 2-10x)
WALL_VS_PREDICTED = 2.0  # wall-clock and predicted speed-up further apart than this: one of them was disturbed


class _Timed(Protocol):
    @property
    def decode_s(self) -> float: ...


R = TypeVar("R", bound=_Timed)


@dataclass(frozen=True)
class RunCheck:
    """What `check_runs` found: runs left out, per config why it is unstable, its spread and re-runs."""

    excluded: frozenset[tuple[int, int]]  # (config, index) of runs still off the others after re-running
    reasons: dict[int, str]
    spreads: dict[int, float]
    reruns: dict[int, int]

    def kept(self, config: int, runs: Sequence[R]) -> list[R]:
        """The runs of ``config`` that count; all of them when none is left (the config is then flagged)."""
        kept = [run for index, run in enumerate(runs) if (config, index) not in self.excluded]
        return kept or list(runs)


def _assess(collected: Mapping[int, Sequence[R]], priced: Callable[[Sequence[R]], float]
            ) -> tuple[set[tuple[int, int]], set[int], dict[int, str], dict[int, float]]:
    """(outlier runs, configs too wide, reasons, spreads) of each run's wall time over its own priced time."""
    ratios: dict[tuple[int, int], float] = {}
    for config, runs in collected.items():
        for index, run in enumerate(runs):
            seconds = priced([run])
            if seconds > 0 and run.decode_s > 0:
                ratios[(config, index)] = run.decode_s / seconds
    keys = list(ratios)
    outlying = {key for key, out in zip(keys, outliers([ratios[k] for k in keys], floor=RUN_FLOOR), strict=True)
                if out}
    typical = statistics.median(ratios.values()) if ratios else 1.0
    wide: set[int] = set()
    reasons: dict[int, str] = {}
    spreads: dict[int, float] = {}
    for config in collected:
        mine = [key for key in keys if key[0] == config]
        kept = [ratios[key] for key in mine if key not in outlying]
        if kept:
            timing = summarize(kept)
            spreads[config] = timing.spread
            if not timing.stable:
                wide.add(config)
                reasons[config] = (f"its runs' wall time over their priced time spans {timing.spread:.0%} across "
                                   f"runs (at most {MAX_SPREAD:.0%} is steady)")
        off = [ratios[key] for key in mine if key in outlying]
        if off:
            worst = max(off, key=lambda r: max(r / typical, typical / r))
            reasons[config] = (f"{len(off)} of {len(mine)} runs took {worst / typical:.1f}x the time a typical run "
                               "takes for the rounds they ran")
    return outlying, wide, reasons, spreads


def check_runs(collected: dict[int, list[R]], priced: Callable[[Sequence[R]], float],
               rerun: Callable[[int, int], R], progress: Callable[[str], None] = lambda _: None, *,
               retries: int = RETRIES) -> RunCheck:
    """Self-check whole runs, config -> runs in the same (prompt, pass) order for every config: a run's wall time
    over its own rounds priced by the calibration should be about the same for every run of one machine state.
    Outlier runs (beyond ``K_OUTLIER`` MADs and ``RUN_FLOOR``) and every run of a config whose ratios spread over
    ``MAX_SPREAD`` are re-run in place (``rerun(config, index)``), at most ``retries`` times; outliers left are
    excluded and their config flagged."""
    reruns = dict.fromkeys(collected, 0)
    for attempt in range(retries):
        outlying, wide, _, _ = _assess(collected, priced)
        todo = sorted(outlying | {(config, i) for config in wide for i in range(len(collected[config]))})
        if not todo:
            break
        progress(f"re-running {len(todo)} run(s) whose time is off the others' (attempt {attempt + 1} of {retries})")
        for config, index in todo:
            collected[config][index] = rerun(config, index)
            reruns[config] += 1
    outlying, _, reasons, spreads = _assess(collected, priced)
    for config in reasons:
        if reruns[config]:
            reasons[config] += f", after {reruns[config]} re-run(s)"
    return RunCheck(frozenset(outlying), reasons, spreads, reruns)


def wall_vs_predicted_problem(wall: float, predicted: float) -> str | None:
    """Why a wall-clock and a predicted speed-up of the same rounds cannot both be right, or None."""
    if wall <= 0 or predicted <= 0 or max(wall / predicted, predicted / wall) <= WALL_VS_PREDICTED:
        return None
    return (f"wall-clock {wall:.2f}x and predicted {predicted:.2f}x are more than {WALL_VS_PREDICTED:g}x apart "
            "(the runs or the calibration were disturbed)")
