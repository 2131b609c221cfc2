"""The seam between the loop and llama.cpp: what the loop needs from a model, and a fake that provides it.

``LlamaModel`` satisfies ``Backend``; ``FakeBackend`` does too, with a tiny vocabulary and logits computed
from the context by a function you give it, so the loop, the TUI and the eval runner run with no weights
(the role httpx's MockTransport plays). The fake never replaces the real path in tests; it sits beside it.

Many sequences per context (SPEC §8): a ``MultiBackend`` holds ``n_seq`` independent caches, decodes one batch
that mixes rows of several sequences (``decode_many``) and rolls each back on its own. ``SequenceView`` turns one
of its sequences back into a plain ``Backend``, so prefill, drafters and calibration run on it unchanged;
``as_multi`` does the reverse for a plain one (a one-sequence ``MultiBackend``).
The single-sequence methods (``decode``, ``rollback``, ``n_past``…) act on sequence 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from relaxtui.engine.api import RowSpec, SeqDecode, top_of
from relaxtui.errors import ContextFull


class Backend(Protocol):
    n_ctx: int
    n_vocab: int
    n_past: int
    decode_seconds: float
    copied_bytes: int  # logits rows copied out of llama.cpp so far (0 for a fake: nothing crosses)

    @property
    def cached_tokens(self) -> Sequence[int]: ...  # the tokens in the KV cache, in order

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray: ...
    def rollback(self, position: int) -> None: ...
    def reset(self) -> None: ...
    def is_eog(self, token: int) -> bool: ...
    def token_piece(self, token: int, *, special: bool = False) -> bytes: ...


class MultiBackend(Backend, Protocol):
    n_seq: int

    def tokens_of(self, seq: int) -> Sequence[int]: ...
    def decode_many(self, items: Sequence[SeqDecode]) -> list[np.ndarray]: ...  # one [rows, vocab] per item
    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                    last: bool = False) -> list[np.ndarray]: ...  # blocks[i] appended to sequence seqs[i] (each
    # once), every token's row (last: each block's last one): ``decode_many``'s, by a path that touches less
    def rollback_seq(self, seq: int, position: int) -> None: ...
    def clear_seq(self, seq: int) -> None: ...
    def share_prefix(self, src: int, dst: int, length: int) -> None: ...  # dst := src's first `length` tokens
    # exact rollback on recurrent/hybrid memory (relaxtui.engine.memory): a KV cache answers True / None / no-op
    @property
    def rollback_limit(self) -> int | None: ...  # trailing tokens a rollback can remove at most; None: any
    def can_rollback(self, seq: int, position: int) -> bool: ...
    def can_share_prefix(self, src: int, dst: int, length: int) -> bool: ...
    def require_rollback(self, depth: int) -> None: ...  # one-line refusal of drafts it could not roll back
    def checkpoint(self, seq: int) -> object: ...  # the sequence's state, for a rollback deeper than the snapshots
    def restore(self, checkpoint: object) -> None: ...  # back to the checkpoint (then decode the kept tokens again)


class SequenceView:
    """One sequence of a multi-sequence backend, seen as a one-sequence ``Backend``."""

    def __init__(self, model: MultiBackend, seq: int) -> None:
        if not 0 <= seq < model.n_seq:
            raise ValueError(f"sequence {seq} outside 0..{model.n_seq - 1}")
        self.model, self.seq = model, seq
        self.n_ctx, self.n_vocab = model.n_ctx, model.n_vocab

    @property
    def n_past(self) -> int:
        return len(self.model.tokens_of(self.seq))

    @property
    def cached_tokens(self) -> Sequence[int]:
        return self.model.tokens_of(self.seq)

    @property
    def decode_seconds(self) -> float:  # shared by every sequence: the context's time inside llama_decode
        return self.model.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.model.copied_bytes

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray:
        return self.model.decode_many([SeqDecode(self.seq, tokens, logits_rows)])[0]

    def rollback(self, position: int) -> None:
        self.model.rollback_seq(self.seq, position)

    def reset(self) -> None:
        self.model.clear_seq(self.seq)

    def use_candidates(self, spec: RowSpec | None) -> bool:
        """This sequence's rows as candidates for ``spec`` (None: whole rows); False when the model cannot."""
        return set_candidates(self.model, self.seq, spec)

    @property
    def rollback_limit(self) -> int | None:
        return getattr(self.model, "rollback_limit", None)

    def can_rollback(self, position: int) -> bool:
        """Whether ``rollback(position)`` can be done exactly now (always, on a model that does not say)."""
        can = getattr(self.model, "can_rollback", None)
        return True if can is None else bool(can(self.seq, position))

    def checkpoint(self) -> object:
        return self.model.checkpoint(self.seq)

    def restore(self, checkpoint: object) -> None:
        self.model.restore(checkpoint)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        return self.model.token_piece(token, special=special)


