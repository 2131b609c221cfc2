"""The race: relaxed settings against strict, problem by problem, each stopping the moment it is decided
(docs/method.md#racing).

Every setting runs the task's problems in one seeded order, in batches, paired with strict at its own draft
length on the same problems and seeds (strict runs once per pair key, shared by every setting that pairs with
it, and only as far as some racing setting needs). After each batch a setting's per-problem paired outcomes feed
one confidence sequence (``confseq``) per criterion:

* ``accuracy``: setting − strict correctness per problem, in [−1, 1] (repeats averaged); threshold −max_drop;
* ``drift``: Δ verifier log-prob per token (nats), clipped to [−max_drift − drift_below, −max_drift + drift_above];
  threshold −max_drift;
* ``speed``: log of strict's priced cost over the setting's, clipped to [log(needed) − speed_below, log(needed) +
  speed_above]; threshold log(needed), the speed-up over its strict pair a setting must show to pay.

The clip windows sit around the thresholds (a bounded-mean sequence needs about width·log(2/α)/gap problems
to decide a gap, however steady the values), lopsided so that clipping can make "holds" easier only for a problem
far below (docs/method.md#racing).

A setting **breaks** once accuracy or drift is shown below its threshold, **does not pay** once speed is, **holds**
once every criterion is shown above; otherwise it races on until the task is exhausted (or the budget spent),
undecided, with its intervals. "Holds" means Δaccuracy ≥ −max_drop, drift ≥ −max_drift and speed-up > needed.

Level: α = 1 − confidence per setting, split over its k criteria (a union bound). Only one side of a criterion's
sequence can make a decision wrong (the side facing away from the truth), so each side gets α/k: the two-sided
sequence runs at 2α/k and P(a setting's decision is wrong) ≤ α. ``family`` > 1 divides α again for one guarantee
over that many settings.

Allocation: the settings closest to a decision first (:func:`allocate`); the guarantee does not depend on it (the
sequences are time-uniform). :func:`decision_codes`, :func:`problems_to_decide` and :func:`allocate` are the small
pure rules; :class:`Race` keeps the books and serialises to JSON, restored by replaying the recorded values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from relaxtui.evals.analysis.confseq import ConfidenceSequence

RACING, HOLDS, BREAKS, NO_PAY, EXHAUSTED, BUDGET_SPENT = (
    "racing", "holds", "breaks", "does not pay", "task exhausted", "budget spent")
DECISIONS = (RACING, HOLDS, BREAKS, NO_PAY)  # decision_codes' codes index this
CAPABILITY = ("accuracy", "drift")  # shown below its threshold: the setting breaks
SPEED = "speed"


@dataclass(frozen=True)
class RaceRules:
    """What a race judges and at what level (the tune command's flags map onto these)."""

    confidence: float = 0.95
    max_drop: float | None = 0.02  # accuracy, as a fraction; None: no gold, drift decides capability
    max_drift: float | None = None  # nats/token of verifier log-prob; required when max_drop is None
    judge_speed: bool = True  # False: speed is judged elsewhere (a replay screen), the race is capability only
    drift_below: float = 1.0  # nats/token: a problem's Δ logp/token below −max_drift − this counts as that
    drift_above: float = 0.25  # ... and above −max_drift + this as that
    speed_below: float = math.log(2.0)  # a log speed-up below log(needed) − this counts as that
    speed_above: float = math.log(1.5)  # ... and above log(needed) + this as that
    batch: int = 4  # problems a setting runs between looks
    repeats: int = 1  # seeds per problem: generations per problem per setting
    family: int = 1  # settings the level is shared over (1: the guarantee is per setting)

    def __post_init__(self) -> None:
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1) (got {self.confidence})")
        if self.max_drop is None and self.max_drift is None:
            raise ValueError("a task without gold is judged on drift: give max_drift")
        for name in ("max_drop", "max_drift"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0 (got {value})")
        if not min(self.drift_below, self.drift_above, self.speed_below, self.speed_above) > 0:
            raise ValueError("the clip windows must be wider than 0 on both sides")
        if self.batch < 1 or self.repeats < 1 or self.family < 1:
            raise ValueError("batch, repeats and family must be >= 1")

    @property
    def criteria(self) -> tuple[str, ...]:
        accuracy = ("accuracy",) if self.max_drop is not None else ()
        drift = ("drift",) if self.max_drift is not None else ()
        return (*accuracy, *drift, *((SPEED,) if self.judge_speed else ()))

    @property
    def sequence_alpha(self) -> float:
        """The two-sided level of each criterion's sequence: each side gets 1 − confidence split over the
        criteria and the family (a union bound; only one side per criterion can make a decision wrong)."""
        return 2.0 * (1.0 - self.confidence) / (len(self.criteria) * self.family)

    def value_range(self, criterion: str, needed_speedup: float = 1.0) -> tuple[float, float]:
        """The range a criterion's sequence runs on: accuracy's own, else the clip window on the threshold."""
        if criterion == "accuracy":
            return -1.0, 1.0
        centre = self.threshold(criterion, needed_speedup)
        if criterion == "drift":
            return centre - self.drift_below, centre + self.drift_above
        return centre - self.speed_below, centre + self.speed_above

    def threshold(self, criterion: str, needed_speedup: float) -> float:
        """The point a criterion is decided against, in the units its sequence runs on."""
        if criterion == "accuracy":
            return -float(self.max_drop or 0.0)
        if criterion == "drift":
            return -float(self.max_drift or 0.0)
        return math.log(needed_speedup)

    def bounded(self, criterion: str, value: float, needed_speedup: float = 1.0) -> float:
        """A raw per-problem outcome as its sequence takes it: accuracy as is, drift clipped, speed-up as a
        clipped log."""
        return float(self.bounded_values(criterion, value, needed_speedup))

    def bounded_values(self, criterion: str, values: ArrayLike, needed_speedup: float = 1.0) -> NDArray[np.float64]:
        """:meth:`bounded`, elementwise (simulations)."""
        values = np.asarray(values, dtype=np.float64)
        if criterion == "accuracy":
            return values
        if criterion == SPEED:
            if np.any(~(values > 0)):
                raise ValueError("a speed-up must be > 0")
            values = np.log(values)
        low, high = self.value_range(criterion, needed_speedup)
        return np.clip(values, low, high)


def decision_codes(above: Mapping[str, ArrayLike], below: Mapping[str, ArrayLike]) -> NDArray[np.int64]:
    """The decision rule, elementwise (one setting, or many simulated copies): index into DECISIONS.
    ``above[c]``: criterion c shown above its threshold; ``below[c]``: shown below. Capability shown below breaks
    (checked first: it says more than speed), speed shown below does not pay, everything shown above holds."""
    criteria = list(above)
    shape = np.broadcast_shapes(*(np.shape(above[c]) for c in criteria), *(np.shape(below[c]) for c in criteria))
    breaks = np.zeros(shape, dtype=bool)
    for c in criteria:
        if c in CAPABILITY:
            breaks |= np.asarray(below[c], dtype=bool)
    no_pay = np.asarray(below[SPEED], dtype=bool) if SPEED in below else np.zeros(shape, dtype=bool)
    holds = np.ones(shape, dtype=bool)
    for c in criteria:
        holds &= np.asarray(above[c], dtype=bool)
    return np.select([breaks, no_pay, holds], [2, 3, 1], default=0).astype(np.int64)


def decide(above: Mapping[str, bool], below: Mapping[str, bool]) -> str:
    return DECISIONS[int(decision_codes(above, below))]


@dataclass(frozen=True)
class Interval:
    estimate: float  # running mean of the bounded values
    low: float
    high: float


def problems_to_decide(done: int, intervals: Mapping[str, Interval], thresholds: Mapping[str, float]) -> float:
    """Problems in all a setting would need, if each open criterion's estimate stays and its interval narrows as
    1/sqrt(n): a criterion leaning below its threshold decides alone (breaks, does not pay), those leaning above
    are all needed (holds). 0 before the first problem (look first); inf when an estimate sits on its threshold."""
    if done == 0:
        return 0.0
    alone: list[float] = []
    together: list[float] = []
    for criterion, interval in intervals.items():
        point = thresholds[criterion]
        if not interval.low <= point <= interval.high:
            continue  # decided
        gap = abs(interval.estimate - point)
        half = (interval.high - interval.low) / 2
        needed = math.inf if gap == 0 else done * (half / gap) ** 2
        (alone if interval.estimate < point else together).append(needed)
    if alone:
        return min(alone)
    return max(together, default=float(done))


@dataclass(frozen=True)
class Candidate:
    """An undecided setting as the allocation sees it."""

    name: str
    pair: str  # the strict run it is paired with
    done: int  # problems it has run
    to_decide: float  # problems_to_decide


def allocate(candidates: Sequence[Candidate], strict_done: Mapping[str, int], *, batch: int, task_size: int,
             budget_left: float = math.inf, repeats: int = 1) -> dict[str, int]:
    """Which settings run their next batch, and how many problems each: closest to a decision first (fewest
    estimated problems still to run, then name), each taken while its batch — with the strict runs it needs that
    are not yet run or already taken — fits the budget (generations). A decided setting is not a candidate."""
    strict_reach = dict(strict_done)
    chosen: dict[str, int] = {}
    for c in sorted(candidates, key=lambda c: (max(c.to_decide - c.done, 0.0), c.name)):
        size = min(batch, task_size - c.done)
        if size <= 0:
            continue
        reach = c.done + size
        cost = (size + max(0, reach - strict_reach.get(c.pair, 0))) * repeats
        if cost > budget_left:
            continue
        budget_left -= cost
        strict_reach[c.pair] = max(strict_reach.get(c.pair, 0), reach)
        chosen[c.name] = size
    return chosen


@dataclass(frozen=True)
class SettingSpec:
    name: str
    pair: str  # strict's key, e.g. "N=3": settings at the same draft length share its runs
    needed_speedup: float = 1.0  # over its strict pair, for "pays" (e.g. 1 + --min-gain)


@dataclass(frozen=True)
class PairedOutcome:
    """One problem's paired result, setting against strict (repeats averaged); None where not judged."""

    problem_id: str
    accuracy: float | None = None  # correctness difference in [−1, 1]
    drift: float | None = None  # Δ mean verifier log-prob per token (nats)
    speedup: float | None = None  # strict's priced cost / the setting's, > 0


@dataclass
class SettingState:
    """One setting's books: what a run folder records. The sequences are rebuilt from ``values`` on restore."""

    spec: SettingSpec
    problems: list[str] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)  # raw outcomes per criterion, in order
    decision: str = RACING
    decided_after: int | None = None  # problems run when it was decided

    def to_json(self) -> dict[str, Any]:
        return {"spec": asdict(self.spec), "problems": list(self.problems),
                "values": {k: list(v) for k, v in self.values.items()}, "decision": self.decision,
                "decided_after": self.decided_after}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SettingState:
        return cls(SettingSpec(**data["spec"]), list(data["problems"]),
                   {k: [float(x) for x in v] for k, v in data["values"].items()}, str(data["decision"]),
                   data["decided_after"])


