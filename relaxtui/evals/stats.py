"""Paired statistics for comparing configs on the same (problem, seed) pairs (SPEC §3 "Paired evidence").

Two configs that ran the same problems with the same seeds are compared pair by pair, which removes the
problem-to-problem spread that makes unpaired intervals on a few dozen problems useless. Differences are
averaged per problem first (its seeds are not independent of each other), and the interval is a Student t
interval over problems. Speed ratios are compared on the log scale: their mean is a geometric mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30; beyond, a Cornish-Fisher expansion
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
Z975 = 1.959963984540054


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
class PairedDifference:
    """config − reference over the (problem, seed) pairs both have."""

    interval: MeanInterval  # of per-problem mean differences
    pairs: int
    wins: int  # pairs where the config is right and the reference wrong
    losses: int


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


def geometric_mean_ratio(config: dict[PairKey, float], reference: dict[PairKey, float]) -> MeanInterval:
    """Geometric mean of per-pair ratios config/reference with its 95% interval (t interval on log ratios,
    per-problem means first); pairs where either value is not positive are left out."""
    shared = [key for key in sorted(set(config) & set(reference)) if config[key] > 0 and reference[key] > 0]
    by_problem: dict[str, list[float]] = defaultdict(list)
    for key in shared:
        by_problem[key[0]].append(math.log(config[key] / reference[key]))
    logs = mean_interval([sum(v) / len(v) for v in by_problem.values()])
    return MeanInterval(*(math.exp(x) if not math.isnan(x) else math.nan for x in (logs.mean, logs.low, logs.high)),
                        logs.n, logs.sd)


def problems_to_resolve(difference: PairedDifference, max_drop: float, *, floor: float | None = None) -> int | None:
    """How many problems in all would make the paired interval's lower bound clear −max_drop, if the mean
    and spread stay as observed; None when the mean itself is below −max_drop (more data would not help).
    For 0/1 scores (``floor`` None) a spread of zero (every pair tied) is taken as if one pair disagreed, so a
    handful of ties never reads as proof; a continuous signal (a log-probability) passes its own ``floor``."""
    interval = difference.interval
    if interval.n == 0 or math.isnan(interval.mean) or interval.mean < -max_drop:
        return None
    n = max(interval.n, 1)
    sd = interval.sd if not math.isnan(interval.sd) else 1.0
    sd = max(sd, math.sqrt(1.0 / n) if floor is None else floor)
    room = interval.mean + max_drop  # how far the lower bound may fall below the mean

    def resolved(count: int) -> bool:
        return count >= 2 and t_quantile_975(count - 1) * sd / math.sqrt(count) <= room

    if resolved(n):
        return n
    low, high = n, max(2 * n, 2)
    while not resolved(high):  # the half-width shrinks as problems grow: double, then bisect
        low, high = high, high * 2
        if high > 10_000_000:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if resolved(middle) else (middle, high)
    return high


def pairs_of(records: Iterable[dict[str, object]], field: str) -> dict[PairKey, float]:
    """{(problem, seed): value of ``field``} for one config's records (booleans count as 0/1)."""
    return {(str(r["problem_id"]), int(r["seed"])): float(r[field]) for r in records}  # type: ignore[arg-type]
