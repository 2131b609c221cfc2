"""Speculative contrastive decoding (Yuan et al. 2023): amplify what the verifier knows beyond the drafter.

Both targets = softmax over G of ((1+β)·z_p − β·z_q)/T, zero outside G, where z are raw logits and G is the
verifier's support after top-k/top-p. π_bonus is the same rule at N+1, which costs one extra drafter step.
Knob β ≥ 0: bigger = further from p (usually *lower* acceptance); β = 0 is strict. Refuses temperature 0.
Ids outside the drafter's vocabulary (z_q = −inf after padding) are outside G too.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


class Contrastive(Rule):
    name = "scd"
    knob_name = "beta"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = ">= 0; bigger = further from the verifier (usually lower acceptance), 0 = strict"
    greedy_ok = False
    needs_logits = True
    needs_draft_logits = True
    relaxed_bonus = True

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return knob >= 0.0

    def contrast(self, p: np.ndarray, logits_p: np.ndarray | None, logits_q: np.ndarray | None) -> np.ndarray:
        if logits_p is None or logits_q is None or self.knob == 0.0:
            return p
        dense = np.count_nonzero(p) == len(p)  # no top-k/top-p: skip the gather, it costs more than the maths
        support = slice(None) if dense else np.flatnonzero(p)
        # float32 logits stay float32 through exp (relative error ~1e-7, twice as fast); normalise in float64
        z_q = logits_q[support]
        z = (1.0 + self.knob) / self.temperature * logits_p[support]
        z -= self.knob / self.temperature * z_q
        # Ids the drafter cannot produce (its vocabulary padded to the verifier's with -inf) stay outside G:
        # −β·(−inf) = +inf would otherwise give them all the mass, and inf − inf = NaN after the shift.
        unreachable = np.isneginf(z_q)
        if unreachable.any():
            if unreachable.all():
                return p
            z[unreachable] = -np.inf
        z -= z.max()
        np.exp(z, out=z)
        z = z.astype(np.float64)
        z /= z.sum()
        if dense:
            return z
        target = np.zeros_like(p)
        target[support] = z
        return target

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        target = self.contrast(p, logits_p, logits_q)
        return target, target, {"pi_over_p": float(target[x] / p[x]) if p[x] > 0 else 0.0}

    def bonus(self, p: np.ndarray, q: np.ndarray | None = None, *, logits_p: np.ndarray | None = None,
              logits_q: np.ndarray | None = None) -> np.ndarray:
        return self.contrast(p, logits_p, logits_q)

    def relaxed_target(self, p: np.ndarray, q: np.ndarray, *, logits_p: np.ndarray | None = None,
                       logits_q: np.ndarray | None = None) -> np.ndarray:
        return self.contrast(p, logits_p, logits_q)
