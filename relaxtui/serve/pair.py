"""The pair a server holds: its models, and how requests turn into tokens and tokens into text.

Both served pairs wrap a ``session.Pair`` (its verifier, drafters by kind and scope, verify prices): ``LlamaServedPair``
the one every face loads (``session.load_pair``), rendering chats with the verifier's own template as ``relaxtui
generate`` does; ``FakeServedPair`` the deterministic 16-word pair of ``relaxtui chat --fake`` (``session.fake_pair``)
over the real loop, so the server runs and is tested with no weights.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from relaxtui.costmodel.profiles import SHIPPED, CostProfile
from relaxtui.decoding.drafters import Drafter, DrafterOptions
from relaxtui.engine.api import Model
from relaxtui.engine.fake import FAKE_WORDS, demo_tables
from relaxtui.pair import KindDrafters
from relaxtui.serve.policy import DEFAULT_SCOPES
from relaxtui.session import (
    FAKE_DRAFT_KIND,
    ModelOptions,
    Pair,
    chat_template,
    conversation_tokens,
    fake_pair,
    load_pair,
)
from relaxtui.text import Message

__all__ = ["FAKE_DRAFT_KIND", "FakeServedPair", "KindDrafters", "LlamaServedPair", "ServedPair", "detokenize"]


class ServedPair(Protocol):
    name: str  # the model id /v1/models lists
    pair: Pair  # the models, their drafters by kind and scope, this machine's verify prices

    @property
    def verifier(self) -> Model: ...  # read-only: each pair holds its own engine's Model (LlamaModel, a fake)
    drafter: Any  # the loop's drafter (the server's own kind), None for the verifier alone
    n_ctx: int  # tokens per slot
    n_vocab: int
    fingerprint: str  # responses' system_fingerprint: this build and these model files
    # how responses are priced when no profile is measured for this machine: a stand-in (the fake pair's; None for
    # real models, whose profile the scheduler measures where its pair's options say)
    @property
    def cost_profile(self) -> CostProfile | None: ...

    def drafter_for(self, kind: str, scope: object = None) -> Drafter: ...  # a kind's, for a tenant (Pair.drafter_for)
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


class LlamaServedPair:
    """A loaded GGUF pair, ``options.parallel`` sequences per context."""

    def __init__(self, options: ModelOptions, *, max_scopes: int = DEFAULT_SCOPES) -> None:
        self.pair = load_pair(options, max_scopes=max_scopes)
        self.cost_profile: CostProfile | None = None  # measured for this machine (or --profile) by the scheduler
        self.verifier = self.pair.verifier
        self.drafter = self.pair.drafter
        self.kinds = self.pair.kinds
        self.name = self.pair.name
        self.n_ctx, self.n_vocab = self.verifier.n_ctx, self.verifier.n_vocab
        self._template = chat_template(self.pair.verifier)
        from relaxtui.engine.gguf import model_fingerprint

        files = [path for path in (self.pair.verifier_path, self.pair.drafter_path) if path is not None]
        self.fingerprint = system_fingerprint([*build_identity(), f"drafter {self.pair.drafter_name}",
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
        return self.pair.drafter_for(kind, scope)

    def close(self) -> None:
        self.pair.close()


class FakeServedPair:
    """The fake pair of ``relaxtui chat --fake`` (``session.fake_pair``) with ``n_seq`` slots. ``delay_s`` slows
    every verifier row; ``gate``, when given, holds each verifier batch until it is set (tests act "while a reply
    runs" without racing the machine's speed); ``prices`` stand for this machine's verify prices, known once
    ``prices_gate`` is set (a measurement that has not ended)."""

    def __init__(self, n_seq: int = 1, *, seed: int = 7, n_ctx: int = 4096, delay_s: float = 0.0,
                 gate: threading.Event | None = None, tables: tuple[np.ndarray, np.ndarray] | None = None,
                 drafting: DrafterOptions | None = None, max_scopes: int = DEFAULT_SCOPES,
                 prices: Sequence[float] | None = None, prices_gate: threading.Event | None = None) -> None:
        """``tables``: the verifier's and drafter's Markov logits (row = previous token) instead of the demo's;
        ``drafting``: the command line's drafter settings (n-gram sizes, suffix's), which every kind it builds gets."""
        self.tables = tables if tables is not None else demo_tables(seed)
        target, draft = self.tables
        self.pair = fake_pair(n_seq, n_ctx=n_ctx, delay_s=delay_s, tables=self.tables, drafting=drafting,
                              batch_gate=gate, prices=prices, prices_gate=prices_gate, max_scopes=max_scopes)
        self.verifier = self.pair.verifier
        self.drafter = self.pair.drafter
        self.kinds = self.pair.kinds
        self.name = self.pair.name
        # no costs to measure: responses are priced by the idealised memory-bound profile, named as such
        self.cost_profile: CostProfile | None = SHIPPED["memory-bound"]
        self.n_ctx, self.n_vocab = n_ctx, target.shape[1]
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
        return self.pair.drafter_for(kind, scope)

    def close(self) -> None:
        self.pair.close()