@dataclass(frozen=True)
class Plan:
    """The next round: problems each chosen setting runs, and the strict runs to make first (per pair key)."""

    settings: dict[str, tuple[str, ...]]
    strict: dict[str, tuple[str, ...]]
    cost: int  # generations

    @property
    def empty(self) -> bool:
        return not self.settings


@dataclass
class RaceState:
    """Everything a race has done: what the run folder records (``to_json``) and resumes from (``from_json``)."""

    rules: RaceRules
    order: tuple[str, ...]  # the task's problems in the race's seeded order
    settings: list[SettingState]
    strict_done: dict[str, int]  # per pair key: strict has run order[:n]
    budget: int | None = None  # generations; None: the task is the limit
    spent: int = 0  # generations, strict runs included

    def to_json(self) -> dict[str, Any]:
        return {"rules": asdict(self.rules), "order": list(self.order), "strict_done": dict(self.strict_done),
                "budget": self.budget, "spent": self.spent, "settings": [s.to_json() for s in self.settings]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RaceState:
        return cls(RaceRules(**data["rules"]), tuple(data["order"]),
                   [SettingState.from_json(s) for s in data["settings"]],
                   {str(k): int(v) for k, v in data["strict_done"].items()}, data["budget"], int(data["spent"]))


class Race:
    """A race in progress: its :class:`RaceState` and one confidence sequence per setting and criterion, rebuilt
    from the state by replaying its values. Drive it as: ``plan`` → run ``plan.strict``, ``record_strict`` → run
    each setting's problems, ``record`` → repeat until ``plan`` is empty → ``close``."""

    def __init__(self, state: RaceState) -> None:
        names = [s.spec.name for s in state.settings]
        if len(set(names)) != len(names):
            raise ValueError(f"setting names must be unique (got {names})")
        if len(set(state.order)) != len(state.order):
            raise ValueError("the problem order repeats a problem")
        for s in state.settings:
            state.strict_done.setdefault(s.spec.pair, 0)
        self.state = state
        self.rules = state.rules
        self.settings = {s.spec.name: s for s in state.settings}
        self._sequences = {name: self._replay(s) for name, s in self.settings.items()}
        for name, s in self.settings.items():
            replayed = self._tested(name)
            if s.decision in DECISIONS and replayed != s.decision:
                raise ValueError(f"{name}: the recorded values replay to {replayed!r}, the record says "
                                 f"{s.decision!r}")

    @classmethod
    def start(cls, rules: RaceRules, specs: Sequence[SettingSpec], problem_ids: Sequence[str], *, seed: int,
              budget: int | None = None) -> Race:
        """A new race over the task's problems in a seeded random order (a file's order may be sorted by
        difficulty; the sequences assume each next problem is a fresh draw from the task)."""
        order = sorted(problem_ids)
        random.Random(seed).shuffle(order)
        return cls(RaceState(rules, tuple(order), [SettingState(spec) for spec in specs], {}, budget))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Race:
        return cls(RaceState.from_json(data))

    def to_json(self) -> dict[str, Any]:
        return self.state.to_json()

    def _replay(self, setting: SettingState) -> dict[str, ConfidenceSequence]:
        rules = self.rules
        sequences = {}
        for criterion in rules.criteria:
            needed = setting.spec.needed_speedup
            low, high = rules.value_range(criterion, needed)
            point = rules.threshold(criterion, needed)
            sequence = ConfidenceSequence(rules.sequence_alpha, low, high, watch=(point,))
            for value in setting.values.get(criterion, []):
                sequence.update(rules.bounded(criterion, value, needed))
            sequences[criterion] = sequence
        return sequences

    # --- reading -------------------------------------------------------------------------------------------------
    def intervals(self, name: str) -> dict[str, Interval]:
        """Each criterion's interval now, in its sequence's units (speed: log speed-up)."""
        return {c: Interval(s.mean, *s.interval()) for c, s in self._sequences[name].items()}

    def thresholds(self, name: str) -> dict[str, float]:
        spec = self.settings[name].spec
        return {c: self.rules.threshold(c, spec.needed_speedup) for c in self.rules.criteria}

    def racing(self) -> list[str]:
        return [name for name, s in self.settings.items() if s.decision == RACING]

    def _tested(self, name: str) -> str:
        sequences, points = self._sequences[name], self.thresholds(name)
        return decide({c: s.shows_above(points[c]) for c, s in sequences.items()},
                      {c: s.shows_below(points[c]) for c, s in sequences.items()})

    # --- planning ------------------------------------------------------------------------------------------------
    def plan(self) -> Plan:
        state = self.state
        budget_left = math.inf if state.budget is None else state.budget - state.spent
        candidates = []
        for name in self.racing():
            done = len(self.settings[name].problems)
            to_decide = (0.0 if budget_left == math.inf  # every setting runs: no order to choose
                         else problems_to_decide(done, self.intervals(name), self.thresholds(name)))
            candidates.append(Candidate(name, self.settings[name].spec.pair, done, to_decide))
        chosen = allocate(candidates, state.strict_done, batch=self.rules.batch, task_size=len(state.order),
                          budget_left=budget_left, repeats=self.rules.repeats)
        batches: dict[str, tuple[str, ...]] = {}
        reach: dict[str, int] = {}
        for name, size in chosen.items():
            done, pair = len(self.settings[name].problems), self.settings[name].spec.pair
            batches[name] = state.order[done:done + size]
            reach[pair] = max(reach.get(pair, 0), done + size)
        strict = {pair: state.order[state.strict_done[pair]:end] for pair, end in reach.items()
                  if end > state.strict_done[pair]}
        cost = (sum(map(len, batches.values())) + sum(map(len, strict.values()))) * self.rules.repeats
        return Plan(batches, strict, cost)

    # --- recording -----------------------------------------------------------------------------------------------
    def record_strict(self, pair: str, problem_ids: Sequence[str]) -> None:
        state = self.state
        done = state.strict_done[pair]
        if tuple(problem_ids) != state.order[done:done + len(problem_ids)]:
            raise ValueError(f"strict {pair}: problems out of the race's order")
        state.strict_done[pair] = done + len(problem_ids)
        state.spent += len(problem_ids) * self.rules.repeats

    def record(self, name: str, outcomes: Sequence[PairedOutcome]) -> str:
        """A batch of paired outcomes, in the race's order; returns the setting's decision after it."""
        state, setting = self.state, self.settings[name]
        if setting.decision != RACING:
            raise ValueError(f"{name} is decided ({setting.decision}): it runs no more problems")
        done = len(setting.problems)
        ids = tuple(o.problem_id for o in outcomes)
        if ids != state.order[done:done + len(ids)]:
            raise ValueError(f"{name}: problems out of the race's order")
        if done + len(ids) > state.strict_done[setting.spec.pair]:
            raise ValueError(f"{name}: strict {setting.spec.pair} has not run these problems")
        for outcome in outcomes:
            raws = {c: getattr(outcome, "speedup" if c == SPEED else c) for c in self.rules.criteria}
            missing = [c for c, raw in raws.items() if raw is None]
            if missing:
                raise ValueError(f"{name}, {outcome.problem_id}: no {', '.join(missing)} outcome")
            for criterion, raw in raws.items():
                bounded = self.rules.bounded(criterion, float(raw), setting.spec.needed_speedup)
                self._sequences[name][criterion].update(bounded)
                setting.values.setdefault(criterion, []).append(float(raw))
            setting.problems.append(outcome.problem_id)
        state.spent += len(ids) * self.rules.repeats
        decision = self._tested(name)
        if decision == RACING and len(setting.problems) >= len(state.order):
            decision = EXHAUSTED
        if decision != RACING:
            setting.decision, setting.decided_after = decision, len(setting.problems)
        return setting.decision

    def close(self) -> None:
        """The race ends (nothing more fits the budget): settings still racing are undecided, budget spent."""
        for name in self.racing():
            self.settings[name].decision = BUDGET_SPENT
            self.settings[name].decided_after = len(self.settings[name].problems)
