"""The headless eval runner: every grid point × problem × repeat, scored and appended as it finishes.

Seeds are ``seed + repeat`` (avg@n); the same seeds run under every config, so speed and capability compare
like for like. The verifier-alone baseline (when asked for) runs first, so speed-ups are available early.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from relaxtui.decoding.backend import Backend
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Finished, Metrics
from relaxtui.decoding.loop import GenerationConfig, generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.evals.degeneracy import is_degenerate
from relaxtui.evals.results import GridPoint, ResultsStore, config_id
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.rules import PAPER_GRID, RULES, make


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

    @staticmethod
    def _name(spec: str) -> str:
        return spec.partition(":")[0]

    def _knobs(self, spec: str) -> tuple[float | None, ...]:
        """``rule:knob`` pins the knob; a bare rule takes --alpha, or else its paper grid."""
        name, pinned, knob = spec.partition(":")
        if RULES[name].knob_name is None:
            return (None,) if not pinned else (self._float(knob, spec),)
        if pinned:
            return (self._float(knob, spec),)
        return self.alphas or PAPER_GRID[name]

    @staticmethod
    def _float(text: str, spec: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise UserError(f"--rule {spec!r}: the knob after ':' must be a number") from None

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


def _record(task: Task, sample: Sample, point: GridPoint, cid: str, seed: int, repeat: int, text: str,
            metrics: Metrics, token_ids: Sequence[int]) -> dict[str, Any]:
    score = task.score(text, sample)
    return {
        "task": task.name, "task_version": task.version, "problem_id": sample.id, "config_id": cid,
        "config": {**asdict(point), "label": point.label}, "seed": seed, "repeat": repeat,
        "output": text, "parsed": score.parsed if isinstance(score.parsed, (str, int, float)) else None,
        "correct": bool(score.correct), "detail": score.detail,
        "output_tokens": metrics.output_tokens, "prompt_tokens": metrics.prompt_tokens,
        "truncated": metrics.truncated, "finish_reason": metrics.finish_reason,
        "degenerate": is_degenerate(token_ids),
        "rounds": metrics.rounds, "drafted": metrics.drafted, "accepted": metrics.accepted,
        "per_position_reached": list(metrics.per_position_reached),
        "per_position_accepted": list(metrics.per_position_accepted),
        "per_position_acceptance": list(metrics.per_position_acceptance),
        "decode_s": metrics.decode_s, "prefill_s": metrics.prefill_s, "tokens_per_s": metrics.tokens_per_s,
    }


def run_eval(task: Task, samples: Sequence[Sample], plan: EvalPlan, run: dict[str, Any], store: ResultsStore,
             verifier: Backend, drafter: Drafter | None, tokenize: Callable[[Sample], list[int]],
             on_sample: Callable[[SampleDone], None] = lambda _: None,
             should_stop: Callable[[], bool] = lambda: False) -> None:
    store.open_run(run)
    done_keys = store.done_keys()
    points = plan.points()
    if drafter is None and any(p.rule is not None for p in points):
        raise UserError("speculative configs need a drafter; pass --drafter or only --no-spec")
    total = len(points) * len(samples) * plan.repeats
    prompts: dict[str, list[int]] = {}
    done = skipped = 0
    for point in points:
        cid = config_id(run, point)
        rule = make(point.rule, point.knob, temperature=plan.sampling.temperature or 1.0) if point.rule else None
        config_drafter = drafter if point.rule else None
        for sample in samples:
            for repeat in range(plan.repeats):
                seed = plan.seed + repeat
                done += 1
                if (cid, sample.id, seed) in done_keys:
                    skipped += 1
                    continue
                if should_stop():
                    return
                if sample.id not in prompts:
                    prompts[sample.id] = tokenize(sample)
                config = GenerationConfig(draft_max=point.draft_max, max_tokens=plan.max_tokens,
                                          sampling=plan.sampling, seed=seed, bonus=plan.bonus)
                finished = None
                for event in generate(verifier, prompts[sample.id], config, drafter=config_drafter, rule=rule):
                    if isinstance(event, Finished):
                        finished = event
                assert finished is not None
                record = _record(task, sample, point, cid, seed, repeat, finished.text, finished.metrics,
                                 finished.token_ids)
                record["finished_at"] = time.time()
                store.append(record)
                on_sample(SampleDone(record, done, total, skipped))
