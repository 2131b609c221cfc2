"""Speculative cascades (Narasimhan et al. 2024): defer to the drafter where it is confident enough.

casc-opt: π = p when max q < max p − α·TV(p, q) (defer to the verifier), else q. Knob α: bigger = more
relaxed; α = −∞ is strict.
casc-tok: π = q·1[v ∈ A] + η·p with A = {v : p_raw(v) ≥ (1−α)·max p_raw} and η = Σ_{v∉A} q(v) — the drafter
keeps the tokens the verifier finds plausible, the rest of its mass goes to p. Knob α ≤ 1: bigger = more
relaxed; α = 1 is π = q; α = −∞ is strict; α = 0 is *not* strict (A = the verifier's argmax set).
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.maximum(p - q, 0.0).sum())


class CascOpt(Rule):
    name = "casc-opt"
    knob_name = "alpha"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = "any real; bigger = more relaxed, -inf = strict"
    # its deferral compares the drafter's confidence max q with the verifier's: a one-hot q (a draft without a
    # distribution) claims confidence 1 and, at every α >= 0, is trusted on every token, p(x) = 0 included
    needs_draft_logits = True

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        tv = total_variation(p, q)
        defer = self.knob == -np.inf or bool(q.max() < p.max() - self.knob * tv)
        target = p if defer else q
        return target, target, {"defer": float(defer), "tv": tv}


class CascTok(Rule):
    name = "casc-tok"
    knob_name = "alpha"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = "<= 1; bigger = more relaxed, 1 = always the drafter, -inf = strict (0 is not strict)"
    needs_logits = True

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return knob <= 1.0

    def top_set(self, p: np.ndarray, logits_p: np.ndarray | None) -> np.ndarray:
        """A as a boolean mask over the raw (T=1) verifier distribution. With logits, p_raw(v) ≥ c·max p_raw
        is z_v ≥ max z + log c, which needs no softmax; without them, ``p`` stands in for p_raw."""
        if self.knob == -np.inf:
            return np.zeros(p.shape, dtype=bool)
        if self.knob == 1.0:
            return np.ones(p.shape, dtype=bool)
        if logits_p is None:
            return p >= (1.0 - self.knob) * p.max()
        return logits_p >= logits_p.max() + np.log1p(-self.knob)

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        in_top = self.top_set(p, logits_p)
        kept_q = np.where(in_top, q, 0.0)
        eta = max(0.0, 1.0 - float(kept_q.sum()))
        target = kept_q + eta * p
        return target, target, {"in_top_set": float(in_top[x]), "eta": eta}
