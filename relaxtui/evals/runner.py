"""The headless eval runner: every grid point × problem × repeat, scored and appended as it finishes.

Seeds are ``seed + repeat`` (avg@n); the same seeds run under every config, so speed and capability compare
like for like, pair by pair. Order is problem-major: each (problem, seed) runs under every config before the
next, so drift in machine speed hits all configs alike. The driver plans *work units* and writes records;
an executor (one sequence at a time here, many sequences or Ray actors elsewhere) turns units into records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from relaxtui.decoding.backend import Backend
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import GenerationConfig, generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.evals.degeneracy import is_degenerate
from relaxtui.evals.identity import RunIdentity
from relaxtui.evals.results import GridPoint, ResultsStore
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.rules import PAPER_GRID, RULES, Rule, make, split_spec


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
        for spec in self.rules:
            name = self._name(spec)
            if name not in RULES:
                make(name)  # raises the "unknown rule" error with the known names
            if self.sampling.greedy and not RULES[name].greedy_ok:
                raise UserError(f"rule {name!r} cannot run greedy (temperature 0); use --temperature > 0")
        if not self.rules and not self.no_spec:
            raise UserError("nothing to run: give --rule or --no-spec")
        self.points()  # every knob of the grid is validated before anything runs

    @property
    def has_spec(self) -> bool:
        return bool(self.rules)

    @staticmethod
    def _name(spec: str) -> str:
        return split_spec(spec)[0]

    def _knobs(self, spec: str) -> tuple[float | None, ...]:
        """``rule:knob`` pins the knob; a bare rule takes --alpha, or else its paper grid."""
        name, knob = split_spec(spec)
        if knob is not None or RULES[name].knob_name is None:
            return (knob,)
        return self.alphas or PAPER_GRID[name]

    def points(self) -> list[GridPoint]:
        points = [GridPoint(None, None, 0)] if self.no_spec else []
        for spec in self.rules:
            name = self._name(spec)
            for knob in self._knobs(spec):
                make(name, knob)
                points += [GridPoint(name, knob, n) for n in self.draft_max]
        return points


@dataclass(frozen=True)
class SampleDone:
    """Progress report: the record just written and how far the run is."""

    record: dict[str, Any]
    done: int
    total: int
    skipped: int


@dataclass(frozen=True)
class WorkUnit:
    """One generation to run: a (problem, seed) under one config. Units are what executors consume."""

    sample: Sample
    point: GridPoint
    config_id: str
    seed: int
    repeat: int

    @property
    def key(self) -> tuple[str, str, int]:
        return self.config_id, self.sample.id, self.seed


def plan_units(samples: Sequence[Sample], plan: EvalPlan, identity: RunIdentity) -> list[WorkUnit]:
    """Every unit of the run, problem-major: each (problem, seed) goes through every config before the next
    one starts, so a machine that speeds up or slows down mid-run shifts all configs alike (paired runs)."""
    points = [(point, identity.config_id(point)) for point in plan.points()]
    return [WorkUnit(sample, point, cid, plan.seed + repeat, repeat)
            for sample in samples for repeat in range(plan.repeats) for point, cid in points]


def make_record(task: Task, unit: WorkUnit, finished: Finished) -> dict[str, Any]:
    """The JSON line of a finished unit: identity, output, score, and every counter the reports need."""
    metrics = finished.metrics
    score = task.score(finished.text, unit.sample)
    return {
        "task": task.name, "task_version": task.version, "problem_id": unit.sample.id,
        "config_id": unit.config_id, "config": {**asdict(unit.point), "label": unit.point.label},
        "seed": unit.seed, "repeat": unit.repeat,
        "output": finished.text, "parsed": score.parsed if isinstance(score.parsed, (str, int, float)) else None,
        "correct": bool(score.correct), "detail": score.detail,
        "output_tokens": metrics.output_tokens, "prompt_tokens": metrics.prompt_tokens,
        "truncated": metrics.truncated, "finish_reason": metrics.finish_reason,
        "degenerate": is_degenerate(finished.token_ids),
        "rounds": metrics.rounds, "drafted": metrics.drafted, "accepted": metrics.accepted,
        "draft_lengths": list(metrics.draft_lengths), "extra_draft_steps": metrics.extra_draft_steps,
        "full_accept_rounds": metrics.full_accept_rounds,
        "per_position_reached": list(metrics.per_position_reached),
        "per_position_accepted": list(metrics.per_position_accepted),
        "per_position_acceptance": list(metrics.per_position_acceptance),
        "decode_s": metrics.decode_s, "prefill_s": metrics.prefill_s, "tokens_per_s": metrics.tokens_per_s,
        "finished_at": time.time(),
    }


def unit_config(plan: EvalPlan, unit: WorkUnit) -> tuple[GenerationConfig, Rule | None]:
    rule = (make(unit.point.rule, unit.point.knob, temperature=plan.sampling.temperature or 1.0)
            if unit.point.rule else None)
    config = GenerationConfig(draft_max=unit.point.draft_max, max_tokens=plan.max_tokens, sampling=plan.sampling,
                              seed=unit.seed, bonus=plan.bonus, draft_min=plan.draft_min, adaptive=plan.adaptive)
    return config, rule


class SequentialExecutor:
    """Runs units one at a time on one verifier/drafter pair (the one-sequence loop)."""

    def __init__(self, verifier: Backend, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]]) -> None:
        self.verifier, self.drafter, self.tokenize = verifier, drafter, tokenize
        self._prompts: dict[str, list[int]] = {}

    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """Yield one record per finished unit; a unit cut short by a stop request yields nothing."""
        for unit in units:
            if should_stop():
                return
            prompt = self._prompts.get(unit.sample.id)
            if prompt is None:
                prompt = self._prompts[unit.sample.id] = self.tokenize(unit.sample)
            config, rule = unit_config(plan, unit)
            drafter = self.drafter if unit.point.rule else None
            finished = None
            for event in generate(self.verifier, prompt, config, drafter=drafter, rule=rule,
                                  should_stop=should_stop):
                if isinstance(event, Finished):
                    finished = event
            assert finished is not None
            if finished.metrics.finish_reason == "stopped":
                return  # the unfinished sample is not recorded; the next run redoes it
            yield make_record(task, unit, finished)


class Executor(Protocol):
    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]: ...


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
             verifier: Backend, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]],
             on_sample: Callable[[SampleDone], None] = lambda _: None,
             should_stop: Callable[[], bool] = lambda: False) -> None:
    """Run the plan on one local pair: one sequence at a time, or as many at once as its contexts hold."""
    if drafter is None and any(p.rule is not None for p in plan.points()):
        raise UserError("speculative configs need a drafter; pass --drafter or only --no-spec")
    run_units(task, samples, plan, identity, store, local_executor(verifier, drafter, tokenize), on_sample, should_stop)


def local_executor(verifier: Backend, drafter: Drafter | None,
                   tokenize: Callable[[Sample], list[int]]) -> Executor:
    """The executor for a local pair: the batched one when the verifier's context holds several sequences."""
    if getattr(verifier, "n_seq", 1) > 1:
        from relaxtui.evals.parallel import ParallelExecutor

        return ParallelExecutor(verifier, drafter, tokenize)  # type: ignore[arg-type]
    return SequentialExecutor(verifier, drafter, tokenize)
