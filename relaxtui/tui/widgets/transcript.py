"""The conversation: user messages, and assistant messages whose every token is styled by its verdict.

Verdict colours live in the .tcss (component classes ``token--accepted`` …), not here. Each token carries an
``@click`` action, so a mouse click selects it for the inspector like the cursor keys do.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Static

from relaxtui.decoding.events import TokenEvent

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class TokenView(Widget):
    """A run of tokens rendered as one wrapped text; the selected one is highlighted."""

    COMPONENT_CLASSES = {"token--accepted", "token--resampled", "token--bonus", "token--verifier",
                         "token--selected"}
    DEFAULT_CSS = "TokenView { height: auto; }"

    selected: reactive[int | None] = reactive(None)

    @dataclass
    class Clicked(Message):
        index: int

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.tokens: list[tuple[int, TokenEvent]] = []  # (index in the conversation, event)
        self.auto_links = False  # tokens carry @click meta; without this Textual repaints them in link colours

    def add(self, index: int, event: TokenEvent) -> None:
        self.tokens.append((index, event))
        self.refresh(layout=True)

    def render(self) -> Text:
        text = Text()
        for index, event in self.tokens:
            style = self.get_component_rich_style(f"token--{event.verdict.value}", partial=True)
            if index == self.selected:
                style += self.get_component_rich_style("token--selected", partial=True)
            shown = event.text if event.text else ("·" if index == self.selected else "")
            text.append(shown, style + Style.from_meta({"@click": f"click_token({index})"}))
        return text

    def action_click_token(self, index: int) -> None:
        self.post_message(self.Clicked(index))


class UserMessage(Static):
    """What the user typed."""


class AssistantMessage(Widget):
    """One reply: an optional collapsible thinking block, then the answer."""

    DEFAULT_CSS = "AssistantMessage { height: auto; }"

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.thinking_view = TokenView(classes="thinking")
        self.answer_view = TokenView(classes="answer")
        self.thinking = Collapsible(self.thinking_view, title="thinking", collapsed=True, classes="-empty")
        self._in_think = False

    def compose(self):  # type: ignore[no-untyped-def]
        yield self.thinking
        yield self.answer_view

    def add(self, index: int, event: TokenEvent) -> None:
        """Route the token: everything from <think> to </think> goes to the collapsible block."""
        if THINK_OPEN in event.text:
            self._in_think = True
            self.thinking.remove_class("-empty")
        target = self.thinking_view if self._in_think else self.answer_view
        if THINK_CLOSE in event.text:
            self._in_think = False
        target.add(index, event)

    def select(self, index: int | None) -> None:
        self.thinking_view.selected = index
        self.answer_view.selected = index


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
