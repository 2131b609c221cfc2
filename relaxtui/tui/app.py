"""The relaxtui chat app: compose, key bindings, and the worker that turns the event stream into messages.

Blocking work (loading models, generating) runs in thread workers that never touch widgets: they post
messages (thread-safe), and small handlers update the UI. A Started/Finished/Failed trio keeps the UI
consistent whatever happens; stop lands within a round because the loop polls it every round.

Lifecycle rules: every reply has a generation number and its own stop flag; messages of any other
generation (a reply stopped by ctrl+n) or arriving after quit are dropped. Quit stops the reply, waits for
its worker, and only then does the caller free the models. Tokens reach the UI in batches — one message per
round — and append to bounded segments, so rendering never competes with llama.cpp for the cores.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message as TextualMessage
from textual.widgets import Footer, Header, Input, LoadingIndicator, Static

from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.events import Event, Finished, Metrics, TokenEvent
from relaxtui.engine.text import Message
from relaxtui.errors import UserError
from relaxtui.tui.engine import ChatEngine, ChatSettings
from relaxtui.tui.save import save_transcript
from relaxtui.tui.widgets.inspector import InspectorPanel
from relaxtui.tui.widgets.settings import SettingsPanel
from relaxtui.tui.widgets.stats import StatsPanel
from relaxtui.tui.widgets.transcript import AssistantMessage, Legend, TokenView, Transcript, UserMessage

QUIT_WAIT_S = 5.0  # quit waits this long for a reply to stop; the loop polls its flag every round


def token_batches(stream: Iterator[Event]) -> Iterator[tuple[TokenEvent, ...] | Finished]:
    """Group a token stream by round for the UI: a batch is released as soon as its round is complete (all its
    n_accepted + 1 tokens seen), so the UI gets at most one message per round and never waits on the next
    round (which may be held up); Finished flushes whatever a stop or an end-of-generation cut short."""
    pending: list[TokenEvent] = []
    for event in stream:
        if isinstance(event, Finished):
            if pending:
                yield tuple(pending)
            yield event
            return
        if pending and event.round.index != pending[-1].round.index:
            yield tuple(pending)  # a round whose tail was cut (cannot happen mid-stream, but never lose tokens)
            pending = []
        pending.append(event)
        if len(pending) >= event.round.n_accepted + 1:
            yield tuple(pending)
            pending = []
    if pending:
        yield tuple(pending)


class RelaxApp(App[None]):
    TITLE = "relaxtui"
    CSS_PATH = "styles/app.tcss"
    BINDINGS = [
        Binding("ctrl+q", "quit", "quit", priority=True),
        Binding("escape", "stop", "stop"),
        Binding("ctrl+n", "new_chat", "new chat"),
        Binding("ctrl+s", "save", "save"),
        Binding("f2", "toggle('#settings')", "settings"),
        Binding("f3", "toggle('StatsPanel')", "stats"),
        Binding("f4", "toggle('InspectorPanel')", "inspector"),
        Binding("f6", "toggle_theme", "theme"),
    ]

    @dataclass
    class Loaded(TextualMessage):
        cost: LoopCosts
        drafters: list[str]  # found in the worker: listing reads every GGUF header, too slow for the UI thread

    @dataclass
    class LoadFailed(TextualMessage):
        reason: str

    @dataclass
    class Progress(TextualMessage):
        text: str

    @dataclass
    class GenerationStarted(TextualMessage):
        generation: int
        draft_max: int

    @dataclass
    class TokensReceived(TextualMessage):
        generation: int
        events: tuple[TokenEvent, ...]

    @dataclass
    class GenerationFinished(TextualMessage):
        generation: int
        text: str
        metrics: Metrics

    @dataclass
    class GenerationFailed(TextualMessage):
        generation: int
        reason: str

    def __init__(self, engine: ChatEngine, settings: ChatSettings | None = None,
                 save_dir: Path | None = None, model_thread: ThreadPoolExecutor | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.model_thread = model_thread
        self.settings = settings or ChatSettings(drafter=engine.drafter_name)
        self.save_dir = save_dir or Path("transcripts")
        self.conversation: list[Message] = []
        self.events: list[TokenEvent] = []  # every generated token of the conversation, in order
        self.selected: int | None = None
        self.generating = False
        self.ready = False
        self.generation = 0  # the reply whose messages the UI accepts; bumped by send and new chat
        self._stop = threading.Event()  # the current reply's stop flag (each reply gets its own)
        self._reply_worker = None  # textual Worker of the current reply
        self._quitting = False
        self._current: AssistantMessage | None = None
        self.last_metrics: Metrics | None = None

    # -- layout --------------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield Vertical(SettingsPanel(self.settings, [self.settings.drafter]), id="settings", classes="-hidden")
            yield Transcript(id="transcript")
            with Vertical(id="sidebar"):
                yield StatsPanel()
                yield InspectorPanel(self.engine.piece)
        yield Legend(id="legend")
        yield LoadingIndicator(id="loading")
        yield Static("", id="status")
        yield Input(placeholder="loading models…", id="prompt", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        # Every thread worker (load, reply, drafter switch) runs on one OS thread. llama.cpp's OpenMP keeps a
        # team of compute threads per calling thread; a second team on 2 cores makes libgomp throttle its
        # spin-waits (more threads than CPUs), which cost a quarter of the decoding speed (measured).
        executor = self.model_thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix="relaxtui-models")
        asyncio.get_running_loop().set_default_executor(executor)
        self.load_models()

    # -- loading -------------------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="models")
    def load_models(self) -> None:
        try:
            with self.engine.lock:
                cost = self.engine.load(lambda text: self.post_message(self.Progress(text)))
                drafters = self.engine.drafter_choices()
        except UserError as exc:
            self.post_message(self.LoadFailed(str(exc)))
            return
        except Exception as exc:  # a model that llama.cpp rejects must not kill the app
            self.post_message(self.LoadFailed(f"model load failed: {exc}"))
            return
        self.post_message(self.Loaded(cost, drafters))

    @on(Progress)
    def show_progress(self, message: Progress) -> None:
        if self._quitting:
            return
        self.query_one("#status", Static).update(message.text)

    @on(Loaded)
    def models_loaded(self, message: Loaded) -> None:
        if self._quitting:
            return
        self.ready = True
        self._show_loading(False)
        self.query_one(StatsPanel).set_cost(message.cost)
        prompt = self.query_one("#prompt", Input)
        prompt.disabled = False
        prompt.placeholder = "message the verifier (enter to send)"
        prompt.focus()
        self.settings = replace(self.settings, drafter=self.engine.drafter_name)
        self._rebuild_settings(message.drafters)
        self._status_idle()

    @on(LoadFailed)
    def load_failed(self, message: LoadFailed) -> None:
        if self._quitting:
            return
        self._show_loading(False)
        self.query_one("#status", Static).update(f"not ready: {message.reason}")
        self.notify(message.reason, title="model load failed", severity="error", timeout=10)
        # a failed drafter switch leaves the loaded verifier usable; a failed first load leaves nothing
        self.ready = hasattr(self.engine, "verifier")
        self.query_one("#prompt", Input).disabled = not self.ready

    def _show_loading(self, shown: bool) -> None:
        """A hidden LoadingIndicator still repaints 16 times a second; stop it, or it steals the cores llama.cpp
        decodes on (and the GIL from the reply's worker)."""
        indicator = self.query_one("#loading", LoadingIndicator)
        indicator.set_class(not shown, "-hidden")
        indicator.auto_refresh = 1 / 16 if shown else None

    def _rebuild_settings(self, drafters: list[str]) -> None:
        holder = self.query_one("#settings", Vertical)
        holder.remove_children()
        holder.mount(SettingsPanel(self.settings, drafters))

    def _status_idle(self) -> None:
        s = self.settings
        knob = "" if s.knob is None else f" {s.knob:g}"
        self.query_one("#status", Static).update(
            f"{s.rule}{knob} · N={s.draft_max} · T={s.temperature:g} · drafter {self.engine.drafter_name}"
            f" · F2 settings")

    # -- sending and streaming -----------------------------------------------------------------------------------
    @on(Input.Submitted, "#prompt")
    def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or not self.ready:
            return
        if self.generating:
            self.notify("still generating: press escape to stop first", severity="warning")
            return
        event.input.value = ""
        self.conversation.append(Message("user", text))
        transcript = self.query_one(Transcript)
        transcript.mount(UserMessage(text))
        self._current = AssistantMessage()
        transcript.mount(self._current)
        transcript.scroll_end(animate=False)
        self.generating = True
        self.generation += 1
        self._stop = threading.Event()
        self._reply_worker = self.generate_reply(list(self.conversation), self.settings, self.generation,
                                                 self._stop)

    @work(thread=True, exit_on_error=False, group="generate")
    def generate_reply(self, conversation: list[Message], settings: ChatSettings, generation: int,
                       stop: threading.Event) -> None:
        """One reply. The engine's lock makes a reply started right after ctrl+n wait for the stopped one to
        leave the models (within a round)."""
        try:
            with self.engine.lock:
                if stop.is_set():
                    return
                self.post_message(self.GenerationStarted(generation, settings.draft_max if self.engine.drafter
                                                         else 0))
                for item in token_batches(self.engine.stream(conversation, settings, stop.is_set)):
                    if isinstance(item, Finished):
                        self.post_message(self.GenerationFinished(generation, item.text, item.metrics))
                    else:
                        self.post_message(self.TokensReceived(generation, item))
        except UserError as exc:
            self.post_message(self.GenerationFailed(generation, str(exc)))
        except Exception as exc:
            self.post_message(self.GenerationFailed(generation, f"generation failed: {exc}"))

    def _live(self, message: GenerationStarted | TokensReceived | GenerationFinished | GenerationFailed) -> bool:
        """Accept messages of the current reply only, and nothing once the app is closing."""
        return not self._quitting and message.generation == self.generation

    @on(GenerationStarted)
    def generation_started(self, message: GenerationStarted) -> None:
        if not self._live(message):
            return
        self.query_one(StatsPanel).reset(message.draft_max)
        self.query_one("#status", Static).update("generating… (escape stops)")

    @on(TokensReceived)
    def tokens_received(self, message: TokensReceived) -> None:
        if not self._live(message):
            return
        start = len(self.events)
        self.events.extend(message.events)
        if self._current is not None:
            self._current.add_many(start, message.events)
        self.query_one(StatsPanel).observe_many(message.events)
        transcript = self.query_one(Transcript)
        if transcript.max_scroll_y - transcript.scroll_y < 3:
            transcript.scroll_end(animate=False)

    @on(GenerationFinished)
    def generation_finished(self, message: GenerationFinished) -> None:
        if not self._live(message):
            return
        self.generating = False
        self.last_metrics = message.metrics
        self.query_one(StatsPanel).finish(message.metrics)
        self.conversation.append(Message("assistant", message.text))
        m = message.metrics
        ending = {"eog": "done", "max_tokens": "hit max tokens", "context": "context full (truncated)",
                  "stopped": "stopped"}[m.finish_reason]
        self.query_one("#status", Static).update(
            f"{ending}: {m.output_tokens} tokens, {m.tokens_per_s:.1f} tok/s, acceptance {m.acceptance_rate:.2f}")
        if m.finish_reason == "context":
            self.notify("the context window is full; start a new chat (ctrl+n)", severity="warning")

    @on(GenerationFailed)
    def generation_failed(self, message: GenerationFailed) -> None:
        if not self._live(message):
            return
        self.generating = False
        if self._current is not None and not (self._current.answer_view.tokens or
                                               self._current.thinking_view.tokens):
            self._current.remove()
            self.conversation.pop()
        self.notify(message.reason, title="generation failed", severity="error", timeout=8)
        self._status_idle()

    def action_stop(self) -> None:
        if self.generating:
            self._stop.set()

    # -- inspector -----------------------------------------------------------------------------------------------
    @on(TokenView.Clicked)
    def token_clicked(self, message: TokenView.Clicked) -> None:
        self.select(message.index)

    @on(Transcript.CursorMoved)
    def cursor_moved(self, message: Transcript.CursorMoved) -> None:
        if not self.events:
            return
        if message.delta is None:
            self.select(message.index % len(self.events))
        else:
            current = self.selected if self.selected is not None else len(self.events)
            self.select(min(max(current + message.delta, 0), len(self.events) - 1))

    def select(self, index: int | None) -> None:
        self.selected = index
        for reply in self.query(AssistantMessage):
            reply.select(index)
        self.query_one(InspectorPanel).show(self.events[index] if index is not None else None)

    # -- settings ------------------------------------------------------------------------------------------------
    @on(SettingsPanel.Invalid)
    def settings_invalid(self, message: SettingsPanel.Invalid) -> None:
        self.notify(message.reason, title="invalid settings", severity="error")

    @on(SettingsPanel.Applied)
    def settings_applied(self, message: SettingsPanel.Applied) -> None:
        if self.generating:
            self.notify("settings apply between messages: stop or wait first", severity="warning")
            return
        drafter_changed = message.settings.drafter != self.engine.drafter_name
        self.settings = message.settings
        if drafter_changed:
            self.ready = False
            self.query_one("#prompt", Input).disabled = True
            self._show_loading(True)
            self.switch_drafter(message.settings.drafter)
        else:
            self._status_idle()
            self.notify("settings applied")

    @work(thread=True, exclusive=True, exit_on_error=False, group="models")
    def switch_drafter(self, name: str) -> None:
        try:
            with self.engine.lock:
                cost = self.engine.set_drafter(name, lambda text: self.post_message(self.Progress(text)))
                drafters = self.engine.drafter_choices()
        except Exception as exc:
            self.post_message(self.LoadFailed(str(exc)))
            return
        self.post_message(self.Loaded(cost, drafters))

    # -- chat actions --------------------------------------------------------------------------------------------
    def action_new_chat(self) -> None:
        """Nothing of the old chat survives: its reply is stopped and its late messages are dropped."""
        self._stop.set()
        self.generation += 1
        self.generating = False
        self.last_metrics = None
        self.conversation.clear()
        self.events.clear()
        self.selected = None
        self._current = None
        self.query_one(Transcript).remove_children()
        self.query_one(InspectorPanel).show(None)
        self.query_one(StatsPanel).reset(0)
        self._status_idle()

    def action_save(self) -> None:
        if not self.conversation:
            self.notify("nothing to save yet", severity="warning")
            return
        stem = self.save_dir / f"chat-{datetime.now():%Y%m%d-%H%M%S}"
        try:
            markdown, events = save_transcript(stem, self.conversation, self.events, self.settings)
        except OSError as exc:
            self.notify(f"could not save: {exc.strerror}", severity="error")
            return
        self.notify(f"saved {markdown} and {events}", title="transcript saved")

    async def action_quit(self) -> None:
        """Stop the reply, wait for its worker to leave the models, then exit (the caller frees them)."""
        self._quitting = True
        self._stop.set()
        worker = self._reply_worker
        if worker is not None and not worker.is_finished:
            try:
                await asyncio.wait_for(worker.wait(), QUIT_WAIT_S)
            except Exception:  # noqa: BLE001 - a failed or slow reply must not keep the app open
                pass
        self.exit()

    def action_toggle(self, selector: str) -> None:
        self.query_one(selector).toggle_class("-hidden")

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"
