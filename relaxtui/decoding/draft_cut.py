"""Priced drafting: verify only the part of a draft that pays for its width here (docs/method.md#priced-drafts).

A verify batch of k tokens costs v(k) verifier steps (measured: on a CPU each extra row costs a third to two thirds
of a step; on a GPU almost nothing). A round that verifies the first j tokens of a proposal yields 1 + Σ_{i≤j} P_i
tokens on average, P_i the chance that its first i tokens are all kept, for v(j + 1) steps. So each round verifies
the prefix with the most expected tokens per step, which is never below the verifier alone's one token per step:
a drafter that finds nothing, or is usually wrong, costs nothing (the round is a plain verifier step).

P_i comes from how this sequence's drafts fared so far. The evidence is the drafter's *streak*: how many of the
tokens just emitted it had proposed, without a miss. A drafter that copies a passage the output restates has a long
streak and is kept nearly always; one that matched a two-token phrase by chance has none. ``KeepOdds`` counts, per
streak bucket, how often a proposed token was kept (a Beta(2, 1) prior each), and is told after every round what
the proposal was and what was emitted, including the proposed tokens the cut did not verify: the emitted tokens say
whether they would have been kept (at greedy exactly; when sampling, the token the verifier emitted is the one a
strict round keeps with the same probability). It depends on tokens alone, so a seed gives the same drafts.

Pure: no model, no clock. A ``PricedDrafter`` (``decoding/priced.py``) holds one ``KeepOdds`` per sequence; the round
never sees the cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relaxtui import checks

DRAFT_CUTS = checks.DRAFT_CUT.values  # the policies (docs/method.md#priced-drafts), resolved by ``cuts_drafts``
BUCKETS = 7  # streaks 0, 1, 2-3, 4-7, 8-15, 16-31, 32+
PRIOR_KEPT, PRIOR_SEEN = 2.0, 3.0  # Beta(2, 1): an unseen bucket keeps two in three (docs/method.md#priced-drafts)


def bucket(streak: int) -> int:
    """The bucket of a streak: 0 for none, then one per power of two, the last open-ended."""
    return min(streak.bit_length(), BUCKETS - 1)


def check_prices(prices: Sequence[float]) -> None:
    """``prices`` is v(1..K) in verifier steps: v(1) = 1, every entry finite and positive."""
    if not prices:
        return
    if abs(prices[0] - 1.0) > 1e-9:
        raise ValueError(f"verify prices start at v(1) = 1 (got {prices[0]})")
    if not all(0.0 < p < float("inf") for p in prices):
        raise ValueError(f"verify prices must be positive and finite (got {list(prices)})")


def priced_length(chances: Sequence[float], prices: Sequence[float]) -> int:
    """How many tokens of a proposal to verify: the j in 0..len(chances) (and below len(prices)) with the most
    expected tokens per verifier step, (1 + Σ_{i≤j} chances[i-1]) / prices[j]; ``chances[i-1]`` is the chance the
    first i are all kept. Ties go to the shorter draft (the same yield for less width)."""
    best_j, best = 0, 1.0 / prices[0]
    expected = 1.0
    for j, chance in enumerate(chances[:len(prices) - 1], start=1):
        expected += chance
        rate = expected / prices[j]
        if rate > best * (1 + 1e-12):
            best_j, best = j, rate
    return best_j


@dataclass
class KeepOdds:
    """One sequence's record of its drafter: the tokens it proposed that were kept, per streak bucket, and its
    current streak (the emitted tokens it had proposed since its last miss)."""

    kept: list[float] = field(default_factory=lambda: [PRIOR_KEPT] * BUCKETS)
    seen: list[float] = field(default_factory=lambda: [PRIOR_SEEN] * BUCKETS)
    streak: int = 0

    def chances(self, n: int) -> list[float]:
        """P_1..P_n for a proposal of n tokens: token i is kept with the rate of bucket(streak + i - 1), as its
        drafter will have been right streak + i - 1 times in a row when it is reached."""
        out, chance = [], 1.0
        for i in range(n):
            b = bucket(self.streak + i)
            chance *= self.kept[b] / self.seen[b]
            out.append(chance)
        return out

    def observe(self, proposal: Sequence[int], emitted: Sequence[int]) -> int:
        """A round ended: the drafter had proposed ``proposal`` (all of it, verified or not) and the round emitted
        ``emitted``. Each proposed token up to the first one that differs from what was emitted is an outcome; the
        streak grows by the tokens it got right, and restarts at a miss or when the drafter proposed nothing (a
        bonus token past a proposal that was all kept is no miss). Returns the tokens it got right."""
        right = 0
        for token, out in zip(proposal, emitted, strict=False):
            b = bucket(self.streak + right)
            self.seen[b] += 1
            if token != out:
                break
            self.kept[b] += 1
            right += 1
        missed = right < min(len(proposal), len(emitted))
        self.streak = 0 if missed or not proposal else self.streak + right
        return right

    def cut(self, n: int, prices: Sequence[float]) -> int:
        """How many of a proposal of n tokens to verify (``priced_length`` over this sequence's chances)."""
        return priced_length(self.chances(n), prices) if n and len(prices) > 1 else 0


def check_policy(policy: str) -> None:
    """A ``draft_cut`` policy is one of DRAFT_CUTS (a refusal names the setting)."""
    checks.DRAFT_CUT.check(policy, "draft_cut")


def cuts_drafts(policy: str, holds_model: bool) -> bool:
    """Whether a ``draft_cut`` policy cuts a drafter's drafts by price: "priced" always, "auto" for a drafter that runs
    no model (its ``DrafterTraits.holds_model`` is False: what it proposes costs nothing, so only the verify width
    is at stake; a model drafter's --draft-p-min stops it drafting instead), "none" never."""
    return policy == "priced" or (policy == "auto" and not holds_model)


def extend(prices: Sequence[float], blocks: int) -> tuple[float, ...]:
    """``prices`` for blocks 1..``blocks``: past the measured ones, each token at the measured average per token."""
    prices = tuple(prices)
    if len(prices) >= blocks or len(prices) < 2:
        return prices[:blocks]
    step = max((prices[-1] - prices[0]) / (len(prices) - 1), 1e-6)
    return prices + tuple(prices[-1] + step * i for i in range(1, blocks - len(prices) + 1))
