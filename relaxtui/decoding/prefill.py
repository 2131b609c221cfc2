"""Prefill with KV reuse: decode only the part of a prompt that the model's cache does not already hold.

Two policies. ``reuse="exact"`` keeps the cache only when it already holds the whole prefix (a repeat of
the same prompt: the cached KV is bit-identical to a fresh prefill, so results do not depend on what ran
before). ``reuse="longest"`` keeps the longest common prefix (a chat turn extends the conversation: only
the new messages are decoded; their neighbours' KV came from other batches, which shifts logits in the last
bits — fine for a chat, not for a reproducible eval). The prefill runs in chunks and polls ``should_stop``
between them, so a stop request during a long prompt is honoured within one chunk. Many sequences in one
context: ``copy_cached_prompt`` takes a prompt another sequence already holds instead of prefilling it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from relaxtui.engine.api import Model

PREFILL_CHUNK = 128  # tokens per decode call: near full batch efficiency on a CPU, yet a stop lands in < 1 s
ReusePolicy = Literal["exact", "longest"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences. A drafter re-syncs with it every round, over
    the whole context: lists compare by slices (in C) and bisect to the first difference, so a long chat costs a
    few slice compares per round, not a Python loop over every token."""
    n = min(len(a), len(b))
    lo = 0  # a[:lo] == b[:lo]
    if isinstance(a, list) and isinstance(b, list):
        if a[:n] == b[:n]:
            return n
        hi = n  # a[:hi] != b[:hi]
        while hi - lo > 32:
            mid = (lo + hi) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                hi = mid
    for i in range(lo, n):
        if a[i] != b[i]:
            return i
    return n


def reusable(cached: Sequence[int], prefix: Sequence[int], policy: ReusePolicy) -> int:
    """How many leading tokens of ``prefix`` can stay in a cache that holds ``cached``."""
    shared = common_prefix(cached, prefix)
    if policy == "longest" or shared == len(prefix):
        return shared
    return 0


def prefill(model: Model, seq: int, prefix: Sequence[int], *, reuse: ReusePolicy = "exact",
            should_stop: Callable[[], bool] = lambda: False, chunk: int = PREFILL_CHUNK) -> tuple[int, bool]:
    """Make sequence ``seq`` of ``model`` hold exactly ``prefix``. Returns (tokens decoded, completed); a stop request
    leaves the cache holding a prefix of ``prefix`` and returns completed = False."""
    keep = prepare(model, seq, prefix, reuse)
    decoded = 0
    for start in range(keep, len(prefix), chunk):
        if should_stop():
            return decoded, False
        part = list(prefix[start:start + chunk])
        model.decode(seq, part)
        decoded += len(part)
    return decoded, True


def prepare(model: Model, seq: int, prefix: Sequence[int], reuse: ReusePolicy = "exact") -> int:
    """Trim sequence ``seq`` of ``model`` to the part of ``prefix`` it may keep (cleared when none); returns that
    length: what is left to decode is ``prefix[keep:]`` (``prefill`` decodes it; the batched loop may send it in a
    shared batch)."""
    keep = reusable(model.tokens_of(seq), prefix, reuse)
    if keep and not model.can_rollback(seq, keep):
        keep = 0  # recurrent memory that cannot go back there: prefill from scratch, exactly
    if keep == 0:
        model.clear(seq)
    else:
        model.rollback(seq, keep)
    return keep


def copy_cached_prompt(model: Model, seq: int, prefix: Sequence[int], policy: ReusePolicy = "exact",
                       sources: Sequence[int] | None = None) -> None:
    """Take a prompt another sequence already holds (the same problem under another config or seed: an eval
    plan puts them side by side) by copying its KV instead of prefilling it again. When that sequence
    prefilled the same prompt, the copied cells are the ones a fresh prefill makes, so outputs do not change
    (the guarantee and the limits of "exact" reuse, which also matches by tokens); on a CPU, where a prompt
    token costs about what an output token does, this saves most of a grid's prefill. A copy the model cannot make
    exactly (recurrent memory holds only a sequence's current state: ``can_share_prefix``) is skipped, and the
    caller prefills instead. ``policy="longest"`` (a server's requests, as llama-server's prompt cache): the longest
    common prefix any other sequence holds is copied when it is longer than what this one keeps (a shared system
    prompt), and only the rest is decoded. ``sources``: the sequences it may copy from (None: every other one; a
    server's scope allows only its own)."""
    if not prefix or reusable(model.tokens_of(seq), prefix, "exact"):
        return  # nothing to do, or this sequence's own cache already holds it
    n = len(prefix)
    others = [other for other in (range(model.n_seq) if sources is None else sources) if other != seq]
    if policy == "longest":
        kept = common_prefix(model.tokens_of(seq), prefix)
        best = max(((common_prefix(model.tokens_of(other), prefix), other) for other in others), default=(0, -1))
        if best[0] > kept and model.can_share_prefix(best[1], seq, best[0]):
            model.share_prefix(best[1], seq, best[0])
        return
    for other in others:
        cached = model.tokens_of(other)
        if len(cached) >= n and list(cached[:n]) == list(prefix):
            if not model.can_share_prefix(other, seq, n):
                continue
            model.share_prefix(other, seq, n)
            return
