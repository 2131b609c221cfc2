"""Why a token was emitted: its verdict, draft position, p(x), q(x), π(x), the rule's statistic, alternatives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from relaxtui.decoding.events import TokenEvent

EXPLAIN = {
    "accepted": "draft kept: u < min(1, π_rej/q)",
    "resampled": "draft rejected; from (π_res − q)+",
    "bonus": "all drafts kept; free from π_bonus",
    "verifier": "verifier alone (no draft)",
}


def _probability(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def describe(event: TokenEvent, piece: Callable[[int], str]) -> str:
    """The inspector's text for one token (pure, so it is testable without an app)."""
    lines = [
        f"token     {event.text!r} id {event.token_id}",
        f"verdict   {event.verdict.value}",
        f"  {EXPLAIN[event.verdict.value]}",
        f"position  {event.draft_position if event.draft_position else '-'} "
        f"({event.round.n_accepted}/{event.round.n_drafted} kept)",
        f"p(x)      {_probability(event.p_x)}",
        f"q(x)      {_probability(event.q_x)}",
        f"π(x)      {_probability(event.pi_x)}",
    ]
    if event.rejected_token is not None:
        lines.append(f"rejected  {piece(event.rejected_token)!r} (id {event.rejected_token})")
    for name, value in event.statistic:
        lines.append(f"{name:<9} {value:.4f}")
    for title, alternatives in (("top p", event.top_p), ("top q", event.top_q)):
        if alternatives:
            lines.append(f"{title}:")
            lines += [f"  {piece(token)!r:<14} {prob:.3f}" for token, prob in alternatives]
    return "\n".join(lines)


class InspectorPanel(Vertical):
    def __init__(self, piece: Callable[[int], str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "inspector · F4"
        self.piece = piece

    def compose(self) -> ComposeResult:
        yield Static("select a token: click it, or focus the transcript (tab) and use ← →", id="inspector-body")

    def show(self, event: TokenEvent | None) -> None:
        body = self.query_one("#inspector-body", Static)
        body.update("no token selected" if event is None else describe(event, self.piece))
