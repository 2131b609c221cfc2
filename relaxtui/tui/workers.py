"""The chat app's blocking work — loading models, switching the drafter, generating a reply — and the messages
it posts. These functions run in the app's thread workers: they never touch a widget, they only ``post``
messages (``post_message`` is thread-safe).

A model load ends in Loaded or LoadFailed (with Progress lines on the way); a reply is a Started / Tokens… /
Finished-or-Failed sequence tagged with its generation number, so the app can drop the messages of a reply
it no longer shows (stopped by ctrl+n, or arriving after quit). What the chat measures in the background runs a
slice per worker (``background_step``), each ending in Measured: a reply asked for meanwhile goes first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual.message import Message

from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.events import Finished, Metrics, TokenEvent
from relaxtui.errors import UserError
from relaxtui.text import Message as ChatMessage
from relaxtui.tui.engine import ChatEngine, ChatSettings, token_batches

Post = Callable[[Message], object]


@dataclass
class Loaded(Message):
    cost: LoopCosts | None  # None: measured in the background (Measured brings it)
    drafters: list[str]  # found in the worker: listing reads every GGUF header, too slow for the UI thread


@dataclass
class Measured(Message):
    """A slice of background measurement ran: what is known now, and whether more remain."""

    cost: LoopCosts | None
    priced: bool  # the verify prices arrived in this slice: replies' drafts are cut by them from now on
    more: bool


@dataclass
class Usable(Message):
    """The verifier is loaded: the message box takes input while the drafter loads (``Loaded`` follows)."""


@dataclass
class LoadFailed(Message):
    reason: str


@dataclass
class Progress(Message):
    text: str


@dataclass
class GenerationStarted(Message):
    generation: int
    draft_max: int


@dataclass
class TokensReceived(Message):
    generation: int
    events: tuple[TokenEvent, ...]


@dataclass
class GenerationFinished(Message):
    generation: int
    text: str
    metrics: Metrics


@dataclass
class GenerationFailed(Message):
    generation: int
    reason: str


def _progress(post: Post) -> Callable[[str], None]:
    """An engine's progress lines, posted as Progress messages."""
    def say(text: str) -> None:
        post(Progress(text))
    return say


def load_models(engine: ChatEngine, post: Post) -> None:
    """Load the verifier (then the message box takes input: ``Usable``), then the drafter, and list the drafters that
    fit the verifier. A message sent in between waits behind the drafter on this one model thread. A drafter that
    fails leaves the verifier alone answering: the failure is said, and the chat is set up as loaded without one."""
    failed = _attempt(engine, engine.load, post)
    if failed is not None:
        post(LoadFailed(failed))
        return
    post(Usable())
    failed = _attempt(engine, engine.load_drafter, post)
    if failed is not None:
        post(LoadFailed(failed))
    try:
        with engine.lock:
            drafters = engine.drafter_choices()
    except Exception:  # noqa: BLE001 - a model folder that cannot be listed: the choice in use is still offered
        drafters = [engine.drafter_name]
    post(Loaded(engine.costs, drafters))


def _attempt(engine: ChatEngine, action: Callable[[Callable[[str], None]], object], post: Post) -> str | None:
    """``action(progress)`` under the engine's lock; None, or why it failed, in one line."""
    try:
        with engine.lock:
            action(_progress(post))
    except UserError as exc:
        return str(exc)
    except Exception as exc:  # a model that llama.cpp rejects must not kill the app
        return f"model load failed: {exc}"
    return None


def background_step(engine: ChatEngine, post: Post) -> None:
    """One slice of what the chat measures in the background (between replies, on the model thread)."""
    try:
        with engine.lock:
            known = engine.pair is not None and engine.pair.prices() is not None
            more = engine.background_step()
            priced = not known and engine.pair is not None and engine.pair.prices() is not None
            cost = engine.costs
    except Exception as exc:  # noqa: BLE001 - a measurement must not kill the app
        post(Progress(f"background measurement failed: {exc}"))
        return
    post(Measured(cost, priced, more))


def switch_drafter(engine: ChatEngine, name: str, post: Post) -> None:
    try:
        with engine.lock:
            cost = engine.set_drafter(name, _progress(post))
            drafters = engine.drafter_choices()
    except Exception as exc:
        post(LoadFailed(str(exc)))
        return
    post(Loaded(cost, drafters))


def generate_reply(engine: ChatEngine, conversation: Sequence[ChatMessage], settings: ChatSettings,
                   generation: int, stop: threading.Event, post: Post) -> None:
    """One reply. The engine's lock makes a reply started right after ctrl+n wait for the stopped one to leave
    the models (within a round)."""
    try:
        with engine.lock:
            if stop.is_set():
                return
            post(GenerationStarted(generation, settings.draft_max if engine.drafter else 0))
            for item in token_batches(engine.stream(conversation, settings, stop.is_set)):
                if isinstance(item, Finished):
                    post(GenerationFinished(generation, item.text, item.metrics))
                else:
                    post(TokensReceived(generation, item))
    except UserError as exc:
        post(GenerationFailed(generation, str(exc)))
    except Exception as exc:
        post(GenerationFailed(generation, f"generation failed: {exc}"))
