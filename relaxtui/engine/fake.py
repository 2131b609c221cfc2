"""A fake model for tests and demos: the ``Model`` protocol with a tiny vocabulary and no weights.

Logits are computed from the context by a function you give it, so the loop, the TUI, the server and the eval
runner run with no model files (the role httpx's MockTransport plays). The fake never replaces the real path in
tests; it sits beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from relaxtui.engine import chain, native
from relaxtui.engine.api import (
    ChainSampling,
    DraftChain,
    Rows,
    RowSpec,
    SeqDecode,
    TopLogits,
    rows_through_decode_many,
    top_of,
)
from relaxtui.engine.thinking import Thinking, find_thinking
from relaxtui.errors import ContextFull

FAKE_WORDS = (" the", " cat", " sat", " on", " a", " warm", " mat", ".", " It", " purred", " softly", ",",
              " and", " slept", " well", "\n")  # the demo pair's vocabulary (chat --fake, serve --fake)


def demo_tables(seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """The demo pair's Markov logits over ``FAKE_WORDS`` (row = previous token): a verifier and a noisier drafter,
    the same for the TUI's and the server's fake pair."""
    rng = np.random.default_rng(seed)
    target = rng.normal(scale=2.5, size=(len(FAKE_WORDS), len(FAKE_WORDS)))
    return target, target + rng.normal(scale=1.2, size=target.shape)


LogitsFn = Callable[[tuple[int, ...]], np.ndarray]


class FakeBackend:
    """A deterministic stand-in model: logits = ``logits_fn(context)``; token t renders as ``pieces[t]``.
    ``n_seq`` sequences, each with its own cache of ``n_ctx`` tokens. Its
    vocabulary answers ``check_vocab`` (two fakes with the same pieces match), and the logits rows of a sequence's
    last decode stand in for hidden states (``hidden_of``: what a hidden-state drafter reads in the tests)."""

    vocab_type = 0
    bos = -1
    add_bos = False

    def __init__(self, logits_fn: LogitsFn, n_vocab: int, *, n_ctx: int = 4096, eog: int | None = None,
                 pieces: Sequence[bytes] | None = None, n_seq: int = 1, chat_template: str | None = None) -> None:
        self.logits_fn = logits_fn
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_seq = n_seq
        native.library()  # (a bad RELAXTUI_NATIVE: one line before anything runs, as a real model's load says it)
        self.eog = eog
        self.pieces = list(pieces) if pieces is not None else [f"<{t}>".encode() for t in range(n_vocab)]
        self.chat_template = chat_template  # its source, read only for the thinking block it marks (None: none)
        self.caches: list[list[int]] = [[] for _ in range(n_seq)]
        self.decode_seconds = 0.0
        self.copied_bytes = 0  # the fake's rows are numpy already: nothing crosses from llama.cpp
        self.decode_calls: list[int] = []  # batch sizes, so tests can check "one verifier batch per round"
        self.batches: list[tuple[tuple[int, int], ...]] = []  # (seq, tokens) of every batch, in order
        self.shared: list[tuple[int, int, int]] = []  # (src, dst, length) of every prompt copied between sequences
        self.hidden: dict[int, np.ndarray] = {}  # seq -> the rows its last decode computed
        self.candidates: dict[int, RowSpec] = {}  # seq -> the candidate rows it hands (set_candidates)
        self.candidate_rows = True  # False: a backend that cannot hand candidates (set_candidates refuses)
        self.handed_candidates = 0  # rows handed as candidates so far (tests check which rows a run took)

    @property
    def eos(self) -> int:
        return -1 if self.eog is None else self.eog

    def token_text(self, token: int) -> bytes:
        return self.pieces[token]

    def hidden_of(self, seq: int) -> np.ndarray:
        return self.hidden[seq]

    def tokens_of(self, seq: int) -> Sequence[int]:
        return self.caches[seq]

    def decode(self, seq: int, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> Rows:
        return self.decode_many([SeqDecode(seq, tokens, logits_rows)])[0]

    def decode_many(self, items: Sequence[SeqDecode]) -> list[Rows]:
        for item in items:
            cached = self.caches[item.seq]
            if len(cached) + len(item.tokens) > self.n_ctx:
                raise ContextFull(len(cached), len(item.tokens), self.n_ctx)
        self.decode_calls.append(sum(len(item.tokens) for item in items))
        self.batches.append(tuple((item.seq, len(item.tokens)) for item in items))
        out: list[Rows] = []
        for item in items:
            cached = self.caches[item.seq]
            start = len(cached)
            cached.extend(int(t) for t in item.tokens)
            rows = [r % len(item.tokens) for r in item.logits_rows]
            block = (np.stack([np.asarray(self.logits_fn(tuple(cached[: start + r + 1])), dtype=np.float32)
                               for r in rows]) if rows else np.empty((0, self.n_vocab), np.float32))
            self.hidden[item.seq] = block
            spec = self.candidates.get(item.seq)
            out.append(block if spec is None else [top_of(row, spec) for row in block])
            self.handed_candidates += 0 if spec is None else len(block)
        return out

    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                    last: bool = False) -> list[Rows]:
        return rows_through_decode_many(self, seqs, blocks, last=last)

    def set_candidates(self, seq: int, spec: RowSpec | None) -> bool:
        """Rows of ``seq`` as ``TopLogits`` (what llama.cpp's backend sampling hands), computed here in numpy."""
        if spec is None or not self.candidate_rows:  # (refused: whole rows, as a real backend leaves them)
            self.candidates.pop(seq, None)
            return spec is None
        self.candidates[seq] = spec
        return True

    def decode_chain(self, seq: int, block: Sequence[int], n: int, sampling: ChainSampling) -> DraftChain | None:
        """The engine's chain on the fake: each step decoded here, picked by the same C step as llama.cpp's chain
        (``engine.chain.pick``); None where that does not apply, as there."""
        spec = self.candidates.get(seq)
        if self.n_seq != 1 or not block or not chain.chains(spec, sampling, n):
            return None
        tokens: list[int] = []
        rows: list[TopLogits] = []
        kept: list[tuple[list[int], list[float]] | None] = []
        row = cast(TopLogits, self.decode_rows([seq], [block], last=True)[0][0])  # (candidate rows: ``chains``)
        while True:
            step = chain.pick(row, sampling, len(tokens))
            if step is None:
                return DraftChain(tokens, rows, kept, row)
            tokens.append(step[0])
            rows.append(row)
            kept.append(step[1])
            if len(tokens) == n:
                return DraftChain(tokens, rows, kept)
            row = cast(TopLogits, self.decode_rows([seq], [[step[0]]], last=True)[0][0])

    def rollback(self, seq: int, position: int) -> None:
        del self.caches[seq][position:]

    def reset(self) -> None:
        for cache in self.caches:
            cache.clear()

    def clear(self, seq: int) -> None:
        self.caches[seq].clear()

    def share_prefix(self, src: int, dst: int, length: int) -> None:
        if src == dst or length > len(self.caches[src]):
            raise ValueError(f"cannot share {length} tokens of sequence {src} with sequence {dst}")
        self.caches[dst][:] = self.caches[src][:length]
        self.shared.append((src, dst, length))

    # a KV cache: every rollback and copy is exact, a checkpoint is the token list
    rollback_limit: int | None = None

    def can_rollback(self, seq: int, position: int) -> bool:
        return True

    def can_share_prefix(self, src: int, dst: int, length: int) -> bool:
        return src != dst and 0 <= length <= len(self.caches[src])

    def require_rollback(self, depth: int) -> None:
        pass

    def checkpoint(self, seq: int) -> tuple[int, tuple[int, ...]]:
        return seq, tuple(self.caches[seq])

    def restore(self, checkpoint: object) -> None:
        assert isinstance(checkpoint, tuple), "a checkpoint of this fake"
        seq, tokens = checkpoint
        del self.caches[seq][len(tokens):]

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        return self.pieces[token]

    @property
    def thinking(self) -> Thinking:
        """A thinking block where its pieces hold both tags (each a token of its own) and its template writes them."""
        def whole_piece(text: str) -> list[int]:
            return [t for t, piece in enumerate(self.pieces) if piece == text.encode()][:1]
        return find_thinking(whole_piece, self.token_piece, self.chat_template)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Each character maps to a token id (mod vocabulary); enough for prompts in tests."""
        return [ord(c) % self.n_vocab for c in text] or [0]


def markov_logits(table: np.ndarray) -> LogitsFn:
    """Logits that depend on the last token only: row ``table[last]`` (a first-order Markov LM)."""
    def logits(context: tuple[int, ...]) -> np.ndarray:
        return table[context[-1]]
    return logits
