"""Paired statistics for comparing configs on the same (problem, seed) pairs (docs/metrics.md "Paired evidence").

Two configs that ran the same problems with the same seeds are compared pair by pair, which removes the
problem-to-problem spread that makes unpaired intervals on a few dozen problems useless. Differences are
averaged per problem first (its seeds are not independent of each other). A difference of 0/1 scores
(accuracy) gets Newcombe's score interval for paired proportions, which stays inside [−1, 1] however few the
problems; a continuous signal gets a Student t interval over problems. Speed ratios are compared on the log
scale: their mean is a geometric mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

# two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30; beyond, a Cornish-Fisher expansion
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
Z975 = 1.959963984540054
MIN_INTERVAL_PROBLEMS = 5  # fewer problems than this: an interval is shown as n/a, not as a number


def t_quantile_975(df: int) -> float:
    """t_{0.975} with ``df`` degrees of freedom (table to 30, then an expansion accurate to ~1e-4)."""
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z975
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass(frozen=True)
class MeanInterval:
    mean: float
    low: float
    high: float
    n: int  # independent units (problems) behind the interval
    sd: float  # standard deviation of the unit values

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_interval(values: Sequence[float]) -> MeanInterval:
    """Mean with a 95% t interval; with fewer than two values the interval is unbounded (NaN bounds)."""
    n = len(values)
    if n == 0:
        return MeanInterval(math.nan, math.nan, math.nan, 0, math.nan)
    mean = sum(values) / n
    if n < 2:
        return MeanInterval(mean, math.nan, math.nan, 1, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return MeanInterval(mean, mean - half, mean + half, n, sd)


PairKey = tuple[str, int]  # (problem id, seed)


@dataclass(frozen=True)
class Cells:
    """A paired 2×2 table over problems: a = both right, b = config right and reference wrong, c = the reverse,
    d = both wrong. Each problem weighs 1, split over its shared seeds, so the cells may be fractional."""

    a: float
    b: float
    c: float
    d: float

    @property
    def n(self) -> float:
        return self.a + self.b + self.c + self.d

    def scaled(self, n: float) -> Cells:
        """The same proportions over ``n`` problems (what more problems would show if the estimate holds)."""
        k = n / self.n
        return Cells(self.a * k, self.b * k, self.c * k, self.d * k)


@dataclass(frozen=True)
class PairedDifference:
    """config − reference over the (problem, seed) pairs both have."""

    interval: MeanInterval  # of per-problem mean differences
    pairs: int
    wins: int  # pairs where the config is right and the reference wrong
    losses: int
    cells: Cells | None = None  # 0/1 scores: the paired table its (Newcombe) interval came from


def paired_difference(config: dict[PairKey, float], reference: dict[PairKey, float]) -> PairedDifference:
    """Paired difference of a per-pair score (e.g. correctness 0/1): per-problem means, then a t interval."""
    shared = sorted(set(config) & set(reference))
    by_problem: dict[str, list[float]] = defaultdict(list)
    wins = losses = 0
    for key in shared:
        difference = config[key] - reference[key]
        by_problem[key[0]].append(difference)
        wins += difference > 0
        losses += difference < 0
    per_problem = [sum(v) / len(v) for v in by_problem.values()]
    return PairedDifference(mean_interval(per_problem), len(shared), wins, losses)


def wilson_interval(successes: float, n: float, z: float = Z975) -> tuple[float, float]:
    """Wilson's score interval for a proportion: inside [0, 1] by construction, sensible at 0 and n."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(max(p * (1 - p) / n + z * z / (4 * n * n), 0.0))
    scale = 1 + z * z / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def newcombe_interval(cells: Cells, z: float = Z975) -> tuple[float, float, float]:
    """(estimate, low, high) of p_config − p_reference from a paired table: Newcombe (1998), method 10 — each
    margin's Wilson interval, combined with the pairs' correlation φ (continuity-corrected as the paper does).
    Unlike a t interval on ±1 differences, it stays inside [−1, 1] and is not zero-width when every pair ties."""
    n = cells.n
    if n <= 0:
        return math.nan, math.nan, math.nan
    right_config, right_reference = cells.a + cells.b, cells.a + cells.c
    p1, p2 = right_config / n, right_reference / n
    l1, u1 = wilson_interval(right_config, n, z)
    l2, u2 = wilson_interval(right_reference, n, z)
    margins = right_config * (cells.c + cells.d) * right_reference * (cells.b + cells.d)
    phi = 0.0
    if margins > 0:
        cross = cells.a * cells.d - cells.b * cells.c
        phi = (cross - n / 2 if cross > n / 2 else min(cross, 0.0)) / math.sqrt(margins)
    below = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    above = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    estimate = p1 - p2
    return estimate, max(-1.0, estimate - below), min(1.0, estimate + above)


