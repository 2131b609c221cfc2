"""The race's driver: runs what ``evals.analysis.race.Race`` plans, batch by batch, through the eval runner's own
executors, and feeds it each problem's paired outcome (docs/method.md#racing).

A batch is the race's plan: the strict runs some racing setting needs next (strict runs once per draft length, on
the problems the settings that pair with it reach), then each chosen setting's next problems. Its units go to the
executor problem-major — each problem's strict run and every setting's run of it back to back — so a machine that
speeds up or slows down moves a pair's both sides alike. The driver alone writes: records to the results file (the
runner's ``run_work``: resume and deduplication as eval's), and the race's books to ``race.json`` after each batch.

Resume: the books are saved after every batch and the results file keeps every finished unit; a restarted race
re-plans the batch it was in (the same batch: the plan is a function of the books), finds its finished units in the
file and runs only the rest, so it reaches the same decisions.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relaxtui.costmodel.pricing import priced_speedup, rounds_of_records
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.errors import UserError
from relaxtui.evals.analysis.race import PairedOutcome, Race, RaceRules, RaceState, SettingSpec, SettingState
from relaxtui.evals.run.executors import Executor
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import GridPoint, ResultsStore
from relaxtui.evals.run.runner import Known, SampleDone, run_work
from relaxtui.evals.run.units import WorkUnit
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.files import read_regular_bytes, write_atomic

RACE_FILE = "race.json"
RACE_MAX_BYTES = 16 << 20
Record = dict[str, Any]


@dataclass(frozen=True)
class Entrant:
    """A setting in the race: its grid point, the strict point it is paired with, and the speed-up over strict it
    must show to pay."""

    point: GridPoint
    needed_speedup: float

    @property
    def name(self) -> str:
        return self.point.label

    @property
    def strict(self) -> GridPoint:
        return GridPoint("strict", None, self.point.draft_max)

    def spec(self) -> SettingSpec:
        return SettingSpec(self.name, self.strict.label, self.needed_speedup)


def race_order(problem_ids: Sequence[str], seed: int) -> tuple[str, ...]:
    """The task's problems in the order every race over them runs (and the strict stage's screening problems are
    the first of): a seeded shuffle, so each next problem is a fresh draw from the task, as the sequences assume
    (a file's order may be sorted by difficulty)."""
    order = sorted(problem_ids)
    random.Random(seed).shuffle(order)
    return tuple(order)


def open_race(path: Path, rules: RaceRules, entrants: Sequence[Entrant], order: Sequence[str],
              budget: int | None) -> Race:
    """The race recorded at ``path``, resumed where it is this one (same rules and problem order), its settings'
    books kept and new settings added; else a new race. Nothing is lost by starting anew: a race is a function of
    the units' outcomes, and every finished unit is in the results file, so a new race reuses them at no cost."""
    specs = [entrant.spec() for entrant in entrants]
    if path.exists():
        race = read_race(path)
        if race.rules == rules and tuple(race.state.order) == tuple(order):
            kept = {s.spec: s for s in race.state.settings}
            state = replace(race.state, settings=[kept.get(spec) or SettingState(spec) for spec in specs],
                            budget=budget)
            return Race(state)
    return Race(RaceState(rules, tuple(order), [SettingState(spec) for spec in specs], {}, budget))


def read_race(path: Path) -> Race:
    """A recorded race (``eval report`` shows it): read as outside bytes, bounded; one line when it is not one."""
    try:
        return Race.from_json(json.loads(read_regular_bytes(path, RACE_MAX_BYTES, "race.json")))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a race this version can read ({exc})") from None


def save_race(path: Path, race: Race) -> None:
    write_atomic(path, json.dumps(race.to_json(), indent=1) + "\n")


def paired_outcome(problem_id: str, mine: Sequence[Record], strict: Sequence[Record],
                   profile: CostProfile | None, scored: bool) -> PairedOutcome:
    """One problem's outcome, a setting against strict on the same seeds (repeats averaged): the correctness
    difference (None for an open-ended task), the difference of the mean verifier log-prob per token (an output
    without one, an empty answer, counts as no difference), and the priced speed-up over strict (None without a
    profile; 1.0, no difference, when a side ran no round to price: a generation that failed or wrote nothing)."""
    def mean(records: Sequence[Record], key: str) -> float | None:
        values = [float(r[key]) for r in records if r.get(key) is not None]
        return sum(values) / len(values) if values else None

    accuracy = None
    if scored:
        accuracy = (mean(mine, "correct") or 0.0) - (mean(strict, "correct") or 0.0)
    mine_logp, strict_logp = mean(mine, "verifier_logprob"), mean(strict, "verifier_logprob")
    drift = 0.0 if mine_logp is None or strict_logp is None else mine_logp - strict_logp
    speedup = None
    if profile is not None:
        mine_speed = priced_speedup(profile, rounds_of_records(mine))
        strict_speed = priced_speedup(profile, rounds_of_records(strict))
        speedup = mine_speed / strict_speed if strict_speed > 0 and mine_speed > 0 else 1.0
    return PairedOutcome(problem_id, accuracy, drift, speedup)


@dataclass(frozen=True)
class Batch:
    """What one batch ran: its generations and seconds (the time estimate reads them)."""

    generations: int
    seconds: float


def run_race(race: Race, entrants: Sequence[Entrant], *, task: Task, samples: Mapping[str, Sample], plan: EvalPlan,
             identity: RunIdentity, store: ResultsStore, known: Known, executor: Executor,
             profile: CostProfile | None, path: Path, on_sample: Callable[[SampleDone], None] = lambda _: None,
             on_batch: Callable[[Race, Batch], None] = lambda *_: None,
             should_stop: Callable[[], bool] = lambda: False,
             deadline: float | None = None, seconds_per_generation: float | None = None) -> bool:
    """Run the race until ``race.plan()`` is empty (every setting decided, the task exhausted or the budget
    spent), a stop request, or — ``deadline`` (``time.monotonic()``) — until the next batch would not end in time
    at the seconds a generation has taken so far. Returns False when stopped (the books are saved: run again to go
    on). ``plan`` gives what every unit shares (sampling, budget, seeds, repeats)."""
    by_name = {entrant.name: entrant for entrant in entrants}
    points = {entrant.strict.label: entrant.strict for entrant in entrants} | {e.name: e.point for e in entrants}
    scored = getattr(task, "scored", True)
    pace = seconds_per_generation
    while not should_stop():
        if deadline is not None and pace is not None:  # a duration budget, in generations at today's pace
            left = max(0, math.floor((deadline - time.monotonic()) / pace))
            race.state.budget = race.state.spent + left
        batch = race.plan()
        if batch.empty:
            break
        units = _units(batch.strict, batch.settings, points, samples, plan, identity)
        started = time.monotonic()
        ran = run_work(task, plan, units, store, executor, known, on_sample=on_sample, should_stop=should_stop)
        if should_stop():
            return False
        seconds = time.monotonic() - started
        pace = seconds / ran if ran else pace
        for pair, ids in batch.strict.items():
            race.record_strict(pair, ids)
        for name, ids in batch.settings.items():
            entrant = by_name[name]
            mine, strict = identity.config_id(entrant.point), identity.config_id(entrant.strict)
            outcomes = [paired_outcome(pid, known.of_problem(mine, pid), known.of_problem(strict, pid), profile,
                                       scored) for pid in ids]
            race.record(name, outcomes)
        save_race(path, race)
        on_batch(race, Batch(batch.cost, seconds))
    if not should_stop():
        race.close()
        save_race(path, race)
    return not should_stop()


def _units(strict: Mapping[str, Sequence[str]], settings: Mapping[str, Sequence[str]], points: Mapping[str, GridPoint],
           samples: Mapping[str, Sample], plan: EvalPlan, identity: RunIdentity) -> list[WorkUnit]:
    """The batch's units, problem-major: each problem's strict run first, then every setting's run of it."""
    wanted: dict[str, list[str]] = {}
    for name, ids in [*strict.items(), *settings.items()]:
        for pid in ids:
            wanted.setdefault(pid, []).append(name)
    units = []
    for pid, names in wanted.items():
        for repeat in range(plan.repeats):
            for name in names:
                point = points[name]
                units.append(WorkUnit(samples[pid], point, identity.config_id(point), plan.seed + repeat, repeat))
    return units


def strict_stage_done(race: Race, entrants: Sequence[Entrant], screened: Sequence[str]) -> None:
    """Count the strict runs the screening stage already made (the first problems of the order) as the race's,
    without spending its budget on them: they ran before it started."""
    for pair in {entrant.strict.label for entrant in entrants}:
        done = race.state.strict_done.get(pair, 0)
        ahead = list(screened[done:])
        if ahead and tuple(ahead) == race.state.order[done:done + len(ahead)]:
            spent = race.state.spent
            race.record_strict(pair, ahead)
            race.state.spent = spent
