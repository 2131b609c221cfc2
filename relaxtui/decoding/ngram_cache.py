"""llama.cpp's ``ngram-cache`` (common/ngram-cache.cpp, the ``lookup`` example's decoding): counts of the token
after each 1..4-gram, in a per-sequence context cache and a dynamic cache of earlier generations, drafting one token
at a time while a cache is confident enough."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from relaxtui.checks import MAX_NGRAM
from relaxtui.decoding.drafting import DrafterTraits
from relaxtui.decoding.ngram_index import NgramBase, SeqTokens
from relaxtui.errors import UserError

NGRAM_MIN, NGRAM_MAX = 1, 4  # LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX
# per n-gram size 1..4: the fewest observations and the smallest share (%) of the top token to draft it
LAX = ((2, 66), (2, 50), (1, 50), (1, 50))  # the context cache (draft_min_*_lax)
STRICT = ((4, 75), (3, 66), (2, 66), (2, 66))  # the dynamic cache (draft_min_*_strict)
Part = dict[int, int]  # next token -> times seen (insertion order breaks ties: the first one met wins)


def _grams(tokens: Sequence[int], first: int) -> list[tuple[tuple[int, ...], int]]:
    """(n-gram, next token) for every next token from ``first`` on and every size 1..4 that fits before it."""
    return [(tuple(tokens[i - size:i]), tokens[i]) for i in range(max(first, 1), len(tokens))
            for size in range(NGRAM_MIN, min(NGRAM_MAX, i) + 1)]


def _chunk_grams(tokens: Sequence[int], start: int, end: int) -> list[tuple[tuple[int, ...], int]]:
    """(n-gram, next token) of the n-grams that lie wholly in ``tokens[start:end]`` (``common_ngram_cache_update``
    over one call's new tokens)."""
    return [(tuple(tokens[i - size:i]), tokens[i]) for size in range(NGRAM_MIN, NGRAM_MAX + 1)
            for i in range(start + size, end)]


def pick(part: Part | None, size: int, thresholds: tuple[tuple[int, int], ...]) -> int | None:
    """The part's most frequent token, when it has been seen often enough and dominates (``try_draft``)."""
    if not part:
        return None
    token, best = max(part.items(), key=lambda item: item[1])  # the first of equals
    total = sum(part.values())
    least, share = thresholds[size - 1]
    return token if total >= least and 100 * best >= share * total else None


class ContextCache(SeqTokens):
    """One sequence's counts (``ngram_cache_context``), kept in step with its context as speculative.cpp keeps them:
    each sync's new tokens are counted apart, only the n-grams that lie wholly inside them (an n-gram that spans two
    calls is never counted; a round's chunk of one or two tokens adds little, so the prompt's counts dominate). A
    common-prefix re-sync (another request on the sequence) uncounts what it cuts and reopens the last chunk kept,
    so the new tokens are counted with it, as a fresh drafter would count that context. Bounded by 4 entries per
    token: about 1.3 KB per token where every n-gram is new."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[tuple[int, ...], Part] = {}
        self.chunks: list[int] = []  # where each counted chunk starts (it ends where the next starts)
        self.reopened = False  # the last chunk is uncounted, to be counted with the next tokens
        self.prompt_len = 0

    def _count(self, start: int, end: int, step: int) -> None:
        counts = self.counts
        for gram, token in _chunk_grams(self.tokens, start, end):
            part = counts.get(gram)
            if part is None:
                counts[gram] = part = {}
            part[token] = part.get(token, 0) + step
            if not part[token]:
                del part[token]
                if not part:
                    del counts[gram]

    def sync(self, context: Sequence[int]) -> None:
        super().sync(context)
        if self.reopened:  # cut back with nothing new after: the kept part of the last chunk counts as it is
            self._count(self.chunks[-1], len(self.tokens), +1)
            self.reopened = False

    def extend(self, new: list[int]) -> None:
        start = len(self.tokens)
        super().extend(new)
        if self.reopened:
            start, self.reopened = self.chunks[-1], False
        else:
            self.chunks.append(start)
        self._count(start, len(self.tokens), +1)

    def truncate(self, keep: int) -> None:
        end = len(self.tokens)
        while self.chunks and self.chunks[-1] >= keep:
            start = self.chunks.pop()
            if self.reopened:  # the last chunk was not counted
                self.reopened = False
            else:
                self._count(start, end, -1)
            end = start
        if self.chunks and not self.reopened:
            self._count(self.chunks[-1], end, -1)
        self.reopened = bool(self.chunks)
        super().truncate(keep)


class DynamicCache:
    """Counts from earlier generations (``ngram_cache_dynamic``), shared by every sequence: at most ``capacity``
    (n-gram, next token) pairs. Eviction: least recently used n-gram first (used = counted or drafted from), with
    all its pairs, until the pairs fit again."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts: OrderedDict[tuple[int, ...], Part] = OrderedDict()
        self.pairs = 0

    def add(self, tokens: Sequence[int], first: int) -> None:
        counts = self.counts
        for gram, token in _grams(tokens, first):
            part = counts.get(gram)
            if part is None:
                part = counts[gram] = {}
            else:
                counts.move_to_end(gram)
            if token not in part:
                self.pairs += 1
            part[token] = part.get(token, 0) + 1
        while self.pairs > self.capacity:
            _, part = counts.popitem(last=False)
            self.pairs -= len(part)

    def get(self, gram: tuple[int, ...]) -> Part | None:
        return self.counts.get(gram)

    def touch(self, gram: tuple[int, ...]) -> None:
        self.counts.move_to_end(gram)


class NgramCacheDrafter(NgramBase[ContextCache]):
    """``ngram-cache``: each next token from the longest of the last 4..1 tokens (drafts included) whose counts
    pass the thresholds, first in the sequence's context cache (lax), then in the dynamic cache (strict); the draft
    stops at the first position where neither is confident, or at ``n_draft``. Keeps: per sequence, the counts of
    its context (to ``release``); per drafter, the dynamic cache, fed from each finished output (the n-grams that
    predict its tokens, the prompt's last tokens included), bounded by ``entries`` pairs with least-recently-used
    eviction. llama.cpp's static cache (a corpus file) is not kept. As speculative.cpp, the context cache counts
    each call's new tokens apart (``ContextCache``); ties go to the token met first."""

    traits = DrafterTraits("ngram-cache", has_distribution=False, learns=True)
    DEFAULT_DRAFT = 8  # llama.cpp's n_draft
    DEFAULT_ENTRIES = 1 << 16
    MAX_ENTRIES = 1 << 20  # sixteen times the default, a few hundred MiB of Python objects at most

    def __init__(self, n_draft: int | None = None, *, entries: int | None = None) -> None:
        super().__init__()
        self.n_draft, capacity = self.settings(n_draft, entries=entries)
        self.dynamic = DynamicCache(capacity)

    @classmethod
    def settings(cls, n_draft: int | None = None, *, entries: int | None = None) -> tuple[int, int]:
        """(n_draft, the dynamic cache's entries), each defaulted when None and checked."""
        n_draft = cls.DEFAULT_DRAFT if n_draft is None else n_draft
        capacity = cls.DEFAULT_ENTRIES if entries is None else entries
        if not 1 <= n_draft <= MAX_NGRAM or not 0 <= capacity <= cls.MAX_ENTRIES:
            raise UserError(f"the ngram-cache drafter needs a draft length in 1..{MAX_NGRAM} and entries in "
                            f"0..{cls.MAX_ENTRIES} (got {n_draft}, {capacity})")
        return n_draft, capacity

    def new_state(self) -> ContextCache:
        return ContextCache()

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        state = self.state(seq)
        state.sync(prompt)
        state.prompt_len = len(prompt)
        return True

    def propose(self, state: ContextCache, n: int) -> list[int]:
        if len(state.tokens) < 2:
            return []
        tail = state.tokens[-NGRAM_MAX:]
        draft: list[int] = []
        while len(draft) < min(n, self.n_draft):
            token = self.next_token(state, tail)
            if token is None:
                break
            draft.append(token)
            tail = [*tail[1 - NGRAM_MAX:], token]
        return draft

    def next_token(self, state: ContextCache, tail: list[int]) -> int | None:
        sizes = range(min(NGRAM_MAX, len(tail)), NGRAM_MIN - 1, -1)
        for size in sizes:
            gram = tuple(tail[-size:])
            if (token := pick(state.counts.get(gram), size, LAX)) is not None:
                return token
        for size in sizes:
            gram = tuple(tail[-size:])
            if (token := pick(self.dynamic.get(gram), size, STRICT)) is not None:
                self.dynamic.touch(gram)
                return token
        return None

    def finished(self, seq: int, output: Sequence[int]) -> None:
        """Count the output into the dynamic cache, with the prompt's last tokens before it (the n-grams that
        predict its first tokens)."""
        state = self.seqs.get(seq)
        lead = state.tokens[max(0, state.prompt_len - NGRAM_MAX):state.prompt_len] if state is not None else []
        self.dynamic.add([*lead, *(int(t) for t in output)], len(lead))
