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
    from relaxtui.evals.runner import EvalPlan
    from relaxtui.session import LoadedPair


def sample_tokenizer(model: LlamaModel, *, thinking: bool | None = None) -> Callable[[Sample], list[int]]:
    """Prompt tokens of a task sample through the verifier's own chat template (rendered once per run)."""
    from relaxtui.session import chat_template, conversation_tokens

    template = chat_template(model)
    return lambda sample: conversation_tokens(model, template, sample.messages, thinking=thinking)


def measure_profile(pair: LoadedPair, plan: EvalPlan, prompt: list[int]) -> str:
    """The cost profile (JSON) of the machine holding ``pair``: run where the models are, saved by the driver."""
    from relaxtui.costmodel.calibrate import calibrate, typical_context
    from relaxtui.costmodel.measure import hardware_description
    from relaxtui.decoding.drafters import ModelDrafter

    drafter = pair.drafter if isinstance(pair.drafter, ModelDrafter) else None
    costs = calibrate(pair.verifier, drafter, max_block=max(plan.draft_max) + 1, sampling=plan.sampling,
                      context=typical_context(prompt, min(plan.max_tokens, 512)), repeats=5, seed=plan.seed)
    drafter_name = pair.drafter_path.name if pair.drafter_path else getattr(pair.drafter, "kind", "none")
    profile = costs.profile(THIS_MACHINE, verifier=pair.verifier_path.name, drafter=drafter_name,
                            hardware=hardware_description())
    return profile.to_json()
