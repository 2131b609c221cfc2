"""Races in simulation: paired outcomes with known truths, many races at once (tests/evals/test_race_guarantee.py,
scripts/race_simulation.py).

A world is a few relaxed settings, each paired with one strict run, with a known truth per setting: its accuracy
difference (drawn as a paired 2×2 table, ties common as in real tasks), its log speed-up and its drift. The kernel
runs thousands of copies of the race in lockstep with the race's own pieces — the same bets and capital
(``confseq``), the same bounded values (``RaceRules.bounded``), the same decision rule (``race.decision_codes``),
every racing setting advancing by one batch per round (what ``race.allocate`` gives when the budget is not the
limit) — so that one run of the kernel is the :class:`race.Race` books run per copy; the test checks the two agree.
The fixed grid it is compared with is computed here too: fixed-n intervals at every n (Newcombe's for accuracy,
a normal interval for the others), at the same confidence split as the race's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from relaxtui.evals.analysis.confseq import ThresholdTests
from relaxtui.evals.analysis.race import DECISIONS, EXHAUSTED, SPEED, RaceRules, decision_codes
from relaxtui.evals.analysis.stats import MIN_INTERVAL_PROBLEMS

EXHAUSTED_CODE = len(DECISIONS)  # codes past DECISIONS: undecided when the task ran out
CODE_NAMES = (*DECISIONS, EXHAUSTED)
BOTH_RIGHT, SETTING_ONLY, STRICT_ONLY, BOTH_WRONG = range(4)  # a pair's cell


@dataclass(frozen=True)
class Truth:
    """One relaxed setting against its strict pair, as the world draws it."""

    accuracy_delta: float  # P(setting right) − P(strict right)
    discordant: float = 0.2  # P(the pair disagrees): the rest are ties
    both_right: float = 0.5
    speedup: float = 1.3  # geometric mean over problems of strict's priced cost / the setting's
    speed_sd: float = 0.15  # of a problem's log speed-up
    drift: float = 0.0  # mean Δ verifier log-prob per token
    drift_sd: float = 0.05

    def cell_probabilities(self) -> tuple[float, float, float, float]:
        setting_only = (self.discordant + self.accuracy_delta) / 2
        strict_only = (self.discordant - self.accuracy_delta) / 2
        both_wrong = 1.0 - self.both_right - self.discordant
        cells = (self.both_right, setting_only, strict_only, both_wrong)
        if min(cells) < 0:
            raise ValueError(f"no paired table has these proportions: {self}")
        return cells

    def holds(self, rules: RaceRules, needed_speedup: float = 1.0) -> bool:
        """Whether "holds" is the right decision: within max_drop and max_drift (at them counts), faster than
        needed (at it does not)."""
        accuracy = rules.max_drop is None or self.accuracy_delta >= -rules.max_drop
        drift = rules.max_drift is None or self.drift >= -rules.max_drift
        speed = not rules.judge_speed or math.log(self.speedup) > math.log(needed_speedup)
        return accuracy and drift and speed


@dataclass(frozen=True)
class Draws:
    """Per copy, setting and problem (in race order): the pair's cell and the raw outcomes."""

    cells: NDArray[np.int8]  # [copies, settings, problems]
    speedup: NDArray[np.float64]
    drift: NDArray[np.float64]

    @property
    def accuracy(self) -> NDArray[np.float64]:
        return (self.cells == SETTING_ONLY).astype(np.float64) - (self.cells == STRICT_ONLY)

    def raw(self, criterion: str) -> NDArray[np.float64]:
        return {"accuracy": self.accuracy, "drift": self.drift, SPEED: self.speedup}[criterion]


def draw(truths: list[Truth], copies: int, problems: int, rng: np.random.Generator) -> Draws:
    """Independent problems (and settings), each drawn from its truth."""
    shape = (copies, len(truths), problems)
    cells = np.empty(shape, dtype=np.int8)
    speedup, drift = np.empty(shape), np.empty(shape)
    for s, truth in enumerate(truths):
        cells[:, s] = rng.choice(4, size=(copies, problems), p=truth.cell_probabilities())
        speedup[:, s] = np.exp(rng.normal(math.log(truth.speedup), truth.speed_sd, (copies, problems)))
        drift[:, s] = rng.normal(truth.drift, truth.drift_sd, (copies, problems))
    return Draws(cells, speedup, drift)


@dataclass(frozen=True)
class Simulated:
    codes: NDArray[np.int64]  # [copies, settings]: CODE_NAMES index
    done: NDArray[np.int64]  # [copies, settings]: problems each setting ran
    strict_done: NDArray[np.int64]  # [copies]: problems strict ran (as far as some setting needed)

    @property
    def generations(self) -> NDArray[np.int64]:
        return self.done.sum(axis=1) + self.strict_done


def race(rules: RaceRules, draws: Draws, needed_speedup: float = 1.0) -> Simulated:
    """Every copy's race, all settings paired with one strict run, the budget not the limit."""
    copies, settings, problems = draws.cells.shape
    bounded = {c: rules.bounded_values(c, draws.raw(c), needed_speedup) for c in rules.criteria}
    tests = [{c: ThresholdTests(rules.sequence_alpha, *rules.value_range(c, needed_speedup),
                                rules.threshold(c, needed_speedup), copies) for c in rules.criteria}
             for _ in range(settings)]
    codes = np.zeros((copies, settings), dtype=np.int64)
    done = np.zeros((copies, settings), dtype=np.int64)
    for start in range(0, problems, rules.batch):
        stop = min(start + rules.batch, problems)
        for s in range(settings):
            racing = codes[:, s] == 0
            if not racing.any():
                continue
            for j in range(start, stop):
                for c in rules.criteria:
                    tests[s][c].update(bounded[c][:, s, j], racing)
            now = decision_codes({c: t.above for c, t in tests[s].items()},
                                 {c: t.below for c, t in tests[s].items()})
            done[racing, s] = stop
            codes[racing, s] = now[racing]
    codes[codes == 0] = EXHAUSTED_CODE
    return Simulated(codes, done, done.max(axis=1))


