"""The settings panel (F2): every setting of the next reply, each with its label beside it; validated on Apply.

Keyboard: F2 opens it with the focus on the rule; tab walks the fields down to Apply, which stays visible
below them (the fields scroll, the button row does not); enter in any field applies, escape closes. The panel
posts Applied or Closed, and the app puts the focus back on the chat input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label, Select

from relaxtui.checks import RELAX_SCOPE as SCOPES
from relaxtui.checks import BadValue
from relaxtui.decoding.drafters import STANDALONE_KINDS
from relaxtui.errors import UserError
from relaxtui.options import ALPHA, DRAFT_MAX, MAX_TOKENS, RELAX_SCOPE, RULE, SEED, TEMPERATURE, TOP_K, TOP_P
from relaxtui.rules import PAPER_GRID, RULES, base_name
from relaxtui.tui.engine import KIND_WORDS, NO_DRAFTER, ChatSettings

# (id, label, setting) of the number fields, in the order they are shown and tabbed through: each is read and checked
# by its entry in the option table (relaxtui.options), whose help is its tooltip
NUMBER_FIELDS = (
    ("set-draft-max", "draft length N", DRAFT_MAX),
    ("set-temperature", "temperature", TEMPERATURE),
    ("set-top-k", "top-k", TOP_K),
    ("set-top-p", "top-p", TOP_P),
    ("set-seed", "seed", SEED),
    ("set-max-tokens", "max tokens", MAX_TOKENS),
)

# a setting as the panel spells it
LABELS = {"alpha": "knob", "relax_scope": "relax scope",
          **{setting.name: label for _, label, setting in NUMBER_FIELDS}}


# the drafter choice's tooltip, from the factory's kinds and their own words
DRAFTER_TIP = "; ".join([f"{NO_DRAFTER} = verifier alone", *(f"{k} = {w}" for k, w in KIND_WORDS.items()),
                         f"{', '.join(k for k in STANDALONE_KINDS if k not in KIND_WORDS)}: no model, they draft "
                         "from the conversation itself", "a .gguf: a drafter LM"])


def knob_name(rule: str) -> str | None:
    return getattr(RULES.get(base_name(rule)), "knob_name", None)


def rule_options(current: str) -> list[tuple[str, str]]:
    """Every rule by name, and the current one as given when a second knob rides in its name (``topk-delta[k=15]``,
    from ``--rule topk-delta:0.5:15``): the list must hold the value it shows."""
    names = list(RULES) if current in RULES else [*RULES, current]
    return [(name, name) for name in names]


def knob_label(rule: str) -> str:
    """'knob (delta)' for cactus, 'knob' for a rule without one."""
    name = knob_name(rule)
    return f"knob ({name})" if name else "knob"


def _values(settings: ChatSettings) -> dict[str, str]:
    return {"set-draft-max": str(settings.draft_max), "set-temperature": f"{settings.temperature:g}",
            "set-top-k": str(settings.top_k), "set-top-p": f"{settings.top_p:g}", "set-seed": str(settings.seed),
            "set-max-tokens": str(settings.max_tokens)}


class SettingsPanel(Vertical):
    BINDINGS = [Binding("escape", "close", "close settings")]

    @dataclass
    class Applied(Message):
        settings: ChatSettings

    @dataclass
    class Invalid(Message):
        reason: str

    class Closed(Message):
        """Escape: nothing applied."""

    def __init__(self, settings: ChatSettings, drafters: list[str], verifier: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "settings · F2"
        self.settings = settings
        self.drafters = drafters
        self.verifier = verifier

    def compose(self) -> ComposeResult:
        s = self.settings
        values = _values(s)
        with VerticalScroll(id="set-fields"):
            with Horizontal(classes="row"):
                yield Label("verifier", classes="label")
                yield Label(self.verifier or "–", id="set-verifier", classes="value")
            with Horizontal(classes="row"):
                yield Label("rule", classes="label")
                yield Select(rule_options(s.rule), value=s.rule, allow_blank=False, compact=True,
                             id="set-rule", tooltip=RULE.help)
            with Horizontal(classes="row"):
                yield Label(knob_label(s.rule), id="set-knob-label", classes="label")
                yield Input("" if s.knob is None else f"{s.knob:g}", compact=True, id="set-knob",
                            tooltip="the rule's knob; empty = its default")
            with Horizontal(classes="row"):
                yield Label(LABELS["relax_scope"], classes="label")
                yield Select([(scope, scope) for scope in SCOPES.values], value=s.relax_scope,
                             allow_blank=False, compact=True, id="set-relax-scope", tooltip=RELAX_SCOPE.help)
            for field_id, label, setting in NUMBER_FIELDS:
                with Horizontal(classes="row"):
                    yield Label(label, classes="label")
                    yield Input(values[field_id], compact=True, id=field_id, tooltip=setting.help)
            with Horizontal(classes="row"):
                yield Label("drafter", classes="label")
                yield Select([(d, d) for d in self.drafters], value=self._drafter_value(s), allow_blank=False,
                             compact=True, id="set-drafter",
                             tooltip=DRAFTER_TIP)
            with Horizontal(classes="row"):
                yield Label("thinking", classes="label")
                yield Checkbox("", s.thinking, compact=True, id="set-thinking",
                               tooltip="reasoning mode, for chat templates that have one")
        with Horizontal(id="set-actions"):
            yield Button("Apply", id="set-apply", variant="primary", compact=True)
            yield Label("esc closes", classes="subtle", id="set-hint")

    def on_mount(self) -> None:
        self._show_knob(self.settings.rule, self.query_one("#set-knob", Input).value)

    def _drafter_value(self, settings: ChatSettings) -> str:
        return settings.drafter if settings.drafter in self.drafters else self.drafters[0]

    def show_settings(self, settings: ChatSettings, drafters: list[str], verifier: str) -> None:
        """Refill the form (after a model load: the drafter list and the current values)."""
        self.settings, self.drafters, self.verifier = settings, drafters, verifier
        self.query_one("#set-verifier", Label).update(verifier or "–")
        rule = self.query_one("#set-rule", Select)
        if settings.rule not in RULES:  # a second knob in its name: the list must hold it (quietly: a Changed from
            with rule.prevent(Select.Changed):  # refilling would re-suggest the knob over the one shown below)
                rule.set_options(rule_options(settings.rule))
        rule.value = settings.rule
        self._show_knob(settings.rule, "" if settings.knob is None else f"{settings.knob:g}")
        self.query_one("#set-relax-scope", Select).value = settings.relax_scope
        for field_id, value in _values(settings).items():
            self.query_one(f"#{field_id}", Input).value = value
        drafter = self.query_one("#set-drafter", Select)
        drafter.set_options([(d, d) for d in drafters])
        drafter.value = self._drafter_value(settings)
        self.query_one("#set-thinking", Checkbox).value = settings.thinking

    @property
    def is_open(self) -> bool:
        return not self.has_class("-hidden")

    def open(self) -> None:
        """Show the panel with the focus on its first field (the app's .tcss decides where it goes)."""
        self.remove_class("-hidden")
        self.query_one("#set-rule", Select).focus()

    def close(self) -> None:
        self.add_class("-hidden")

    def read(self) -> ChatSettings:
        """The form as ChatSettings; raises UserError with a clear message on bad input (empty = unchanged)."""
        typed = {}
        for field_id, label, setting in NUMBER_FIELDS:  # empty: the setting as it was
            value = setting.read(self.query_one(f"#{field_id}", Input).value, label)
            typed[setting.name] = getattr(self.settings, setting.name) if value is None else value
        settings = ChatSettings(
            rule=str(self.query_one("#set-rule", Select).value),
            knob=ALPHA.read(self.query_one("#set-knob", Input).value, "knob"),
            relax_scope=str(self.query_one("#set-relax-scope", Select).value),
            thinking=self.query_one("#set-thinking", Checkbox).value,
            drafter=str(self.query_one("#set-drafter", Select).value),
            **typed,
        )
        try:
            settings.validated()
        except BadValue as exc:  # a lower layer names the setting (alpha, draft_max): the panel spells it as its label
            raise exc.spelled(LABELS.get(exc.name, exc.name), lambda name: LABELS.get(name, name)) from None
        return settings

    @on(Select.Changed, "#set-rule")
    def suggest_knob(self, event: Select.Changed) -> None:
        """Switching rule names its knob and fills in the rule's first paper-grid value (none: no knob to edit)."""
        rule = str(event.value)
        if rule != self.settings.rule:
            knob = PAPER_GRID.get(rule, (None,))[0]
            self._show_knob(rule, "" if knob is None else f"{knob:g}")
        else:
            self._show_knob(rule, self.query_one("#set-knob", Input).value)

    def _show_knob(self, rule: str, value: str) -> None:
        self.query_one("#set-knob-label", Label).update(knob_label(rule))
        knob = self.query_one("#set-knob", Input)
        knob.disabled = knob_name(rule) is None  # nothing to type: tab skips it
        knob.placeholder = "– (no knob)" if knob.disabled else "default"
        knob.value = "" if knob.disabled else value

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

    def action_close(self) -> None:
        self.post_message(self.Closed())
