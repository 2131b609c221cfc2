"""Loading a verifier/drafter pair and turning a user prompt into tokens: shared by every face.

A ``Pair`` is what a face has loaded and asks for everything model-side: the verifier, its drafters by kind (each
built once by the factory, with every option; standalone kinds kept for their corpora, per scope where they learn),
this machine's verify prices (read from the cache, or measured at most once: in the background on the face's own
model thread, or now) and ``close()``. ``--draft-cut`` is the pair's: resolved once, when the factory builds a kind,
into a ``PricedDrafter`` that reads the pair's prices. ``load_pair`` loads GGUF files; ``fake_pair`` is the
deterministic 16-word pair of ``chat --fake``, ``serve --fake`` and the tests, on ``engine/fake.py``.

Nothing here prints; the CLI, TUI and eval runner decide how to show progress and results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import numpy as np

from relaxtui.checks import BadValue
from relaxtui.costmodel.background import Background
from relaxtui.costmodel.verify_prices import VerifyPrices
from relaxtui.decoding.draft_cut import check_policy
from relaxtui.decoding.drafters import DRAFT_KINDS, Drafter, DrafterOptions, Openers, drafter_kind, make_drafter
from relaxtui.decoding.vocab import VocabModel
from relaxtui.engine.api import Rows, SeqDecode
from relaxtui.engine.capacity import check_parallel
from relaxtui.engine.fake import FAKE_WORDS, FakeBackend, demo_tables
from relaxtui.engine.llama import LlamaModel
from relaxtui.engine.mtp import MtpHead, check_mtp_files
from relaxtui.engine.text import ChatTemplate
from relaxtui.errors import UserError
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.models.store import resolve_model
from relaxtui.options import CTX_SIZE, DRAFT_MAX, DRAFT_P_MIN, DRAFTER_SETTINGS, GPU_LAYERS, PARALLEL, THREADS
from relaxtui.pair import DEFAULT_SCOPES, KindDrafters, StandInPrices
from relaxtui.text import Message

__all__ = ["DRAFT_KINDS", "FAKE_DRAFT_KIND", "ModelOptions", "Pair", "chat_template", "conversation_tokens",
           "drafter_options", "fake_pair", "load_pair", "prompt_tokens"]


@dataclass(frozen=True)
class ModelOptions:
    verifier: str = DEFAULT_VERIFIER
    drafter: str | None = DEFAULT_DRAFTER  # None = verifier alone
    ctx_size: int = 4096
    threads: int | None = None
    gpu_layers: int = 0
    draft_kind: str = "model"  # one of DRAFT_KINDS: "model" (a GGUF drafter), "ngram" (prompt lookup, no model)
    ngram_min: int = 1
    ngram_max: int = 3
    draft_p_min: float = 0.0
    parallel: int = 1  # sequences per context (K): --parallel; ctx_size is per sequence
    # what shapes a drafter that opens no model (relaxtui.options.DRAFTER_SETTINGS; each kind reads its own)
    ngram_size_n: int | None = None
    ngram_size_m: int | None = None
    ngram_min_hits: int = 1
    ngram_mod_n_min: int | None = None
    suffix_depth: int = 64
    suffix_factor: float = 1.0
    suffix_min_prob: float = 0.1
    rollback_depth: int = 16  # the longest draft the run verifies (its --draft-max, the longest of an eval grid): a
    # recurrent/hybrid verifier keeps that many recurrent-state snapshots per sequence (a verify batch
    # [last, x_1..x_N] rolls back N at most) and is refused in one line if it cannot; a longer draft later (the chat's
    # settings) runs from a checkpoint, exactly. Checked as draft_max, the setting it comes from
    draft_cut: str = "auto"  # priced drafting (docs/method.md#priced-drafts): the kinds whose drafts the pair's
    # drafters cut by this machine's verify prices ("auto": those that run no model; "priced": every kind; "none")

    def __post_init__(self) -> None:
        """Each field through its check in the option table; a refusal names the setting (the CLI spells it as
        its flag, relaxtui.options)."""
        drafter_kind(self.draft_kind)  # an unknown kind: one line
        check_policy(self.draft_cut)
        for setting in (DRAFT_P_MIN, CTX_SIZE, THREADS, PARALLEL, GPU_LAYERS, *DRAFTER_SETTINGS):
            setting.check.check(getattr(self, setting.name), setting.name)
        DRAFT_MAX.check.check(self.rollback_depth, DRAFT_MAX.name)
        drafter_options(self)  # what its kind refuses of them together (ngram_min > ngram_max): before anything loads

    @property
    def drafter_file(self) -> str | None:
        """The ``--drafter`` value when it names a model file the kind opens (None: ngram, the verifier's own MTP
        heads, or no drafter)."""
        return drafter_kind(self.draft_kind).file_of(self.drafter)


def _gpu_layers(option: int) -> int:
    """--gpu-layers as llama.cpp's n_gpu_layers (-1 = every layer)."""
    return 10_000 if option == -1 else option


