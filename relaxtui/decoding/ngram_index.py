"""What llama.cpp's n-gram drafters share, kept incrementally: one sequence's tokens in sync with its context, and
its n-grams by position under a rolling hash.

A drafter is called every round with the whole context (``DraftRequest.context``, which only grows during a
generation), so each kind keeps per-sequence state that extends with the tokens appended since the last call and
re-syncs by common prefix when the context changed (a new request on the same sequence: a chat's next turn keeps
what the turns share). Appending k tokens costs O(k), truncating O(removed): a draft call never rescans the context.

The hash is llama.cpp's n-gram hash (``common_ngram_mod::idx``): ``h = h * 6364136223846793005 + token`` over the
n tokens, modulo 2^64, so ``h % size`` is llama.cpp's slot for a table of ``size`` entries. It rolls:
dropping the first token and appending one is one multiply-add.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

import numpy as np

from relaxtui.checks import MAX_NGRAM
from relaxtui.decoding.drafting import BaseDrafter, Draft, DraftRequest
from relaxtui.decoding.prefill import common_prefix
from relaxtui.errors import UserError

MASK = (1 << 64) - 1
LCG = 6364136223846793005  # llama.cpp's multiplier (common/ngram-mod.cpp)
BULK = 64  # windows from which numpy hashes a block (the prompt) instead of rolling in Python


def gram_hash(tokens: Sequence[int]) -> int:
    h = 0
    for token in tokens:
        h = (h * LCG + token) & MASK
    return h


def roll(h: int, out: int, new: int, top: int) -> int:
    """The hash of a window shifted by one: ``out`` leaves, ``new`` enters; ``top`` = LCG^(n-1) mod 2^64."""
    return ((h - out * top) * LCG + new) & MASK


def hash_windows(tokens: Sequence[int], start: int, end: int, n: int) -> list[int]:
    """Hashes of the n-token windows starting at ``start..end-1`` (numpy for a block, rolling for a few)."""
    count = end - start
    if count <= 0:
        return []
    if count >= BULK:
        block = np.asarray(tokens[start:end + n - 1], dtype=np.uint64)
        hashes = np.zeros(count, dtype=np.uint64)
        for i in range(n):  # uint64 arithmetic wraps: exactly the hash modulo 2^64
            hashes = hashes * np.uint64(LCG) + block[i:i + count]
        return hashes.tolist()
    top = pow(LCG, n - 1, 1 << 64)
    h = gram_hash(tokens[start:start + n])
    out = [h]
    for j in range(start + 1, end):
        h = roll(h, tokens[j - 1], tokens[j + n - 1], top)
        out.append(h)
    return out


def sizes(kind: str, size_n: int | None, size_m: int | None, defaults: tuple[int, int]) -> tuple[int, int]:
    """(n, m), each defaulted when None; refused outside 1..MAX_NGRAM (llama.cpp's bound)."""
    n, m = defaults[0] if size_n is None else size_n, defaults[1] if size_m is None else size_m
    if n < 1 or m < 1:
        raise UserError(f"the {kind} drafter needs n-gram sizes >= 1 (got n = {n}, m = {m})")
    if n > MAX_NGRAM or m > MAX_NGRAM:
        raise UserError(f"the {kind} drafter needs n-gram sizes <= {MAX_NGRAM}, as llama.cpp (got n = {n}, m = {m})")
    return n, m


class SeqTokens:
    """One sequence's tokens as its drafter last saw them. ``sync(context)`` brings them to a new context: the tokens
    appended since the last call are handed to ``extend``; a context that differs before its end (another request
    on the sequence) is first cut back to the common prefix by ``truncate``. Subclasses index in those two hooks."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.source: Sequence[int] | None = None  # the context object last synced (the loop's own list, growing)

    def sync(self, context: Sequence[int]) -> None:
        old = len(self.tokens)
        if context is self.source and len(context) >= old and (old == 0 or context[old - 1] == self.tokens[-1]):
            keep = old  # the same growing list (DraftRequest's contract): only the new tail to read
        else:
            keep = common_prefix(self.tokens, context if isinstance(context, list) else list(context))
            if keep < old:
                self.truncate(keep)
        self.source = context
        if len(context) > keep:
            new = context[keep:]
            self.extend(new if isinstance(new, list) else [int(t) for t in new])

    def extend(self, new: list[int]) -> None:
        self.tokens.extend(new)

    def truncate(self, keep: int) -> None:
        del self.tokens[keep:]


class GramIndex(SeqTokens):
    """Every n-gram of one sequence by where it starts: its hash, the newest start of each hash, and per start the
    previous start with the same hash (a chain, newest first). Memory: about 150 bytes per token of the sequence."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.hashes: list[int] = []  # hashes[j]: the window tokens[j:j+n]
        self.prev: list[int] = []  # prev[j]: the previous start with hashes[j], -1 for none
        self.newest: dict[int, int] = {}

    def extend(self, new: list[int]) -> None:
        start = len(self.hashes)
        super().extend(new)
        hashes = hash_windows(self.tokens, start, len(self.tokens) - self.n + 1, self.n)
        newest, prev = self.newest, self.prev
        for j, h in enumerate(hashes, start):
            prev.append(newest.get(h, -1))
            newest[h] = j
        self.hashes.extend(hashes)

    def truncate(self, keep: int) -> None:
        first = max(keep - self.n + 1, 0)  # windows from here on read a removed token
        for j in range(len(self.hashes) - 1, first - 1, -1):  # newest first: each is its hash's newest start
            if self.prev[j] < 0:
                del self.newest[self.hashes[j]]
            else:
                self.newest[self.hashes[j]] = self.prev[j]
        del self.hashes[first:], self.prev[first:]
        super().truncate(keep)

    def earlier(self, start: int) -> Iterator[int]:
        """Earlier starts of the n-gram at ``start``, newest first (hash collisions skipped)."""
        tokens, n = self.tokens, self.n
        key = tokens[start:start + n]
        j = self.prev[start]
        while j >= 0:
            if tokens[j:j + n] == key:
                yield j
            j = self.prev[j]


S = TypeVar("S", bound=SeqTokens)


class NgramBase(BaseDrafter, Generic[S]):
    """The n-gram kinds' shared loop over their own state type ``S``: one state per sequence (``new_state``),
    synced with the prompt at ``begin`` and with the context at every draft, then ``propose`` reads it. Nothing to
    prefill, no model, no distribution; a kind that finds nothing proposes nothing (the round runs verifier-only).
    ``release`` forgets the sequence."""

    def __init__(self) -> None:
        self.seqs: dict[int, S] = {}

    def new_state(self) -> S:
        raise NotImplementedError

    def state(self, seq: int) -> S:
        found = self.seqs.get(seq)
        if found is None:
            found = self.seqs[seq] = self.new_state()
        return found

    def propose(self, state: S, n: int) -> list[int]:
        raise NotImplementedError

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        self.state(seq).sync(prompt)
        return True

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return self.timed_drafts(requests, self.propose_for)

    def propose_for(self, request: DraftRequest) -> list[int]:
        """One request's proposal: its sequence's state synced with the context, then read."""
        state = self.state(request.seq)
        state.sync(request.context)
        return self.propose(state, request.n_max)

    def release(self, seq: int) -> None:
        self.seqs.pop(seq, None)
