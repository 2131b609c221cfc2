"""Live statistics of the current generation: acceptance, lengths, per-position acceptance, speed."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Label

from relaxtui.costmodel.auto import break_even_length, priced_speedup
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.events import Metrics, TokenEvent

LEVELS = " ▁▂▃▄▅▆▇█"


def position_bars(acceptance: list[float]) -> str:
    """Per draft position P(accept at i | i reached), as one line of level blocks plus the values."""
    if not acceptance:
        return "pos -"
    blocks = "".join(LEVELS[round(a * (len(LEVELS) - 1))] for a in acceptance)
    values = " ".join(f"{a:.2f}".lstrip("0") if a < 1 else "1" for a in acceptance)
    return f"pos {blocks} {values}"


class FixedLines(Widget):
    """Text of a fixed height (set in the .tcss): a new value repaints the widget without a layout pass, which
    Static.update would trigger every round."""

    text: reactive[str] = reactive("", layout=False)

    def render(self) -> Text:
        return Text(self.text)


class StatsPanel(Vertical):
    """Fed token events; derives every number from the round timings they carry."""

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.counters = RoundCounters(0)
        self.tokens = 0
        self.cost: LoopCosts | None = None
        self._last_round = -1
        self.draft_max = 0
        self.final_tokens_per_s: float | None = None

    def compose(self) -> ComposeResult:
        yield Label("statistics", classes="panel-title")
        yield FixedLines(id="stats-numbers")
        yield FixedLines(id="stats-positions")

    def on_mount(self) -> None:
        self.show()

    def reset(self, draft_max: int) -> None:
        self.counters = RoundCounters(draft_max)
        self.tokens = 0
        self._last_round = -1
        self.draft_max = draft_max
        self.final_tokens_per_s: float | None = None
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
        self.show()

    def set_cost(self, cost: LoopCosts) -> None:
        self.cost = cost
        self.show()

    def lines(self) -> list[str]:
        c = self.counters
        tps = self.final_tokens_per_s if self.final_tokens_per_s is not None else (
            self.tokens / c.round_s if c.round_s > 0 else 0.0)
        lines = [
            f"accept {c.acceptance_rate:.2f} ({c.accepted}/{c.drafted})",
            f"mean length {c.mean_accepted_length:.2f}  tokens {self.tokens}",
        ]
        if self.cost is None:
            return lines + [f"{tps:.1f} tok/s"]
        cost = self.cost
        measured = tps * cost.ar_step_s if tps else 0.0
        priced = c.rounds and self.tokens
        modelled = priced_speedup(cost, c.draft_lengths, c.full_rounds, self.tokens) if priced else 1.0
        lines += [f"{tps:.1f} tok/s  c_rel {cost.c_rel:.2f}", f"speed-up {measured:.2f}x (model {modelled:.2f}x)"]
        n = max(c.draft_lengths, default=0)
        if n and c.rounds and (modelled < 1.0 or measured < 1.0):  # the chat drafts anyway: say what it costs
            lines += ["slower than verifier alone:", f"N={n} needs mean length {break_even_length(cost, n):.2f}"]
        return lines

    def show(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#stats-numbers", FixedLines).text = "\n".join(self.lines())
        self.query_one("#stats-positions", FixedLines).text = position_bars(self.counters.per_position_acceptance)
