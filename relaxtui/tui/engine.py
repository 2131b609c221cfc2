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

import numpy as np

from relaxtui import checks
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.decoding.backend import FakeBackend
from relaxtui.decoding.drafters import Drafter, DrafterOptions, make_drafter
from relaxtui.decoding.events import Event, Finished, TokenEvent
from relaxtui.decoding.loop import GenerationConfig, generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.text import Message
from relaxtui.errors import UserError
from relaxtui.rules import Rule, make

NO_DRAFTER = "none"
NGRAM = "ngram"
# what the status line adds after the drafter's name, by kind (a drafter LM is named by its file)
KIND_WORDS = {"ngram": "prompt lookup", "mtp": "MTP head"}


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
        rule = make(self.rule, self.knob, temperature=self.temperature or 1.0)
        if sampling.greedy and not rule.greedy_ok:
            raise UserError(f"rule {self.rule!r} cannot run greedy (temperature 0)")
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
    kind: str = "model"  # "model" (a GGUF or the fake pair's model), "ngram" (prompt lookup), "mtp", "none"

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

    verifier: object
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

    def stream(self, messages: Sequence[Message], settings: ChatSettings,
               should_stop: Callable[[], bool]) -> Iterator[Event]:
        rule, config = settings.validated()
        tokens = self.prompt_tokens(messages, settings.thinking)
        drafter = self.drafter if settings.draft_max > 0 else None
        clock = self.clock()
        extra = {"clock": clock} if clock is not None else {}
        return generate(self.verifier, tokens, config, drafter=drafter, rule=rule,  # type: ignore[arg-type]
                        should_stop=should_stop, **extra)

    def close(self) -> None:
        pass


class LlamaChatEngine(ChatEngine):
    """The real thing: a verifier and a drafter through llama.cpp (loaded in the app's worker thread)."""

    def __init__(self, options) -> None:  # type: ignore[no-untyped-def]
        self.options = options  # relaxtui.session.ModelOptions
        self.lock = threading.Lock()
        self.pair = None
        self.drafter = None
        self.drafter_name = options.drafter or NO_DRAFTER
        self.verifier_name = options.verifier

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
        return calibrate(self.verifier, self.drafter, max_block=CALIBRATED_MAX_DRAFT + 1, sampling=SamplingParams(),
                         repeats=2)

    def drafter_choices(self) -> list[str]:
        from relaxtui.models.store import list_models

        names = [info.path.name for info in list_models() if info.vocab_size == self.verifier.n_vocab]
        started = self.options.drafter  # the command line's drafter ("mtp", a file anywhere): always offered
        return [NO_DRAFTER, NGRAM, *([started] if started not in (None, NO_DRAFTER, NGRAM, *names) else []), *names]

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts:
        """Switch drafters through the same factory as the command line, with every option (GPU layers, p-min,
        n-gram sizes); a drafter that does not fit the verifier is one error and the old one stays."""
        from relaxtui.session import load_drafter

        old = self.drafter
        if name == NO_DRAFTER:
            self.drafter = None
        elif name == self.options.drafter and self.pair is not None and self.pair.drafter is not None:
            self.drafter = self.pair.drafter  # back to the command line's drafter (an MTP head: one per verifier)
        else:
            if name != NGRAM:
                progress(f"loading drafter {name}…")
            kind = "ngram" if name == NGRAM else "model"
            self.drafter = load_drafter(replace(self.options, drafter=name, draft_kind=kind), self.verifier)
        if old is not None and self.pair is not None and old is not self.pair.drafter:
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
                self.pair.close()
                self.pair = None


FAKE_WORDS = (" the", " cat", " sat", " on", " a", " warm", " mat", ".", " It", " purred", " softly", ",",
              " and", " slept", " well", "\n")


class FakeChatEngine(ChatEngine):
    """Deterministic demo engine: a 16-word Markov 'verifier' and a noisier 'drafter' through the real loop."""

    def __init__(self, seed: int = 7, step_s: float = 0.01, delay_s: float = 0.0, n_ctx: int = 4096,
                 gate: threading.Event | None = None, gate_after: int = 0) -> None:
        """``delay_s`` slows every verifier step; ``gate`` holds the verifier's ``gate_after``-th step until it is
        set, so a test can act "during a reply" without racing the machine's speed."""
        vocab = len(FAKE_WORDS)
        rng = np.random.default_rng(seed)
        target = rng.normal(scale=2.5, size=(vocab, vocab))
        draft = target + rng.normal(scale=1.2, size=(vocab, vocab))
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
        self.drafter = self._fake("model")
        self.drafter_name = "fake-drafter"
        self.verifier_name = "fake-verifier"
        self.step_s = step_s
        self.lock = threading.Lock()

    def load(self, progress: Callable[[str], None]) -> LoopCosts:
        progress("loading fake models…")
        return fake_costs(self.step_s)  # the same step the fake rounds report, so measured and model agree

    def drafter_choices(self) -> list[str]:
        return [NO_DRAFTER, NGRAM, "fake-drafter"]

    def _fake(self, kind: str) -> Drafter:
        """A drafter of ``kind`` built by the real factory around the fake draft model."""
        return make_drafter(DrafterOptions(kind=kind), self.verifier, open_model=lambda _: self._draft_model)

    def set_drafter(self, name: str, progress: Callable[[str], None]) -> LoopCosts:
        self.drafter = None if name == NO_DRAFTER else self._fake("ngram" if name == NGRAM else "model")
        self.drafter_name = name
        return self.load(progress)

    def prompt_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        return [len(messages) % self.verifier.n_vocab, sum(len(m.content) for m in messages) % self.verifier.n_vocab]

    def piece(self, token: int) -> str:
        return FAKE_WORDS[token]

    def clock(self) -> Callable[[], float]:
        ticks = itertools.count()
        return lambda: next(ticks) * self.step_s


