"""Executors turn work units into records (the driver, ``runner.run_units``, only writes them).

- ``SequentialExecutor``: one unit at a time on one pair (the one-sequence loop);
- ``ParallelExecutor``: K units at once, one sequence each in one context per model, through the same continuous
  batching the server uses (``relaxtui.executors.BatchedExecutor``);
- ``relaxtui.evals.run.ray_executor.RayExecutor``: units on Ray actors, each running one of the two above.

Records come back as units finish, which may be out of plan order: the driver keys them by (config, problem,
seed), so resume and deduplication do not care. A unit cut short by a stop request yields no record; a unit
whose row cannot run (its prompt does not render or does not fit the context) yields a failed record with its
reason (``units.failed_record``) and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from relaxtui.decoding.batched import Job
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.engine.api import Model
from relaxtui.errors import UserError
from relaxtui.evals.run.units import WorkUnit, failed_record, make_record, row_problem, unit_config
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.executors import BatchedExecutor

if TYPE_CHECKING:
    from relaxtui.decoding.config import GenerationConfig
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.rules import Rule

__all__ = ["Executor", "ParallelExecutor", "SequentialExecutor", "local_executor"]


class Executor(Protocol):
    """Lifecycle: ``start()`` readies what it runs on (Ray starts its actors; a local pair is loaded by the caller),
    ``run(...)`` yields records as units finish (it may be called again with more units), ``close()`` frees it."""

    def start(self) -> object: ...
    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]: ...
    def close(self) -> None: ...


class _Local:
    """Local executors run on a pair the caller loaded and frees: nothing to start or close here."""

    verifier: Model
    drafter: Drafter | None
    tokenize: Callable[[Sample], list[int]]
    _prompts: dict[str, list[int] | str]

    def config(self, plan: EvalPlan, unit: WorkUnit) -> tuple[GenerationConfig, Rule | None]:
        return unit_config(plan, unit)

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def prompt(self, sample: Sample) -> list[int] | str:
        """The sample's prompt tokens (tokenised once per sample, shared by its configs and seeds), or why its row
        cannot run: a prompt the chat template refuses, an empty one, or one the context cannot hold."""
        found = self._prompts.get(sample.id)
        if found is None:
            try:
                tokens = self.tokenize(sample)
            except UserError as exc:
                found = str(exc)
            else:
                found = row_problem(tokens, self.verifier.n_ctx) or tokens
            self._prompts[sample.id] = found
        return found

    def _runnable(self, task: Task, units: Sequence[WorkUnit],
                  should_stop: Callable[[], bool]) -> Iterator[WorkUnit | dict[str, Any]]:
        """Each unit whose row can run, or the failed record of one that cannot; nothing more after a stop request."""
        for unit in units:
            if should_stop():
                return
            prompt = self.prompt(unit.sample)
            yield failed_record(task, unit, prompt) if isinstance(prompt, str) else unit


class SequentialExecutor(_Local):
    """Runs units one at a time on one verifier/drafter pair (the one-sequence loop)."""

    def __init__(self, verifier: Model, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]]) -> None:
        self.verifier, self.drafter, self.tokenize = verifier, drafter, tokenize
        self._prompts = {}

    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """Yield one record per finished unit; a unit cut short by a stop request yields nothing."""
        for unit in self._runnable(task, units, should_stop):
            if isinstance(unit, dict):  # a failed record
                yield unit
                continue
            config, rule = self.config(plan, unit)
            drafter = self.drafter if unit.point.rule else None
            prompt = self.prompt(unit.sample)
            assert not isinstance(prompt, str)  # _runnable() made this unit's failed record instead
            finished = None
            for event in generate(self.verifier, prompt, config, drafter=drafter, rule=rule,
                                  should_stop=should_stop):
                if isinstance(event, Finished):
                    finished = event
            assert finished is not None
            if finished.metrics.finish_reason == "stopped":
                return  # the unfinished sample is not recorded; the next run redoes it
            yield make_record(task, unit, finished, plan)


class ParallelExecutor(_Local):
    """Runs units ``verifier.n_seq`` at a time on one pair whose contexts hold that many sequences."""

    def __init__(self, verifier: Model, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]]) -> None:
        self.verifier, self.drafter, self.tokenize = verifier, drafter, tokenize
        self._prompts = {}

    def _jobs(self, plan: EvalPlan, units: Sequence[WorkUnit]) -> Iterator[Job]:
        for unit in units:
            prompt = self.prompt(unit.sample)
            assert not isinstance(prompt, str)  # run() keeps the units whose rows cannot run out of the batch
            config, rule = self.config(plan, unit)
            yield Job(prompt, config, rule, speculative=unit.point.rule is not None, tag=unit)

    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """Yield one record per finished unit, as units finish: the units, in plan order, are the jobs of one
        ``BatchedExecutor`` run in this thread (the server's continuous batching, fed once and closed)."""
        runnable, seen = [], 0
        for unit in self._runnable(task, units, should_stop):
            seen += 1
            if isinstance(unit, dict):  # a failed record
                yield unit
            else:
                runnable.append(unit)
        if seen < len(units):
            return  # a stop request came before every unit was looked at
        batch = BatchedExecutor(self.verifier, self.drafter)
        batch.submit(self._jobs(plan, runnable))
        batch.close()  # no more jobs: the run ends when these are done
        for job, finished in batch.run(should_stop, tokens=False):
            if not isinstance(finished, Finished) or finished.metrics.finish_reason == "stopped":
                continue  # the unfinished unit is not recorded; the next run redoes it
            yield make_record(task, job.tag, finished, plan)


def local_executor(verifier: Model, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]]) -> Executor:
    """The executor for a local pair: the batched one when the verifier's context holds several sequences (its
    drafter cut by price where the pair that built it says so)."""
    if verifier.n_seq > 1:
        return ParallelExecutor(verifier, drafter, tokenize)
    return SequentialExecutor(verifier, drafter, tokenize)
