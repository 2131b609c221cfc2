"""Typical acceptance (Medusa, Cai et al. 2024): a deterministic test on the verifier alone.

Accept x iff p(x) > min(ε, δ·exp(−H(p))) with δ = sqrt(ε); on rejection emit from p itself (no residual).
Knob ε ∈ (0, 1), default 0.09: bigger = stricter threshold. There is no strict setting.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Decision, Rule


def entropy(p: np.ndarray) -> float:
    support = p[p > 0]
    return float(-(support * np.log(support)).sum())


class Typical(Rule):
    name = "typical"
    may_leave_support = False  # accepts only p(x) above a threshold >= 0, resamples p
    knob_name = "epsilon"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    relaxes_upward = False  # a smaller knob relaxes more
    knob_default = 0.09
    knob_help = "in (0, 1), default 0.09; bigger = stricter (delta = sqrt(epsilon))"
    subtract_draft = False

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 < knob < 1.0

    def threshold(self, p: np.ndarray) -> float:
        return min(self.knob, float(np.sqrt(self.knob)) * float(np.exp(-entropy(p))))

    def accepts(self, p: np.ndarray, x: int) -> bool:
        """The deterministic test, exposed on its own."""
        return bool(p[x] > self.threshold(p))

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        return p, p, {"threshold": self.threshold(p)}

    def decide(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
               logits_q: np.ndarray | None = None) -> Decision:
        threshold = self.threshold(p)
        accept = 1.0 if (q[x] > 0 and p[x] > threshold) else 0.0
        return Decision(p, p, accept, (("accept_prob", accept), ("threshold", threshold)))
