"""Live statistics of the current reply: acceptance, lengths, per-position acceptance, speed and speed-ups.

Two speed-ups, each named for what it is:

- **wall-clock**: this reply's tokens/s over the verifier alone's, the latter timed on this machine when the
  models loaded (``LoopCosts.ar_step_s``: a one-token verify block plus its emission).
- **priced (this machine)**: this reply's own rounds priced by the cost model with the costs timed at load
  (the "this-machine" profile), against the verifier alone writing as many tokens — what eval and tune call
  the priced speed-up (``display.PRICED``). It is not disturbed by what else the machine does during the reply.

The break-even mean accepted length at the reply's N comes from the same cost model, and is shown only when the
reply is below it by that model (priced speed-up under 1, mean length under the break-even). A value not
measured yet is "–", never a number that looks measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widget import Widget

from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.costmodel.pricing import (
    BreakEven,
    Rounds,
    break_even,
    priced_speedup,
    rounds_break_even,
    rounds_of_metrics,
)
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.events import Metrics, TokenEvent
from relaxtui.display import PRICED, WALL_CLOCK

LEVELS = " ▁▂▃▄▅▆▇█"
DASH = "–"  # not measured yet
LABEL_WIDTH = 15
STATS_LINES = 9  # the most lines() returns; the .tcss gives #stats-numbers this height


def position_bars(acceptance: list[float]) -> str:
    """Per draft position P(accept at i | i reached), as one line of level blocks plus the values."""
    if not acceptance:
        return f"pos {DASH}"
    blocks = "".join(LEVELS[round(a * (len(LEVELS) - 1))] for a in acceptance)
    values = " ".join(f"{a:.2f}".lstrip("0") if a < 1 else "1" for a in acceptance)
    return f"pos {blocks} {values}"


def below_break_even(cost: LoopCosts, counters: RoundCounters, priced: float,
                     rounds: Rounds | None = None) -> BreakEven | None:
    """N's break-even (`pricing.break_even`) when this reply is below it, else None.

    Both sides come from the cost model: the priced speed-up of the reply's own rounds is below 1 *and* its mean
    accepted length is below N's break-even (what `profiles show` and `generate` print for N). The two agree except
    at the margin (a last verifier-only round, full-accept re-syncs); there nothing is claimed, so the line never
    sits next to a mean length above the break-even, nor next to a priced speed-up over 1. ``rounds``: the reply's
    rounds, judged at the widths they verified (a priced cut, a drafter with nothing to propose)."""
    n = max(counters.draft_lengths, default=0)
    if n == 0 or priced >= 1.0:
        return None
    profile = cost.profile(blocks=n + 1)
    even = break_even(profile, n) if rounds is None else rounds_break_even(profile, rounds, n)
    return even if even.below(counters.mean_accepted_length) else None


def break_even_line(even: BreakEven) -> str:
    """One line of the panel (about 32 columns): the length N needs, or that no rate makes N pay here; for rounds
    of other widths than N, the same at their mean width."""
    if even.widths is not None and even.widths != (even.n, even.n):  # the rounds' mean width: what was priced
        if even.length is None:
            return f" no rate pays at {even.ceiling - 1:.1f} drafts"
        return f" break-even at {even.ceiling - 1:.1f} drafts: {even.length:.2f}"
    if even.length is None:
        return f" no acceptance rate pays at N={even.n}"
    return f" break-even at N={even.n}: length {even.length:.2f}"


def priced_reply(cost: LoopCosts, rounds: Rounds) -> float:
    """A reply's own rounds priced by this machine's profile against the verifier alone (`pricing`)."""
    return priced_speedup(cost.profile(blocks=max(rounds.by_length, default=0) + 1), rounds)


def rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.1f} tok/s" if tokens_per_s < 1000 else f"{tokens_per_s:.0f} tok/s"


def row(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{value}"


class FixedLines(Widget):
    """Text of a fixed height (set in the .tcss): a new value repaints the widget without a layout pass, which
    Static.update would trigger every round."""

    text: reactive[str] = reactive("", layout=False)

    def render(self) -> Text:
        return Text(self.text)


class StatsPanel(Vertical):
    """Fed token events; derives every number from the round timings they carry."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "statistics · F3"
        self.counters = RoundCounters(0)
        self.tokens = 0
        self.cost: LoopCosts | None = None
        self._last_round = -1
        self.draft_max = 0
        self.final_tokens_per_s: float | None = None
        self.final_rounds: Rounds | None = None  # the finished reply's rounds, as the loop counted them

    def compose(self) -> ComposeResult:
        yield FixedLines(id="stats-numbers")
        yield FixedLines(id="stats-positions")

    def on_mount(self) -> None:
        self.show()

    def reset(self, draft_max: int) -> None:
        self.counters = RoundCounters(draft_max)
        self.tokens = 0
        self._last_round = -1
        self.draft_max = draft_max
        self.final_tokens_per_s = None
        self.final_rounds = None
        self.show()

    def observe_many(self, events: Sequence[TokenEvent]) -> None:
        """Count a batch of tokens, then redraw once."""
        for event in events:
            self.tokens += 1
            if event.round.index != self._last_round:
                self._last_round = event.round.index
                self.counters.observe_round(event.round)
        self.show()

    def finish(self, metrics: Metrics) -> None:
        """At the end, show the loop's own decode-time tokens/s (the running value counts round time only)."""
        self.final_tokens_per_s = metrics.tokens_per_s
        # the loop's own counters: they hold the round that decoded the end token, which no token event shows
        self.final_rounds = rounds_of_metrics([metrics])
        self.show()

    def replay(self, events: Sequence[TokenEvent], metrics: Metrics) -> None:
        """Show a finished reply again (a resumed chat's last one)."""
        self.reset(max(metrics.draft_lengths, default=0))
        self.observe_many(events)
        self.finish(metrics)

    def set_cost(self, cost: LoopCosts) -> None:
        self.cost = cost
        self.show()

    def rounds(self) -> Rounds:
        """What the priced speed-up prices: the rounds seen so far, or once finished the loop's own count."""
        if self.final_rounds is not None:
            return self.final_rounds
        return Rounds.of(self.counters.draft_lengths, self.tokens, full_rounds=self.counters.full_rounds)

    def tokens_per_s(self) -> float | None:
        """This reply's tokens/s; None before its first round."""
        if self.final_tokens_per_s is not None:
            return self.final_tokens_per_s or None
        return self.tokens / self.counters.round_s if self.counters.round_s > 0 and self.tokens else None

    def lines(self) -> list[str]:
        c, cost = self.counters, self.cost
        tps = self.tokens_per_s()
        measured = c.rounds > 0 and self.tokens > 0
        lines = [
            row("acceptance", f"{c.acceptance_rate:.2f} ({c.accepted}/{c.drafted})" if c.drafted else DASH),
            row("mean length", f"{c.mean_accepted_length:.2f}" if measured else DASH),
            row("speed", rate(tps) if tps else DASH),
            row("verifier alone", rate(1.0 / cost.ar_step_s) if cost and cost.ar_step_s > 0 else DASH),
            row("c_rel", f"{cost.c_rel:.2f}" if cost and cost.c_rel > 0 else DASH),
            "speed-up vs verifier alone",
        ]
        wall_clock = f"{tps * cost.ar_step_s:.2f}x" if cost and tps else DASH
        priced = priced_reply(cost, self.rounds()) if cost and measured else None
        lines += [f" {WALL_CLOCK:<22}{wall_clock}",
                  f" {PRICED + ' (this machine)':<22}{DASH if priced is None else f'{priced:.2f}x'}"]
        below = below_break_even(cost, c, priced, self.rounds()) if cost is not None and priced is not None else None
        if below is not None:
            lines.append(break_even_line(below))
        return lines

    def show(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#stats-numbers", FixedLines).text = "\n".join(self.lines())
        self.query_one("#stats-positions", FixedLines).text = position_bars(self.counters.per_position_acceptance)
