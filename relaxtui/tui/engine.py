"""What the chat app talks to: a small engine interface with a llama.cpp implementation and a fake one.

The app never touches models: it asks an engine to load (in a worker thread), to stream events for a
conversation under some settings, and to render token ids. The fake engine runs the *real* loop on
FakeBackend models with a deterministic clock, so Pilot and snapshot tests exercise the true event stream.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from relaxtui import checks
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import (
    KINDS,
    STANDALONE_KINDS,
    Drafter,
    DrafterOptions,
    Openers,
    drafter_kind,
    make_drafter,
)
from relaxtui.decoding.events import Event, Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import Model
from relaxtui.engine.fake import FAKE_WORDS, FakeBackend, demo_tables
from relaxtui.options import DRAFT_KIND
from relaxtui.rules import Rule, make
from relaxtui.text import Message

if TYPE_CHECKING:  # imported lazily at run time: only the real engine loads llama.cpp (--fake runs without it)
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.session import LoadedPair, ModelOptions

NO_DRAFTER = "none"
FAKE_DRAFTER = "fake-drafter"  # the fake pair's drafter LM, as the settings panel offers it
# what the status line adds after the drafter's name, as each kind's traits word it (a drafter LM: its file's name)
KIND_WORDS = {name: kind.about for name, kind in KINDS.items() if kind.about}


def drafter_choice(kind: str, drafter: str | None) -> str:
    """The settings panel's name for the drafter a command line gives: a kind that opens no file by the kind's name,
    else the ``--drafter`` value (a GGUF, or "mtp": the verifier's own head); "none" without one."""
    if drafter is None:
        return NO_DRAFTER
    return drafter if drafter_kind(kind).model_file else kind


def choice_kind(name: str) -> str:
    """The drafter kind a settings-panel choice drafts with: a standalone kind (prompt lookup, the n-gram family,
    suffix) by its name; anything else names a GGUF drafter LM (the default kind)."""
    return name if name in STANDALONE_KINDS else DRAFT_KIND.default


def offered(started: str, files: Sequence[str]) -> list[str]:
    """The settings panel's drafter choices: none, every standalone kind the factory lists, the drafter the chat
    started with (a file anywhere, "mtp"), then the GGUF drafters that fit the verifier."""
    listed = [NO_DRAFTER, *STANDALONE_KINDS]
    return [*listed, *([started] if started not in (*listed, *files) else []), *files]


@dataclass(frozen=True)
class ChatSettings:
    """Everything the settings panel edits; ``validated()`` turns it into a rule and a generation config."""

    rule: str = "strict"
    knob: float | None = None
    draft_max: int = 3
    temperature: float = 0.6
    top_k: int = 20
    top_p: float = 0.95
    thinking: bool = False
    drafter: str = NO_DRAFTER
    max_tokens: int = 512
    seed: int = 0

    def checked(self, where: str = "") -> ChatSettings:
        """Itself, once every field has passed its one check (``SETTING_CHECKS``: the same check as the flag's),
        each refusal naming the field as ``{where}{field}`` (``settings.seed must be >= 0 (got -1): ...``)."""
        for name, check in SETTING_CHECKS.items():
            check.check(getattr(self, name), f"{where}{name}")
        return self

    def validated(self, where: str = "") -> tuple[Rule, GenerationConfig]:
        """Raise UserError (one clear line) on any bad value; return what the loop needs."""
        self.checked(where)
        sampling = SamplingParams(self.temperature, self.top_k, self.top_p)
        rule = make(self.rule, self.knob, temperature=self.temperature)  # refuses one that cannot run greedy at T = 0
        # a chat turn extends the conversation: keep the cached prefix in both models (reuse="longest")
        config = GenerationConfig(draft_max=self.draft_max, max_tokens=self.max_tokens, sampling=sampling,
                                  seed=self.seed, top_alternatives=5, reuse="longest")
        return rule, config


# every ChatSettings field -> the check its flag uses too (tests walk this table against the dataclass's fields)
SETTING_CHECKS: dict[str, checks.Check] = {
    "rule": checks.TEXT, "knob": checks.KNOB, "draft_max": checks.DRAFT_MAX, "temperature": checks.TEMPERATURE,
    "top_k": checks.TOP_K, "top_p": checks.TOP_P, "thinking": checks.THINKING, "drafter": checks.TEXT,
    "max_tokens": checks.MAX_TOKENS, "seed": checks.SEED,
}


@dataclass(frozen=True)
class ModelInfo:
    """One model of the chat as a saved chat records it: the name it was given, its file (if any), its kind."""

    name: str
    path: str | None = None
    kind: str = "model"  # a factory kind (decoding.drafters.DRAFT_KINDS: "model" a GGUF or the fake pair's) or "none"

    @property
    def file_name(self) -> str:
        """The model file's name (what two chats compare), else the name it was given."""
        return Path(self.path).name if self.path else self.name


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


CALIBRATED_MAX_DRAFT = 4  # calibrated at load up to this N; larger N continue the measured curves linearly


def fake_costs(step_s: float = 0.1, c_rel: float = 0.3) -> LoopCosts:
    """Round costs of a CPU-like machine (verify block grows 0.4 step per token) for the fake engine."""
    verify = tuple(step_s * (1.0 + 0.4 * k) for k in range(9))
    draft = tuple(step_s * c_rel * n for n in range(1, 9))
    return LoopCosts(verify, draft, 0.0, 0.0, step_s, step_s * c_rel)


class ChatEngine:
    """Interface (and shared streaming logic); subclasses own the models.

    ``lock`` is held by whoever uses the models (load, a reply, a drafter switch, close): two replies never
    share a KV cache, and models are never freed under a running decode."""

    verifier: Model
    drafter: Drafter | None
    drafter_name: str = NO_DRAFTER
    verifier_name: str = "verifier"
    supports_thinking: bool = False
    lock: threading.Lock

    def models(self) -> tuple[ModelInfo, ModelInfo]:
        """(verifier, drafter) as loaded now: what a saved chat records and a resumed one compares against."""
        verifier_path = getattr(getattr(self, "verifier", None), "path", None)
        traits = self.drafter.traits if self.drafter is not None else None
        drafter_path = traits.model_path if traits is not None else None
        kind = traits.kind if traits is not None else NO_DRAFTER
        return (ModelInfo(self.verifier_name, None if verifier_path is None else str(verifier_path)),
                ModelInfo(self.drafter_name, None if drafter_path is None else str(drafter_path), kind))

    @property
    def drafter_kind(self) -> str:
        """The kind of the drafter in use, as its traits declare it ("none" without one)."""
        return self.drafter.traits.kind if self.drafter is not None else NO_DRAFTER

    def load(self, progress: Callable[[str], None]) -> LoopCosts:
        raise NotImplementedError

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts:
        raise NotImplementedError

    def drafter_choices(self) -> list[str]:
        raise NotImplementedError

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        raise NotImplementedError

    def piece(self, token: int) -> str:
        raise NotImplementedError

    def clock(self) -> Callable[[], float] | None:
        return None

    def price(self, config: GenerationConfig, drafter: Drafter | None) -> GenerationConfig:
        """The turn's config with the verify prices its drafts are cut by (docs/method.md#priced-drafts): none here;
        an engine whose models can be timed measures them (``LlamaChatEngine``)."""
        return config

    def stream(self, messages: Sequence[Message], settings: ChatSettings,
               should_stop: Callable[[], bool]) -> Iterator[Event]:
        rule, config = settings.validated()
        tokens = self.prompt_tokens(messages, settings.thinking)
        drafter = self.drafter if settings.draft_max > 0 else None
        config = self.price(config, drafter)
        clock = self.clock()
        if clock is None:  # the loop's own timer
            return generate(self.verifier, tokens, config, drafter=drafter, rule=rule, should_stop=should_stop)
        return generate(self.verifier, tokens, config, drafter=drafter, rule=rule, should_stop=should_stop,
                        clock=clock)

    def close(self) -> None:
        pass


class LlamaChatEngine(ChatEngine):
    """The real thing: a verifier and a drafter through llama.cpp (loaded in the app's worker thread)."""

    verifier: LlamaModel

    def __init__(self, options: ModelOptions) -> None:
        self.options = options
        self.lock = threading.Lock()
        self.pair: LoadedPair | None = None
        self.drafter = None
        self.started = drafter_choice(options.draft_kind, options.drafter)  # the command line's, always offered
        self.drafter_name = self.started
        self.verifier_name = options.verifier
        self.kept: dict[str, Drafter] = {}

    def load(self, progress: Callable[[str], None]) -> LoopCosts:
        """Load the pair (once: an app started on an engine that is already loaded reuses its models)."""
        from relaxtui.session import chat_template, load_pair

        if self.pair is None:
            progress(f"loading {self.options.verifier} and {self.options.drafter or 'no drafter'}…")
            self.pair = load_pair(self.options)
        self.verifier = self.pair.verifier
        self.drafter = self.pair.drafter
        self.template = chat_template(self.pair.verifier)
        self.supports_thinking = self.template.supports_thinking
        return self._measure(progress)

    def _measure(self, progress: Callable[[str], None]) -> LoopCosts:
        """This machine's round costs (a few seconds), for the live predicted speed-up and break-even line."""
        from relaxtui.costmodel.calibrate import calibrate

        progress("timing this machine's round costs…")
        costs = calibrate(self.verifier, self.drafter, max_block=CALIBRATED_MAX_DRAFT + 1, sampling=SamplingParams(),
                          repeats=2)
        if self.drafter is not None and self.pair is not None:  # priced drafting's verify prices, now, not mid-turn
            from relaxtui.costmodel.verify_prices import pricer

            pricer(self.pair, self.options, log=progress)(GenerationConfig(draft_max=1), self.drafter)
        return costs

    def price(self, config: GenerationConfig, drafter: Drafter | None) -> GenerationConfig:
        """Measured at load or at a drafter switch (``_measure``, with progress), never mid-turn: once per verifier
        (cached on disk too), for every drafter the chat switches to."""
        from relaxtui.costmodel.verify_prices import pricer

        assert self.pair is not None, "load() comes first"
        return pricer(self.pair, self.options, measure=False)(config, drafter)

    def drafter_choices(self) -> list[str]:
        from relaxtui.models.store import list_models

        names = [info.path.name for info in list_models() if info.vocab_size == self.verifier.n_vocab]
        return offered(self.started, names)

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts:
        """Switch drafters through the same factory as the command line, with every option (GPU layers, p-min,
        n-gram sizes); a drafter that does not fit the verifier is one error and the old one stays."""
        from relaxtui.session import load_drafter

        old = self.drafter
        kind = choice_kind(name)
        if name == NO_DRAFTER:
            self.drafter = None
        elif name == self.started and self.pair is not None and self.pair.drafter is not None:
            self.drafter = self.pair.drafter  # back to the command line's drafter (an MTP head: one per verifier)
        elif name in self.kept:
            self.drafter = self.kept[name]  # a standalone kind again: its corpus of earlier turns kept
        else:
            if drafter_kind(kind).model_file:
                progress(f"loading drafter {name}…")
            self.drafter = load_drafter(replace(self.options, drafter=name, draft_kind=kind), self.verifier)
            if self.drafter is not None and drafter_kind(kind).standalone:
                self.kept[name] = self.drafter
        if old is not None and self.pair is not None and old is not self.pair.drafter and old not in self.kept.values():
            old.close()
        self.drafter_name = name
        return self._measure(progress)

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        from relaxtui.session import conversation_tokens

        return conversation_tokens(self.verifier, self.template, messages,
                                   thinking=thinking if self.supports_thinking else None)

    def piece(self, token: int) -> str:
        return self.verifier.token_piece(token).decode("utf-8", errors="replace")

    def close(self) -> None:
        """Free the models once nothing uses them (a reply still stopping holds the lock for one round)."""
        with self.lock:
            if self.pair is not None:
                if self.drafter is not None and self.drafter is not self.pair.drafter:
                    self.drafter.close()
                for kept in self.kept.values():
                    if kept is not self.drafter:
                        kept.close()
                self.kept.clear()
                self.pair.close()
                self.pair = None




class FakeChatEngine(ChatEngine):
    """Deterministic demo engine: a 16-word Markov 'verifier' and a noisier 'drafter' through the real loop."""

    verifier: FakeBackend

    def __init__(self, seed: int = 7, step_s: float = 0.01, delay_s: float = 0.0, n_ctx: int = 4096,
                 gate: threading.Event | None = None, gate_after: int = 0, drafter: str = FAKE_DRAFTER,
                 drafting: DrafterOptions | None = None) -> None:
        """``delay_s`` slows every verifier step; ``gate`` holds the verifier's ``gate_after``-th step until it is
        set, so a test can act "during a reply" without racing the machine's speed; ``drafter``: the choice it
        starts with (the fake drafter LM, a standalone kind, or none); ``drafting``: the command line's drafter
        settings (n-gram sizes, suffix's), which every kind it builds gets."""
        self.drafting = drafting or DrafterOptions()
        vocab = len(FAKE_WORDS)
        target, draft = demo_tables(seed)
        pieces = [w.encode() for w in FAKE_WORDS]
        calls = itertools.count(1)

        def verifier_logits(context: tuple[int, ...]) -> np.ndarray:
            if delay_s:
                time.sleep(delay_s)
            if gate is not None and next(calls) == gate_after:
                gate.wait(timeout=120)  # never hang a test run forever
            return target[context[-1]]

        self.verifier = FakeBackend(verifier_logits, vocab, pieces=pieces, n_ctx=n_ctx)
        self._draft_model = FakeBackend(lambda ctx: draft[ctx[-1]], vocab, pieces=pieces, n_ctx=n_ctx)
        self.verifier_name = "fake-verifier"
        self.step_s = step_s
        self.lock = threading.Lock()
        self.kept: dict[str, Drafter] = {}
        self.set_drafter(drafter, lambda text: None)

    def load(self, progress: Callable[[str], None]) -> LoopCosts:
        progress("loading fake models…")
        return fake_costs(self.step_s)  # the same step the fake rounds report, so measured and model agree

    def drafter_choices(self) -> list[str]:
        return offered(FAKE_DRAFTER, [FAKE_DRAFTER])

    def _fake(self, kind: str) -> Drafter:
        """A drafter of ``kind`` built by the real factory around the fake draft model."""
        return make_drafter(replace(self.drafting, kind=kind), self.verifier,
                            Openers(model=lambda _: self._draft_model))

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts:
        kind = choice_kind(name)
        if name == NO_DRAFTER:
            self.drafter = None
        else:  # a standalone kind keeps one instance for the whole chat (its corpus learns across turns)
            kept = self.kept.get(name)
            self.drafter = kept if kept is not None else self._fake(kind)
            if drafter_kind(kind).standalone:
                self.kept[name] = self.drafter
        self.drafter_name = name
        return self.load(progress)

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        return [len(messages) % self.verifier.n_vocab, sum(len(m.content) for m in messages) % self.verifier.n_vocab]

    def piece(self, token: int) -> str:
        return FAKE_WORDS[token]

    def clock(self) -> Callable[[], float]:
        ticks = itertools.count()
        return lambda: next(ticks) * self.step_s


