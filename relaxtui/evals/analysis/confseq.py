"""Confidence sequences for the mean of bounded values, by betting (docs/method.md#racing).

A confidence sequence (CS) is a sequence of intervals that covers the mean at every sample size at once:
P(the mean lies outside the interval at *any* n) ≤ α. It may be read after every problem and a race may stop
whenever it decides, without losing coverage; a fixed-n interval read after every batch does lose it.

The construction is the *hedged capital process* of Waudby-Smith & Ramdas, "Estimating means of bounded random
variables by betting", JRSS-B 86(1), 2024 (arXiv:2010.09686), Theorem 3, with their predictable plug-in bets
(λ^PrPl±, truncation c = 1/2, hedge weight θ = 1/2). Values x_i in [low, high] are rescaled to [0, 1]; for a
candidate mean m two gamblers bet on the next value:

    K⁺_t(m) = Π_{i≤t} (1 + λ⁺_i(m)·(x_i − m)),   λ⁺_i(m) = min(λ̃_i, c/m)
    K⁻_t(m) = Π_{i≤t} (1 − λ⁻_i(m)·(x_i − m)),   λ⁻_i(m) = min(λ̃_i, c/(1 − m))
    λ̃_i = sqrt(2·log(2/α) / (σ̂²_{i−1} · i · log(1 + i)))
    μ̂_i = (1/2 + Σ_{j≤i} x_j)/(i + 1),   σ̂²_i = (1/4 + Σ_{j≤i} (x_j − μ̂_j)²)/(i + 1),   σ̂²_0 = 1/4

When m is the true mean both are nonnegative martingales starting at 1, so (Ville's inequality) the hedged process
max(θK⁺, (1 − θ)K⁻) ever reaches 1/α with probability at most α; the CS is every m where it has not, intersected
over time (the interval never widens). Each factor of K⁺ falls as m grows and each factor of K⁻ rises, so K⁺
rejects a prefix of [0, 1] and K⁻ a suffix: the lower bound is where K⁺ crosses 2/α, the upper where K⁻ does.
Two consequences this module uses:

* a decision needs the capital at one point only: "the mean is above m" is shown exactly when K⁺(m) has reached
  2/α, which a race tracks incrementally at its threshold (:class:`ThresholdTests` does it for many simulated
  copies at once, the same arithmetic);
* the interval's ends are roots of a monotone function, found on the exact capital (no grid), rounded outward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

TRUNCATION = 0.5  # c: a bet stakes at most half the capital, so a factor never falls below 1 − c (the paper's 1/2)
_PRIOR_MEAN, _PRIOR_VARIANCE = 0.5, 0.25  # the paper's one fake observation in μ̂ and σ̂²
_ROOT_POINTS = 257  # candidate means per refinement round of an interval end (the bracket shrinks 256× a round)
_ROOT_TOLERANCE = 1e-9  # on the [0, 1] scale; ends are rounded outward, so the interval errs wide by at most this

FloatArray = NDArray[np.float64]


def bet_size(count: ArrayLike, sum_sq_dev: ArrayLike, alpha: float) -> FloatArray:
    """λ̃ for observation ``count + 1``: predictable, from the ``count`` values before it (σ̂² of those)."""
    t = np.asarray(count, dtype=np.float64) + 1.0
    variance = (_PRIOR_VARIANCE + np.asarray(sum_sq_dev, dtype=np.float64)) / t
    return np.sqrt(2.0 * math.log(2.0 / alpha) / (variance * t * np.log1p(t)))


def log_factors(x: ArrayLike, m: ArrayLike, bet: ArrayLike,
                truncation: float = TRUNCATION) -> tuple[FloatArray, FloatArray]:
    """log of one observation's factor in K⁺(m) and in K⁻(m) (broadcast over x, m, bet; m in [0, 1])."""
    x, m, bet = (np.asarray(a, dtype=np.float64) for a in (x, m, bet))
    with np.errstate(divide="ignore"):  # c/0 = inf: at m = 0 (m = 1) that side's bet is never truncated
        plus = np.minimum(bet, truncation / m)
        minus = np.minimum(bet, truncation / (1.0 - m))
    step = x - m
    return np.log1p(plus * step), np.log1p(-minus * step)


