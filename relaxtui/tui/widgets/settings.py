"""The settings panel: rule, knob, draft length, sampling, thinking, drafter — validated on Apply."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Select, Switch

from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, RULES
from relaxtui.tui.engine import ChatSettings


def _number(text: str, name: str, kind: type = float) -> float | int | None:
    text = text.strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise UserError(f"{name} must be a {'whole ' if kind is int else ''}number (got {text!r})") from None


class SettingsPanel(Vertical):
    @dataclass
    class Applied(Message):
        settings: ChatSettings

    @dataclass
    class Invalid(Message):
        reason: str

    def __init__(self, settings: ChatSettings, drafters: list[str], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.settings = settings
        self.drafters = drafters

    def compose(self) -> ComposeResult:
        s = self.settings
        yield Label("settings", classes="panel-title")
        yield Label("rule")
        yield Select([(name, name) for name in RULES], value=s.rule, allow_blank=False, id="set-rule")
        yield Label("knob (α, δ, w, T, β, ε)")
        yield Input("" if s.knob is None else f"{s.knob:g}", placeholder="none", id="set-knob")
        with Horizontal(classes="pair"):
            yield Input(str(s.draft_max), placeholder="N", id="set-draft-max", tooltip="draft length N")
            yield Input(f"{s.temperature:g}", placeholder="T", id="set-temperature", tooltip="temperature")
        with Horizontal(classes="pair"):
            yield Input(str(s.top_k), placeholder="top-k", id="set-top-k", tooltip="top-k (0 = off)")
            yield Input(f"{s.top_p:g}", placeholder="top-p", id="set-top-p", tooltip="top-p (1 = off)")
        yield Label("drafter")
        yield Select([(d, d) for d in self.drafters], value=s.drafter if s.drafter in self.drafters else
                     self.drafters[0], allow_blank=False, id="set-drafter")
        with Horizontal(classes="pair"):
            yield Label("thinking")
            yield Switch(value=s.thinking, id="set-thinking")
        yield Button("Apply", id="set-apply", variant="primary")

    def read(self) -> ChatSettings:
        """The form as ChatSettings; raises UserError with a clear message on bad input."""
        draft_max = _number(self.query_one("#set-draft-max", Input).value, "draft length", int)
        temperature = _number(self.query_one("#set-temperature", Input).value, "temperature")
        top_k = _number(self.query_one("#set-top-k", Input).value, "top-k", int)
        top_p = _number(self.query_one("#set-top-p", Input).value, "top-p")
        settings = ChatSettings(
            rule=str(self.query_one("#set-rule", Select).value),
            knob=_number(self.query_one("#set-knob", Input).value, "knob"),  # type: ignore[arg-type]
            draft_max=self.settings.draft_max if draft_max is None else int(draft_max),
            temperature=self.settings.temperature if temperature is None else float(temperature),
            top_k=self.settings.top_k if top_k is None else int(top_k),
            top_p=self.settings.top_p if top_p is None else float(top_p),
            thinking=self.query_one("#set-thinking", Switch).value,
            drafter=str(self.query_one("#set-drafter", Select).value),
            max_tokens=self.settings.max_tokens, seed=self.settings.seed,
        )
        settings.validated()
        return settings

    @on(Select.Changed, "#set-rule")
    def suggest_knob(self, event: Select.Changed) -> None:
        """Switching rule fills in that rule's first paper-grid knob (blank for rules without one)."""
        if event.value == self.settings.rule:
            return
        knob = PAPER_GRID.get(str(event.value), (None,))[0]
        self.query_one("#set-knob", Input).value = "" if knob is None else f"{knob:g}"

    @on(Button.Pressed, "#set-apply")
    @on(Input.Submitted)
    def apply(self) -> None:
        try:
            settings = self.read()
        except UserError as exc:
            self.post_message(self.Invalid(str(exc)))
            return
        self.settings = settings
        self.post_message(self.Applied(settings))
