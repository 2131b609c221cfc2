"""Running round counters (vLLM's ``observe_draft``), shared by the loop's final metrics and live displays.

Position i is *reached* in a round when drafts 1..i-1 were accepted; per-position acceptance is
accepted-at-i over reached-at-i (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relaxtui.decoding.events import RoundTiming, acceptance_rate, mean_accepted_length


@dataclass
class RoundCounters:
    draft_max: int
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    llama_s: float = 0.0
    round_s: float = 0.0
    reached: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    draft_lengths: list[int] = field(default_factory=list)  # k_r of every round, in order (cost profiles price it)
    full_rounds: int = 0  # rounds whose every draft was accepted (the drafter then re-syncs two tokens)

    def __post_init__(self) -> None:
        self.reached = [0] * self.draft_max
        self.accepted_at = [0] * self.draft_max

    def observe_round(self, timing: RoundTiming) -> None:
        n_drafted, n_accepted = timing.n_drafted, timing.n_accepted
        if n_drafted > len(self.reached):  # a display that did not know N up front
            grow = n_drafted - len(self.reached)
            self.reached += [0] * grow
            self.accepted_at += [0] * grow
        self.rounds += 1
        self.draft_lengths.append(n_drafted)
        self.full_rounds += n_drafted > 0 and n_accepted == n_drafted
        self.drafted += n_drafted
        self.accepted += n_accepted
        for position in range(min(n_drafted, n_accepted + 1)):
            self.reached[position] += 1
        for position in range(n_accepted):
            self.accepted_at[position] += 1
        self.draft_s += timing.draft_s
        self.verify_s += timing.verify_s
        self.llama_s += timing.llama_s
        self.round_s += timing.total_s

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.accepted, self.drafted)

    @property
    def mean_accepted_length(self) -> float:
        return mean_accepted_length(self.accepted, self.rounds)

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / r if r else 0.0 for a, r in zip(self.accepted_at, self.reached, strict=True)]
