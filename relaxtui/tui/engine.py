"""What the chat app talks to: a small engine interface with a llama.cpp implementation and a fake one.

The app never touches models: it asks an engine to load (in a worker thread), to stream events for a
conversation under some settings, and to render token ids. The fake engine runs the *real* loop on
FakeBackend models with a deterministic clock, so Pilot and snapshot tests exercise the true event stream.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from relaxtui import checks
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import KINDS, STANDALONE_KINDS, Drafter, DrafterOptions, drafter_kind
from relaxtui.decoding.events import Event, Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.decoding.thinking import check_scope_on
from relaxtui.engine.api import Model
from relaxtui.engine.fake import FAKE_WORDS
from relaxtui.errors import UserError
from relaxtui.options import (
    DRAFT_KIND,
    MAX_TOKENS,
    NO_DRAFTER,
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    Speculative,
)
from relaxtui.rules import Rule, make
from relaxtui.text import Message

if TYPE_CHECKING:  # imported lazily at run time: only the real engine loads llama.cpp (--fake runs without it)
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.session import ModelOptions, Pair

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
class ChatSettings(Speculative):
    """Everything the settings panel edits: the speculative settings a request has too, and a turn's sampling, budget
    and thinking; ``validated()`` turns it into a rule and a generation config."""

    drafter: str = NO_DRAFTER
    temperature: float = TEMPERATURE.default
    top_k: int = TOP_K.default
    top_p: float = TOP_P.default
    thinking: bool = False
    max_tokens: int = 512
    seed: int = SEED.default
    CHECKS: ClassVar[dict[str, checks.Check]] = {
        **Speculative.CHECKS, "temperature": TEMPERATURE.check, "top_k": TOP_K.check, "top_p": TOP_P.check,
        "thinking": checks.THINKING, "max_tokens": MAX_TOKENS.check, "seed": SEED.check}

    def validated(self, where: str = "") -> tuple[Rule, GenerationConfig]:
        """Raise UserError (one clear line) on any bad value; return what the loop needs."""
        self.checked(where)
        sampling = SamplingParams(self.temperature, self.top_k, self.top_p)
        rule = make(self.rule, self.knob, temperature=self.temperature)  # refuses one that cannot run greedy at T = 0
        if self.drafts:
            rule.check_draft_max(self.draft_max)  # (FLy at N = 1)
        # a chat turn extends the conversation: keep the cached prefix in both models (reuse="longest")
        config = GenerationConfig(draft_max=self.draft_max, max_tokens=self.max_tokens, sampling=sampling,
                                  seed=self.seed, top_alternatives=5, reuse="longest", relax_scope=self.relax_scope)
        return rule, config


SETTING_CHECKS = ChatSettings.CHECKS  # every ChatSettings field -> its check in the option table (tests walk it)


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
    """Interface (and shared streaming logic) over a loaded ``session.Pair``; subclasses load it.

    ``lock`` is held by whoever uses the models (load, a reply, a drafter switch, a background slice, close): two
    replies never share a KV cache, and models are never freed under a running decode. What a chat measures (this
    machine's verify prices, its round costs) runs in the background, a slice at a time on the app's model thread
    between replies (``background_step``): the chat takes its first message at once."""

    pair: Pair | None = None
    verifier: Model
    drafter: Drafter | None = None
    drafter_name: str = NO_DRAFTER
    verifier_name: str = "verifier"
    supports_thinking: bool = False
    lock: threading.Lock
    costs: LoopCosts | None = None  # this machine's round costs for the drafter in use (None: not measured yet)

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

    @property
    def priced(self) -> bool:
        """Whether the next reply's drafts are cut by this machine's verify prices (they are known, and the drafter
        in use is one the pair cuts)."""
        return (self.drafter is not None and self.drafter.traits.cut is not None and self.pair is not None
                and self.pair.prices() is not None)

    def load(self, progress: Callable[[str], None]) -> None:
        """Load what takes a message: the verifier (the app's message box takes input once this returns)."""
        raise NotImplementedError

    def load_drafter(self, progress: Callable[[str], None]) -> LoopCosts | None:
        """The rest, on the same model thread (a message sent meanwhile waits behind it): the verifier's warm-up, the
        drafter, and what the pair measures in the background queued; the round costs when already known."""
        raise NotImplementedError

    def check_scope(self, scope: str) -> None:
        """A relax scope the loaded verifier marks no thinking block for: one line naming ``relax_scope`` (nothing to
        check before the models load: the turn's own request check refuses it then)."""
        verifier = getattr(self, "verifier", None)
        if verifier is not None:
            check_scope_on(verifier, scope)

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts | None:
        """Switch drafters through the pair (a standalone kind keeps one instance for the whole chat: its corpus
        learns across turns); the new drafter's round costs are measured in the background."""
        raise NotImplementedError

    def drafter_choices(self) -> list[str]:
        raise NotImplementedError

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        raise NotImplementedError

    def piece(self, token: int) -> str:
        raise NotImplementedError

    def clock(self) -> Callable[[], float] | None:
        return None

    def background_step(self) -> bool:
        """One slice of what the chat measures in the background (under ``lock``, on the model thread, between
        replies); whether more remain."""
        return self.pair is not None and self.pair.background.step()

    def stream(self, messages: Sequence[Message], settings: ChatSettings,
               should_stop: Callable[[], bool]) -> Iterator[Event]:
        rule, config = settings.validated()
        tokens = self.prompt_tokens(messages, settings.thinking)
        drafter = self.drafter if settings.draft_max > 0 else None
        if self.pair is not None:
            self.pair.background.touched()  # a measurement between replies sets itself up again
        clock = self.clock()
        if clock is None:  # the loop's own timer
            return generate(self.verifier, tokens, config, drafter=drafter, rule=rule, should_stop=should_stop)
        return generate(self.verifier, tokens, config, drafter=drafter, rule=rule, should_stop=should_stop,
                        clock=clock)

    def _choose(self, name: str, own: str, progress: Callable[[str], None]) -> None:
        """The drafter the settings panel's ``name`` drafts with: none, the pair's own (the choice ``own``), a
        standalone kind (kept by the pair), or another drafter LM file."""
        assert self.pair is not None
        kind = choice_kind(name)
        if name == NO_DRAFTER:
            self.drafter = None
        elif name == own and self.pair.drafter is not None:
            self.drafter = self.pair.drafter  # back to the command line's drafter (an MTP head: one per verifier)
        elif drafter_kind(kind).standalone:
            self.drafter = self.pair.drafter_for(kind)  # one instance for the chat: its corpus of earlier turns kept
        else:
            progress(f"loading drafter {name}…")
            self.drafter = self.pair.drafter_file(name, kind)
        self.drafter_name = name

    def _measure_in_background(self, progress: Callable[[str], None]) -> None:
        """Queue this machine's round costs for the drafter in use (the live predicted speed-up and break-even
        line), after the verify prices; said once when they are there."""
        assert self.pair is not None
        from relaxtui.costmodel.calibrate import calibration_slices

        self.costs = None
        drafter = self.drafter

        def measured(costs: LoopCosts) -> None:
            if self.drafter is drafter:  # (not for a drafter switched away from meanwhile)
                self.costs = costs
        self.pair.background.add("this machine's round costs", calibration_slices(
            self.verifier, drafter, max_block=CALIBRATED_MAX_DRAFT + 1, sampling=SamplingParams(), repeats=2), measured)

    def close(self) -> None:
        """Free the models once nothing uses them (a reply still stopping holds the lock for one round)."""
        with self.lock:
            if self.pair is not None:
                self.pair.close()
                self.pair = None


class LlamaChatEngine(ChatEngine):
    """The real thing: a verifier and a drafter through llama.cpp (loaded in the app's worker thread)."""

    verifier: LlamaModel

    def __init__(self, options: ModelOptions) -> None:
        self.options = options
        self.lock = threading.Lock()
        self.started = drafter_choice(options.draft_kind, options.drafter)  # the command line's, always offered
        self.drafter_name = self.started
        self.verifier_name = options.verifier
        self._loaded = False  # load_drafter ran: the pair is whole and its measurements are queued

    def load(self, progress: Callable[[str], None]) -> None:
        """Check both files and load the verifier (once: an app started on an engine that is already loaded reuses
        its models)."""
        from relaxtui.session import chat_template, load_pair

        if self.pair is None:
            progress(f"loading {self.options.verifier}…")
            self.pair = load_pair(self.options, later=True)
            self.verifier = self.pair.verifier
            self.template = chat_template(self.pair.verifier)
            self.supports_thinking = self.template.supports_thinking

    def load_drafter(self, progress: Callable[[str], None]) -> LoopCosts | None:
        """Warm the verifier and load the drafter (``Pair.finish_loading``); what the pair measures starts in the
        background (once)."""
        assert self.pair is not None
        if not self._loaded:
            self._loaded = True
            self.pair.background.log = progress
            if self.started != NO_DRAFTER:
                progress(f"loading drafter {self.started}…")
            try:
                self.pair.finish_loading()
            finally:  # a drafter that fails leaves the verifier alone, measured as any chat (the panel offers others)
                self.drafter = self.pair.drafter
                if self.drafter is None:
                    self.drafter_name = NO_DRAFTER
                self.pair.start_pricing(progress)
                self._measure_in_background(progress)
        return self.costs

    def drafter_choices(self) -> list[str]:
        from relaxtui.models.store import list_models

        names = [info.path.name for info in list_models() if info.vocab_size == self.verifier.n_vocab]
        return offered(self.started, names)

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts | None:
        """Through the pair, with every option of the command line's (GPU layers, p-min, n-gram sizes); a drafter
        that does not fit the verifier is one error and the old one stays."""
        self._choose(name, self.started, progress)
        self._measure_in_background(progress)
        return self.costs

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        from relaxtui.session import conversation_tokens

        return conversation_tokens(self.verifier, self.template, messages,
                                   thinking=thinking if self.supports_thinking else None)

    def piece(self, token: int) -> str:
        return self.verifier.token_piece(token).decode("utf-8", errors="replace")


class FakeChatEngine(ChatEngine):
    """Deterministic demo engine: the fake pair (``session.fake_pair``: a 16-word Markov 'verifier' and a noisier
    'drafter') through the real loop, with a deterministic clock."""

    def __init__(self, seed: int = 7, step_s: float = 0.01, delay_s: float = 0.0, n_ctx: int = 4096,
                 gate: threading.Event | None = None, gate_after: int = 0, drafter: str = FAKE_DRAFTER,
                 drafting: DrafterOptions | None = None, prices: Sequence[float] | None = None,
                 prices_gate: threading.Event | None = None, drafter_gate: threading.Event | None = None,
                 drafter_error: str | None = None) -> None:
        """``delay_s`` slows every verifier step; ``gate`` holds the verifier's ``gate_after``-th step until it is
        set, so a test can act "during a reply" without racing the machine's speed; ``drafter``: the choice it
        starts with (the fake drafter LM, a standalone kind, or none); ``drafting``: the command line's drafter
        settings (n-gram sizes, suffix's), which every kind it builds gets; ``prices``: stand-in verify prices, known
        once ``prices_gate`` is set (a measurement in the background that has not ended); ``drafter_gate`` holds
        ``load_drafter`` until it is set, and ``drafter_error`` makes it fail so (the verifier alone stays)."""
        from relaxtui.session import fake_pair

        self.pair = fake_pair(seed=seed, n_ctx=n_ctx, delay_s=delay_s, gate=gate, gate_after=gate_after,
                              drafting=drafting, prices=prices, prices_gate=prices_gate)
        self.verifier = self.pair.verifier
        self.verifier_name = "fake-verifier"
        self.step_s = step_s
        self.lock = threading.Lock()
        self.costs = fake_costs(step_s)  # the same step the fake rounds report, so measured and model agree
        self.drafter_gate, self.drafter_error = drafter_gate, drafter_error
        self.set_drafter(drafter, lambda text: None)

    def load(self, progress: Callable[[str], None]) -> None:
        progress("loading fake models…")

    def load_drafter(self, progress: Callable[[str], None]) -> LoopCosts | None:
        """``drafter_gate``, when given, holds this until it is set (a test acts while the drafter "loads")."""
        if self.drafter_gate is not None:
            self.drafter_gate.wait(timeout=120)  # never hang a test run forever
        if self.pair is not None:
            self.pair.start_pricing(progress)
        if self.drafter_error is not None:
            self.drafter, self.drafter_name = None, NO_DRAFTER
            raise UserError(self.drafter_error)
        return self.costs

    def drafter_choices(self) -> list[str]:
        return offered(FAKE_DRAFTER, [FAKE_DRAFTER])

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts | None:
        self._choose(name, FAKE_DRAFTER, progress)
        return self.costs

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        return [len(messages) % self.verifier.n_vocab, sum(len(m.content) for m in messages) % self.verifier.n_vocab]

    def piece(self, token: int) -> str:
        return FAKE_WORDS[token]

    def clock(self) -> Callable[[], float]:
        ticks = itertools.count()
        return lambda: next(ticks) * self.step_s

    def close(self) -> None:
        """Nothing to free: fake models (an app may be started again on the same engine)."""
