"""Relaxed acceptance with a top-k set (TensorRT-LLM's "relaxed acceptance" for DeepSeek-R1's MTP, and vLLM's ratio
ports): keep a draft the verifier ranks close enough to its own top token.

The set A = the verifier's k likeliest tokens whose raw probability (softmax of its logits at T = 1, over the whole
vocabulary, as the engines compute it) is at least p_raw(top) − δ (``topk-delta``, TensorRT-LLM's form) or at least
r · p_raw(top) (``topk-ratio``, vLLM's ports: the same as logit(v) ≥ logit(top) + ln r). The engines run it greedy:
a draft in A is kept, and a rejection emits the verifier's argmax. relaxtui keeps that at temperature 0 and, when
sampling, judges a draft in A other than the top token as kept and every other draft as strict judges it:

    π_rej(v) = max(p(v), q(v)) for v in A minus the top token, p(v) elsewhere;   π_res = π_bonus = p

so δ = 0 (or r = 1, or k = 1) is strict at any temperature (but for exact ties with the top). Knobs: δ in [0, 1]
(bigger = more relaxed) or r in (0, 1] (smaller = more relaxed); second knob k, a whole number ≥ 1 (default 10 for
the difference, TensorRT-LLM's example; 3 for the ratio, vLLM's port).
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule

MAX_K = 1024  # bounded where it is read: a k of 1e15 was taken, and every row then sorted the whole vocabulary


class TopSet(Rule):
    """The shared set A and targets; a subclass says which raw probabilities are close enough to the top one."""

    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob2: float  # both forms have a default k
    needs_logits = True  # A reads the raw distribution over the whole vocabulary (whole rows when sampling)

    @classmethod
    def knob2_ok(cls, knob2: float) -> bool:
        return knob2 == int(knob2) and 1 <= knob2 <= MAX_K

    def floor(self, top_prob: float) -> float:
        """The least raw probability in A, given the top one's."""
        raise NotImplementedError

    def kept(self, top_ids: np.ndarray, top_probs: np.ndarray) -> np.ndarray:
        """A minus the top token: ids from the verifier's k likeliest (``top_ids``/``top_probs`` descending) whose raw
        probability reaches ``floor``."""
        k = int(self.knob2)
        ids, probs = top_ids[1:k], top_probs[1:k]
        return ids[probs >= self.floor(float(top_probs[0]))]

    def raw_top(self, p: np.ndarray, logits_p: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The verifier's k likeliest ids and their raw probabilities, descending (ties: lower id first): from its
        raw logits over the whole vocabulary, or, without them, with ``p`` standing in for the raw distribution."""
        k = min(int(self.knob2), len(p))
        values = p if logits_p is None else logits_p
        ids = np.argpartition(values, len(values) - k)[-k:] if k < len(values) else np.arange(len(values))
        ids = ids[np.lexsort((ids, -values[ids]))]
        if logits_p is None:
            return ids, p[ids]
        z = logits_p.astype(np.float64)
        top = float(z.max())
        log_norm = top + float(np.log(np.exp(z - top).sum()))
        return ids, np.exp(z[ids] - log_norm)

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        kept = self.kept(*self.raw_top(p, logits_p))
        pi_rej = p.copy()
        pi_rej[kept] = np.maximum(p[kept], q[kept])
        return pi_rej, p, {"in_set": float(x in kept)}

    def greedy_top(self) -> int:
        return int(self.knob2)

    def greedy_keeps(self, top_ids: np.ndarray, top_probs: np.ndarray, x: int) -> bool:
        return bool(x in self.kept(top_ids, top_probs))


class TopkDelta(TopSet):
    name = "topk-delta"
    knob_name = "delta"
    knob_help = ("in [0, 1]: keep a draft in the top k within delta of the top probability; bigger = more relaxed, "
                 "0 = strict")
    knob2_name = "k"
    knob2_default = 10.0
    knob2_help = "a whole number in 1..1024, default 10: how many of the verifier's likeliest tokens may be kept"

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 <= knob <= 1.0

    def floor(self, top_prob: float) -> float:
        return top_prob - self.knob


class TopkRatio(TopSet):
    name = "topk-ratio"
    knob_name = "r"
    knob_help = ("in (0, 1]: keep a draft in the top k with at least r times the top probability; smaller = more "
                 "relaxed, 1 = strict")
    knob2_name = "k"
    knob2_default = 3.0
    knob2_help = "a whole number in 1..1024, default 3: how many of the verifier's likeliest tokens may be kept"
    relaxes_upward = False  # a smaller ratio keeps more

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 < knob <= 1.0

    def floor(self, top_prob: float) -> float:
        return self.knob * top_prob
