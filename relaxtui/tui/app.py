"""The relaxtui chat app: compose, key bindings, and the worker that turns the event stream into workers.

Blocking work (loading models, generating) runs in thread workers that never touch widgets: they post
messages (thread-safe), and small handlers update the UI. A Started/Finished/Failed trio keeps the UI
consistent whatever happens; stop lands within a round because the loop polls it every round.

Lifecycle rules: every reply has a generation number and its own stop flag; messages of any other
generation (a reply stopped by ctrl+n) or arriving after quit are dropped. Quit stops the reply, waits for
its worker, and only then does the caller free the models. Tokens reach the UI in batches — one message per
round — and append to bounded segments, so rendering never competes with llama.cpp for the cores.

The conversation is a list of turns (save.Turn): what the engine is sent, what ctrl+s saves and what
``--resume`` restores (``resume=``) are the same thing.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Input, LoadingIndicator
from textual.worker import Worker

from relaxtui.checks import BadValue
from relaxtui.decoding.events import Metrics, TokenEvent
from relaxtui.text import Message
from relaxtui.tui import workers
from relaxtui.tui.engine import ChatEngine, ChatSettings, token_batches
from relaxtui.tui.save import SavedChat, Turn, conversation, model_changes, save_chat, saved_notice
from relaxtui.tui.widgets.inspector import InspectorPanel
from relaxtui.tui.widgets.settings import LABELS, SettingsPanel
from relaxtui.tui.widgets.stats import StatsPanel
from relaxtui.tui.widgets.status import StatusLine
from relaxtui.tui.widgets.transcript import AssistantMessage, Legend, TokenView, Transcript, UserMessage

__all__ = ["RelaxApp", "token_batches"]

QUIT_WAIT_S = 5.0  # quit waits this long for a reply to stop; the loop polls its flag every round
WIDE_SCREEN = 110  # from this width the settings panel opens beside the sidebar; below, over it (app.tcss)


class RelaxApp(App[None]):
    TITLE = "relaxtui"
    CSS_PATH = "styles/app.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_SCREEN, "-wide")]
    BINDINGS = [
        Binding("ctrl+q", "quit", "quit", priority=True),
        Binding("escape", "stop", "stop"),
        Binding("ctrl+n", "new_chat", "new chat"),
        Binding("ctrl+s", "save", "save"),
        Binding("f2", "settings", "settings"),
        Binding("f3", "toggle('StatsPanel')", "stats"),
        Binding("f4", "toggle('InspectorPanel')", "inspector"),
        Binding("f6", "toggle_theme", "theme"),
    ]

    # the workers' messages, here too so that ``RelaxApp.TokensReceived`` names them
    Loaded, LoadFailed, Progress, Measured = workers.Loaded, workers.LoadFailed, workers.Progress, workers.Measured
    GenerationStarted, TokensReceived = workers.GenerationStarted, workers.TokensReceived
    GenerationFinished, GenerationFailed = workers.GenerationFinished, workers.GenerationFailed

    def __init__(self, engine: ChatEngine, settings: ChatSettings | None = None,
                 save_dir: Path | None = None, model_thread: ThreadPoolExecutor | None = None,
                 resume: SavedChat | None = None, notice: str = "") -> None:
        super().__init__()
        self.engine = engine
        self.model_thread = model_thread
        self.settings = settings or (resume.settings if resume else ChatSettings(drafter=engine.drafter_name))
        self.save_dir = save_dir or Path("transcripts")
        self.resume = resume  # restored on mount; its drafter is switched to once the models are loaded
        self.notice = notice  # shown on mount: which typed flags a resumed chat runs with instead of its own
        self.turns: list[Turn] = []
        self.events: list[TokenEvent] = []  # every generated token of the conversation, in order
        self.selected: int | None = None
        self.generating = False
        self.ready = False  # every model loaded (a drafter switch clears it while it loads)
        self.takes_input = False  # the message box takes input: the verifier is loaded (the drafter may still load)
        self.generation = 0  # the reply whose messages the UI accepts; bumped by send and new chat
        self._stop = threading.Event()  # the current reply's stop flag (each reply gets its own)
        self._reply_worker: Worker[None] | None = None  # textual Worker of the current reply
        self._reply_settings = self.settings
        self._reply_start = 0  # index in ``events`` of the current reply's first token
        self._quitting = False
        self._measuring = False  # a background slice is queued or running
        self._current: AssistantMessage | None = None
        self.last_metrics: Metrics | None = None

    @property
    def closing(self) -> bool:
        """Quit was asked, or textual is tearing the app down (a test's ``run_test`` ends, the terminal closes):
        a worker's message that arrives then finds its widgets gone, so it is dropped."""
        return self._quitting or not self.is_running

    @property
    def conversation(self) -> list[Message]:
        """What the engine is sent: every turn so far, as chat workers."""
        return conversation(self.turns)

    # -- layout --------------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield Transcript(id="transcript")
            yield SettingsPanel(self.settings, [self.settings.drafter], self.engine.verifier_name, id="settings",
                                classes="-hidden")
            with Vertical(id="sidebar"):
                yield StatsPanel()
                yield InspectorPanel(self.engine.piece)
        yield Legend(id="legend")
        yield LoadingIndicator(id="loading")
        yield StatusLine("", id="status")
        yield Input(placeholder="loading models…", id="prompt", disabled=True)
        yield Footer()

    async def on_mount(self) -> None:
        # Every thread worker (load, reply, drafter switch) runs on one OS thread. llama.cpp's OpenMP keeps a
        # team of compute threads per calling thread; a second team on 2 cores makes libgomp throttle its
        # spin-waits (more threads than CPUs), which cost a quarter of the decoding speed (measured).
        executor = self.model_thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix="relaxtui-models")
        asyncio.get_running_loop().set_default_executor(executor)
        self.load_models()
        if self.resume is not None:
            await self._restore(self.resume)
        if self.notice:
            self.notify(self.notice, title="resumed chat", timeout=10)

    async def _restore(self, saved: SavedChat) -> None:
        """A saved chat as it was: the transcript in verdict colours, and its last reply's statistics."""
        await self.query_one(Transcript).restore(saved.turns)
        self.turns = list(saved.turns)
        self.events = [event for turn in saved.turns for event in turn.events]
        last = next((turn for turn in reversed(saved.turns) if turn.metrics is not None), None)
        if last is not None and last.metrics is not None:
            self.query_one(StatsPanel).replay(last.events, last.metrics)
            self.last_metrics = last.metrics

    # -- loading -------------------------------------------------------------------------------------------------
    def load_models(self) -> None:
        self.run_worker(partial(workers.load_models, self.engine, self.post_message), thread=True,
                        exclusive=True, exit_on_error=False, group="models")

    @on(workers.Progress)
    def show_progress(self, message: workers.Progress) -> None:
        if self.closing:
            return
        self.query_one(StatusLine).update(message.text)

    @on(workers.Usable)
    def verifier_loaded(self) -> None:
        """The message box takes input while the drafter loads (a message sent now is answered once it is there).
        Not for a resumed chat: it may switch to its own drafter first (``models_loaded``)."""
        if self.closing or self.resume is not None:
            return
        self.takes_input = True
        self._show_loading(False)
        prompt = self.query_one("#prompt", Input)
        prompt.disabled = False
        prompt.placeholder = "message the verifier (enter to send)"
        if not self.query_one(SettingsPanel).is_open:
            prompt.focus()

    @on(workers.Loaded)
    def models_loaded(self, message: workers.Loaded) -> None:
        if self.closing:
            return
        if message.cost is not None:
            self.query_one(StatsPanel).set_cost(message.cost)
        self.measure_in_background()
        if self._resume_models(message.drafters):
            return  # switching to the saved chat's drafter: another Loaded follows
        self.verifier_loaded()
        self.ready = True
        self.settings = replace(self.settings, drafter=self.engine.drafter_name)
        self.query_one(SettingsPanel).show_settings(self.settings, message.drafters,
                                                    self.engine.models()[0].file_name)
        self._status_idle()

    def measure_in_background(self) -> None:
        """One slice of what the engine measures in the background (its verify prices, its round costs), queued on
        the model thread behind any reply asked for already; the next is queued when it ends (``measured``)."""
        if not self._measuring:
            self._measuring = True
            self.run_worker(partial(workers.background_step, self.engine, self.post_message), thread=True,
                            exit_on_error=False, group="background")

    @on(workers.Measured)
    def measured(self, message: workers.Measured) -> None:
        self._measuring = False
        if self.closing:
            return
        if message.cost is not None and self.query_one(StatsPanel).cost is not message.cost:
            self.query_one(StatsPanel).set_cost(message.cost)
        if message.priced:
            self.notify("this machine's verify prices are measured: replies' drafts are cut by price from now on",
                        title="priced drafting", timeout=6)
        if message.more:
            self.measure_in_background()

    def _resume_models(self, drafters: list[str]) -> bool:
        """For a resumed chat: switch to its drafter when it is here (True: a switch is under way, the next Loaded
        comes back here), then say so when its models are not the ones this chat continues with."""
        saved = self.resume
        if saved is None:
            return False
        if saved.settings.drafter != self.engine.drafter_name and saved.settings.drafter in drafters:
            self.switch_drafter(saved.settings.drafter)
            return True
        self.resume = None
        for change in model_changes(saved, *self.engine.models()):
            self.notify(change, title="resumed chat", severity="warning", timeout=10)
        return False

    @on(workers.LoadFailed)
    def load_failed(self, message: workers.LoadFailed) -> None:
        if self.closing:
            return
        self.resume = None  # a resumed chat's drafter that fails to load is not tried again
        self._show_loading(False)
        self.query_one(StatusLine).update(f"not ready: {message.reason}")
        self.notify(message.reason, title="model load failed", severity="error", timeout=10)
        # a failed drafter switch leaves the loaded verifier usable; a failed first load leaves nothing
        self.ready = self.takes_input = hasattr(self.engine, "verifier")
        self.query_one("#prompt", Input).disabled = not self.ready

    def _show_loading(self, shown: bool) -> None:
        """A hidden LoadingIndicator still repaints 16 times a second; stop it, or it steals the cores llama.cpp
        decodes on (and the GIL from the reply's worker)."""
        indicator = self.query_one("#loading", LoadingIndicator)
        indicator.set_class(not shown, "-hidden")
        indicator.auto_refresh = 1 / 16 if shown else None

    def _status_idle(self) -> None:
        self.query_one(StatusLine).idle(self.settings, self.engine.drafter_name, self.engine.drafter_kind)

    # -- sending and streaming -----------------------------------------------------------------------------------
    @on(Input.Submitted, "#prompt")
    def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or not self.takes_input:
            return
        if self.generating:
            self.notify("still generating: press escape to stop first", severity="warning")
            return
        event.input.value = ""
        self.turns.append(Turn("user", text))
        transcript = self.query_one(Transcript)
        transcript.mount(UserMessage(text))
        self._current = AssistantMessage()
        transcript.mount(self._current)
        transcript.scroll_end(animate=False)
        self.generating = True
        self.generation += 1
        self._stop = threading.Event()
        self._reply_settings, self._reply_start = self.settings, len(self.events)
        self._reply_worker = self.run_worker(
            partial(workers.generate_reply, self.engine, self.conversation, self.settings, self.generation,
                    self._stop, self.post_message), thread=True, exit_on_error=False, group="generate")

    def _live(self, message: workers.GenerationStarted | workers.TokensReceived | workers.GenerationFinished
              | workers.GenerationFailed) -> bool:
        """Accept messages of the current reply only, and nothing once the app is closing."""
        return not self.closing and message.generation == self.generation

    @on(workers.GenerationStarted)
    def generation_started(self, message: workers.GenerationStarted) -> None:
        if not self._live(message):
            return
        self.query_one(StatsPanel).reset(message.draft_max)
        self.query_one(StatusLine).update("generating… (escape stops)")

    @on(workers.TokensReceived)
    def tokens_received(self, message: workers.TokensReceived) -> None:
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

    @on(workers.GenerationFinished)
    def generation_finished(self, message: workers.GenerationFinished) -> None:
        if not self._live(message):
            return
        self.generating = False
        self.last_metrics = message.metrics
        self.query_one(StatsPanel).finish(message.metrics)
        self.turns.append(Turn("assistant", message.text, tuple(self.events[self._reply_start:]), message.metrics,
                               self._reply_settings))
        self.query_one(StatusLine).finished(message.metrics)
        if message.metrics.finish_reason == "context":
            self.notify("the context window is full; start a new chat (ctrl+n)", severity="warning")

    @on(workers.GenerationFailed)
    def generation_failed(self, message: workers.GenerationFailed) -> None:
        if not self._live(message):
            return
        self.generating = False
        events = tuple(self.events[self._reply_start:])
        if events:  # what was shown stays part of the conversation (and of a save), without metrics
            self.turns.append(Turn("assistant", "".join(e.text for e in events), events, None, self._reply_settings))
        elif self._current is not None:
            self._current.remove()
            self.turns.pop()
        self.notify(message.reason, title="generation failed", severity="error", timeout=8)
        self._status_idle()

    def action_stop(self) -> None:
        """Escape: stop the reply; with none running, close the settings panel."""
        if self.generating:
            self._stop.set()
        elif self.query_one(SettingsPanel).is_open:
            self._close_settings()

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
    def action_settings(self) -> None:
        """F2: open the panel on its first field, or close it."""
        panel = self.query_one(SettingsPanel)
        if panel.is_open:
            self._close_settings()
        else:
            panel.open()

    def _close_settings(self) -> None:
        """Close the panel and give the chat input the focus, so the next keys typed land there."""
        self.query_one(SettingsPanel).close()
        prompt = self.query_one("#prompt", Input)
        if not prompt.disabled:
            prompt.focus()

    @on(SettingsPanel.Closed)
    def settings_closed(self) -> None:
        self._close_settings()

    @on(SettingsPanel.Invalid)
    def settings_invalid(self, message: SettingsPanel.Invalid) -> None:
        self.notify(message.reason, title="invalid settings", severity="error")

    @on(SettingsPanel.Applied)
    def settings_applied(self, message: SettingsPanel.Applied) -> None:
        if self.generating:
            self.notify("settings apply between messages: stop or wait first", severity="warning")
            return
        try:  # a relax scope the loaded verifier cannot mark: refused as the panel's other settings are
            self.engine.check_scope(message.settings.relax_scope)
        except BadValue as exc:
            self.notify(str(exc.spelled(LABELS["relax_scope"])), title="invalid settings", severity="error")
            return
        drafter_changed = message.settings.drafter != self.engine.drafter_name
        self.settings = message.settings
        self._close_settings()
        if drafter_changed:
            self.switch_drafter(message.settings.drafter)
        else:
            self._status_idle()
            self.notify("settings applied")

    def switch_drafter(self, name: str) -> None:
        self._loading_models()
        self.run_worker(partial(workers.switch_drafter, self.engine, name, self.post_message), thread=True,
                        exclusive=True, exit_on_error=False, group="models")

    def _loading_models(self) -> None:
        self.ready = self.takes_input = False
        self.query_one("#prompt", Input).disabled = True
        self._show_loading(True)

    # -- chat actions --------------------------------------------------------------------------------------------
    def action_new_chat(self) -> None:
        """Nothing of the old chat survives: its reply is stopped and its late messages are dropped."""
        self._stop.set()
        self.generation += 1
        self.generating = False
        self.last_metrics = None
        self.turns.clear()
        self.events.clear()
        self.selected = None
        self._current = None
        self.query_one(Transcript).remove_children()
        self.query_one(InspectorPanel).show(None)
        self.query_one(StatsPanel).reset(0)
        self._status_idle()

    def action_save(self) -> None:
        if not self.turns:
            self.notify("nothing to save yet", severity="warning")
            return
        stem = self.save_dir / f"chat-{datetime.now():%Y%m%d-%H%M%S}"
        verifier, drafter = self.engine.models()
        chat = SavedChat(self.settings, verifier, drafter, tuple(self.turns),
                         saved_at=datetime.now().isoformat(timespec="seconds"))
        try:
            markdown, saved = save_chat(stem, chat)
        except OSError as exc:
            self.notify(f"could not save: {exc.strerror}", severity="error")
            return
        self.notify(saved_notice(markdown, saved), title="chat saved", timeout=10)

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

    async def action_toggle(self, selector: str) -> None:
        """F3/F4: show or hide a sidebar panel (replaces DOMNode's ``toggle``, which is async: textual awaits it)."""
        self.query_one(selector).toggle_class("-hidden")

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"