def drafter_options(options: ModelOptions, path: Path | None = None) -> DrafterOptions:
    """What the factory builds the drafter from: the kind, its model file, and every drafter setting."""
    own = {setting.name: getattr(options, setting.name) for setting in DRAFTER_SETTINGS}
    return DrafterOptions(kind=options.draft_kind, model=path, p_min=options.draft_p_min, n_ctx=options.ctx_size,
                          n_seq=options.parallel, threads=options.threads, gpu_layers=_gpu_layers(options.gpu_layers),
                          draft_cut=options.draft_cut, **own)


def _drafter_path(options: ModelOptions) -> Path | None:
    name = options.drafter_file
    return None if name is None else resolve_model(name)


def open_gguf(options: DrafterOptions) -> LlamaModel:
    """The model a ``model`` drafter runs, loaded with every option."""
    if options.model is None:
        raise BadValue("draft_kind", "model needs a drafter GGUF file")
    # no recurrent-state snapshots: a hybrid drafter drafts, extends and times from a checkpoint restored after it,
    # so its snapshots would never be rolled back to (each is a copy of the state, paid on every decode)
    return LlamaModel(options.model, n_ctx=options.n_ctx, n_threads=options.threads, n_gpu_layers=options.gpu_layers,
                      n_seq=options.n_seq, rollback_depth=0)


def open_mtp_head(verifier: object, options: DrafterOptions) -> MtpHead:
    """The verifier's MTP head (layers from ``options.model``, an MTP-only GGUF, when given)."""
    if not isinstance(verifier, LlamaModel):
        raise BadValue("draft_kind", "mtp drafts with a GGUF verifier's own MTP layers")
    return MtpHead(verifier, options.model, n_threads=options.threads, n_gpu_layers=options.gpu_layers)


def _close(model: object) -> None:
    assert isinstance(model, LlamaModel), "the GGUF openers open LlamaModels only"
    model.close()


GGUF = Openers(model=open_gguf, close=_close, mtp_head=open_mtp_head, mtp_files=check_mtp_files)
"""The factory's openers for GGUF files through llama.cpp: what every face drafts with."""


Log = Callable[[str], None]
V = TypeVar("V", bound=VocabModel)  # the verifier a pair holds: a LlamaModel, a FakeBackend
FAKE_DRAFT_KIND = "model"  # the fake pair's own drafter: an LM over the fake draft table


class Prices(Protocol):
    """This machine's verify prices as a pair holds them (``costmodel.verify_prices.VerifyPrices``; a fake pair's
    ``pair.StandInPrices``)."""

    def known(self) -> tuple[float, ...] | None: ...
    def start(self, background: Background, log: Log = ...,
              done: Callable[[tuple[float, ...]], None] = ...) -> bool: ...
    def wait(self, log: Log = ...) -> tuple[float, ...]: ...


