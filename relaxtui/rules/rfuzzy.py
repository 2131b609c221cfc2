"""Fuzzy speculative decoding (Holsman et al. 2025): trust the drafter where it is close to the verifier.

π = q if JS(p, q) ≤ T else p, with the Jensen–Shannon divergence in nats (at most ln 2). Knob T: bigger =
more relaxed; any T < 0 is strict. Needs sampling: it refuses temperature 0.
"""

from __future__ import annotations

import numpy as np

from relaxtui.errors import NumericsError
from relaxtui.rules.base import Rule


def _sum_a_log_b(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·log b over a > 0 (0·log 0 = 0), without temporaries for the skipped entries."""
    logs = np.log(b, out=np.zeros_like(b), where=a > 0)
    return float(a @ logs)


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """JS(p, q) in nats = log 2 + ½[Σ p log p + Σ q log q − Σ (p+q) log(p+q)], in float64 with 0·log 0 = 0.

    Float64 throughout: in float32 a softmax over large logits underflows to exact zeros, and the unmasked
    0·log 0 = NaN then reads as "JS = 0, accept" (found in the dense path). After top-k/top-p the joint
    support is a few dozen entries, so we gather it first; on a dense row the masked logs are cheaper."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    support = np.flatnonzero((p > 0) | (q > 0))
    if len(support) < len(p) // 8:
        p, q = p[support], q[support]
    total = p + q
    inner = _sum_a_log_b(p, p) + _sum_a_log_b(q, q) - _sum_a_log_b(total, total)
    js = float(np.log(2.0)) + 0.5 * inner
    if not np.isfinite(js):
        raise NumericsError(f"Jensen-Shannon divergence is not finite ({js}): p or q holds NaN or inf")
    return min(max(0.0, js), float(np.log(2.0)))  # clip rounding just outside [0, ln 2]


class RFuzzy(Rule):
    name = "rfuzzy"
    knob_name = "T"
    knob: float  # a rule with a knob_name has one: check_knob gives a float or refuses
    knob_help = "a JS threshold in nats (JS <= ln 2); bigger = more relaxed, < 0 = strict"
    greedy_ok = False

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        js = js_divergence(p, q)
        target = q if js <= self.knob else p
        return target, target, {"js": js}
