"""The thinking block a model marks: ``<think>…</think>``, as Qwen3's and DeepSeek-R1's chat templates and tokenizers
mark it — each tag one token of the vocabulary, and a template that writes them. ``--relax-scope`` reads it
(docs/method.md#relaxation-scoped-to-thinking); found once per loaded model (``LlamaModel.thinking``,
``FakeBackend.thinking``). No jinja2 here: the template's source is read as text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def template_thinks(source: str | None) -> bool:
    """Whether a chat template ever marks a thinking block: it writes ``<think>`` (DeepSeek-R1's opens one in the
    prompt; Qwen3's closes an empty one when thinking is off) or switches thinking (``enable_thinking``). None (no
    template of the model's own: ChatML) never does."""
    return source is not None and (THINK_OPEN in source or "enable_thinking" in source)


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """The token ids of ``<think>`` and ``</think>`` in a model's vocabulary."""

    open: int
    close: int


@dataclass(frozen=True, slots=True)
class Thinking:
    """What a model's tokenizer and chat template say of a thinking block: its tags, or (``tags`` None) why it has
    none, as a clause that completes "…needs a thinking block, and …"."""

    tags: ThinkTags | None
    missing: str = ""


def find_thinking(tokenize: Callable[[str], Sequence[int]], piece: Callable[[int], bytes],
                  template: str | None) -> Thinking:
    """The thinking block as the tokenizer and the chat template (its source; None: the model has none) mark it:
    each tag must tokenise (specials parsed) to one token that renders as the tag itself, and the template must write
    one (``template_thinks``). Asked once per loaded model."""
    tags = []
    for tag in (THINK_OPEN, THINK_CLOSE):
        ids = list(tokenize(tag))
        if len(ids) != 1 or piece(ids[0]) != tag.encode():
            return Thinking(None, f"the verifier's tokenizer has no single {tag} token")
        tags.append(ids[0])
    if not template_thinks(template):
        return Thinking(None, "the verifier's chat template never marks one (it writes no <think>)")
    return Thinking(ThinkTags(tags[0], tags[1]))
