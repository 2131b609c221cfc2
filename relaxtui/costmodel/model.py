"""The SPEC §3 speed-up model and the draft-length advice built on it.

S(N) = (l_accept + 1) / (v(N+1) + N·c_rel): per verifier-step time, a round emits l_accept + 1 tokens and
costs one (N+1)-token verify plus N drafter steps. With an i.i.d. per-token acceptance rate a, the expected
number of accepted drafts is l_accept = a(1 − a^N)/(1 − a). Length-adjusted: S_relax = (L_AR / L_relax)·S.
"""

from __future__ import annotations

from collections.abc import Sequence


def expected_accepted(acceptance_rate: float, n: int) -> float:
    """E[accepted drafts per round] for draft length n with i.i.d. acceptance."""
    a = min(max(acceptance_rate, 0.0), 1.0)
    if a == 1.0:
        return float(n)
    return a * (1.0 - a**n) / (1.0 - a)


def verify_cost(v: Sequence[float], k: int) -> float:
    """v(k) from a measured curve (v[0] = v(1)); past its end, extrapolate linearly from the last two."""
    if k <= len(v):
        return v[k - 1]
    if len(v) == 1:
        return v[0] * k
    slope = v[-1] - v[-2]
    return v[-1] + slope * (k - len(v))


def predicted_speedup(l_accept: float, n: int, c_rel: float, v: Sequence[float]) -> float:
    """Modelled speed-up over the verifier alone (N = 0 gives 1 by construction)."""
    return (l_accept + 1.0) / (verify_cost(v, n + 1) + n * c_rel)


def length_adjusted(speedup: float, length_ar: float, length_relaxed: float) -> float:
    """S_relax = (L_AR / L_relax)·S: a relaxed rule that writes longer answers loses that much."""
    return speedup * length_ar / length_relaxed if length_relaxed > 0 else 0.0


def best_draft_length(acceptance_rate: float, c_rel: float, v: Sequence[float], n_max: int) -> tuple[int, float]:
    """The N in 0..n_max with the highest modelled speed-up, and that speed-up (0 = don't speculate)."""
    best = (0, 1.0)
    for n in range(1, n_max + 1):
        speedup = predicted_speedup(expected_accepted(acceptance_rate, n), n, c_rel, v)
        if speedup > best[1]:
            best = (n, speedup)
    return best
