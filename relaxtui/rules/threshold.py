"""Threshold acceptance, SGLang's target-only verification (``--speculative-accept-threshold-acc`` and
``-single``; sgl-kernel's ``TreeSpeculativeSamplingTargetOnly``): the verifier alone decides, from p(x).

On a draft chain the kernel accepts x when its coin u satisfies u ≤ p(x) / t_acc or when p(x) ≥ t_single, and after
a rejection samples p with x removed (it sets the draft's probability to p(x) and draws from relu(p − that)). So a
draft passes with a(x) = 1 if p(x) ≥ t_single, else min(1, p(x) / t_acc), whatever q says: target-only by design, it
treats every draft as a token without a distribution (q one-hot on x), which its kernel reads as zeros. In the
framework's terms, with the round's test min(1, π_rej(x) / q(x)) and q(x) = 0 rejecting as everywhere:

    π_rej = a · q        π_res = p without x, renormalised (drawn as it is, not minus q)        π_bonus = p

Both knobs at 1 give a(x) = p(x) and the residual p without x: exact (the output follows p) for any drafter, and
strict itself for a drafter without a distribution. Knob t_acc in (0, 1]: smaller = more relaxed; second knob
t_single in (0, 1], default 1: smaller = more relaxed. 0 is refused: p(x) ≥ 0 would pass drafts the verifier rules out.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


class Threshold(Rule):
    name = "threshold"
    knob_name = "t_acc"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = "in (0, 1]: a draft passes with min(1, p(x)/t_acc); smaller = more relaxed, 1 (with t_single 1) = exact"
    knob2_name = "t_single"
    knob2: float  # it has a default
    knob2_default = 1.0
    knob2_help = "in (0, 1], default 1: a draft with p(x) >= t_single always passes; smaller = more relaxed"
    relaxes_upward = False  # smaller thresholds pass more
    may_leave_support = False  # a(x) = 0 where p(x) = 0; the residual is p's
    subtract_draft = False  # the residual is p without the draft, whatever q is
    x_dependent = True  # π_res leaves out the drafted token (a relaxed bonus keeps p)

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return 0.0 < knob <= 1.0

    @classmethod
    def knob2_ok(cls, knob2: float) -> bool:
        return 0.0 < knob2 <= 1.0

    def chance(self, p_x: float) -> float:
        """a(x): the kernel's acceptance chance of a draft the verifier gives p(x)."""
        return 1.0 if p_x >= self.knob2 else min(1.0, p_x / self.knob)

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        chance = np.where(p >= self.knob2, 1.0, np.minimum(1.0, p / self.knob))
        rest = p.copy()
        rest[x] = 0.0
        mass = rest.sum()
        return chance * q, rest / mass if mass > 0 else p, {"chance": float(chance[x])}

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]]:
        chance = self.chance(p_x)
        return chance * q_x, (("chance", chance),)