class Pair(Generic[V]):
    """What a face has loaded (module docstring). ``drafter`` is the command line's (None: the verifier alone);
    ``drafter_for`` hands any other kind the pair can draft with, built once; ``prices()`` is what its priced drafters
    read (None until known); a face drives ``background`` (measurements that decode on these models) from its model
    thread while idle, or calls ``price_drafts`` to have the prices now."""

    def __init__(self, verifier: V, drafting: DrafterOptions, openers: Openers, *, speculative: bool,
                 prices: Prices | None = None, close_verifier: Callable[[], None] = lambda: None,
                 verifier_path: Path | None = None, drafter_path: Path | None = None, name: str = "verifier",
                 options: ModelOptions | None = None, max_scopes: int = DEFAULT_SCOPES,
                 later: Callable[[], None] | None = None) -> None:
        """``later``: what ``finish_loading`` does before it builds the drafter (a pair loaded with
        ``load_pair(later=True)``: the verifier's warm-up); given, the drafter waits for ``finish_loading`` too."""
        self.verifier, self.drafting, self.openers = verifier, drafting, openers
        self.verifier_path, self.drafter_path, self.name, self.options = verifier_path, drafter_path, name, options
        self._prices, self._close_verifier = prices, close_verifier
        self.background = Background()
        self._later = later
        self._speculative = speculative
        self.drafter: Drafter | None = self._make(drafting) if speculative and later is None else None
        self.kinds = KindDrafters(self.drafter, lambda kind: self._make(replace(drafting, kind=kind, model=None)),
                                  max_scopes)
        self._other: Drafter | None = None  # a drafter LM of another file (the chat's switch), one at a time

    def finish_loading(self) -> None:
        """What a pair loaded with ``later`` left undone (the verifier's warm-up, then the command line's drafter), on
        the face's model thread, after it took input; nothing for a pair loaded whole."""
        if self._later is not None:
            self._later()
            self._later = None
            if self._speculative:
                self.drafter = self.kinds.own = self._make(self.drafting)

    def _make(self, drafting: DrafterOptions) -> Drafter:
        """A drafter through the factory, priced by this pair where its kind's ``draft_cut`` says so."""
        return make_drafter(drafting, self.verifier, self.openers, self.prices if self._prices is not None else None)

    @property
    def draft_cut(self) -> str:
        return self.drafting.draft_cut

    @property
    def drafter_name(self) -> str:
        """What runs and profiles call the drafter: its model file's name, else its kind; "none" without one."""
        return self.drafter.traits.label if self.drafter is not None else "none"

    def drafter_for(self, kind: str, scope: object = None) -> Drafter:
        """The pair's drafter of ``kind``: its own, or a standalone kind's, built once (one per ``scope`` where it
        learns: ``pair.KindDrafters``)."""
        return self.kinds.get(kind, scope)

    def drafter_file(self, name: str, kind: str) -> Drafter:
        """A drafter of ``kind`` that opens the file ``name`` (the chat's switch to another drafter LM), with every
        option of the pair's own; the one built before it is closed."""
        if self.options is None:
            raise UserError(f"this pair cannot load a drafter file ({name})")
        options = replace(self.options, drafter=name, draft_kind=kind)
        drafter = self._make(drafter_options(options, _drafter_path(options)))
        if self._other is not None:
            self._other.close()
        self._other = drafter
        return drafter

    def prices(self) -> tuple[float, ...] | None:
        """v(1..K) in verifier steps on this machine, as measured for this verifier (None: not known yet)."""
        return self._prices.known() if self._prices is not None else None

    def start_pricing(self, log: Log = lambda line: None,
                      done: Callable[[tuple[float, ...]], None] = lambda prices: None) -> bool:
        """The prices from the cache now, else their measurement queued on ``background`` (a face that must answer at
        once: chat, serve); whether they are known now. Nothing to do where no drafter of the pair is cut."""
        if self._prices is None or self.draft_cut == "none":
            return False
        return self._prices.start(self.background, log, done)

    def price_drafts(self, log: Log = lambda line: None) -> None:
        """The prices now, measured on the caller's thread if they are neither kept nor known, when the pair's own
        drafter is cut by them (generate, eval, bench, tune: every draft of a run is priced alike)."""
        if self._prices is not None and self.drafter is not None and self.drafter.traits.cut is not None:
            self._prices.wait(log)

    def close(self) -> None:
        self.background.close()
        self.kinds.close()
        for drafter in (self._other, self.drafter):
            if drafter is not None:
                drafter.close()
        self._other = self.drafter = None
        self._close_verifier()


def load_pair(options: ModelOptions, *, max_scopes: int = DEFAULT_SCOPES, later: bool = False) -> Pair[LlamaModel]:
    """Resolve and load both models (the drafter through the one factory, with every option), checking their
    vocabularies before anything runs. ``later``: only what takes a prompt now (every file checked, the verifier
    loaded unwarmed); ``Pair.finish_loading`` warms it and loads the drafter (chat: the message box takes input
    meanwhile, and a message sent then waits on the model thread behind them)."""
    verifier_path = resolve_model(options.verifier)
    drafter_path = _drafter_path(options)
    check_parallel(options.parallel, [verifier_path, *([drafter_path] if drafter_path else [])], options.ctx_size,
                   rollback_depth=options.rollback_depth)
    speculative = options.drafter is not None
    if speculative:
        drafter_kind(options.draft_kind).check_files(verifier_path, drafter_path, GGUF)  # headers, before any load
    # a kind that drafts from the verifier's hidden rows (an MTP head) needs a verifier that keeps them
    keep_hidden = {"mtp": True} if speculative and drafter_kind(options.draft_kind).needs_hidden_states else {}
    verifier = LlamaModel(verifier_path, n_ctx=options.ctx_size, n_threads=options.threads,
                          n_gpu_layers=_gpu_layers(options.gpu_layers), n_seq=options.parallel,
                          rollback_depth=options.rollback_depth, **keep_hidden, **({"warmup": False} if later else {}))
    try:
        if speculative and options.rollback_depth > 0:
            verifier.require_rollback(options.rollback_depth)  # a hybrid model that cannot: one line, before decoding
        prices = VerifyPrices(verifier, verifier_path, threads=options.threads, gpu_layers=options.gpu_layers)
        return Pair(verifier, drafter_options(options, drafter_path), GGUF, speculative=speculative, prices=prices,
                    close_verifier=verifier.close, verifier_path=verifier_path, drafter_path=drafter_path,
                    name=verifier_path.name, options=options, max_scopes=max_scopes,
                    later=verifier.warm_up if later else None)
    except BaseException:
        verifier.close()
        raise


