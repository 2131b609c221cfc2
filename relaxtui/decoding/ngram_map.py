"""llama.cpp's self-drafting by n-gram lookup in the sequence's own history (common/ngram-map.cpp, PR 18471):
``ngram-simple``, ``ngram-map`` (llama.cpp's ``ngram-map-k``) and ``ngram-map-k4v``.

All three take the context's last n tokens (the key, ``size_n``) and propose what followed an earlier occurrence of
it, at most ``size_m`` tokens (then the round's N). They keep per-sequence state only, bounded by the sequence
itself (about 150 bytes per token, ``GramIndex``): it lives until ``release`` and follows a new request on the
sequence by common prefix, as llama.cpp's map follows the prompt at ``common_ngram_map_begin``. No distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relaxtui.checks import MAX_NGRAM_COUNT
from relaxtui.decoding.drafting import DrafterTraits, EmittedToken, confirmed
from relaxtui.decoding.ngram_index import GramIndex, NgramBase, sizes
from relaxtui.errors import UserError

MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES: value m-grams counted per key
MAX_COUNT = MAX_NGRAM_COUNT  # COMMON_NGRAM_MAX_VALUE_COUNT (16380): counts saturate here


def check_min_hits(kind: str, min_hits: int) -> None:
    """A key's matches before it drafts: 1.. the count a key's hits saturate at (more would never be reached)."""
    if not 1 <= min_hits <= MAX_COUNT:
        raise UserError(f"the {kind} drafter needs min hits in 1..{MAX_COUNT}, where a key's counts stop (got "
                        f"{min_hits})")


class NgramSimpleDrafter(NgramBase[GramIndex]):
    """``ngram-simple`` (llama.cpp's ``common_ngram_simple_draft``): the newest earlier occurrence of the key, and
    the tokens after it. As llama.cpp: the context must be longer than n + m + 2 tokens; a match starts at position
    1 or later and not one token before the key (it would overlap it); at most m tokens are copied, and none unless
    at least n are there to copy. Keeps: per sequence, its n-grams by position (a hash chain, O(1) per lookup).
    Eviction: none needed; the index is the sequence's own size and is dropped by ``release``."""

    traits = DrafterTraits("ngram-simple", has_distribution=False)
    DEFAULTS = (12, 48)  # llama.cpp's (--spec-ngram-simple-size-n/-m)

    def __init__(self, size_n: int | None = None, size_m: int | None = None) -> None:
        super().__init__()
        self.size_n, self.size_m = sizes(self.traits.kind, size_n, size_m, self.DEFAULTS)

    def new_state(self) -> GramIndex:
        return GramIndex(self.size_n)

    def propose(self, state: GramIndex, n: int) -> list[int]:
        tokens, size_n = state.tokens, self.size_n
        length = len(tokens)
        if length - 1 <= size_n + self.size_m + 1:
            return []
        for start in state.earlier(length - size_n):
            if start > length - size_n - 2:
                continue  # the key shifted by one
            if start < 1:
                return []
            copy = min(self.size_m, length - 1 - start - size_n)  # from the history before `last`, as llama.cpp
            return tokens[start + size_n:start + size_n + min(copy, n)] if copy >= size_n else []
        return []


@dataclass
class Value:
    """One m-gram seen after a key (``common_ngram_map_value``)."""

    tokens: tuple[int, ...]
    count: int = 0
    n_accepted: int = 0  # drafts kept the last time this value drafted; the next draft is no longer


@dataclass
class KeyStats:
    """What the map knows of one key n-gram (``common_ngram_map_key``)."""

    start: int  # where the map first met it
    hits: int = 0  # draft calls that matched it
    counted_to: int = 0  # occurrences up to here are in ``values``
    n_accepted: int = 0  # ngram-map: drafts kept the last time it drafted
    values: list[Value] = field(default_factory=list)  # ngram-map-k4v


class MapIndex(GramIndex):
    """A sequence's n-grams plus the map's own view: per key hash, the start the map holds (the first one put
    there; a batch goes in newest first, so the prompt's newest occurrence wins, as llama.cpp's ``key_map``), the
    statistics of keys that matched, and what the last draft used (for ``accept``)."""

    def __init__(self, n: int, m: int) -> None:
        super().__init__(n)
        self.m = m
        self.held: dict[int, int] = {}  # key hash -> the start the map holds
        self.held_to = 0  # starts up to here have been offered to ``held``
        self.stats: dict[tuple[int, ...], KeyStats] = {}
        self.last: tuple[KeyStats, Value | None, list[int]] | None = None  # and the draft it made

    def offer(self, bound: int) -> None:
        """Offer the starts that have become eligible (m + 1 tokens after their key), newest first."""
        held, hashes = self.held, self.hashes
        for start in range(bound, self.held_to, -1):  # position 0 is never held (llama.cpp's 0 means none)
            held.setdefault(hashes[start], start)
        self.held_to = max(self.held_to, bound)

    def truncate(self, keep: int) -> None:
        """Forget what reads a removed token; a key held past the prefix falls back to its newest start in it."""
        limit = max(keep - self.n, 0)  # a start past this reads a removed token
        for start in range(min(self.held_to, len(self.hashes) - 1), limit, -1):
            h = self.hashes[start]
            if self.held.get(h) == start:
                earlier = self.prev[start]
                while earlier > limit:
                    earlier = self.prev[earlier]
                if earlier >= 1:
                    self.held[h] = earlier
                else:
                    del self.held[h]
        self.held_to = min(self.held_to, limit)
        span = self.n + self.m
        self.stats = {key: s for key, s in self.stats.items()
                      if s.start + self.n <= keep and s.counted_to + span <= keep}
        self.last = None
        super().truncate(keep)


class NgramMapDrafter(NgramBase[MapIndex]):
    """``ngram-map`` (llama.cpp's ``ngram-map-k``: ``common_ngram_map_draft`` with ``key_only``). The key's match is
    the start the map holds for it, which needs m + 1 tokens after its key (a match lies at least m + 1 tokens
    back); the context must hold 2n + m + 1 tokens. Each key remembers how many drafts were kept the last time it
    drafted and drafts no more than that (none once it got none). Keeps: per sequence, its n-grams, the held starts
    and the statistics of matched keys, all bounded by the sequence's length. Eviction: none needed; a common-prefix
    re-sync drops whatever read a removed token, ``release`` drops the sequence."""

    traits = DrafterTraits("ngram-map", has_distribution=False)
    DEFAULTS = (12, 48)  # llama.cpp's (--spec-ngram-map-k-size-n/-m; k4v: the same, min hits 1)

    counts_values = False  # count the m-grams after the key (k4v)

    def __init__(self, size_n: int | None = None, size_m: int | None = None, *, min_hits: int = 1) -> None:
        super().__init__()
        self.size_n, self.size_m = sizes(self.traits.kind, size_n, size_m, self.DEFAULTS)
        check_min_hits(self.traits.kind, min_hits)
        self.min_hits = min_hits

    def new_state(self) -> MapIndex:
        return MapIndex(self.size_n, self.size_m)

    def propose(self, state: MapIndex, n: int) -> list[int]:
        state.last = None
        tokens, size_n, size_m = state.tokens, self.size_n, self.size_m
        length = len(tokens)
        if length - 1 < 2 * size_n + size_m:
            return []
        bound = length - size_n - size_m - 2  # the newest start with m + 1 tokens after its key, before `last`
        state.offer(bound)
        here = length - size_n
        start = state.held.get(state.hashes[here])
        if start is None or start > bound or tokens[start:start + size_n] != tokens[here:]:
            return []
        key = tuple(tokens[here:])
        stats = state.stats.get(key)
        if stats is None:
            stats = state.stats[key] = KeyStats(start, n_accepted=size_m)
        stats.hits = min(stats.hits + 1, MAX_COUNT)
        if not self.counts_values:
            take = min(size_m, stats.n_accepted, n)
            draft = tokens[start + size_n:start + size_n + take]
            state.last = (stats, None, draft)
            return draft
        if stats.hits < self.min_hits:
            return []
        best = self.count_values(state, stats, start)
        others = sum(v.count for v in stats.values) - best.count
        if others > 0 and best.count < 2 * others:
            return []  # no m-gram dominates
        draft = list(best.tokens[:min(best.n_accepted, n)])
        state.last = (stats, best, draft)
        return draft

    def count_values(self, state: MapIndex, stats: KeyStats, start: int) -> Value:
        """Count the m-grams after the key's occurrences from ``counted_to`` to ``start`` (both included, as
        llama.cpp: the match itself counts again at each hit); the first most frequent one."""
        tokens, size_n, size_m = state.tokens, self.size_n, self.size_m
        found = [start]
        for j in state.earlier(start):
            if j < stats.counted_to:
                break
            found.append(j)
        for j in reversed(found):
            value = tuple(tokens[j + size_n:j + size_n + size_m])
            slot = next((v for v in stats.values if v.tokens == value), None)
            if slot is None and len(stats.values) < MAX_VALUES:
                slot = Value(value, n_accepted=size_m)
                stats.values.append(slot)
            if slot is not None:
                slot.count = min(slot.count + 1, MAX_COUNT)
        stats.counted_to = start
        return max(stats.values, key=lambda v: v.count)  # max keeps the first of equals

    def accept(self, seq: int, n_accepted: int, emitted: Sequence[EmittedToken]) -> None:
        """The next draft of the same key (value) is no longer than the tokens of this one the round confirmed
        (verified or not: a price may have verified fewer)."""
        state = self.seqs.get(seq)
        if state is not None and state.last is not None:
            stats, value, draft = state.last
            if value is None:
                stats.n_accepted = confirmed(draft, emitted)
            else:
                value.n_accepted = confirmed(draft, emitted)
            state.last = None


class NgramMapK4vDrafter(NgramMapDrafter):
    """``ngram-map-k4v`` (``common_ngram_map_draft`` without ``key_only``): ``ngram-map`` that also counts up to 4
    distinct m-grams after the key's occurrences (up to its match) and drafts only when the key has matched
    ``min_hits`` times and the most frequent m-gram is at least twice the others together; it drafts that m-gram, no
    longer than its last accepted count. (llama.cpp checks the most frequent m-gram but copies what follows the
    match, which may be another one; it counts the match again at each hit, which is kept.) Keeps and evicts as
    ``ngram-map``."""

    traits = DrafterTraits("ngram-map-k4v", has_distribution=False)
    counts_values = True