def paired_proportion_difference(config: dict[PairKey, float],
                                 reference: dict[PairKey, float]) -> PairedDifference:
    """Paired difference of 0/1 scores with Newcombe's interval over problems: each problem's shared seeds
    split its weight of 1 over the four cells (one seed: exactly Newcombe's table of pairs). The estimate is
    the mean of per-problem mean differences, as ``paired_difference``'s."""
    t_based = paired_difference(config, reference)
    by_problem: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key in sorted(set(config) & set(reference)):
        by_problem[key[0]].append((config[key], reference[key]))
    table = [0.0, 0.0, 0.0, 0.0]
    for scores in by_problem.values():
        for mine, theirs in scores:
            cell = 0 if mine > 0 and theirs > 0 else 1 if mine > 0 else 2 if theirs > 0 else 3
            table[cell] += 1 / len(scores)
    cells = Cells(*table)
    interval = t_based.interval
    if cells.n > 0:
        _, low, high = newcombe_interval(cells)
        interval = MeanInterval(interval.mean, low, high, interval.n, interval.sd)
    return replace(t_based, interval=interval, cells=cells)


def geometric_mean_ratio(config: dict[PairKey, float], reference: dict[PairKey, float]) -> MeanInterval:
    """Geometric mean of per-pair ratios config/reference with its 95% interval (t interval on log ratios,
    per-problem means first); pairs where either value is not positive are left out."""
    shared = [key for key in sorted(set(config) & set(reference)) if config[key] > 0 and reference[key] > 0]
    by_problem: dict[str, list[float]] = defaultdict(list)
    for key in shared:
        by_problem[key[0]].append(math.log(config[key] / reference[key]))
    logs = mean_interval([sum(v) / len(v) for v in by_problem.values()])
    mean, low, high = (math.exp(x) if not math.isnan(x) else math.nan for x in (logs.mean, logs.low, logs.high))
    return MeanInterval(mean, low, high, logs.n, logs.sd)


def says_nothing(difference: PairedDifference | MeanInterval) -> bool:
    """Whether an interval is shown as n/a (in the table, the JSON and tune's advice alike): too few problems,
    no bounds, or — for a t interval — no spread at all. A Newcombe interval has width even when every pair ties."""
    interval = difference.interval if isinstance(difference, PairedDifference) else difference
    if interval.n < MIN_INTERVAL_PROBLEMS or math.isnan(interval.low) or math.isnan(interval.high):
        return True
    return not (isinstance(difference, PairedDifference) and difference.cells is not None) and not interval.sd > 0


def problems_to_resolve(difference: PairedDifference, max_drop: float, *, floor: float | None = None) -> int | None:
    """How many problems in all would make the paired interval's lower bound clear −max_drop, if the estimate
    (for 0/1 scores: the paired table's proportions, with Newcombe's interval) or the mean and spread (a t
    interval) stay as observed; never fewer than an interval needs to be shown. None when the estimate itself
    is at or below −max_drop (more data would not help). A t interval's spread is floored — at ``floor``, else
    as if one pair disagreed — so that a handful of ties never reads as proof."""
    interval = difference.interval
    if interval.n == 0 or math.isnan(interval.mean) or interval.mean < -max_drop:
        return None
    n = max(interval.n, 1)
    cells = difference.cells
    if cells is not None and cells.n > 0:
        def resolved(count: int) -> bool:
            return newcombe_interval(cells.scaled(count))[1] >= -max_drop
    else:
        sd = interval.sd if not math.isnan(interval.sd) else 1.0
        sd = max(sd, math.sqrt(1.0 / n) if floor is None else floor)
        room = interval.mean + max_drop  # how far the lower bound may fall below the mean

        def resolved(count: int) -> bool:
            return count >= 2 and t_quantile_975(count - 1) * sd / math.sqrt(count) <= room

    low = max(n, MIN_INTERVAL_PROBLEMS)
    if resolved(low):
        return low
    high = 2 * low
    while not resolved(high):  # the interval narrows as problems grow: double, then bisect
        low, high = high, high * 2
        if high > 10_000_000:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if resolved(middle) else (middle, high)
    return high


def pairs_of(records: Iterable[dict[str, Any]], field: str) -> dict[PairKey, float]:
    """{(problem, seed): value of ``field``} for one config's records (booleans count as 0/1)."""
    return {(str(r["problem_id"]), int(r["seed"])): float(r[field]) for r in records}