class _FakeVerifier(FakeBackend):
    """The fake pair's verifier; ``batch_gate``, when given, holds each batch of several sequences until it is set."""

    def __init__(self, logits_fn: Callable[[tuple[int, ...]], np.ndarray], n_vocab: int, *, n_ctx: int, n_seq: int,
                 pieces: Sequence[bytes], batch_gate: threading.Event | None = None) -> None:
        super().__init__(logits_fn, n_vocab, n_ctx=n_ctx, pieces=pieces, n_seq=n_seq)
        self.batch_gate = batch_gate

    def decode_many(self, items: Sequence[SeqDecode]) -> list[Rows]:
        if self.batch_gate is not None:
            self.batch_gate.wait(timeout=60)  # never hang a test run forever
        return super().decode_many(items)


def fake_pair(n_seq: int = 1, *, seed: int = 7, n_ctx: int = 4096, delay_s: float = 0.0,
              tables: tuple[np.ndarray, np.ndarray] | None = None, drafting: DrafterOptions | None = None,
              speculative: bool = True, gate: threading.Event | None = None, gate_after: int = 0,
              batch_gate: threading.Event | None = None, prices: Sequence[float] | None = None,
              prices_gate: threading.Event | None = None, max_scopes: int = DEFAULT_SCOPES) -> Pair[FakeBackend]:
    """The deterministic pair of ``FAKE_WORDS``: a Markov verifier and a noisier drafter LM (``demo_tables(seed)``, or
    ``tables``: the verifier's and drafter's logits, row = previous token), ``n_seq`` sequences of ``n_ctx`` tokens,
    through the real factory and loops. ``drafting``: the command line's drafter settings, which every kind it builds
    gets. Test hooks: ``delay_s`` slows every verifier row; ``gate`` holds the verifier's ``gate_after``-th row and
    ``batch_gate`` every batch until set; ``prices`` stand for this machine's verify prices (None: drafts are never
    cut), known once ``prices_gate`` is set (a measurement that has not ended)."""
    target, draft = tables if tables is not None else demo_tables(seed)
    vocab = target.shape[1]
    pieces = [w.encode() for w in FAKE_WORDS[:vocab]]
    calls = iter(range(1, 1 << 62))

    def verifier_logits(context: tuple[int, ...]) -> np.ndarray:
        if delay_s:
            time.sleep(delay_s)
        if gate is not None and next(calls) == gate_after:
            gate.wait(timeout=120)  # never hang a test run forever
        return target[context[-1]]

    verifier: FakeBackend = _FakeVerifier(verifier_logits, vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq,
                                          batch_gate=batch_gate)
    draft_model = FakeBackend(lambda ctx: draft[ctx[-1]], vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq)
    options = replace(drafting or DrafterOptions(), kind=FAKE_DRAFT_KIND, n_seq=n_seq, n_ctx=n_ctx)
    stand_in = StandInPrices(prices, prices_gate) if prices is not None else None
    return Pair(verifier, options, Openers(model=lambda _: draft_model), speculative=speculative, prices=stand_in,
                name="fake-verifier", max_scopes=max_scopes)


def chat_template(model: LlamaModel) -> ChatTemplate:
    def text(token: int) -> str:
        return model.token_piece(token, special=True).decode("utf-8", errors="replace") if token >= 0 else ""
    return ChatTemplate(model.header.chat_template, bos_token=text(model.bos), eos_token=text(model.eos))


def prompt_tokens(model: LlamaModel, prompt: str, *, chat: bool = True, thinking: bool | None = None,
                  system: str | None = None) -> list[int]:
    """Render through the model's chat template (default) or take the text raw, then tokenise."""
    if not chat:
        return model.tokenize(prompt, add_special=True, parse_special=False)
    messages = ([Message("system", system)] if system else []) + [Message("user", prompt)]
    return conversation_tokens(model, chat_template(model), messages, thinking=thinking)


def conversation_tokens(model: LlamaModel, template: ChatTemplate, messages: Sequence[Message], *,
                        thinking: bool | None = None) -> list[int]:
    """Render a conversation with the template and tokenise it; the template writes BOS itself where the
    model wants one, so no special tokens are added here."""
    rendered = template.render(messages, thinking=thinking)
    return model.tokenize(rendered, add_special=False, parse_special=True)