def fixed_n_codes(rules: RaceRules, draws: Draws, needed_speedup: float = 1.0,
                  z: float | None = None) -> NDArray[np.int64]:
    """[copies, settings, n − 1]: the decision fixed-n intervals give after n = 1..problems problems, with the
    race's rule: Newcombe's paired interval for accuracy (``stats.newcombe_interval``, vectorised), a normal
    interval on the bounded values for the others; ``z`` defaults to the race's level (each side α/k).
    Fewer than MIN_INTERVAL_PROBLEMS problems decide nothing (the report shows n/a)."""
    if z is None:
        z = NormalDist().inv_cdf(1 - rules.sequence_alpha / 2)
    n = np.arange(1, draws.cells.shape[2] + 1, dtype=np.float64)
    above, below = {}, {}
    for c in rules.criteria:
        point = rules.threshold(c, needed_speedup)
        if c == "accuracy":
            low, high = newcombe_bounds(np.stack([np.cumsum(draws.cells == k, axis=2) for k in range(4)]), z)
        else:
            values = rules.bounded_values(c, draws.raw(c), needed_speedup)
            mean = np.cumsum(values, axis=2) / n
            spread = np.sqrt(np.maximum(np.cumsum(values**2, axis=2) / n - mean**2, 0) * n / np.maximum(n - 1, 1))
            low, high = mean - z * spread / np.sqrt(n), mean + z * spread / np.sqrt(n)
        shown = n >= MIN_INTERVAL_PROBLEMS
        above[c], below[c] = (low > point) & shown, (high < point) & shown
    return decision_codes(above, below)


def newcombe_bounds(cells: NDArray[np.int64], z: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Newcombe's method-10 bounds over arrays of paired tables (cells stacked first: a, b, c, d), the same
    arithmetic as ``stats.newcombe_interval``."""
    a, b, c, d = (np.asarray(x, dtype=np.float64) for x in cells)
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n

    def wilson(p: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        centre = p + z * z / (2 * n)
        spread = z * np.sqrt(np.maximum(p * (1 - p) / n + z * z / (4 * n * n), 0.0))
        scale = 1 + z * z / n
        return np.maximum(0.0, (centre - spread) / scale), np.minimum(1.0, (centre + spread) / scale)

    l1, u1 = wilson(p1)
    l2, u2 = wilson(p2)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(margins > 0, np.where(cross > n / 2, cross - n / 2, np.minimum(cross, 0.0)) / np.sqrt(margins),
                       0.0)
    below = np.sqrt(np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    above = np.sqrt(np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    estimate = p1 - p2
    return np.maximum(-1.0, estimate - below), np.minimum(1.0, estimate + above)


def grid_problems(race_codes: NDArray[np.int64], fixed: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per copy, the smallest fixed n at which fixed-n intervals decide every setting the race decided, the same
    way (one n for all settings: a grid runs every setting on the same problems). A copy where the race decided
    nothing, or where no n up to the task matches, gets the whole task."""
    problems = fixed.shape[2]
    decided = (race_codes >= 1) & (race_codes < EXHAUSTED_CODE)  # [copies, settings]
    matches = (fixed == race_codes[:, :, None]) | ~decided[:, :, None]
    every = matches.all(axis=1)  # [copies, n]
    first = np.where(every.any(axis=1), every.argmax(axis=1) + 1, problems)
    return np.where(decided.any(axis=1), first, problems).astype(np.int64)


def right_codes(truth: Truth, rules: RaceRules, needed_speedup: float = 1.0) -> tuple[int, ...]:
    """The decisions (DECISIONS indices) that are right for a truth: holds, or each verdict that is true."""
    if truth.holds(rules, needed_speedup):
        return (1,)
    capability = ((rules.max_drop is not None and truth.accuracy_delta < -rules.max_drop)
                  or (rules.max_drift is not None and truth.drift < -rules.max_drift))
    speed = rules.judge_speed and truth.speedup <= needed_speedup
    return (2,) * capability + (3,) * speed


def right(codes: NDArray[np.int64], truths: list[Truth], rules: RaceRules, needed_speedup: float = 1.0
          ) -> NDArray[np.bool_]:
    """Which decisions are right, per copy and setting (settings on axis 1; any trailing axes)."""
    out = np.zeros(codes.shape, dtype=bool)
    for s, truth in enumerate(truths):
        out[:, s] = np.isin(codes[:, s], right_codes(truth, rules, needed_speedup))
    return out


def planned_problems(race_right: NDArray[np.bool_], fixed_right: NDArray[np.bool_]) -> int:
    """The smallest fixed n at which fixed-n intervals decide rightly, on average over the copies, at least the
    share of settings the race decides rightly: a grid planned by a power calculation that knew the truths (not
    the draws). The task's size when no n reaches it."""
    problems = fixed_right.shape[2]
    share = fixed_right.mean(axis=(0, 1))  # [n]
    reached = np.flatnonzero(share >= race_right.mean())
    return int(reached[0]) + 1 if reached.size else problems
