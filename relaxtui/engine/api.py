"""The engine's side of the seam: what every model (llama.cpp's, or the fake) offers the loops, and the rows it hands.

The loops see a model only through ``Model``: every call names the sequence it acts on (a context holds
``n_seq`` independent caches), so one protocol serves the one-sequence loop, the batched one, prefill, drafters and
calibration alike. A logits row comes whole (an ``np.ndarray`` over the vocabulary) or as its top
(``TopLogits``, what llama.cpp's backend sampling hands); both answer the same questions (``row_argmax``,
``row_vocab``). This module imports nothing above ``engine/``; ``decoding/`` imports nothing else of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from relaxtui.errors import NumericsError

MAX_DRAFT = 64  # the longest draft a round verifies (a context reserves its output rows for this many + 1)


def as_array(values: np.ndarray | Sequence, dtype: type) -> np.ndarray:
    """``values`` as an array, made once (rows and candidates keep plain numbers until asked for arrays)."""
    return values if isinstance(values, np.ndarray) else np.array(values, dtype=dtype)


def as_plain(values: np.ndarray | Sequence) -> Sequence:
    """``values`` as plain Python numbers, converting only an array."""
    return values.tolist() if isinstance(values, np.ndarray) else values


@dataclass(frozen=True, slots=True)
class RowSpec:
    """What a sequence asks the engine for instead of whole logits rows: each row's ``k`` largest raw logits with
    their ids (llama.cpp computes them in the graph, on the GPU when the model is there) and, with ``normaliser``,
    the row's log-normaliser at T=1 (a pass over the vocabulary, paid only by consumers of log p(x))."""

    k: int
    normaliser: bool = False


class TopLogits:
    """The top of one raw logits row as the engine hands it: the ``k`` largest logits and their ids (in no
    particular order) and, when asked, log Σ exp(logits) over the whole row (so log p(x) at T=1 = logit(x) − it).

    Top-k/top-p with ``top_k <= k`` need nothing else: ``candidates`` and ``process`` give, from it, the same
    processed distribution as from the whole row. Immutable by convention. ``ids`` and ``logits`` may come as plain
    number sequences (greedy's one-candidate rows do, from the engine) and become arrays when first read as such:
    most such rows are only asked their ``argmax``, and right after a decode the first numpy call costs tens of
    microseconds on a CPU whose caches the model's weights have flushed."""

    __slots__ = ("_ids", "_logits", "vocab_size", "log_norm", "complete")

    def __init__(self, ids: np.ndarray | Sequence[int], logits: np.ndarray | Sequence[float], vocab_size: int,
                 log_norm: float | None = None, complete: bool = False) -> None:
        self._ids, self._logits = ids, logits
        self.vocab_size = vocab_size
        self.log_norm = log_norm
        self.complete = complete  # the candidates are the whole row (k >= its vocabulary; a fitted row's pads: -inf)

    @property
    def ids(self) -> np.ndarray:
        """int, [k]."""
        self._ids = as_array(self._ids, np.int64)
        return self._ids

    @property
    def logits(self) -> np.ndarray:
        """float32, [k]."""
        self._logits = as_array(self._logits, np.float32)
        return self._logits

    def as_lists(self) -> tuple[Sequence[int], Sequence[float]]:
        """(ids, logits) as plain Python numbers (read-only), without making arrays of them."""
        return as_plain(self._ids), as_plain(self._logits)

    def __len__(self) -> int:
        """How many candidates the row holds (k)."""
        return len(self._ids)

    def __repr__(self) -> str:
        return f"TopLogits(k={len(self)}, vocab_size={self.vocab_size}, log_norm={self.log_norm})"

    def argmax(self) -> int:
        """The likeliest id; among equal logits the lowest id, as ``np.argmax`` of the whole row picks."""
        if len(self._ids) == 1:  # greedy's row: the engine's argmax alone (plain numbers: this runs per row)
            value = float(self._logits[0])
            if not math.isfinite(value):
                raise NumericsError(f"the logits hold a non-finite value ({value}) at token {int(self._ids[0])}")
            return int(self._ids[0])
        top = self.logits.max()
        if not np.isfinite(top):
            at = self.ids[np.argmax(self.logits)]
            raise NumericsError(f"the logits hold a non-finite value ({top}) at token {at}")
        return int(self.ids[self.logits == top].min())

    def probs(self) -> np.ndarray | None:
        """Each candidate's probability at T=1 under the whole row (None without the normaliser)."""
        return None if self.log_norm is None else np.exp(self.logits.astype(np.float64) - self.log_norm)

    def log_prob(self, token: int) -> float | None:
        """log p(token) at T=1; None without the normaliser or for a token outside the top k."""
        if self.log_norm is None:
            return None
        at = position(self.ids, token)
        return float(self.logits[at]) - self.log_norm if at is not None else None

    def fitted(self, vocab_size: int) -> TopLogits:
        """The same row for a vocabulary of ``vocab_size`` (a drafter's padding ids beyond it dropped)."""
        if vocab_size == self.vocab_size:
            return self
        keep = self.ids < vocab_size
        return TopLogits(self.ids[keep], self.logits[keep], vocab_size, self.log_norm, self.complete)


