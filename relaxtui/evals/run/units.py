"""What an executor turns into a record: a work unit (one problem and seed under one config), the generation
config and rule it runs with, and the record of its finished generation.

Shared by every executor (one sequence at a time, many in one context, Ray actors on other nodes) and by the
driver (``runner.run_units``), so a record is made the same way wherever its unit ran.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from relaxtui.costmodel.replay_rows import pack
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished
from relaxtui.evals.analysis.degeneracy import is_degenerate
from relaxtui.evals.analysis.drift import record_signals
from relaxtui.evals.run.results import GridPoint
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.rules import Rule

if TYPE_CHECKING:
    from relaxtui.evals.run.plan import EvalPlan

__all__ = ["ROWS_FIELD", "WorkUnit", "failed_record", "make_record", "row_problem", "unit_config"]

FAILED = "failed: "  # how a record's detail starts when its row failed at run time (the run went on)
ROWS_FIELD = "round_rows"  # a record's recorded rounds on their way to the driver (bytes of a rows file,
# costmodel/replay_rows.py): the driver writes them beside the results and never into a result line


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



def make_record(task: Task, unit: WorkUnit, finished: Finished, plan: EvalPlan | None = None) -> dict[str, Any]:
    """The JSON line of a finished unit: identity, output, score, and every counter the reports need; with the
    unit's recorded rounds (``plan.record_rows``) under ``ROWS_FIELD``, for the driver to write apart."""
    metrics = finished.metrics
    score = task.score(finished.text, unit.sample)
    rows = {ROWS_FIELD: _packed_rows(unit, finished, plan)} if plan is not None and finished.round_rows else {}
    return {**rows,
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
        "finished_at": time.time(), "failed": score.detail.startswith(FAILED),
        # label-free drift signals (analysis/drift.py); False for an open-ended task, whose `correct` means nothing
        "scored": getattr(task, "scored", True),
        **record_signals(finished.token_ids, finished.verifier_logprobs, finished.verifier_probs),
    }


def _packed_rows(unit: WorkUnit, finished: Finished, plan: EvalPlan) -> bytes:
    sampling = plan.sampling
    meta = {"config_id": unit.config_id, "problem_id": unit.sample.id, "seed": unit.seed,
            "draft_max": unit.point.draft_max, "rule": unit.point.rule, "knob": unit.point.knob,
            "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
            "finish_reason": finished.metrics.finish_reason, "output_tokens": finished.metrics.output_tokens}
    return pack(finished.round_rows, meta)


def failed_record(task: Task, unit: WorkUnit, reason: str) -> dict[str, Any]:
    """The record of a unit whose row could not run (its prompt does not render, or does not fit the context):
    scored wrong, with the reason in ``detail``, no output and no drift signals, so the run goes on and a resumed
    run does not retry a row that would fail the same way."""
    return {
        "task": task.name, "task_version": task.version, "problem_id": unit.sample.id,
        "config_id": unit.config_id, "config": {**asdict(unit.point), "label": unit.point.label},
        "seed": unit.seed, "repeat": unit.repeat, "output": "", "parsed": None, "correct": False,
        "detail": (FAILED + reason)[:300], "output_tokens": 0, "prompt_tokens": 0, "truncated": False,
        "finish_reason": "failed", "degenerate": False, "rounds": 0, "drafted": 0, "accepted": 0,
        "draft_lengths": [], "extra_draft_steps": 0, "full_accept_rounds": 0, "per_position_reached": [],
        "per_position_accepted": [], "per_position_acceptance": [], "decode_s": 0.0, "prefill_s": 0.0,
        "tokens_per_s": 0.0, "finished_at": time.time(), "failed": True, "scored": getattr(task, "scored", True),
        **record_signals([], (), ()),
    }


def row_problem(prompt: list[int], n_ctx: int) -> str | None:
    """Why a row's prompt cannot run on a context of ``n_ctx`` tokens (None when it can): the row-level part of
    the loop's request checks, made before a unit starts so that one row never stops a whole run."""
    if not prompt:
        return "the prompt is empty"
    if len(prompt) >= n_ctx:
        return f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}; raise --ctx-size or shorten it"
    return None


def unit_config(plan: EvalPlan, unit: WorkUnit) -> tuple[GenerationConfig, Rule | None]:
    rule = plan.rule_at(unit.point)
    config = GenerationConfig(draft_max=unit.point.draft_max, max_tokens=plan.max_tokens, sampling=plan.sampling,
                              seed=unit.seed, bonus=plan.bonus, draft_min=plan.draft_min, adaptive=plan.adaptive,
                              record_rows=plan.record_rows and unit.point.rule is not None,
                              relax_scope=plan.relax_scope,
                              stop=tuple(unit.sample.meta.get("stop", ())),  # a task file's stop strings
                              dense_rows=True, logprobs=True,  # the drift signals read each token's log p(x)
                              # at T=1, which only whole rows give for every token of every rule: every config of a
                              # run on the same rows
                              learn=False)  # each unit drafted cold: no config drafts from another's output of the
    # same problem (a learning drafter's corpus), and a run's results do not depend on the order its units ran in
    return config, rule
