"""The headless eval runner: every grid point × problem × repeat, scored and appended as it finishes.

Seeds are ``seed + repeat`` (avg@n); the same seeds run under every config, so speed and capability compare
like for like, pair by pair. Order is problem-major: each (problem, seed) runs under every config before the
next, so drift in machine speed hits all configs alike. The driver plans *work units* and writes records;
an executor (``evals.executors``: one sequence at a time, many in one context, or Ray actors) turns units into
records (``evals.units``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import Model
from relaxtui.errors import UserError
from relaxtui.evals.executors import Executor, SequentialExecutor, local_executor
from relaxtui.evals.identity import RunIdentity
from relaxtui.evals.results import GridPoint, ResultsStore
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.evals.units import WorkUnit, make_record, unit_config
from relaxtui.rules import PAPER_GRID, Rule, make, rule_class, split_spec

# where these live now; importable from here as before
__all__ = ["EvalPlan", "Executor", "SampleDone", "SequentialExecutor", "WorkUnit", "local_executor", "make_record",
           "plan_units", "run_eval", "run_units", "unit_config"]


@dataclass(frozen=True)
class EvalPlan:
    rules: tuple[str, ...] = ("strict",)
    alphas: tuple[float, ...] = ()  # empty: each rule's paper grid
    draft_max: tuple[int, ...] = (3,)
    no_spec: bool = True
    repeats: int = 1
    seed: int = 0
    max_tokens: int = 4096
    sampling: SamplingParams = SamplingParams()
    bonus: str = "auto"
    draft_min: int = 0
    adaptive: bool = False

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise UserError(f"--repeats must be >= 1 (got {self.repeats})")
        if not self.rules and not self.no_spec:
            raise UserError("nothing to run: give --rule or --no-spec")
        self.points()  # every rule of the grid is built once before anything runs (a bad knob, greedy: one line)

    @property
    def has_spec(self) -> bool:
        return bool(self.rules)

    @staticmethod
    def _name(spec: str) -> str:
        return split_spec(spec)[0]

    def _knobs(self, spec: str) -> tuple[float | None, ...]:
        """``rule:knob`` pins the knob; a bare rule takes --alpha, or else its paper grid."""
        name, knob = split_spec(spec)
        if knob is not None or rule_class(name).knob_name is None:  # an unknown rule: one line
            return (knob,)
        return self.alphas or PAPER_GRID[name]

    def points(self) -> list[GridPoint]:
        points = [GridPoint(None, None, 0)] if self.no_spec else []
        for spec in self.rules:
            name = self._name(spec)
            for knob in self._knobs(spec):
                self.rule_at(GridPoint(name, knob, 0))
                points += [GridPoint(name, knob, n) for n in self.draft_max]
        return points

    def rule_at(self, point: GridPoint) -> Rule | None:
        """The rule a grid point runs (None: the verifier alone), built by the factory, the eval run's one place for
        it: its knob validated, and at temperature 0 a rule that cannot run greedy refused."""
        return make(point.rule, point.knob, temperature=self.sampling.temperature) if point.rule else None


@dataclass(frozen=True)
class SampleDone:
    """Progress report: the record just written and how far the run is."""

    record: dict[str, Any]
    done: int
    total: int
    skipped: int


def plan_units(samples: Sequence[Sample], plan: EvalPlan, identity: RunIdentity) -> list[WorkUnit]:
    """Every unit of the run, problem-major: each (problem, seed) goes through every config before the next
    one starts, so a machine that speeds up or slows down mid-run shifts all configs alike (paired runs)."""
    points = [(point, identity.config_id(point)) for point in plan.points()]
    return [WorkUnit(sample, point, cid, plan.seed + repeat, repeat)
            for sample in samples for repeat in range(plan.repeats) for point, cid in points]


def run_units(task: Task, samples: Sequence[Sample], plan: EvalPlan, identity: RunIdentity, store: ResultsStore,
              executor: Executor, on_sample: Callable[[SampleDone], None] = lambda _: None,
              should_stop: Callable[[], bool] = lambda: False) -> None:
    """The driver: plan the units, skip what the store already has, append each record as it arrives.
    Only the driver writes, so resume and deduplication live in one place whatever the executor is."""
    store.open_run(identity)
    units = plan_units(samples, plan, identity)
    done_keys = store.done_keys()
    todo = [unit for unit in units if unit.key not in done_keys]
    skipped = len(units) - len(todo)
    done = skipped
    for record in executor.run(task, plan, todo, should_stop):
        key = (record["config_id"], record["problem_id"], record["seed"])
        if key in done_keys:
            continue  # an executor that retried a unit may return it twice: the first one wins
        done_keys.add(key)
        store.append(record)
        done += 1
        on_sample(SampleDone(record, done, len(units), skipped))


def run_eval(task: Task, samples: Sequence[Sample], plan: EvalPlan, identity: RunIdentity, store: ResultsStore,
             verifier: Model, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]],
             on_sample: Callable[[SampleDone], None] = lambda _: None,
             should_stop: Callable[[], bool] = lambda: False) -> None:
    """Run the plan on one local pair: one sequence at a time, or as many at once as its contexts hold."""
    if drafter is None and any(p.rule is not None for p in plan.points()):
        raise UserError("speculative configs need a drafter; pass --drafter or only --no-spec")
    run_units(task, samples, plan, identity, store, local_executor(verifier, drafter, tokenize), on_sample, should_stop)
