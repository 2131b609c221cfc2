"""What every executor does with a loaded pair before it runs units: the prompts of a task's samples through
the verifier's own chat template, and the cost profile of the machine that holds the pair (measured by
``costmodel.calibrate.measure_profile`` with the plan's N and sampling).

Shared by the local executors and the Ray actors (which run on other nodes), so it lives with the runner and
not in a command: the driver only saves what comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from relaxtui.costmodel.profiles import THIS_MACHINE
from relaxtui.evals.tasks.base import Sample

__all__ = ["THIS_MACHINE", "plan_profile", "sample_tokenizer"]

if TYPE_CHECKING:
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.session import Pair


def sample_tokenizer(model: LlamaModel, *, thinking: bool | None = None) -> Callable[[Sample], list[int]]:
    """Prompt tokens of a task sample through the verifier's own chat template (rendered once per run).

    A task file's sample may ask for a raw completion prompt (``meta["raw"]``: its one message tokenised as
    text, with BOS) or for thinking on or off (``meta["thinking"]``, which ``--thinking`` overrides)."""
    from relaxtui.session import chat_template, conversation_tokens

    template = chat_template(model)

    def tokenize(sample: Sample) -> list[int]:
        if sample.meta.get("raw"):
            return model.tokenize(sample.messages[-1].content, add_special=True, parse_special=False)
        think = thinking if thinking is not None else sample.meta.get("thinking")
        return conversation_tokens(model, template, sample.messages, thinking=think)
    return tokenize


def plan_profile(pair: Pair, plan: EvalPlan, prompt: list[int]) -> str:
    """The cost profile (JSON) of the machine holding ``pair``, for ``plan``'s longest N and its sampling: run where
    the models are, saved by the driver."""
    from relaxtui.costmodel.calibrate import measure_profile

    return measure_profile(pair.verifier, pair.drafter, verifier_name=pair.name, drafter_name=pair.drafter_name,
                           max_block=max(plan.draft_max) + 1, sampling=plan.sampling, prompt=prompt,
                           max_tokens=plan.max_tokens, seed=plan.seed).to_json()