def threshold(alpha: float) -> float:
    """log of the capital at which one side rejects: max(θK⁺, (1 − θ)K⁻) ≥ 1/α with θ = 1/2."""
    return math.log(2.0 / alpha)


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) (got {alpha})")


class ConfidenceSequence:
    """One running CS on the mean of values in [low, high]: ``update(x)`` after each problem, ``interval()`` any
    time. ``watch`` names points (in value units) whose tests a decision reads: ``shows_above(m)`` is true once
    every mean ≤ m is excluded, ``shows_below(m)`` once every mean ≥ m is; both stay true (running intersection).
    Deterministic: the same values in the same order give the same state, bit for bit."""

    def __init__(self, alpha: float, low: float = 0.0, high: float = 1.0, watch: Sequence[float] = (),
                 truncation: float = TRUNCATION) -> None:
        _check_alpha(alpha)
        if not high > low:
            raise ValueError(f"the range must have high > low (got [{low}, {high}])")
        self.alpha, self.low, self.high, self.truncation = alpha, low, high, truncation
        self._threshold = threshold(alpha)
        self._count = 0
        self._history = np.empty((2, 64))  # rows: the values rescaled to [0, 1], their bets; grows by doubling
        self._sum = 0.0
        self._sum_sq_dev = 0.0
        self._watch = tuple(float(m) for m in watch)
        scaled = np.array([self._scale(m) for m in self._watch], dtype=np.float64)
        self._watch_scaled = np.clip(scaled, 0.0, 1.0)
        self._watch_log_plus = np.zeros(len(self._watch))
        self._watch_log_minus = np.zeros(len(self._watch))
        self._above = scaled < 0.0  # a point below the range: every mean in the range is above it already
        self._below = scaled > 1.0
        self._ends = (0, 0.0, 1.0)  # (count, lower, upper) on the [0, 1] scale, computed when asked for

    def _scale(self, value: float) -> float:
        return (value - self.low) / (self.high - self.low)

    def _unscale(self, value: float) -> float:
        return self.low + value * (self.high - self.low)

    @property
    def count(self) -> int:
        return self._count

    @property
    def mean(self) -> float:
        """The running mean of the values (NaN before the first)."""
        return self._unscale(self._sum / self._count) if self._count else math.nan

    def update(self, value: float) -> None:
        if not self.low <= value <= self.high:  # NaN fails this too
            raise ValueError(f"a value outside [{self.low}, {self.high}]: {value}")
        x = self._scale(value)
        bet = float(bet_size(self.count, self._sum_sq_dev, self.alpha))
        if self._watch:
            plus, minus = log_factors(x, self._watch_scaled, bet, self.truncation)
            self._watch_log_plus += plus
            self._watch_log_minus += minus
            self._above |= self._watch_log_plus >= self._threshold
            self._below |= self._watch_log_minus >= self._threshold
        if self._count == self._history.shape[1]:
            self._history = np.concatenate([self._history, np.empty_like(self._history)], axis=1)
        self._history[:, self._count] = x, bet
        self._count += 1
        self._sum += x
        self._sum_sq_dev += (x - (_PRIOR_MEAN + self._sum) / (self._count + 1)) ** 2

    def _peak_log_capital(self, points: FloatArray, side: int) -> FloatArray:
        """max over every time so far (time 0 included) of log K⁺ (side 0) or log K⁻ (side 1) at each point: a
        point is outside the running intersection once this reaches the threshold."""
        xs = self._history[0, :self._count, None]
        bets = self._history[1, :self._count, None]
        m = points[None, :]
        with np.errstate(divide="ignore"):  # as in log_factors, one side only
            bet = np.minimum(bets, self.truncation / (m if side == 0 else 1.0 - m))
        paths = np.cumsum(np.log1p(bet * (xs - m) * (1 if side == 0 else -1)), axis=0)
        return np.maximum(paths.max(axis=0, initial=0.0), 0.0)

    def _end(self, side: int) -> float:
        """The lower end (side 0: K⁺ rejects a prefix of [0, 1]) or the upper end (side 1: K⁻ rejects a suffix),
        refined on ever finer grids of the bracket and rounded outward (onto a rejected point)."""
        bracket = (0.0, 1.0)
        while True:
            points = np.linspace(*bracket, _ROOT_POINTS)
            rejected = int(np.count_nonzero(self._peak_log_capital(points, side) >= self._threshold))
            if side == 0:
                if rejected in (0, _ROOT_POINTS):  # nothing in the bracket rejected, or all of it
                    return float(points[0] if rejected == 0 else points[-1])
                bracket = (points[rejected - 1], points[rejected])
            else:
                if rejected in (0, _ROOT_POINTS):
                    return float(points[-1] if rejected == 0 else points[0])
                bracket = (points[-rejected - 1], points[-rejected])
            if bracket[1] - bracket[0] <= _ROOT_TOLERANCE:
                return float(bracket[side])

    def interval(self) -> tuple[float, float]:
        """(low, high) in value units: every mean outside has been excluded at some time (the running
        intersection, watched tests included), so the interval never widens."""
        if self._ends[0] != self._count:
            self._ends = (self._count, self._end(0), self._end(1))
        _, lower, upper = self._ends
        for m, above, below in zip(self._watch_scaled, self._above, self._below, strict=True):
            lower = max(lower, float(m)) if above else lower
            upper = min(upper, float(m)) if below else upper
        return self._unscale(lower), self._unscale(max(upper, lower))  # crossed sides: shown as one point

    def _watched(self, point: float) -> int:
        try:
            return self._watch.index(float(point))
        except ValueError:
            raise KeyError(f"{point} is not a watched point of this sequence ({self._watch})") from None

    def shows_above(self, point: float) -> bool:
        """Whether the sequence has excluded every mean at or below ``point`` (a watched point)."""
        return bool(self._above[self._watched(point)])

    def shows_below(self, point: float) -> bool:
        """Whether the sequence has excluded every mean at or above ``point`` (a watched point)."""
        return bool(self._below[self._watched(point)])


