"""MARS, margin-aware verification (Song et al. 2026, arXiv 2601.15498; the authors' code, github.com/5SSjw/MARS,
``evaluate_posterior``): relax only where the verifier hardly prefers its top token to the runner-up.

At each position the verifier's two largest logits z₁ ≥ z₂ give the ratio z₂ / z₁ (the authors' "logit ratio", of the
logits as sampling processes them: temperature divides both and cancels). Where it exceeds θ the position is
indecisive and the draft is kept if it is the verifier's top or runner-up token, with no coin; any other draft is
rejected and the token comes from p itself (the authors' code resamples the unchanged p). Elsewhere the position is
strict. relaxtui reads z₁, z₂ from the raw logits row and relaxes only where z₁ > 0 (for z₁ ≤ 0 the ratio grows as the
margin widens, and the authors' z₂ / (z₁ + 1e-10) would relax everywhere) and where the runner-up is in p's support
(top-k/top-p removed it: its processed logit is −∞, as in the authors' code). With R = {top, runner-up}:

    relaxed position:  π_rej = q · 1[v in R]  (a draft in R passes)      π_res = p, drawn as it is
    other positions:   π_rej = p                                          π_res = norm((p − q)+)   (strict)
    π_bonus = p

Knob θ, any real, default 0.9 (the authors' code; their sweep 0.84–0.98): smaller = more relaxed, θ ≥ 1 = strict. At
temperature 0 the authors' code matches argmaxes, and so does relaxtui. It reads the verifier's raw logits (whole rows).
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule, residual


class Mars(Rule):
    name = "mars"
    knob_name = "theta"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_default = 0.9
    knob_help = ("any real, default 0.9: relax where the verifier's second logit over its first exceeds it; "
                 "smaller = more relaxed, >= 1 = strict")
    relaxes_upward = False  # a smaller θ relaxes more positions
    needs_logits = True  # the two largest raw logits
    may_leave_support = False  # keeps the top or a runner-up p gives mass; resamples p or strict's residual
    subtract_draft = False  # a relaxed position resamples p itself; a strict one carries strict's residual in π_res

    def margin(self, p: np.ndarray, logits_p: np.ndarray | None) -> tuple[bool, float, np.ndarray]:
        """(relaxed, z₂/z₁ (0 where z₁ ≤ 0), the top two ids) of one verifier row."""
        if logits_p is None:
            raise ValueError("rule 'mars' reads the verifier's raw logits; none were handed")
        two = np.argpartition(logits_p, len(logits_p) - 2)[-2:]
        top, second = two[np.lexsort((two, -logits_p[two]))]  # (equal logits: the lower id first, as argmax)
        z1, z2 = float(logits_p[top]), float(logits_p[second])
        ratio = z2 / z1 if z1 > 0 else 0.0
        relaxed = z1 > 0 and p[second] > 0 and ratio > self.knob
        return relaxed, ratio, np.array([top, second])

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        relaxed, ratio, pair = self.margin(p, logits_p)
        stats = {"ratio": ratio, "relaxed": float(relaxed)}
        if relaxed:
            pi_rej = np.zeros_like(p)
            pi_rej[pair] = q[pair]
            return pi_rej, p, stats
        rest = residual(p, q)
        return p, rest / rest.sum(), stats

    def relaxed_target(self, p: np.ndarray, q: np.ndarray, *, logits_p: np.ndarray | None = None,
                       logits_q: np.ndarray | None = None) -> np.ndarray:
        """No draft at N+1, so nothing to keep: the bonus is p, as in the authors' code."""
        return p
