"""The pair a server holds: its models, and how requests turn into tokens and tokens into text.

``LlamaServedPair`` wraps the pair every face loads (``session.load_pair``), rendering chats with the verifier's
own template as ``relaxtui generate`` does; ``FakeServedPair`` is the deterministic 16-word pair of
``relaxtui chat --fake`` over the real loop, so the server runs and is tested with no weights.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from relaxtui.costmodel.profiles import SHIPPED, CostProfile
from relaxtui.decoding.drafters import Drafter, DrafterOptions, Openers, drafter_kind, make_drafter
from relaxtui.engine.api import Model, Rows, SeqDecode
from relaxtui.engine.fake import FAKE_WORDS, FakeBackend, demo_tables
from relaxtui.options import DRAFT_KIND
from relaxtui.serve.body import bad
from relaxtui.serve.policy import DEFAULT_SCOPES
from relaxtui.session import LoadedPair, ModelOptions, chat_template, conversation_tokens, load_drafter, load_pair
from relaxtui.text import Message

FAKE_DRAFT_KIND = "model"  # the fake pair's own drafter: an LM over the fake draft table


class ServedPair(Protocol):
    name: str  # the model id /v1/models lists

    @property
    def verifier(self) -> Model: ...  # read-only: each pair holds its own engine's Model (LlamaModel, a fake)
    drafter: Any  # the loop's drafter (the server's own kind), None for the verifier alone
    n_ctx: int  # tokens per slot
    n_vocab: int
    fingerprint: str  # responses' system_fingerprint: this build and these model files
    # how responses are priced: the loaded models and their options, measured for this machine's profile (None:
    # nothing to measure), or a stand-in profile (the fake pair's; None for real models)
    @property
    def loaded(self) -> LoadedPair | None: ...
    @property
    def options(self) -> ModelOptions | None: ...  # threads, GPU layers, context: what the cached profile is keyed by
    @property
    def cost_profile(self) -> CostProfile | None: ...

    def drafter_for(self, kind: str, scope: object = None) -> Drafter: ...  # a kind's, for a tenant (KindDrafters)
    def tokenizer_info(self) -> dict[str, Any]: ...  # GET /tokenizer_info (vLLM's; lm-eval's remote tokenizer)
    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]: ...
    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]: ...
    def token_bytes(self, token: int) -> bytes: ...
    def close(self) -> None: ...


def detokenize(pair: ServedPair, tokens: Sequence[int]) -> str:
    return b"".join(pair.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")


def system_fingerprint(parts: Sequence[str]) -> str:
    """OpenAI's ``system_fingerprint``: "fp_" and 12 hex digits of what fixes the outputs (the build, the model
    files' contents); one value for a server's life, a new one when either changes."""
    return "fp_" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def build_identity() -> list[str]:
    """relaxtui's and llama.cpp's versions and the CPU features the llama.cpp build uses."""
    import llama_cpp

    from relaxtui import __version__

    features = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return [f"relaxtui {__version__}", f"llama-cpp-python {llama_cpp.__version__}", features]


def _special_text(model: Any, token: int) -> str | None:
    return model.token_piece(token, special=True).decode("utf-8", "replace") if token >= 0 else None


class KindDrafters:
    """The drafters a server's requests pick by ``draft_kind``, per scope (a tenant: an API key, a user of it).

    A kind that runs a model (the pair's own) is one instance for everyone: it learns nothing across sequences, and
    the batched loop empties a sequence that passes to another scope. A standalone kind (prompt lookup, the n-gram
    family, suffix: no model file) is built by the factory on the first request that asks for it; one that
    ``learns`` (its corpus of earlier prompts and outputs: suffix, ngram-cache, ngram-mod) gets an instance per scope,
    so what one tenant generated never drafts for another, and is kept for the scope's next requests. Memory: each
    instance is bounded by its kind's own caps (suffix's corpus, ngram-cache's entries, ngram-mod's table); at most
    ``max_scopes`` scopes keep instances, the least recently used evicted first (a request of an evicted scope starts
    a fresh one; a live request keeps the instance it holds). Which kinds a request may name is the protocol's
    (``Defaults.draft_kinds``)."""

    def __init__(self, own: Drafter | None, build: Callable[[str], Drafter], max_scopes: int = DEFAULT_SCOPES) -> None:
        self.own, self.build, self.max_scopes = own, build, max_scopes
        self.shared: dict[str, Drafter] = {}  # kinds that learn nothing across sequences
        self.scoped: OrderedDict[object, dict[str, Drafter]] = OrderedDict()  # scope -> its learning kinds, LRU first
        self.evicted = 0  # scopes dropped to stay within max_scopes (a metric, and what tests read)
        self.lock = threading.Lock()  # request handlers ask from several threads

    def get(self, kind: str, scope: object = None) -> Drafter:
        if self.own is not None and self.own.traits.kind == kind and not self.own.traits.learns:
            return self.own
        if not drafter_kind(kind).standalone:
            raise bad(DRAFT_KIND.request_name, f"this server holds no {kind!r} drafter")  # Defaults.draft_kinds
        with self.lock:
            if kind in self.shared:
                return self.shared[kind]
            drafters = self.scoped.get(scope)
            if drafters is not None:
                self.scoped.move_to_end(scope)
                if kind in drafters:
                    return drafters[kind]
            drafter = self.build(kind)
            if not drafter.traits.learns:
                self.shared[kind] = drafter
                return drafter
            if drafters is None:
                drafters = self.scoped[scope] = {}
                while len(self.scoped) > self.max_scopes:
                    _, dropped = self.scoped.popitem(last=False)
                    self.evicted += 1
                    for old in dropped.values():
                        old.close()
            drafters[kind] = drafter
            return drafter

    @property
    def scopes(self) -> int:
        return len(self.scoped)

    def close(self) -> None:
        with self.lock:
            for drafter in [*self.shared.values(), *(d for kinds in self.scoped.values() for d in kinds.values())]:
                drafter.close()
            self.shared.clear()
            self.scoped.clear()


class LlamaServedPair:
    """A loaded GGUF pair, ``options.parallel`` sequences per context."""

    def __init__(self, options: ModelOptions, *, max_scopes: int = DEFAULT_SCOPES) -> None:
        self.loaded: LoadedPair = load_pair(options)
        self.options: ModelOptions = options
        self.cost_profile: CostProfile | None = None  # measured for this machine (or --profile) by the scheduler
        self.verifier = self.loaded.verifier
        self.drafter = self.loaded.drafter

        def standalone(kind: str) -> Drafter:
            """A standalone kind through the same factory and options as the command line's drafter (it opens no
            file)."""
            drafter = load_drafter(replace(options, draft_kind=kind, drafter=kind), self.verifier)
            assert drafter is not None  # load_drafter gives None only for no drafter, and this names one
            return drafter

        self.kinds = KindDrafters(self.drafter, standalone, max_scopes)
        self.name = self.loaded.verifier_path.name
        self.n_ctx, self.n_vocab = self.verifier.n_ctx, self.verifier.n_vocab
        self._template = chat_template(self.verifier)
        from relaxtui.engine.gguf import model_fingerprint

        files = [self.loaded.verifier_path, *([self.loaded.drafter_path] if self.loaded.drafter_path else [])]
        self.fingerprint = system_fingerprint([*build_identity(), f"drafter {self.loaded.drafter_name}",
                                               *(f"{f.name} {model_fingerprint(f)}" for f in files)])

    def tokenizer_info(self) -> dict[str, Any]:
        model = self.verifier
        return {"tokenizer_class": "llama.cpp", "bos_token": _special_text(model, model.bos),
                "bos_token_id": model.bos if model.bos >= 0 else None, "eos_token": _special_text(model, model.eos),
                "eos_token_id": model.eos if model.eos >= 0 else None, "pad_token": None,
                "add_bos_token": model.add_bos, "chat_template": self._template.source,
                "model_max_length": self.n_ctx, "vocab_size": self.n_vocab}

    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]:
        return conversation_tokens(self.verifier, self._template, messages, thinking=thinking)

    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.verifier.tokenize(text, add_special=add_special, parse_special=True)

    def token_bytes(self, token: int) -> bytes:
        return self.verifier.token_piece(token)

    def drafter_for(self, kind: str, scope: object = None) -> Drafter:
        return self.kinds.get(kind, scope)

    def close(self) -> None:
        self.kinds.close()
        self.loaded.close()


class FakeServedPair:
    """The fake pair of ``relaxtui chat --fake`` with ``n_seq`` slots. ``delay_s`` slows every verifier row;
    ``gate``, when given, holds each verifier batch until it is set (tests act "while a reply runs" without racing
    the machine's speed)."""

    def __init__(self, n_seq: int = 1, *, seed: int = 7, n_ctx: int = 4096, delay_s: float = 0.0,
                 gate: threading.Event | None = None, tables: tuple[np.ndarray, np.ndarray] | None = None,
                 drafting: DrafterOptions | None = None, max_scopes: int = DEFAULT_SCOPES) -> None:
        """``tables``: the verifier's and drafter's Markov logits (row = previous token) instead of the demo's;
        ``drafting``: the command line's drafter settings (n-gram sizes, suffix's), which every kind it builds gets."""
        drafting = replace(drafting or DrafterOptions(), n_seq=n_seq, n_ctx=n_ctx)
        target, draft = tables if tables is not None else demo_tables(seed)
        vocab = target.shape[1]
        pieces = [w.encode() for w in FAKE_WORDS[:vocab]]

        def verifier_logits(context: tuple[int, ...]) -> np.ndarray:
            if delay_s:
                time.sleep(delay_s)
            return target[context[-1]]

        self.verifier = _GatedBackend(verifier_logits, vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq, gate=gate)
        self.tables = (target, draft)
        self._draft_model = FakeBackend(lambda ctx: draft[ctx[-1]], vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq)
        openers = Openers(model=lambda _: self._draft_model)
        self.drafter = make_drafter(replace(drafting, kind=FAKE_DRAFT_KIND), self.verifier, openers)
        self.kinds = KindDrafters(self.drafter, lambda kind: make_drafter(replace(drafting, kind=kind), self.verifier,
                                                                          openers), max_scopes)
        self.name = "fake-verifier"
        # no costs to measure: responses are priced by the idealised memory-bound profile, named as such
        self.cost_profile: CostProfile | None = SHIPPED["memory-bound"]
        self.loaded: LoadedPair | None = None
        self.options: ModelOptions | None = None
        self.n_ctx, self.n_vocab = n_ctx, vocab
        self.fingerprint = system_fingerprint(["fake", hashlib.sha256(target.tobytes() + draft.tobytes()).hexdigest()])

    def tokenizer_info(self) -> dict[str, Any]:
        return {"tokenizer_class": "fake", "bos_token": None, "bos_token_id": None, "eos_token": None,
                "eos_token_id": None, "pad_token": None, "add_bos_token": False, "chat_template": None,
                "model_max_length": self.n_ctx, "vocab_size": self.n_vocab}

    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]:
        return self.text_tokens("".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:")

    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.verifier.tokenize(text)

    def token_bytes(self, token: int) -> bytes:
        return FAKE_WORDS[token].encode()

    def drafter_for(self, kind: str, scope: object = None) -> Drafter:
        return self.kinds.get(kind, scope)

    def close(self) -> None:
        self.kinds.close()


class _GatedBackend(FakeBackend):
    def __init__(self, *args: Any, gate: threading.Event | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = gate

    def decode_many(self, items: Sequence[SeqDecode]) -> list[Rows]:
        if self.gate is not None:
            self.gate.wait(timeout=60)  # never hang a test run forever
        return super().decode_many(items)
