"""The race's guarantee, shown by Monte Carlo (docs/method.md#racing): with paired outcomes drawn from known
truths (ties common: both right 50%, both wrong 30%), wrong "holds" happen at most 1 − confidence of the time,
however often the race looks; a race that peeks at a fixed-n 95% interval (Newcombe's, the one the report shows)
after every batch exceeds that rate, so the same check catches it. The simulation kernel is the race's own
arithmetic; the last tests check it against the :class:`Race` books run copy by copy.

Tolerance: a rate is accepted when its count is at most the 99.9% one-sided binomial quantile of Binomial(runs,
1 − confidence) (a true rate at the bound fails 1 time in 1000); peeking must exceed that same quantile.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxtui.evals.analysis import race_sim
from relaxtui.evals.analysis.race import (
    BREAKS,
    EXHAUSTED,
    HOLDS,
    PairedOutcome,
    Race,
    RaceRules,
    SettingSpec,
)
from relaxtui.evals.analysis.stats import Z975, Cells, newcombe_interval

RUNS = 2000  # races per world
PROBLEMS = 200  # the task; 40 looks at batches of 5
RULES = RaceRules(confidence=0.95, max_drop=0.05, judge_speed=False, batch=5)
ALPHA = 1 - RULES.confidence


def within_bound(count: int, runs: int, rate: float) -> bool:
    """count ≤ the 99.9% one-sided binomial quantile of Binomial(runs, rate) (exact, by summing the pmf)."""
    total, k = 0.0, 0
    while True:
        total += math.comb(runs, k) * rate**k * (1 - rate) ** (runs - k)
        if total >= 0.999:
            return count <= k
        k += 1


def test_the_tolerance_is_a_binomial_quantile():
    assert within_bound(130, 2000, 0.05) and not within_bound(140, 2000, 0.05)  # quantile: 100 + 3.1 sd ≈ 132


def peeking_decisions(draws: race_sim.Draws, rules: RaceRules) -> np.ndarray:
    """The first decision a race would take reading the 95% Newcombe interval (no split, as the report shows
    it) after every batch: [runs, settings] of CODE_NAMES indices (0: never decided)."""
    fixed = race_sim.fixed_n_codes(rules, draws, z=Z975)
    looks = fixed[:, :, rules.batch - 1::rules.batch]
    first = (looks != 0).argmax(axis=2)
    taken = np.take_along_axis(looks, first[:, :, None], axis=2)[:, :, 0]
    return np.where((looks != 0).any(axis=2), taken, 0)


@pytest.fixture(scope="module")
def worlds():
    """The race and the peeking race on the same draws, per true Δaccuracy (max_drop 0.05)."""
    rng = np.random.default_rng(20240)
    out = {}
    for delta in (-0.15, -0.05, 0.05):
        draws = race_sim.draw([race_sim.Truth(delta)], RUNS, PROBLEMS, rng)
        out[delta] = (race_sim.race(RULES, draws).codes, peeking_decisions(draws, RULES))
    return out


@pytest.mark.parametrize("delta", [-0.15, -0.05])
def test_wrong_holds_stay_within_one_minus_confidence(worlds, delta):
    """Well below −max_drop "holds" is wrong. At −max_drop it is right by definition (a loss of max_drop is
    allowed), but it is where the bound is tight (the limit of worlds just below), so it is counted as wrong here:
    the sequence bounds P(holds) there by the same α. Measured: 0 and 37 of 2000 races (1.9%), bound 5%."""
    codes, _ = worlds[delta]
    assert within_bound(int((codes == 1).sum()), RUNS, ALPHA)


def test_peeking_at_a_fixed_n_interval_exceeds_it(worlds):
    """The same check fails for a race built on Newcombe's 95% interval read after every batch: at −max_drop it
    says "holds" in 292 of 2000 races (14.6%), though each single look errs that way 2.5% of the time at most."""
    _, peeked = worlds[-0.05]
    assert not within_bound(int((peeked == 1).sum()), RUNS, ALPHA)
    race_codes, _ = worlds[-0.05]
    assert (peeked == 1).sum() > 5 * max((race_codes == 1).sum(), 1)


def test_the_race_decides_where_the_answer_is_clear(worlds):
    """Not vacuous: well below it breaks in most races, above it holds in half or more (200 problems, 20% of pairs
    disagree), and a holds above −max_drop or a breaks below it is never wrong there."""
    below, _ = worlds[-0.15]
    above, _ = worlds[0.05]
    assert (below == 2).mean() > 0.6 and (below == 1).sum() == 0
    assert (above == 1).mean() > 0.5 and (above == 2).sum() == 0


def test_the_vectorised_newcombe_is_the_reports():
    rng = np.random.default_rng(1)
    tables = rng.integers(0, 30, size=(4, 200))
    low, high = race_sim.newcombe_bounds(tables, Z975)
    for k in range(200):
        _, want_low, want_high = newcombe_interval(Cells(*map(float, tables[:, k])))
        assert low[k] == pytest.approx(want_low, abs=1e-12) and high[k] == pytest.approx(want_high, abs=1e-12)


# --- the kernel is the race -------------------------------------------------------------------------------------

def drive(rules: RaceRules, draws: race_sim.Draws, copy: int, needed: float = 1.0) -> Race:
    """One copy's race through the Race books: plan, strict, record, until nothing is left to plan."""
    settings, problems = draws.cells.shape[1:]
    ids = [f"p{j:04d}" for j in range(problems)]
    race = Race.start(rules, [SettingSpec(f"s{s}", "N=3", needed) for s in range(settings)], ids, seed=0)
    position = {pid: j for j, pid in enumerate(race.state.order)}  # the draws are in race order
    while not (plan := race.plan()).empty:
        for pair, strict_ids in plan.strict.items():
            race.record_strict(pair, strict_ids)
        for name, batch in plan.settings.items():
            s = int(name[1:])
            race.record(name, [PairedOutcome(pid, accuracy=float(draws.accuracy[copy, s, position[pid]]),
                                             drift=float(draws.drift[copy, s, position[pid]]),
                                             speedup=float(draws.speedup[copy, s, position[pid]]))
                               for pid in batch])
    race.close()
    return race


@pytest.mark.parametrize("rules", [
    RULES,
    RaceRules(confidence=0.9, max_drop=0.05, max_drift=0.1, batch=4),
    RaceRules(confidence=0.95, max_drop=None, max_drift=0.05, batch=3),
])
def test_the_kernel_and_the_race_books_agree(rules):
    """Copy by copy: the same decisions, after the same problems, and the same generations spent."""
    rng = np.random.default_rng(7)
    truths = [race_sim.Truth(-0.12, speedup=1.25), race_sim.Truth(0.1, speedup=0.9, drift=-0.2),
              race_sim.Truth(0.05, discordant=0.1, speedup=1.4, drift=0.0)]
    draws = race_sim.draw(truths, 12, 120, rng)
    sim = race_sim.race(rules, draws)
    seen = set()
    for copy in range(12):
        race = drive(rules, draws, copy)
        decisions = [race.settings[f"s{s}"].decision for s in range(3)]
        assert decisions == [race_sim.CODE_NAMES[c] for c in sim.codes[copy]]
        assert [race.settings[f"s{s}"].decided_after for s in range(3)] == list(sim.done[copy])
        assert race.state.spent == sim.generations[copy]
        seen.update(decisions)
    assert len(seen) >= 2  # the worlds decide differently: the comparison is not all one outcome
    assert seen & {HOLDS, BREAKS, "does not pay"} and seen <= {HOLDS, BREAKS, "does not pay", EXHAUSTED}