def sequence_of(model: Backend, seq: int = 0) -> SequenceView:
    """Sequence ``seq`` of ``model`` (a view stays itself): the one-sequence rollback API (``can_rollback``,
    ``checkpoint``, ``restore``) for a plain backend, a one-sequence LlamaModel or a view alike."""
    if isinstance(model, SequenceView):
        return model
    return SequenceView(as_multi(model), seq)


class OneSequence:
    """A plain one-sequence ``Backend`` seen as a ``MultiBackend`` of one sequence (``as_multi``)."""

    n_seq = 1

    def __init__(self, model: Backend) -> None:
        self.model = model
        self.n_ctx, self.n_vocab = model.n_ctx, model.n_vocab

    @property
    def n_past(self) -> int:
        return self.model.n_past

    @property
    def cached_tokens(self) -> Sequence[int]:
        return self.model.cached_tokens

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.model.copied_bytes

    def tokens_of(self, seq: int) -> Sequence[int]:
        return self.model.cached_tokens

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray:
        return self.model.decode(tokens, logits_rows)

    def decode_many(self, items: Sequence[SeqDecode]) -> list[np.ndarray]:
        if len(items) != 1 or items[0].seq != 0:
            raise ValueError("a one-sequence backend decodes sequence 0 alone")
        return [self.model.decode(items[0].tokens, items[0].logits_rows)]

    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                    last: bool = False) -> list[np.ndarray]:
        return rows_through_decode_many(self, seqs, blocks, last=last)  # type: ignore[arg-type]

    def rollback(self, position: int) -> None:
        self.model.rollback(position)

    def rollback_seq(self, seq: int, position: int) -> None:
        self.model.rollback(position)

    def reset(self) -> None:
        self.model.reset()

    def clear_seq(self, seq: int) -> None:
        self.model.reset()

    def set_candidates(self, seq: int, spec: RowSpec | None) -> bool:
        return set_candidates(self.model, seq, spec)

    def share_prefix(self, src: int, dst: int, length: int) -> None:
        raise ValueError("a one-sequence backend has no other sequence to share with")

    def can_share_prefix(self, src: int, dst: int, length: int) -> bool:
        return False

    @property
    def rollback_limit(self) -> int | None:
        return getattr(self.model, "rollback_limit", None)

    def can_rollback(self, seq: int, position: int) -> bool:
        can = getattr(self.model, "can_rollback", None)  # (a one-sequence backend's: the position alone)
        return True if can is None else bool(can(position))

    def require_rollback(self, depth: int) -> None:
        require = getattr(self.model, "require_rollback", None)
        if require is not None:
            require(depth)

    def checkpoint(self, seq: int) -> object:
        return self.model.checkpoint()  # type: ignore[attr-defined]

    def restore(self, checkpoint: object) -> None:
        self.model.restore(checkpoint)  # type: ignore[attr-defined]

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        return self.model.token_piece(token, special=special)


