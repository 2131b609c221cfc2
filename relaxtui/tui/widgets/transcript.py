"""The conversation: user messages, and assistant messages whose every token is styled by its verdict.

Verdict colours live in the .tcss (component classes ``token--accepted`` …), not here. Each token carries an
``@click`` action, so a mouse click selects it for the inspector like the cursor keys do. Replies stream
into bounded segments, so a long reply costs no more per token than a short one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Static

from relaxtui.decoding.events import TokenEvent

if TYPE_CHECKING:
    from relaxtui.tui.save import Turn

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


SEGMENT_TOKENS = 96  # a segment is sealed at the first line break after this many tokens


class TokenView(Widget):
    """A run of tokens rendered as one wrapped text; the selected one is highlighted.

    Streams are split into such runs (segments) at line breaks, so appending a token re-renders and re-wraps
    only the last, bounded segment: the cost per token stays O(1) however long the reply grows."""

    COMPONENT_CLASSES = {"token--accepted", "token--resampled", "token--bonus", "token--verifier",
                         "token--selected"}
    DEFAULT_CSS = "TokenView { height: auto; }"

    selected: reactive[int | None] = reactive(None)

    @dataclass
    class Clicked(Message):
        index: int

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokens: list[tuple[int, TokenEvent]] = []  # (index in the conversation, event)
        self.auto_links = False  # tokens carry @click meta; without this Textual repaints them in link colours
        self._text: Text | None = None  # the styled text so far; appended to, rebuilt on selection or theme

    def extend(self, tokens: Sequence[tuple[int, TokenEvent]]) -> None:
        """Append tokens; ask for a layout pass (which re-arranges the whole screen) only when the wrapped text
        needs another line, else a repaint of this segment is enough."""
        text = self._text
        if text is not None:
            for index, event in tokens:
                self._append(text, index, event)
        self.tokens.extend(tokens)
        width = self.content_region.width
        grows = width <= 0 or len(self.render().wrap(self.app.console, width)) != self.content_region.height
        self.refresh(layout=grows)

    def holds(self, index: int | None) -> bool:
        return index is not None and bool(self.tokens) and self.tokens[0][0] <= index <= self.tokens[-1][0]

    @property
    def sealed(self) -> bool:
        """Long enough and ending a line: later tokens go to a new segment."""
        return len(self.tokens) >= SEGMENT_TOKENS and self.tokens[-1][1].text.endswith("\n")

    def _append(self, text: Text, index: int, event: TokenEvent) -> None:
        style = self.get_component_rich_style(f"token--{event.verdict.value}", partial=True)
        if index == self.selected:
            style += self.get_component_rich_style("token--selected", partial=True)
        shown = event.text if event.text else ("·" if index == self.selected else "")
        text.append(shown, style + Style.from_meta({"@click": f"click_token({index})"}))

    def render(self) -> Text:
        text = self._text
        if text is None:
            text = Text()
            for index, event in self.tokens:
                self._append(text, index, event)
            self._text = text  # after the styles were read: reading them may reset the cache
        if self.sealed:
            text = text.copy()
            text.right_crop(1)  # the line break that sealed it: the next segment starts on its own row anyway
        return text

    def watch_selected(self) -> None:
        self._text = None

    def notify_style_update(self) -> None:
        self._text = None  # a theme change restyles every token
        super().notify_style_update()

    def action_click_token(self, index: int) -> None:
        self.post_message(self.Clicked(index))


class TokenStream(Vertical):
    """One part of a reply (thinking or answer) as a column of TokenView segments."""

    DEFAULT_CSS = "TokenStream { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.segments: list[TokenView] = []

    @property
    def tokens(self) -> list[tuple[int, TokenEvent]]:
        return [token for segment in self.segments for token in segment.tokens]

    def plain(self) -> str:
        return "".join(event.text for _, event in self.tokens)

    def extend(self, tokens: Sequence[tuple[int, TokenEvent]]) -> None:
        """Append tokens: sealed segments are never touched again, so cost is bounded per token."""
        pending = list(tokens)
        while pending:
            if not self.segments or self.segments[-1].sealed:
                segment = TokenView()
                self.segments.append(segment)
                self.mount(segment)
            segment = self.segments[-1]
            taken = 0
            while taken < len(pending):  # fill up to the first line break past the segment's size
                taken += 1
                if len(segment.tokens) + taken >= SEGMENT_TOKENS and pending[taken - 1][1].text.endswith("\n"):
                    break
            segment.extend(pending[:taken])
            del pending[:taken]

    def select(self, index: int | None, previous: int | None) -> None:
        """Only the segments holding the old or the new selection re-render."""
        for segment in self.segments:
            if segment.holds(index) or segment.holds(previous):
                segment.selected = index if segment.holds(index) else None


class UserMessage(Static):
    """What the user typed."""


class AssistantMessage(Widget):
    """One reply: an optional collapsible thinking block, then the answer."""

    DEFAULT_CSS = "AssistantMessage { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thinking_view = TokenStream(classes="thinking")
        self.answer_view = TokenStream(classes="answer")
        self.thinking = Collapsible(self.thinking_view, title="thinking", collapsed=True, classes="-empty")
        self._in_think = False
        self._selected: int | None = None

    def compose(self) -> ComposeResult:
        yield self.thinking
        yield self.answer_view

    def add_many(self, start: int, events: Sequence[TokenEvent]) -> None:
        """Route tokens (conversation indices start, start+1, …): everything from <think> to </think> goes to
        the collapsible block; consecutive tokens bound for the same part are appended in one call."""
        run: list[tuple[int, TokenEvent]] = []
        run_target: TokenStream | None = None
        for offset, event in enumerate(events):
            if THINK_OPEN in event.text:
                self._in_think = True
                self.thinking.remove_class("-empty")
            target = self.thinking_view if self._in_think else self.answer_view
            if THINK_CLOSE in event.text:
                self._in_think = False
            if target is not run_target and run and run_target is not None:  # a run always has its target
                run_target.extend(run)
                run = []
            run_target = target
            run.append((start + offset, event))
        if run and run_target is not None:
            run_target.extend(run)

    def add(self, index: int, event: TokenEvent) -> None:
        self.add_many(index, [event])

    def select(self, index: int | None) -> None:
        previous, self._selected = self._selected, index
        self.thinking_view.select(index, previous)
        self.answer_view.select(index, previous)


class Transcript(VerticalScroll, can_focus=True):
    """The scrolling conversation; with focus, arrow keys move the inspector's cursor over the tokens."""

    BINDINGS = [
        Binding("left", "move(-1)", "prev token", show=False),
        Binding("right", "move(1)", "next token", show=False),
        Binding("home", "move_to(0)", "first token", show=False),
        Binding("end", "move_to(-1)", "last token", show=False),
    ]

    @dataclass
    class CursorMoved(Message):
        delta: int | None  # None: absolute move to ``index``
        index: int = 0

    def action_move(self, delta: int) -> None:
        self.post_message(self.CursorMoved(delta))

    async def restore(self, turns: Sequence[Turn]) -> None:
        """Show a saved conversation as it was: user messages, and replies token by token in their verdict
        colours (their tokens numbered from 0 across the conversation, as live replies are)."""
        start = 0
        for turn in turns:
            if turn.role == "user":
                await self.mount(UserMessage(turn.content))
                continue
            reply = AssistantMessage()
            await self.mount(reply)
            reply.add_many(start, turn.events)
            start += len(turn.events)
        self.scroll_end(animate=False)

    def action_move_to(self, index: int) -> None:
        self.post_message(self.CursorMoved(None, index))


class Legend(Widget):
    """What the colours mean, styled by the same component classes as the tokens."""

    COMPONENT_CLASSES = {"token--accepted", "token--resampled", "token--bonus", "token--verifier"}

    def render(self) -> Text:
        text = Text("legend: ")
        for verdict, label in (("accepted", "accepted draft"), ("resampled", "rejected → resampled"),
                               ("bonus", "bonus"), ("verifier", "verifier only")):
            text.append(label, self.get_component_rich_style(f"token--{verdict}", partial=True))
            text.append("  ")
        return text
