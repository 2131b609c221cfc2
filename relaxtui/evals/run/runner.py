"""The headless eval runner: every grid point × problem × repeat, scored and appended as it finishes.

Seeds are ``seed + repeat`` (avg@n); the same seeds run under every config, so speed and capability compare
like for like, pair by pair. Order is problem-major: each (problem, seed) runs under every config before the
next, so drift in machine speed hits all configs alike. The driver plans *work units* and writes records;
an executor (``evals.run.executors``: one sequence at a time, many in one context, or Ray actors) turns units into
records (``evals.run.units``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relaxtui.decoding.drafters import Drafter
from relaxtui.engine.api import Model
from relaxtui.errors import UserError
from relaxtui.evals.run.executors import Executor, local_executor
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import ResultsStore
from relaxtui.evals.run.units import ROWS_FIELD, WorkUnit
from relaxtui.evals.tasks.base import Sample, Task

__all__ = ["Known", "SampleDone", "plan_units", "run_eval", "run_units", "run_work"]


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
    known = Known.of(store)
    run_work(task, plan, plan_units(samples, plan, identity), store, executor, known, on_sample, should_stop)


Key = tuple[str, str, int]  # (config id, problem id, seed): a unit's, and its record's


@dataclass
class Known:
    """The records a run folder holds, by unit key, kept up to date as units finish: what a driver that runs units
    in several calls (the race, batch by batch) skips and reads back without reading the file again."""

    records: dict[Key, dict[str, Any]]

    @classmethod
    def of(cls, store: ResultsStore) -> Known:
        return cls({(r["config_id"], r["problem_id"], r["seed"]): r for r in store.records()})

    def of_problem(self, config_id: str, problem_id: str) -> list[dict[str, Any]]:
        """Every seed's record of one problem under one config."""
        return [r for (cid, pid, _), r in self.records.items() if cid == config_id and pid == problem_id]


def run_work(task: Task, plan: EvalPlan, units: Sequence[WorkUnit], store: ResultsStore, executor: Executor,
             known: Known, on_sample: Callable[[SampleDone], None] = lambda _: None,
             should_stop: Callable[[], bool] = lambda: False) -> int:
    """Run the ``units`` ``known`` does not hold, appending each record as it arrives (its rows first) and adding
    it to ``known``; returns how many ran. ``plan`` gives what every unit shares (sampling, budget, bonus)."""
    todo = [unit for unit in units if unit.key not in known.records]
    skipped = len(units) - len(todo)
    done = skipped
    for record in executor.run(task, plan, todo, should_stop):
        key = (record["config_id"], record["problem_id"], record["seed"])
        if key in known.records:
            continue  # an executor that retried a unit may return it twice: the first one wins
        rows = record.pop(ROWS_FIELD, None)
        if rows is not None:  # before the line: a unit with a line has its rows, and a resumed run skips both
            store.write_rows(key, rows)
        store.append(record)
        known.records[key] = record
        done += 1
        on_sample(SampleDone(record, done, len(units), skipped))
    return done - skipped


def run_eval(task: Task, samples: Sequence[Sample], plan: EvalPlan, identity: RunIdentity, store: ResultsStore,
             verifier: Model, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]],
             on_sample: Callable[[SampleDone], None] = lambda _: None,
             should_stop: Callable[[], bool] = lambda: False) -> None:
    """Run the plan on one local pair: one sequence at a time, or as many at once as its contexts hold."""
    if drafter is None and any(p.rule is not None for p in plan.points()):
        raise UserError("speculative configs need a drafter; pass --drafter or only --no-spec")
    run_units(task, samples, plan, identity, store, local_executor(verifier, drafter, tokenize), on_sample,
              should_stop)
