"""The pair a server holds: its models, and how requests turn into tokens and tokens into text.

``LlamaServedPair`` wraps the pair every face loads (``session.load_pair``), rendering chats with the verifier's
own template as ``relaxtui generate`` does; ``FakeServedPair`` is the deterministic 16-word pair of
``relaxtui chat --fake`` over the real loop, so the server runs and is tested with no weights.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from relaxtui.decoding.backend import FakeBackend, MultiBackend
from relaxtui.decoding.drafters import DrafterOptions, make_drafter
from relaxtui.engine.text import Message
from relaxtui.session import LoadedPair, ModelOptions, chat_template, conversation_tokens, load_pair

FAKE_WORDS = (" the", " cat", " sat", " on", " a", " warm", " mat", ".", " It", " purred", " softly", ",",
              " and", " slept", " well", "\n")


class ServedPair(Protocol):
    name: str  # the model id /v1/models lists
    verifier: MultiBackend
    drafter: Any  # the loop's drafter (model or n-gram), None for the verifier alone
    ngram: Any  # an n-gram drafter any request may ask for instead (it holds no model), or None
    n_ctx: int  # tokens per slot
    n_vocab: int

    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]: ...
    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]: ...
    def token_bytes(self, token: int) -> bytes: ...
    def close(self) -> None: ...


def detokenize(pair: ServedPair, tokens: Sequence[int]) -> str:
    return b"".join(pair.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")


class LlamaServedPair:
    """A loaded GGUF pair, ``options.parallel`` sequences per context."""

    def __init__(self, options: ModelOptions) -> None:
        self.loaded: LoadedPair = load_pair(options)
        self.verifier = self.loaded.verifier
        self.drafter = self.loaded.drafter
        ngram = DrafterOptions(kind="ngram", ngram_min=options.ngram_min, ngram_max=options.ngram_max)
        self.ngram = (make_drafter(ngram, self.verifier)
                      if self.drafter is not None and self.drafter.traits.kind != "ngram" else None)
        self.name = self.loaded.verifier_path.name
        self.n_ctx, self.n_vocab = self.verifier.n_ctx, self.verifier.n_vocab
        self._template = chat_template(self.verifier)

    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]:
        return conversation_tokens(self.verifier, self._template, messages, thinking=thinking)

    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.verifier.tokenize(text, add_special=add_special, parse_special=True)

    def token_bytes(self, token: int) -> bytes:
        return self.verifier.token_piece(token)

    def close(self) -> None:
        self.loaded.close()


class FakeServedPair:
    """The fake pair of ``relaxtui chat --fake`` with ``n_seq`` slots. ``delay_s`` slows every verifier row;
    ``gate``, when given, holds each verifier batch until it is set (tests act "while a reply runs" without racing
    the machine's speed)."""

    def __init__(self, n_seq: int = 1, *, seed: int = 7, n_ctx: int = 4096, delay_s: float = 0.0,
                 gate: threading.Event | None = None, tables: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """``tables``: the verifier's and drafter's Markov logits (row = previous token) instead of the demo's."""
        if tables is None:
            rng = np.random.default_rng(seed)
            target = rng.normal(scale=2.5, size=(len(FAKE_WORDS), len(FAKE_WORDS)))
            tables = target, target + rng.normal(scale=1.2, size=target.shape)
        target, draft = tables
        vocab = target.shape[1]
        pieces = [w.encode() for w in FAKE_WORDS[:vocab]]

        def verifier_logits(context: tuple[int, ...]) -> np.ndarray:
            if delay_s:
                time.sleep(delay_s)
            return target[context[-1]]

        self.verifier = _GatedBackend(verifier_logits, vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq, gate=gate)
        self.tables = (target, draft)
        self._draft_model = FakeBackend(lambda ctx: draft[ctx[-1]], vocab, pieces=pieces, n_ctx=n_ctx, n_seq=n_seq)
        self.drafter = make_drafter(DrafterOptions(kind="model", n_seq=n_seq, n_ctx=n_ctx), self.verifier,
                                    open_model=lambda _: self._draft_model)
        self.ngram = make_drafter(DrafterOptions(kind="ngram"), self.verifier)
        self.name = "fake-verifier"
        self.n_ctx, self.n_vocab = n_ctx, vocab

    def chat_tokens(self, messages: Sequence[Message], thinking: bool | None) -> list[int]:
        return self.text_tokens("".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:")

    def text_tokens(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.verifier.tokenize(text)

    def token_bytes(self, token: int) -> bytes:
        return FAKE_WORDS[token].encode()

    def close(self) -> None:
        pass


class _GatedBackend(FakeBackend):
    def __init__(self, *args: Any, gate: threading.Event | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = gate

    def decode_many(self, items):  # type: ignore[no-untyped-def]
        if self.gate is not None:
            self.gate.wait(timeout=60)  # never hang a test run forever
        return super().decode_many(items)
