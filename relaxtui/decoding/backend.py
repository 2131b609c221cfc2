"""The seam between the loop and llama.cpp: what the loop needs from a model, and a fake that provides it.

``LlamaModel`` satisfies ``Backend``; ``FakeBackend`` does too, with a tiny vocabulary and logits computed
from the context by a function you give it, so the loop, the TUI and the eval runner run with no weights
(the role httpx's MockTransport plays). The fake never replaces the real path in tests; it sits beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from relaxtui.errors import ContextFull


class Backend(Protocol):
    n_ctx: int
    n_vocab: int
    n_past: int
    decode_seconds: float

    @property
    def cached_tokens(self) -> Sequence[int]: ...  # the tokens in the KV cache, in order

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray: ...
    def rollback(self, position: int) -> None: ...
    def reset(self) -> None: ...
    def is_eog(self, token: int) -> bool: ...
    def token_piece(self, token: int, *, special: bool = False) -> bytes: ...


LogitsFn = Callable[[tuple[int, ...]], np.ndarray]


class FakeBackend:
    """A deterministic stand-in model: logits = ``logits_fn(context)``; token t renders as ``pieces[t]``."""

    def __init__(self, logits_fn: LogitsFn, n_vocab: int, *, n_ctx: int = 4096, eog: int | None = None,
                 pieces: Sequence[bytes] | None = None) -> None:
        self.logits_fn = logits_fn
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.eog = eog
        self.pieces = list(pieces) if pieces is not None else [f"<{t}>".encode() for t in range(n_vocab)]
        self.cached: list[int] = []
        self.decode_seconds = 0.0
        self.decode_calls: list[int] = []  # batch sizes, so tests can check "one verifier batch per round"

    @property
    def n_past(self) -> int:
        return len(self.cached)

    @property
    def cached_tokens(self) -> Sequence[int]:
        return self.cached

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray:
        if self.n_past + len(tokens) > self.n_ctx:
            raise ContextFull(self.n_past, len(tokens), self.n_ctx)
        self.decode_calls.append(len(tokens))
        start = len(self.cached)
        self.cached.extend(int(t) for t in tokens)
        rows = [r % len(tokens) for r in logits_rows]
        return np.stack([np.asarray(self.logits_fn(tuple(self.cached[: start + r + 1])), dtype=np.float32)
                         for r in rows]) if rows else np.empty((0, self.n_vocab), np.float32)

    def rollback(self, position: int) -> None:
        del self.cached[position:]

    def reset(self) -> None:
        self.cached.clear()

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        return self.pieces[token]

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Each character maps to a token id (mod vocabulary); enough for prompts in tests."""
        return [ord(c) % self.n_vocab for c in text] or [0]


def markov_logits(table: np.ndarray) -> LogitsFn:
    """Logits that depend on the last token only: row ``table[last]`` (a first-order Markov LM)."""
    def logits(context: tuple[int, ...]) -> np.ndarray:
        return table[context[-1]]
    return logits
