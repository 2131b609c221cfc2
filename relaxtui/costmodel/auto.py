"""`--draft-max auto`: the draft length the cost model predicts fastest on this machine, and the honest line.

Inputs: the calibrated costs of a round (`calibrate`) and a short acceptance estimate on the user's own prompt
(per draft position, P(accept at i | i reached)). With per-position acceptance a_1, a_2, … the expected
accepted drafts at length N are Σ_{i≤N} Π_{j≤i} a_j and the round is fully accepted with probability
Π_{j≤N} a_j, so each N's speed-up over the verifier alone is priced like bench prices measured rounds.
N = 0 (no speculation) wins whenever nothing is predicted faster than the verifier alone — on a CPU, often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.costmodel.pricing import BreakEven, Rounds, break_even, priced_speedup, rounds_break_even
from relaxtui.costmodel.profiles import THIS_MACHINE
from relaxtui.display import priced_label

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
    """Tokens per second at draft length n over the verifier alone's: one expected round priced by this machine's
    profile (`pricing`, as every face prices)."""
    expected, full = expected_accepted(rates, n)
    return priced_speedup(costs.profile(blocks=n + 1), Rounds({n: 1.0}, 1.0 + expected, full_rounds=full))


def break_even_length(costs: LoopCosts, n: int) -> BreakEven:
    """The mean accepted length draft length n needs to match the verifier alone here (`pricing.break_even`)."""
    return break_even(costs.profile(blocks=n + 1), n)


@dataclass(frozen=True)
class AutoChoice:
    draft_max: int
    predicted: dict[int, float]  # N -> predicted speed-up
    rates: tuple[float, ...]
    break_even: dict[int, BreakEven]  # N -> the mean accepted length needed (or that none pays)
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
            return (f"0 (verifier alone): speculation is predicted slower here — best N={n} "
                    f"{self.predicted[n]:.2f}x; {self.break_even[n].need()} (the estimate is {expected:.2f})")
        return (f"N={n}, predicted {self.predicted[n]:.2f}x the verifier alone (mean accepted "
                f"length {expected:.2f}, break-even {self.break_even[n].steps:.2f})")


def choose_draft_length(costs: LoopCosts, rates: Sequence[float], n_max: int | None = None) -> AutoChoice:
    """The fastest predicted N in 1..n_max, or 0 when none beats the verifier alone."""
    n_max = min(n_max or costs.max_block - 1, costs.max_block - 1)
    predicted = {n: predicted_speedup(costs, rates, n) for n in range(0, n_max + 1)}
    even = {n: break_even_length(costs, n) for n in range(1, n_max + 1)}
    best = max(predicted, key=lambda n: (predicted[n], -n))
    return AutoChoice(best if predicted[best] > 1.0 else 0, predicted, tuple(rates), even,
                      None if costs.stable else costs.unstable_reason or "spread too wide")


def slower_line(costs: LoopCosts, n: int, mean_accepted_length: float, rounds: Rounds) -> str | None:
    """One line when a finished generation at draft length n was slower than the verifier alone here, its own
    rounds priced by this machine's profile (a price, not a prediction: ``display.PRICED``); None when faster. The
    break-even is that of the rounds that ran, at the widths they verified (a priced cut verifies fewer than n)."""
    if n == 0 or not rounds.rounds or rounds.output_tokens == 0:
        return None
    profile = costs.profile(blocks=max(rounds.by_length) + 1)
    speedup = priced_speedup(profile, rounds)
    if speedup >= 1.0:
        return None
    return (f"speculation was slower than the verifier alone here ({speedup:.2f}x {priced_label(THIS_MACHINE)}): "
            f"{rounds_break_even(profile, rounds, n).need()} (this run: {mean_accepted_length:.2f})")
