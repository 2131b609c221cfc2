"""Prompt-lookup drafting: propose what followed the last occurrence of the context's own suffix.

No model: the draft is copied from earlier in the context, so it carries no distribution (the loop makes q
one-hot on each proposed token). It stands in for the paper's lightweight drafters: almost free (c_rel ≈ 0), but
not a language model — relaxed rules that trust q will copy the context, which is how degenerate loops start
(SPEC §1). It reads only the context each request carries, so one instance serves every sequence.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest
from relaxtui.errors import UserError


class NgramDrafter(BaseDrafter):
    kind = "ngram"  # read by tui/engine.py until it reads traits
    traits = DrafterTraits("ngram", has_distribution=False)

    def __init__(self, vocab_size: int | None = None, *, n_min: int = 1, n_max: int = 3, window: int = 4096) -> None:
        """``vocab_size`` is unused (the loop builds the one-hot q); tui/engine.py passes it until it builds drafters
        through ``make_drafter``."""
        if not 1 <= n_min <= n_max:
            raise UserError(f"n-gram sizes need 1 <= --ngram-min <= --ngram-max (got {n_min}..{n_max})")
        self.n_min, self.n_max = n_min, n_max
        self.window = window  # how far back to search, in tokens

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        """Nothing to prefill; the lookup reads the context it is given each round."""
        return True

    def propose(self, context: Sequence[int], n: int) -> list[int]:
        """Longest n-gram first: find the most recent earlier occurrence of the context's last g tokens and
        return up to n tokens that followed it."""
        tokens = np.asarray(context[-self.window:], dtype=np.int64)
        length = len(tokens)
        for gram in range(min(self.n_max, length - 1), self.n_min - 1, -1):
            suffix = tokens[length - gram:]
            # candidate starts whose window matches the suffix, excluding the suffix itself
            starts = np.flatnonzero(tokens[: length - gram] == suffix[0])
            for start in starts[::-1]:
                if start + gram <= length - 1 and np.array_equal(tokens[start:start + gram], suffix):
                    follow = tokens[start + gram:start + gram + n]
                    if len(follow):
                        return [int(t) for t in follow]
        return []

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = []
        for request in requests:
            started = time.perf_counter()
            tokens = self.propose(request.context, request.n_max) if request.n_max > 0 else []
            drafts.append(Draft(tokens, None, None, time.perf_counter() - started))
        return drafts
