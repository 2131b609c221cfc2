"""`--draft-max auto`: the draft length the cost model predicts fastest on this machine, and the honest line.

Inputs: the calibrated costs of a round (`calibrate`) and a short acceptance estimate on the user's own prompt
(per draft position, P(accept at i | i reached)). With per-position acceptance a_1, a_2, … the expected
accepted drafts at length N are Σ_{i≤N} Π_{j≤i} a_j and the round is fully accepted with probability
Π_{j≤N} a_j, so each N's speed-up over the verifier alone is priced like bench prices measured rounds.
N = 0 (no speculation) wins whenever nothing is predicted faster than the verifier alone — on a CPU, often.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from relaxtui.costmodel.calibrate import LoopCosts

MIN_REACHED = 8  # a position reached fewer times than this borrows the overall acceptance rate


def position_acceptance(reached: Sequence[int], accepted: Sequence[int]) -> list[float]:
    """Per-position acceptance; thinly observed positions take the pooled rate (capped by the position before,
    since acceptance rarely rises deeper into a draft)."""
    total_reached, total_accepted = sum(reached), sum(accepted)
    pooled = total_accepted / total_reached if total_reached else 0.0
    rates: list[float] = []
    for r, a in zip(reached, accepted, strict=True):
        rate = a / r if r >= MIN_REACHED else pooled
        rates.append(min(rate, rates[-1]) if rates and r < MIN_REACHED else rate)
    return rates


def expected_accepted(rates: Sequence[float], n: int) -> tuple[float, float]:
    """(expected accepted drafts, probability all n are accepted) for draft length n; positions past the
    estimate repeat its last rate."""
    expected, survive = 0.0, 1.0
    for i in range(n):
        rate = rates[i] if i < len(rates) else (rates[-1] if rates else 0.0)
        survive *= rate
        expected += survive
    return expected, survive


def predicted_speedup(costs: LoopCosts, rates: Sequence[float], n: int) -> float:
    """Tokens per second at draft length n over the verifier alone's, from calibrated costs."""
    if n == 0:
        return 1.0
    expected, full = expected_accepted(rates, n)
    tokens = 1.0 + expected
    round_s = costs.round_s(n) + full * costs.resync_extra_s + tokens * costs.emit_s
    return tokens * costs.ar_step_s / round_s


def break_even_length(costs: LoopCosts, n: int) -> float:
    """Mean accepted length (tokens per round) that draft length n needs to match the verifier alone here."""
    # a round of L tokens costs round_s + L·emit, the verifier alone L·(verify_1 + emit): emission cancels
    return costs.round_s(n) / costs.verify_s[0]


@dataclass(frozen=True)
class AutoChoice:
    draft_max: int
    predicted: dict[int, float]  # N -> predicted speed-up
    rates: tuple[float, ...]
    break_even: dict[int, float]  # N -> mean accepted length needed
    unstable_reason: str | None = None  # the calibration's timings stayed implausible: the choice is uncertain

    @property
    def best_speculative(self) -> int:
        return max((n for n in self.predicted if n > 0), key=lambda n: self.predicted[n])

    def line(self) -> str:
        caveat = (f"; this machine's timings were unstable ({self.unstable_reason}), so the choice is uncertain: "
                  "re-run on an idle machine") if self.unstable_reason else ""
        return self._line() + caveat

    def _line(self) -> str:
        n = self.best_speculative
        expected = 1 + expected_accepted(self.rates, n)[0]
        if self.draft_max == 0:
            return (f"--draft-max auto: 0 (verifier alone): speculation is predicted slower here — best N={n} "
                    f"{self.predicted[n]:.2f}x, it would need a mean accepted length of {self.break_even[n]:.2f} to "
                    f"break even and the estimate is {expected:.2f}")
        return (f"--draft-max auto: N={n}, predicted {self.predicted[n]:.2f}x the verifier alone (mean accepted "
                f"length {expected:.2f}, break-even {self.break_even[n]:.2f})")


def choose_draft_length(costs: LoopCosts, rates: Sequence[float], n_max: int | None = None) -> AutoChoice:
    """The fastest predicted N in 1..n_max, or 0 when none beats the verifier alone."""
    n_max = min(n_max or costs.max_block - 1, costs.max_block - 1)
    predicted = {n: predicted_speedup(costs, rates, n) for n in range(0, n_max + 1)}
    even = {n: break_even_length(costs, n) for n in range(1, n_max + 1)}
    best = max(predicted, key=lambda n: (predicted[n], -n))
    return AutoChoice(best if predicted[best] > 1.0 else 0, predicted, tuple(rates), even,
                      None if costs.stable else costs.unstable_reason or "spread too wide")


def priced_speedup(costs: LoopCosts, draft_lengths: Sequence[int], full_rounds: int, output_tokens: int) -> float:
    """A generation's own rounds priced by the calibrated costs, against the verifier alone writing as many."""
    seconds = (sum(costs.round_s(k) for k in draft_lengths) + full_rounds * costs.resync_extra_s
               + output_tokens * costs.emit_s)
    return output_tokens * costs.ar_step_s / seconds if seconds > 0 else math.inf


def slower_line(costs: LoopCosts, n: int, mean_accepted_length: float, draft_lengths: Sequence[int],
                full_rounds: int, output_tokens: int) -> str | None:
    """One line when a finished generation at draft length n is predicted slower than the verifier alone
    here (its own rounds priced by the calibrated costs); None when it is faster."""
    if n == 0 or not draft_lengths or output_tokens == 0:
        return None
    speedup = priced_speedup(costs, draft_lengths, full_rounds, output_tokens)
    if speedup >= 1.0:
        return None
    return (f"speculation is predicted slower than the verifier alone here ({speedup:.2f}x): at N={n} it would need a "
            f"mean accepted length of {break_even_length(costs, n):.2f} to break even (this run: "
            f"{mean_accepted_length:.2f})")
