"""FLy, training-free loosely speculative decoding (Li et al., ICLR 2026, arXiv 2511.22972; vLLM's
``rejection_sample_method="fly"``): where the verifier is unsure, wait before rejecting a draft.

Every position is judged as strict judges it (π_rej = π_res = π_bonus = p). A draft strict rejects is kept instead
when the verifier is uncertain there — the entropy of its three largest processed probabilities, −Σ p ln p over those
three as they are (nats, not renormalised), is at least τ — the verifier and the drafter both give it mass, and the W
drafts after it in the same round all pass strict's own test, each with the uniform the round draws for it. Otherwise
the rejection stands, with strict's residual. A window that would run past the draft defers nothing. At temperature 0
the test is argmax matching and the entropy is the T = 1 distribution's (the engines' greedy FLy). The decision reads
later positions of the round: decoding/acceptance.py's look-ahead path (``lookahead``).

Knob τ ≥ 0, default 0.3 (the paper's): smaller = more relaxed; above ln 3 ≈ 1.0986, the largest top-3 entropy, it is
strict. Second knob W, a whole number ≥ 1: default min(6, N − 1) for a draft length N (vLLM's); needs N ≥ 2.
"""

from __future__ import annotations

import math

import numpy as np

from relaxtui.checks import MAX_DRAFT, BadValue
from relaxtui.rules.base import Rule

TOP = 3  # the largest probabilities the entropy reads (vLLM's VLLM_FLY_ENTROPY_TOP_K, the paper's top-3)
WINDOW = 6  # the paper's and vLLM's window, cut to N - 1 for a shorter draft
STRICT_TAU = math.log(TOP)  # the largest top-3 entropy: any τ above it never defers


def top_entropy(probs: np.ndarray) -> float:
    """−Σ p ln p over the three largest entries of ``probs`` (fewer if it holds fewer), as they are (nats). Three
    passes of argmax over the support: a partition of a row that is mostly zeros (top-k/top-p over a whole
    vocabulary) is slow on the ties, ~20 ms on 152k ids, and ~1 ms on a dense one, against ~0.1 ms for this."""
    support = probs[probs > 0]
    top = []
    for _ in range(min(TOP, len(support))):
        at = int(support.argmax())
        top.append(float(support[at]))
        support[at] = 0.0  # (support is a copy: the mask made it)
    return -math.fsum(value * math.log(value) for value in top if value > 0)


class Fly(Rule):
    name = "fly"
    knob_name = "tau"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_default = 0.3
    knob_help = (">= 0, default 0.3: the top-3 entropy (nats) from which a rejection waits for the drafts after it; "
                 "smaller = more relaxed, above ln 3 = 1.0986 = strict")
    knob2_name = "W"
    knob2_help = "a whole number >= 1, default min(6, N - 1): the drafts after a waiting rejection that must all pass"
    relaxes_upward = False  # a smaller τ defers more rejections
    may_leave_support = False  # keeps only drafts with p(x) > 0, resamples strict's residual, bonuses from p
    lookahead = True

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return knob >= 0.0

    @classmethod
    def knob2_ok(cls, knob2: float) -> bool:
        return knob2 == int(knob2) and 1 <= knob2 <= MAX_DRAFT

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        return p, p, {"entropy": top_entropy(p)}

    def window(self, n: int, draft_max: int | None = None) -> int:
        if self.knob2 is not None:
            return int(self.knob2)
        return max(0, min(WINDOW, (draft_max or n) - 1))

    def defers(self, probs: np.ndarray) -> bool:
        return top_entropy(probs) >= self.knob

    def greedy_top(self) -> int:
        return TOP

    def check_draft_max(self, draft_max: int) -> None:
        """N = 0 (the verifier alone) judges nothing; N = 1 leaves no draft to confirm a waiting rejection."""
        if draft_max == 1:
            raise BadValue("draft_max", "must be at least 2 for rule 'fly' (got 1): it keeps a rejected draft only "
                                        "when the drafts after it pass")
        if self.knob2 is not None and draft_max and self.knob2 >= draft_max:
            raise BadValue("draft_max", f"must be above the window of rule 'fly', W={self.knob2:g} (got {draft_max}): "
                                        "the W drafts after a waiting rejection must fit in the draft")

