"""Prompt-lookup drafting: propose what followed the last occurrence of the context's own suffix.

No model: the draft is copied from earlier in the context, so it carries no distribution (the loop makes q
one-hot on each proposed token). It stands in for the paper's lightweight drafters: almost free (c_rel ≈ 0), but
not a language model — relaxed rules that trust q will copy the context, which is how degenerate loops start
(docs/method.md). Each sequence's n-grams are indexed as its context grows (``relaxtui.decoding.ngram_index``), so
a round costs O(new tokens), not a scan of the window; the proposals are those of a scan.
"""

from __future__ import annotations

from collections.abc import Sequence

from relaxtui import checks
from relaxtui.decoding.drafting import DrafterTraits
from relaxtui.decoding.ngram_index import GramIndex, NgramBase, SeqTokens


def check_sizes(n_min: int, n_max: int) -> None:
    """Prompt lookup's sizes: each in 1..MAX_LOOKUP_NGRAM (one index is kept per size), the smallest first."""
    checks.LOOKUP_NGRAM.check(n_min, "ngram_min")
    checks.LOOKUP_NGRAM.check(n_max, "ngram_max")
    if n_min > n_max:
        raise checks.BadValue("ngram_min", f"must be at most {{ngram_max}} (got {n_min}..{n_max})", ("ngram_max",))


class GramIndexes(SeqTokens):
    """One ``GramIndex`` per n-gram size, largest first, each synced with the same context."""

    def __init__(self, sizes: range) -> None:
        super().__init__()
        self.indexes = [GramIndex(size) for size in reversed(sizes)]

    def sync(self, context: Sequence[int]) -> None:
        for index in self.indexes:
            index.sync(context)
        self.tokens = self.indexes[0].tokens


class NgramDrafter(NgramBase[GramIndexes]):
    """Longest n-gram first (``n_max`` down to ``n_min``): the most recent earlier occurrence of the context's last
    g tokens that starts within the last ``window`` tokens, and up to N tokens that followed it. Keeps: per
    sequence, its g-grams for each size (to ``release``); nothing shared."""

    traits = DrafterTraits("ngram", has_distribution=False)

    def __init__(self, *, n_min: int = 1, n_max: int = 3, window: int = 4096) -> None:
        super().__init__()
        check_sizes(n_min, n_max)
        self.n_min, self.n_max = n_min, n_max
        self.window = window  # how far back to search, in tokens

    def new_state(self) -> GramIndexes:
        return GramIndexes(range(self.n_min, self.n_max + 1))

    def propose(self, state: GramIndexes, n: int) -> list[int]:
        tokens = state.tokens
        length = len(tokens)
        first = max(length - self.window, 0)  # the window's first token
        for index in state.indexes:
            gram = index.n
            if gram > min(length, self.window) - 1:
                continue
            for start in index.earlier(length - gram):
                if start < first:
                    break
                return tokens[start + gram:start + gram + n]
        return []
