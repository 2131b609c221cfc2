"""Ensemble: both targets are the mixture w·p + (1−w)·q.

Knob w (the verifier weight) ∈ [0, 1]: *smaller* = more relaxed; w = 1 is strict, w = 0 always accepts.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


class Ensemble(Rule):
    name = "ensemble"
    knob_name = "w"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    relaxes_upward = False  # a smaller knob relaxes more
    knob_help = "in [0, 1], the verifier weight; smaller = more relaxed, 1 = strict, 0 = always accept"

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 <= knob <= 1.0

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        mixture = self.knob * p + (1.0 - self.knob) * q
        return mixture, mixture, {}

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]]:
        return self.knob * p_x + (1.0 - self.knob) * q_x, ()
