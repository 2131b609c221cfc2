"""What every executor does with a loaded pair before it runs units: the prompts of a task's samples through
the verifier's own chat template, and the cost profile of the machine that holds the pair.

Shared by the local executors and the Ray actors (which run on other nodes), so it lives with the runner and
not in a command: the driver only saves what comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from relaxtui.costmodel.profiles import THIS_MACHINE
from relaxtui.evals.tasks.base import Sample

__all__ = ["THIS_MACHINE", "measure_profile", "sample_tokenizer"]

if TYPE_CHECKING:
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.session import LoadedPair


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


def measure_profile(pair: LoadedPair, plan: EvalPlan, prompt: list[int]) -> str:
    """The cost profile (JSON) of the machine holding ``pair``: run where the models are, saved by the driver."""
    from relaxtui.costmodel.calibrate import calibrate, typical_context
    from relaxtui.costmodel.measure import hardware_description

    costs = calibrate(pair.verifier, pair.drafter, max_block=max(plan.draft_max) + 1, sampling=plan.sampling,
                      context=typical_context(prompt, min(plan.max_tokens, 512)), repeats=5, seed=plan.seed)
    profile = costs.profile(THIS_MACHINE, verifier=pair.verifier_path.name, drafter=pair.drafter_name,
                            hardware=hardware_description())
    return profile.to_json()
