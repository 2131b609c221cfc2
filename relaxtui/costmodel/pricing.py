"""The one price of a set of generations, and the one break-even: every face (bench, eval, tune, chat, generate,
serve) prices through here, so one set of rounds gives one number wherever it is shown.

A generation's counters (``Rounds``: how many rounds verified how many drafts, tokens, fully accepted rounds, extra
drafter steps, end-of-generation tokens) are priced by a ``CostProfile``. The verifier alone is priced through the
same function, on the rounds it would run to write the same tokens — one verifier step per output token and per
end-of-generation token — so a verifier-alone run prices at exactly 1.0 by construction (its rounds *are* those
rounds), and a speculative run's end-of-generation round is paid on both sides of the ratio.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile

END_REASON = "eog"  # the finish reason of a generation whose last round decoded an end-of-generation token


class Generation(Protocol):
    """What pricing reads of one generation (``decoding.events.Metrics`` has these, read-only: a frozen dataclass)."""

    @property
    def output_tokens(self) -> int: ...
    @property
    def draft_lengths(self) -> tuple[int, ...]: ...
    @property
    def extra_draft_steps(self) -> int: ...
    @property
    def full_accept_rounds(self) -> int: ...
    @property
    def finish_reason(self) -> str: ...


@dataclass(frozen=True)
class Rounds:
    """The counters a price needs, pooled over one or more generations; no times (the hardware does not change
    them). Counts may be fractional for an expected round (``auto``)."""

    by_length: Mapping[int, float] = field(default_factory=dict)  # drafts verified in a round (0: a verifier step)
    # -> how many rounds did so
    output_tokens: float = 0.0
    full_rounds: float = 0.0  # rounds whose every draft was accepted (the drafter re-syncs two tokens)
    extra_draft_steps: float = 0.0  # drafter steps past the draft (a relaxed bonus needs q at N+1)
    end_tokens: float = 0.0  # end-of-generation tokens decoded: a round paid for, not counted as output

    @classmethod
    def of(cls, draft_lengths: Iterable[int], output_tokens: float, *, full_rounds: float = 0,
           extra_draft_steps: float = 0, end_tokens: float = 0) -> Rounds:
        """From a list of per-round draft lengths, as the loop's counters keep them."""
        return cls(dict(Counter(draft_lengths)), output_tokens, full_rounds, extra_draft_steps, end_tokens)

    @property
    def rounds(self) -> float:
        return sum(self.by_length.values())

    def __add__(self, other: Rounds) -> Rounds:
        lengths = dict(self.by_length)
        for k, count in other.by_length.items():
            lengths[k] = lengths.get(k, 0) + count
        return Rounds(lengths, self.output_tokens + other.output_tokens, self.full_rounds + other.full_rounds,
                      self.extra_draft_steps + other.extra_draft_steps, self.end_tokens + other.end_tokens)

    def verifier_alone(self) -> Rounds:
        """The rounds the verifier alone runs to write the same tokens: one step per token, the end token too."""
        return Rounds({0: self.output_tokens + self.end_tokens}, self.output_tokens)


def rounds_of_metrics(generations: Iterable[Generation]) -> Rounds:
    """Pooled counters of finished generations (the loop's ``Metrics``)."""
    total = Rounds()
    for m in generations:
        total += Rounds.of(m.draft_lengths, m.output_tokens, full_rounds=m.full_accept_rounds,
                           extra_draft_steps=m.extra_draft_steps, end_tokens=float(m.finish_reason == END_REASON))
    return total


def rounds_of_records(records: Iterable[Mapping[str, Any]]) -> Rounds:
    """Pooled counters of eval records. Records from before a field was kept: a fixed N per round (or verifier
    steps), no extra steps, and no end token counted (their verifier alone then prices as it always did)."""
    total = Rounds()
    for r in records:
        if "draft_lengths" in r:
            lengths = list(r["draft_lengths"])
        else:
            lengths = [r["config"]["draft_max"]] * r["rounds"]
        total += Rounds.of(lengths, r["output_tokens"], full_rounds=r.get("full_accept_rounds", 0),
                           extra_draft_steps=r.get("extra_draft_steps", 0),
                           end_tokens=float(r.get("finish_reason") == END_REASON))
    return total


def priced_ms(profile: CostProfile, rounds: Rounds) -> float:
    """What the rounds cost under the profile: every round (its verify block and drafter steps), the drafter steps
    past the draft, the re-syncs after fully accepted rounds, and each emitted token. A block longer than the
    profile measures is a UserError naming it."""
    blocks = sum(count * profile.round_cost_ms(k) for k, count in sorted(rounds.by_length.items()) if count)
    return (blocks + rounds.extra_draft_steps * profile.drafter_ms + rounds.full_rounds * profile.resync_ms
            + rounds.output_tokens * profile.emit_ms)