def set_candidates(model: object, seq: int, spec: RowSpec | None) -> bool:
    """Ask ``model`` for candidate rows on ``seq``; False: it cannot (a capability a backend may lack), and hands
    whole rows. A
    multi-sequence backend takes ``set_candidates(seq, spec)``, a one-sequence view ``use_candidates(spec)``."""
    setter = getattr(model, "set_candidates", None)
    if setter is not None:
        return bool(setter(seq, spec))
    user = getattr(model, "use_candidates", None)
    if user is not None and seq == 0:
        return bool(user(spec))
    return spec is None


def as_multi(model: Backend) -> MultiBackend:
    """``model`` itself when it holds many sequences, else a one-sequence view of it as a ``MultiBackend``."""
    if callable(getattr(model, "decode_many", None)) and hasattr(model, "n_seq"):
        return model  # type: ignore[return-value]
    return OneSequence(model)  # type: ignore[return-value]


def rows_through_decode_many(model: MultiBackend, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                             last: bool = False) -> list[Any]:
    """``decode_rows`` through ``decode_many``: the same rows, for a backend without a leaner path of its own."""
    items = [SeqDecode(seq, block, [-1] if last else range(len(block)))
             for seq, block in zip(seqs, blocks, strict=True)]
    return model.decode_many(items)


LogitsFn = Callable[[tuple[int, ...]], np.ndarray]


class FakeBackend:
    """A deterministic stand-in model: logits = ``logits_fn(context)``; token t renders as ``pieces[t]``.
    ``n_seq`` sequences, each with its own cache of ``n_ctx`` tokens (sequence 0 for the one-sequence API). Its
    vocabulary answers ``check_vocab`` (two fakes with the same pieces match), and the logits rows of a sequence's
    last decode stand in for hidden states (``hidden_of``: what a hidden-state drafter reads in the tests)."""

    vocab_type = 0
    bos = -1
    add_bos = False

    def __init__(self, logits_fn: LogitsFn, n_vocab: int, *, n_ctx: int = 4096, eog: int | None = None,
                 pieces: Sequence[bytes] | None = None, n_seq: int = 1) -> None:
        self.logits_fn = logits_fn
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_seq = n_seq
        self.eog = eog
        self.pieces = list(pieces) if pieces is not None else [f"<{t}>".encode() for t in range(n_vocab)]
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

    @property
    def cached(self) -> list[int]:
        return self.caches[0]

    @property
    def n_past(self) -> int:
        return len(self.caches[0])

    @property
    def cached_tokens(self) -> Sequence[int]:
        return self.caches[0]

    def tokens_of(self, seq: int) -> Sequence[int]:
        return self.caches[seq]

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray:
        return self.decode_many([SeqDecode(0, tokens, logits_rows)])[0]

    def decode_many(self, items: Sequence[SeqDecode]) -> list[np.ndarray]:
        for item in items:
            cached = self.caches[item.seq]
            if len(cached) + len(item.tokens) > self.n_ctx:
                raise ContextFull(len(cached), len(item.tokens), self.n_ctx)
        self.decode_calls.append(sum(len(item.tokens) for item in items))
        self.batches.append(tuple((item.seq, len(item.tokens)) for item in items))
        out = []
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
                    last: bool = False) -> list[np.ndarray]:
        return rows_through_decode_many(self, seqs, blocks, last=last)  # type: ignore[arg-type]

    def set_candidates(self, seq: int, spec: RowSpec | None) -> bool:
        """Rows of ``seq`` as ``TopLogits`` (what llama.cpp's backend sampling hands), computed here in numpy."""
        if spec is None or not self.candidate_rows:  # (refused: whole rows, as a real backend leaves them)
            self.candidates.pop(seq, None)
            return spec is None
        self.candidates[seq] = spec
        return True

    def rollback(self, position: int) -> None:
        self.rollback_seq(0, position)

    def rollback_seq(self, seq: int, position: int) -> None:
        del self.caches[seq][position:]

    def reset(self) -> None:
        for cache in self.caches:
            cache.clear()

    def clear_seq(self, seq: int) -> None:
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
        seq, tokens = checkpoint  # type: ignore[misc]
        del self.caches[seq][len(tokens):]

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
