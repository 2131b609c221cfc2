"""Newcombe's score interval for a paired difference of proportions (Newcombe 1998, method 10): published values,
an independent route to the same numbers, and the feasible-range property the report and tune's advice rely on."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxtui.evals.analysis.stats import (
    Z975,
    Cells,
    newcombe_interval,
    paired_proportion_difference,
    problems_to_resolve,
    wilson_interval,
)


def test_the_published_value_for_a_paired_table():
    """Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables (2017), ch. 8: complete response
    before and after consolidation therapy (Cavo et al. 2012), table [[59, 6], [16, 80]] — Newcombe's
    square-and-add interval −0.0621 (95% CI −0.1186 to −0.0046), as their `contingencytables` package tests it."""
    estimate, low, high = newcombe_interval(Cells(a=59, b=6, c=16, d=80))
    assert round(estimate, 4) == -0.0621 and round(low, 4) == -0.1186 and round(high, 4) == -0.0046


def _wilson_by_bisection(successes: float, n: float) -> tuple[float, float]:
    """The Wilson bounds as the two roots of the score test |p̂ − p| = z·sqrt(p(1 − p)/n), found by bisection
    (no closed form shared with the code under test)."""
    p_hat = successes / n

    def outside(p: float) -> bool:
        return abs(p_hat - p) > Z975 * math.sqrt(p * (1 - p) / n)

    def root(inside: float, out: float) -> float:
        for _ in range(200):
            middle = (inside + out) / 2
            inside, out = (inside, middle) if outside(middle) else (middle, out)
        return (inside + out) / 2

    low = 0.0 if not outside(0.0) or p_hat == 0 else root(p_hat, 0.0)
    high = 1.0 if not outside(1.0) or p_hat == 1 else root(p_hat, 1.0)
    return low, high


def _newcombe_reference(a: float, b: float, c: float, d: float) -> tuple[float, float]:
    """Method 10 written out from the paper's description, on bisection-found Wilson bounds."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = _wilson_by_bisection(a + b, n)
    l2, u2 = _wilson_by_bisection(a + c, n)
    product = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(product) if product > 0 else 0.0
    theta = p1 - p2
    low = theta - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = theta + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return low, high


@pytest.mark.parametrize("table", [(59, 6, 16, 80), (1, 1, 7, 12), (0, 0, 0, 10), (10, 0, 0, 0), (3, 4, 0, 1),
                                   (0, 5, 5, 0), (20, 1, 0, 19), (2.5, 0.5, 1.0, 1.0)])
def test_an_independent_route_gives_the_same_interval(table):
    _, low, high = newcombe_interval(Cells(*table))
    assert (low, high) == pytest.approx(_newcombe_reference(*table), abs=1e-9)


def test_wilson_matches_its_score_test_roots():
    for successes, n in [(0, 5), (1, 5), (5, 5), (17, 40), (0.5, 3)]:
        assert wilson_interval(successes, n) == pytest.approx(_wilson_by_bisection(successes, n), abs=1e-9)


def test_ties_still_leave_an_interval_and_four_problems_cannot_exceed_100_points():
    # every pair tied, both always right, 8 problems: not a zero-width "proof" but about ±32 points
    _, low, high = newcombe_interval(Cells(8, 0, 0, 0))
    assert low == pytest.approx(-(1 - 8 / (8 + Z975**2))) and high == pytest.approx(-low)
    # the case: 4 problems, one win — a t interval said [-54.5, +104.6]
    estimate, low, high = newcombe_interval(Cells(0, 1, 0, 3))
    assert estimate == 0.25 and -1 <= low < 0 < estimate < high <= 1


tables = st.tuples(*[st.floats(0, 500, allow_nan=False) for _ in range(4)]).filter(lambda t: sum(t) > 1e-6)


@settings(max_examples=300, deadline=None)
@given(tables)
def test_the_interval_lies_in_the_feasible_range_and_holds_its_estimate(table):
    estimate, low, high = newcombe_interval(Cells(*table))
    assert -1.0 <= low <= estimate <= high <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40), st.integers(1, 3))
def test_paired_scores_with_seeds_give_an_interval_in_range(pairs, seeds):
    config = {(f"p{i // seeds}", i % seeds): float(mine) for i, (mine, _) in enumerate(pairs)}
    reference = {(f"p{i // seeds}", i % seeds): float(theirs) for i, (_, theirs) in enumerate(pairs)}
    difference = paired_proportion_difference(config, reference)
    interval = difference.interval
    assert difference.cells is not None and difference.cells.n == pytest.approx(interval.n)
    assert -1.0 <= interval.low <= interval.mean <= interval.high <= 1.0
    assert difference.pairs == len(pairs) and (difference.wins, difference.losses) == (
        sum(m and not t for m, t in pairs), sum(t and not m for m, t in pairs))


def test_seeds_of_one_problem_split_its_weight():
    config = {("a", 0): 1.0, ("a", 1): 0.0, ("b", 0): 1.0, ("b", 1): 1.0}
    reference = {("a", 0): 1.0, ("a", 1): 1.0, ("b", 0): 0.0, ("b", 1): 1.0}
    cells = paired_proportion_difference(config, reference).cells
    assert cells == Cells(a=1.0, b=0.5, c=0.5, d=0.0)  # two problems, each of weight 1


def test_problems_to_resolve_is_the_first_count_whose_newcombe_bound_clears_the_drop():
    config = {(f"p{i}", 0): float(i % 10 == 0) for i in range(40)}
    reference = {(f"p{i}", 0): float(i % 10 == 1) for i in range(40)}
    difference = paired_proportion_difference(config, reference)
    needed = problems_to_resolve(difference, 0.02)
    assert needed is not None and needed > 40
    cells = difference.cells
    assert newcombe_interval(cells.scaled(needed))[1] >= -0.02 > newcombe_interval(cells.scaled(needed - 1))[1]
    losing = paired_proportion_difference({("p", 0): 0.0, ("q", 0): 0.0}, {("p", 0): 1.0, ("q", 0): 1.0})
    assert problems_to_resolve(losing, 0.05) is None  # the estimate is past the drop: more data would not help


def test_coverage_is_near_95_percent():
    """A seeded simulation (no timing involved): the interval covers the true difference about 95% of the time."""
    rng = random.Random(7)
    cell_p = (0.5, 0.15, 0.1, 0.25)  # true difference 0.05
    covered, trials = 0, 2000
    for _ in range(trials):
        counts = [0, 0, 0, 0]
        for _ in range(60):
            counts[rng.choices(range(4), cell_p)[0]] += 1
        _, low, high = newcombe_interval(Cells(*counts))
        covered += low <= 0.05 <= high
    assert 0.93 <= covered / trials <= 0.98
