"""Prompt-lookup drafting: propose what followed the last occurrence of the context's own suffix.

No model: the draft is copied from earlier in the context, so q is one-hot on each proposed token. It
stands in for the paper's lightweight drafters (MTP heads): almost free (c_rel ≈ 0), but not a language
model — relaxed rules that trust q will copy the context, which is how degenerate loops start (SPEC §1).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from relaxtui.decoding.drafters import Draft
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError


class NgramDrafter:
    kind = "ngram"

    def __init__(self, vocab_size: int, *, n_min: int = 1, n_max: int = 3, window: int = 4096) -> None:
        if not 1 <= n_min <= n_max:
            raise UserError(f"n-gram sizes need 1 <= --ngram-min <= --ngram-max (got {n_min}..{n_max})")
        self.vocab_size = vocab_size
        self.n_min, self.n_max = n_min, n_max
        self.window = window  # how far back to search, in tokens
        self.model = None  # no model: the loop's llama-time accounting skips us

    def begin(self, prompt: Sequence[int], **_: object) -> bool:
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

    def draft(self, context: Sequence[int], n: int, sampling: SamplingParams,
              rng: np.random.Generator) -> Draft:
        started = time.perf_counter()
        tokens = self.propose(context, n) if n > 0 else []
        probs = np.zeros((len(tokens), self.vocab_size))
        probs[np.arange(len(tokens)), tokens] = 1.0
        return Draft(tokens, probs, None, time.perf_counter() - started)

    def next_distribution(self, sampling: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        raise UserError("the ngram drafter has no distribution past its draft; use --bonus target or auto")
