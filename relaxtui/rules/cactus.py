"""CACTUS (Hao & Mou, ICLR 2026): boost the drafted token's verifier mass within a divergence budget.

H_x(x) = γ = min(1, p(x) + sqrt(2δ p(x)(1 − p(x)))); every other token is p scaled by (1−γ)/(1−p(x)).
Both targets are H_x, which depends on the drafted x — so after a rejection the residual is recomputed for
that x. Knob δ ≥ 0: bigger = more relaxed; δ = 0 is strict. Second order, KL(H_x ‖ p) ≈ δ.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


def boosted_mass(p_x: float, delta: float) -> float:
    """γ: the drafted token's target mass, which depends only on p(x) and δ."""
    return min(1.0, p_x + float(np.sqrt(2.0 * delta * p_x * (1.0 - p_x))))


class Cactus(Rule):
    name = "cactus"
    may_leave_support = False  # γ(0) = 0 and the rest of the target scales p
    knob_name = "delta"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = ">= 0; bigger = more relaxed, 0 = strict"
    x_dependent = True

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return knob >= 0.0

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        p_x = float(p[x])
        gamma = boosted_mass(p_x, self.knob)
        scale = (1.0 - gamma) / (1.0 - p_x) if p_x < 1.0 else 1.0
        target = p * scale
        target[x] = gamma
        return target, target, {"gamma": gamma}

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]]:
        gamma = boosted_mass(p_x, self.knob)
        return gamma, (("gamma", gamma),)
