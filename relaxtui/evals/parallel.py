"""An executor that runs K work units at once, one sequence each, in one context per model (SPEC §8).

Units go into the batched loop in plan order; records come back as units finish, which may be out of plan
order — the driver (``run_units``) keys records by (config, problem, seed), so resume and deduplication do not
care. A unit cut short by a stop request yields no record, as with the sequential executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from relaxtui.decoding.backend import MultiBackend
from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.drafters import Drafter
from relaxtui.evals.runner import EvalPlan, WorkUnit, make_record, unit_config
from relaxtui.evals.tasks.base import Sample, Task


class ParallelExecutor:
    """Runs units ``verifier.n_seq`` at a time on one pair whose contexts hold that many sequences."""

    def __init__(self, verifier: MultiBackend, drafter: Drafter | None,
                 tokenize: Callable[[Sample], list[int]]) -> None:
        self.verifier, self.drafter, self.tokenize = verifier, drafter, tokenize
        self._prompts: dict[str, list[int]] = {}

    def _jobs(self, plan: EvalPlan, units: Sequence[WorkUnit]) -> Iterator[Job]:
        for unit in units:  # lazily: a prompt is tokenised when its unit takes a slot
            prompt = self._prompts.get(unit.sample.id)
            if prompt is None:
                prompt = self._prompts[unit.sample.id] = self.tokenize(unit.sample)
            config, rule = unit_config(plan, unit)
            yield Job(prompt, config, rule, speculative=unit.point.rule is not None, tag=unit)

    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """Yield one record per finished unit, as units finish."""
        for job, finished in generate_many(self.verifier, self._jobs(plan, units), drafter=self.drafter,
                                           should_stop=should_stop):
            if finished.metrics.finish_reason == "stopped":
                continue  # the unfinished unit is not recorded; the next run redoes it
            yield make_record(task, job.tag, finished)
