"""The betting confidence sequence (Waudby-Smith & Ramdas 2024, Theorem 3, predictable plug-in bets): its ends
against a brute-force evaluation written from the paper's formulas, its time-uniform coverage by Monte Carlo,
and the properties a race reads (never widens, the watched tests, the batch kernel's agreement)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxtui.evals.analysis.confseq import ConfidenceSequence, ThresholdTests


def brute_force_interval(values: list[float], alpha: float, grid: int = 2001) -> tuple[float, float]:
    """Every grid mean ever rejected by max(K⁺/2, K⁻/2) ≥ 1/α, computed in plain Python from the paper's
    definitions (values already on [0, 1]); the interval is the hull of the never-rejected grid points."""
    c = 0.5
    bets, mean_sum, sq_dev = [], 0.0, 0.0
    for i, x in enumerate(values, start=1):
        variance = (0.25 + sq_dev) / i  # σ̂²_{i−1}
        bets.append(math.sqrt(2 * math.log(2 / alpha) / (variance * i * math.log(1 + i))))
        mean_sum += x
        sq_dev += (x - (0.5 + mean_sum) / (i + 1)) ** 2
    kept = []
    for k in range(grid):
        m = k / (grid - 1)
        log_plus = log_minus = 0.0
        ever = False
        for x, bet in zip(values, bets, strict=True):
            log_plus += math.log1p(min(bet, c / m if m > 0 else math.inf) * (x - m))
            log_minus += math.log1p(-min(bet, c / (1 - m) if m < 1 else math.inf) * (x - m))
            ever |= max(log_plus, log_minus) >= math.log(2 / alpha)
        if not ever:
            kept.append(m)
    return min(kept), max(kept)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_ends_match_a_brute_force_evaluation(seed):
    rng = np.random.default_rng(seed)
    values = list(rng.choice([0.0, 0.5, 1.0], p=[0.15, 0.7, 0.15], size=80) * 0.6 + rng.uniform(0, 0.4, 80))
    sequence = ConfidenceSequence(0.05)
    for x in values:
        sequence.update(float(x))
    low, high = sequence.interval()
    want_low, want_high = brute_force_interval([float(x) for x in values], 0.05)
    step = 1 / 2000
    assert want_low - step <= low <= want_low and want_high <= high <= want_high + step
    assert high - low < 0.5  # informative: the comparison is not two trivial [0, 1]s


def test_the_interval_never_widens_and_rescales():
    rng = np.random.default_rng(3)
    sequence = ConfidenceSequence(0.1, low=-2.0, high=2.0)
    previous = (-2.0, 2.0)
    for x in rng.normal(0.3, 0.5, 300).clip(-2, 2):
        sequence.update(float(x))
        now = sequence.interval()
        assert previous[0] <= now[0] <= now[1] <= previous[1]
        previous = now
    assert previous[0] < 0.3 < previous[1] and previous[1] - previous[0] < 0.5


def test_watched_tests_agree_with_the_interval_and_the_batch_kernel():
    """A watched point's test is the interval's end read at one point, and ThresholdTests (the simulation's)
    reaches each decision at the same step, copy by copy."""
    rng = np.random.default_rng(4)
    points = [-0.2, -0.05, 0.0, 0.1]
    data = rng.choice([-1.0, 0.0, 1.0], p=[0.05, 0.8, 0.15], size=(len(points), 400))
    kernel = ThresholdTests(0.05, -1.0, 1.0, np.array(points), copies=len(points))
    sequences = [ConfidenceSequence(0.05, -1.0, 1.0, watch=(m,)) for m in points]
    for step in range(data.shape[1]):
        kernel.update(data[:, step])
        for k, (m, sequence) in enumerate(zip(points, sequences, strict=True)):
            sequence.update(float(data[k, step]))
            assert sequence.shows_above(m) == kernel.above[k] and sequence.shows_below(m) == kernel.below[k]
            if step % 50 == 49:
                low, high = sequence.interval()
                assert low >= m if sequence.shows_above(m) else True
                assert high <= m if sequence.shows_below(m) else True
    assert kernel.above.any() and not kernel.above.all()  # the points are decided differently


@pytest.mark.parametrize("cells", [(0.1, 0.9, 0.0), (0.05, 0.8, 0.15), (0.5, 0.0, 0.5)])
def test_coverage_holds_at_every_n_at_once(cells):
    """2000 sequences of 400 values each, skewed, tie-heavy and two-point: the share that ever excludes the true
    mean (on either side, at any n) stays within α = 0.05 (99.9% binomial tolerance: ≤ 132 of 2000)."""
    rng = np.random.default_rng(5)
    support = np.array([-1.0, 0.0, 1.0])
    truth = float(np.dot(cells, support))
    values = rng.choice(support, p=cells, size=(2000, 400))
    tests = ThresholdTests(0.05, -1.0, 1.0, truth, copies=2000)
    for step in range(400):
        tests.update(values[:, step])
    assert int((tests.above | tests.below).sum()) <= 132


def test_it_is_deterministic_and_refuses_what_it_cannot_bound():
    one, two = ConfidenceSequence(0.05, watch=(0.4,)), ConfidenceSequence(0.05, watch=(0.4,))
    for x in np.random.default_rng(6).uniform(0, 1, 50):
        one.update(float(x))
        two.update(float(x))
    assert one.interval() == two.interval() and one.mean == two.mean and one.count == 50
    with pytest.raises(ValueError):
        one.update(1.5)
    with pytest.raises(ValueError):
        one.update(math.nan)
    with pytest.raises(KeyError):
        one.shows_above(0.3)
    outside = ConfidenceSequence(0.05, watch=(-0.5, 1.5))  # points beyond the range are decided from the start
    assert outside.shows_above(-0.5) and outside.shows_below(1.5)
    assert not outside.shows_below(-0.5) and not outside.shows_above(1.5)
    with pytest.raises(ValueError):
        ConfidenceSequence(1.0)