def priced_speedup(profile: CostProfile, rounds: Rounds) -> float:
    """The verifier alone writing the same tokens, over these rounds, both priced by the profile; 0.0 when
    nothing was priced."""
    cost = priced_ms(profile, rounds)
    return priced_ms(profile, rounds.verifier_alone()) / cost if cost > 0 else 0.0


# -- break-even ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BreakEven:
    """The mean accepted length (tokens per round) at which draft length N matches the verifier alone.

    A round of N drafts yields at most N + 1 tokens, so a break-even at or above N + 1 (or below 0, which no valid
    profile gives) cannot be reached whatever the rule: ``length`` is then None. The break-even of rounds that ran
    (``rounds_break_even``) prices each at the width it verified — priced drafting cuts drafts short, a drafter may
    propose nothing — and its ceiling is what those widths can yield."""

    n: int
    steps: float  # one round of N drafts, in verifier steps (the break-even whether reachable or not); of rounds
    # that ran: their mean cost
    where: str = "on this machine"  # or "under profile NAME"
    most: float | None = None  # tokens a round can yield at most, on average over the rounds priced (None: N + 1)
    widths: tuple[int, int] | None = None  # (fewest, most) drafts the priced rounds verified (None: N in each)

    @property
    def ceiling(self) -> float:
        return self.n + 1 if self.most is None else self.most

    @property
    def reachable(self) -> bool:
        return math.isfinite(self.steps) and 0 <= self.steps < self.ceiling

    @property
    def length(self) -> float | None:
        return self.steps if self.reachable else None

    def below(self, mean_accepted_length: float) -> bool:
        """Whether a run of this mean accepted length is below the break-even (always, when it is unreachable)."""
        return not self.reachable or mean_accepted_length < self.steps

    def need(self) -> str:
        """The clause every face prints: what N would need, or that nothing makes it pay — for rounds of other
        widths than N, what those rounds would need."""
        if self.widths is None or self.widths == (self.n, self.n):
            if self.reachable:
                return f"at N={self.n} it would need a mean accepted length of {self.steps:.2f} to break even"
            return (f"no acceptance rate makes N={self.n} pay {self.where} (a round costs {self.steps:.2f} verifier "
                    f"steps and yields at most {self.n + 1} tokens)")
        low, high = self.widths
        ran = (f"its rounds at N={self.n} verified {low}–{high} drafts ({self.ceiling - 1:.2f} on average) at "
               f"{self.steps:.2f} verifier steps a round")
        if self.reachable:
            return f"{ran}: they would need a mean accepted length of {self.steps:.2f} to break even"
        return (f"no acceptance rate makes these rounds pay {self.where}: {ran}, and such rounds yield at most "
                f"{self.ceiling:.2f} tokens")


def where_priced(profile: CostProfile) -> str:
    return "on this machine" if profile.name == THIS_MACHINE else f"under profile {profile.name}"


def break_even(profile: CostProfile, n: int) -> BreakEven:
    """Rounds of n drafts against the verifier alone: a round of L tokens costs round(n) + L·emit and the verifier
    alone L·(t_AR + emit), so emission cancels; the re-sync after fully accepted rounds is left out."""
    return BreakEven(n, profile.round_cost_ms(n) / profile.verifier_ar_ms, where_priced(profile))


def rounds_break_even(profile: CostProfile, rounds: Rounds, n: int) -> BreakEven:
    """The break-even of the rounds that ran at draft length ``n``: what they cost on average in verifier steps —
    each at the width it verified, with the drafter steps past the draft and the re-syncs, as ``priced_ms`` prices
    them — so a run is below it exactly when its priced speed-up is below 1 (up to its end token). Rounds that all
    verified ``n`` drafts give ``break_even(profile, n)``; no rounds: that too."""
    count = rounds.rounds
    if not count or (set(rounds.by_length) == {n} and not rounds.extra_draft_steps and not rounds.full_rounds):
        return break_even(profile, n)
    emitted = rounds.output_tokens * profile.emit_ms  # (paid by the verifier alone too: it cancels)
    steps = (priced_ms(profile, rounds) - emitted) / count / profile.verifier_ar_ms
    most = sum((k + 1) * c for k, c in rounds.by_length.items()) / count
    verified = [k for k, c in rounds.by_length.items() if c]
    return BreakEven(n, steps, where_priced(profile), most, (min(verified), max(verified)))
