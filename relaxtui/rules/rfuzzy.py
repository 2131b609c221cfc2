"""Fuzzy speculative decoding (Holsman et al. 2025): trust the drafter where it is close to the verifier.

π = q if JS(p, q) ≤ T else p, with the Jensen–Shannon divergence in nats (at most ln 2). Knob T: bigger =
more relaxed; any T < 0 is strict. Needs sampling: it refuses temperature 0.
"""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


def _kl_to_mixture(a: np.ndarray, m: np.ndarray) -> float:
    support = a > 0
    return float(np.sum(a[support] * np.log(a[support] / m[support])))


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """JS in nats, computed on the joint support only (after top-k/top-p that is a few dozen entries)."""
    support = np.flatnonzero((p > 0) | (q > 0))
    p_s, q_s = p[support], q[support]
    m = 0.5 * (p_s + q_s)
    return 0.5 * _kl_to_mixture(p_s, m) + 0.5 * _kl_to_mixture(q_s, m)


class RFuzzy(Rule):
    name = "rfuzzy"
    knob_name = "T"
    knob_help = "a JS threshold in nats (JS <= ln 2); bigger = more relaxed, < 0 = strict"
    greedy_ok = False

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        js = js_divergence(p, q)
        target = q if js <= self.knob else p
        return target, target, {"js": js}