def position(ids: np.ndarray, token: int) -> int | None:
    """Where ``token`` sits in a candidate row's ids (in no particular order); None when it is not there."""
    at = np.flatnonzero(ids == token)
    return int(at[0]) if len(at) else None


Row = np.ndarray | TopLogits  # one raw logits row: whole (the dense path) or its top (candidate rows)


def top_of(logits: np.ndarray, spec: RowSpec) -> TopLogits:
    """What the engine hands for ``spec`` from a whole row, computed in numpy (the fake backend's candidate rows,
    and the reference the engine's are checked against)."""
    k = min(spec.k, logits.shape[-1])
    ids = np.argpartition(logits, -k)[-k:] if k < logits.shape[-1] else np.arange(logits.shape[-1])
    log_norm = None
    if spec.normaliser:
        top = float(np.max(logits))
        log_norm = top + float(np.log(np.exp(logits.astype(np.float64) - top).sum()))
    return TopLogits(ids.astype(np.int64), np.asarray(logits, dtype=np.float32)[ids], logits.shape[-1], log_norm,
                     complete=k >= logits.shape[-1])


Rows = np.ndarray | list[TopLogits]  # one decode's rows: a whole [rows, vocab] block, or each row's top


@dataclass(frozen=True, slots=True)
class SeqDecode:
    """One sequence's part of a batch: tokens appended at its own position, logits for the rows named
    (indices into ``tokens``, negative allowed)."""

    seq: int
    tokens: Sequence[int]
    logits_rows: Sequence[int] = ()


def row_order(n_tokens: int, logits_rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """(distinct rows in ascending order, where each asked-for row sits in that list): a batch computes each
    row once, the caller gets them in the order and multiplicity it asked for."""
    rows = sorted({r % n_tokens for r in logits_rows}) if n_tokens else []
    return rows, [rows.index(r % n_tokens) for r in logits_rows]


class Model(Protocol):
    """A model with one context of ``n_seq`` sequences, each with its own cache of ``n_ctx`` tokens.

    Rollback is exact on a KV cache; on recurrent/hybrid memory it is bounded (``rollback_limit``,
    ``can_rollback``) and deeper ones go through ``checkpoint``/``restore``."""

    n_ctx: int
    n_vocab: int
    n_seq: int
    decode_seconds: float  # time inside the model's decode calls so far (for the Python-overhead share)

    @property
    def copied_bytes(self) -> int: ...  # logits rows copied out of llama.cpp so far (0 for a fake)
    def tokens_of(self, seq: int) -> Sequence[int]: ...  # the tokens in seq's cache, in order
    def decode(self, seq: int, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> Rows: ...
    def decode_many(self, items: Sequence[SeqDecode]) -> list[Rows]: ...  # one batch, one Rows per item
    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                    last: bool = False) -> list[Rows]: ...  # every token's row of each block (last: its last)
    def rollback(self, seq: int, position: int) -> None: ...  # keep seq's first ``position`` tokens
    def clear(self, seq: int) -> None: ...
    def share_prefix(self, src: int, dst: int, length: int) -> None: ...  # dst := src's first ``length`` tokens
    def can_share_prefix(self, src: int, dst: int, length: int) -> bool: ...
    @property
    def rollback_limit(self) -> int | None: ...  # trailing tokens a rollback can remove at most; None: any
    def can_rollback(self, seq: int, position: int) -> bool: ...
    def require_rollback(self, depth: int) -> None: ...  # one-line refusal of drafts it could not roll back
    def checkpoint(self, seq: int) -> object: ...  # seq's state, for a rollback deeper than the snapshots
    def restore(self, checkpoint: object) -> None: ...  # back to it (then decode the kept tokens again)
    def set_candidates(self, seq: int, spec: RowSpec | None) -> bool: ...  # False: whole rows stay
    def is_eog(self, token: int) -> bool: ...
    def token_piece(self, token: int, *, special: bool = False) -> bytes: ...
