"""Mentored decoding (Tran-Thien 2023): accept with min(1, p(x) / ((1−α) q(x))); residual from p.

π_rej = min(p/(1−α), 1) is not a distribution; it only scales the acceptance test. π_res = p.
Knob α ∈ [0, 1): bigger = more relaxed; α = 0 is strict.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


class Mentored(Rule):
    name = "mentored"
    may_leave_support = False  # π_rej = min(p / (1 - α), 1): zero where p is
    knob_name = "alpha"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = "in [0, 1); bigger = more relaxed, 0 = strict"

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 <= knob < 1.0

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        return np.minimum(p / (1.0 - self.knob), 1.0), p, {}

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]]:
        return min(p_x / (1.0 - self.knob), 1.0), ()
