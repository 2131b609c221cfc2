"""The engine's side of the seam: what every model (llama.cpp's, or the fake) offers the loops, and the rows it hands.

The loops see a model only through ``Model``: every call names the sequence it acts on (a context holds
``n_seq`` independent caches), so one protocol serves the one-sequence loop, the batched one, prefill, drafters and
calibration alike. A logits row comes whole (``WholeRow``, a view of the [rows, vocab] block) or as its top
(``TopLogits``, what llama.cpp's backend sampling hands); both answer the same questions (``engine/rows.py``), so no
caller asks which it holds. This module imports nothing above ``engine/``; ``decoding/`` imports nothing else of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from relaxtui.checks import MAX_DRAFT
from relaxtui.engine.rows import (
    Row,
    Rows,
    RowSpec,
    TopLogits,
    WholeRow,
    WholeRows,
    as_array,
    as_plain,
    as_row,
    as_rows,
    position,
    softmax,
    top_of,
)
from relaxtui.engine.thinking import Thinking, ThinkTags

__all__ = ["MAX_DRAFT", "ChainSampling", "DraftChain", "DraftHead", "Model", "Row", "RowSpec", "Rows", "SeqDecode",
           "ThinkTags", "Thinking", "TopLogits", "WholeRow",
           "WholeRows", "as_array", "as_plain", "as_row", "as_rows", "position", "row_order",
           "rows_through_decode_many", "softmax", "top_of"]


@dataclass(frozen=True, slots=True)
class SeqDecode:
    """One sequence's part of a batch: tokens appended at its own position, logits for the rows named
    (indices into ``tokens``, negative allowed)."""

    seq: int
    tokens: Sequence[int]
    logits_rows: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class ChainSampling:
    """How ``Model.decode_chain`` picks each draft token: greedy at temperature 0 (a row's one candidate, its argmax),
    else temperature, then top-k, then top-p on the row's candidates, drawn with ``uniforms[step]`` (as the Python
    step draws: ``decoding.sampling``)."""

    temperature: float
    top_k: int
    top_p: float
    uniforms: Sequence[float] = ()


@dataclass(frozen=True, slots=True)
class DraftChain:
    """What ``Model.decode_chain`` drafted: each step's token, its row's raw candidates, and (sampled) the kept
    distribution it drew from, as ascending ids and their probabilities. ``stopped`` is the row of a step the chain
    left to the caller's Python step (a mass that is not finite: the Python step raises, or picks where its top-k
    cut drops a NaN, and drafts on), None when it drafted every step asked. (A row without candidates raises in the
    engine, as its Python read does.)"""

    tokens: list[int]
    rows: list[TopLogits]
    kept: list[tuple[list[int], list[float]] | None]
    stopped: TopLogits | None = None


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
    def decode_chain(self, seq: int, block: Sequence[int], n: int,
                     sampling: ChainSampling) -> DraftChain | None: ...  # a whole draft in one call; None: cannot
    def is_eog(self, token: int) -> bool: ...
    def token_piece(self, token: int, *, special: bool = False) -> bytes: ...
    @property
    def thinking(self) -> Thinking: ...  # the thinking block its tokenizer and template mark (--relax-scope)



class DraftHead(Protocol):
    """A head that drafts from the verifier's hidden rows on a context of its own (an MTP head): it follows the
    verifier's cache by itself, so a drafter only asks it for rows. ``first``: q's logits one past each
    (seq, last) — ``last`` the token the verifier decodes next; ``step``: one more position of each chain."""

    path: Path
    n_ctx: int
    decode_seconds: float

    @property
    def copied_bytes(self) -> int: ...
    def first(self, items: Sequence[tuple[int, int]]) -> np.ndarray: ...
    def step(self, items: Sequence[tuple[int, int]]) -> np.ndarray: ...
    def close(self) -> None: ...


class DecodesMany(Protocol):
    """What ``rows_through_decode_many`` needs of a model: ``Model.decode_many`` alone (a mixin of one has it)."""

    def decode_many(self, items: Sequence[SeqDecode]) -> list[Rows]: ...


def rows_through_decode_many(model: DecodesMany, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *,
                             last: bool = False) -> list[Rows]:
    """``decode_rows`` through ``decode_many``: the same rows, for a model without a leaner path of its own."""
    items = [SeqDecode(seq, block, [-1] if last else range(len(block)))
             for seq, block in zip(seqs, blocks, strict=True)]
    return model.decode_many(items)
