"""Relaxation scoped to thinking (docs/method.md#relaxation-scoped-to-thinking): ``--relax-scope thinking`` judges
with the relaxed rule only the rounds whose context is inside ``<think>…</think>``, ``answer`` only those outside,
and every other round is strict's; ``all`` (the default) relaxes everywhere.

Pure: the tags' token ids come from the verifier (``Model.thinking``, found once from its tokenizer and chat
template), and the tracker reads tokens. A token is judged by the block its context is in: the ``</think>`` that
closes a block is the block's last token, the ``<think>`` that opens one is judged outside. A round never straddles a
tag (``ScopeTracker.cut``): its drafts end at the first tag, so every drafted position shares one context state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relaxtui.checks import RELAX_SCOPE, BadValue
from relaxtui.engine.api import Model, Thinking, ThinkTags

RELAX_SCOPES = RELAX_SCOPE.values


@dataclass(frozen=True, slots=True)
class ScopeTracker:
    """Where a generation's relaxed rule applies: inside the thinking block (``relax_inside``) or outside it, as
    the tags ``tags`` open and close it."""

    tags: ThinkTags
    relax_inside: bool

    def relaxes(self, inside: bool) -> bool:
        """Whether a round whose context is ``inside`` a thinking block (or not) is judged by the relaxed rule."""
        return inside == self.relax_inside

    def inside_after(self, tokens: Sequence[int], inside: bool) -> bool:
        """Whether the context is inside a thinking block after ``tokens``, from ``inside`` before them: the last tag
        among them says (an opening one opens it, a closing one closes it), none leaves it as it was. A prompt is read
        from ``inside=False``: a template that opens ``<think>`` in the prompt starts inside, one that closes an empty
        block (thinking off) outside."""
        tags = self.tags
        for token in reversed(tokens):
            if token == tags.open:
                return True
            if token == tags.close:
                return False
        return inside

    def cut(self, tokens: Sequence[int]) -> int:
        """How many of a round's drafts it verifies: up to and including the first tag, so that every drafted
        position has its context on one side of the boundary (all of them when none is a tag)."""
        tags = self.tags
        for i, token in enumerate(tokens):
            if token == tags.open or token == tags.close:
                return i + 1
        return len(tokens)


def scope_tracker(scope: str, thinking: Thinking) -> ScopeTracker | None:
    """The tracker of a generation's scope on a verifier whose tokenizer and template mark ``thinking`` (None: scope
    ``all``, nothing to track); a scope the verifier cannot mark is one line naming the setting."""
    RELAX_SCOPE.check(scope, "relax_scope")
    if scope == "all":
        return None
    if thinking.tags is None:
        raise BadValue("relax_scope", f"{scope!r} needs a thinking block, and {thinking.missing}: only 'all' runs "
                                      "with this verifier")
    return ScopeTracker(thinking.tags, relax_inside=scope == "thinking")


def check_scope_on(verifier: Model, scope: str) -> None:
    """Refuse ``scope`` in one line naming the setting where ``verifier`` marks no thinking block: what every
    generation checks before decoding, and a face right after loading (before a run folder is touched)."""
    if scope != "all":
        scope_tracker(scope, verifier.thinking)