class ThresholdTests:
    """The same two capital processes at one point per copy, for many independent copies at once: what a
    simulation of thousands of races needs (decisions only, no interval). ``update`` takes one value per copy;
    copies where ``active`` is false are left as they are (a decided setting runs no more problems)."""

    def __init__(self, alpha: float, low: float, high: float, point: ArrayLike, copies: int,
                 truncation: float = TRUNCATION) -> None:
        _check_alpha(alpha)
        self.alpha, self.low, self.high, self.truncation = alpha, low, high, truncation
        self._threshold = threshold(alpha)
        scaled = (np.broadcast_to(np.asarray(point, dtype=np.float64), (copies,)) - low) / (high - low)
        self._point = np.clip(scaled, 0.0, 1.0)
        self.count = np.zeros(copies, dtype=np.int64)
        self._sum = np.zeros(copies)
        self._sum_sq_dev = np.zeros(copies)
        self._log_plus = np.zeros(copies)
        self._log_minus = np.zeros(copies)
        self.above = scaled < 0.0
        self.below = scaled > 1.0

    def update(self, values: ArrayLike, active: NDArray[np.bool_] | None = None) -> None:
        values = np.asarray(values, dtype=np.float64)
        if np.any(~((values >= self.low) & (values <= self.high))):
            raise ValueError(f"a value outside [{self.low}, {self.high}]")
        x = (values - self.low) / (self.high - self.low)
        rows = slice(None) if active is None else np.flatnonzero(active)
        x = x[rows]
        count = self.count[rows]
        bet = bet_size(count, self._sum_sq_dev[rows], self.alpha)
        plus, minus = log_factors(x, self._point[rows], bet, self.truncation)
        self._log_plus[rows] += plus
        self._log_minus[rows] += minus
        self.above[rows] |= self._log_plus[rows] >= self._threshold
        self.below[rows] |= self._log_minus[rows] >= self._threshold
        self.count[rows] = count + 1
        self._sum[rows] += x
        self._sum_sq_dev[rows] += (x - (_PRIOR_MEAN + self._sum[rows]) / (count + 2)) ** 2
