"""Decoding a batch of a ``LlamaModel``'s context and reading its rows back (a mixin, as ``memory.SequenceMemory``
is for rollback): the general ``decode_many`` (any rows of any sequences, chunked by n_batch) and ``decode_rows``
(every decode of a round, by the path that touches least right after a decode: docs/method.md).

Rows come back whole (float32 arrays, copied: the next decode overwrites llama.cpp's buffers) or, for a sequence with
candidate rows, as ``TopLogits`` read from the backend sampler (``engine/candidates.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from relaxtui.engine.api import SeqDecode, row_order, rows_through_decode_many
from relaxtui.errors import ContextFull

if TYPE_CHECKING:
    from relaxtui.engine.candidates import CandidateSamplers
    from relaxtui.engine.memory import Snapshots
    from relaxtui.engine.mtp import HiddenStore

try:
    import llama_cpp as _llama
except ImportError:  # pragma: no cover - set-up problem: llama.py says so
    _llama = None  # type: ignore[assignment]  # (a module or nothing: llama.py refuses to load without it)


def _ordered(out: Any, order: list[int]) -> Any:
    """Rows in the order (and multiplicity) the caller asked for."""
    if order == list(range(len(out))):
        return out
    return [out[i] for i in order] if isinstance(out, list) else out[order]


# one sequence's share of a batch: (seq, tokens, first position, output rows as token indices in ascending order,
# where the first of them goes in `out`, out: a list of candidate rows or a [rows, n_vocab] array)
_Part = tuple[int, list[int], int, list[int], int, Any]


def _chunks(parts: list[_Part], size: int) -> list[list[_Part]]:
    """``parts`` in batches of at most ``size`` tokens: a part that does not fit is split, its output rows with it
    (a round's batch always fits: one chunk, the parts as they are)."""
    total = sum(len(part[1]) for part in parts)
    if total <= size:
        return [parts] if total else []
    chunks: list[list[_Part]] = []
    chunk: list[_Part] = []
    room = size
    for seq, tokens, start, rows, slot, out in parts:
        begin = 0
        while begin < len(tokens):
            end = begin + min(room, len(tokens) - begin)
            inside = [row - begin for row in rows if begin <= row < end]
            chunk.append((seq, tokens[begin:end], start + begin, inside, slot, out))
            slot += len(inside)
            room -= end - begin
            begin = end
            if room == 0:
                chunks.append(chunk)
                chunk, room = [], size
    if chunk:
        chunks.append(chunk)
    return chunks


class BatchDecoding:
    """``decode_many`` and ``decode_rows`` of a ``LlamaModel`` (a mixin: it uses the model's context, batch, cached
    token lists, candidate samplers, snapshots and hidden store, and counts time inside llama_decode and bytes
    copied)."""

    _ctx: int
    _batch: Any
    _batch_arrays: tuple[Any, Any, Any, Any]  # the batch's token, pos, logits and seq_id arrays
    _seqs: list[list[int]]
    _candidates: CandidateSamplers
    _snapshots: Snapshots | None
    _outputs_per_seq: int
    _copied: int
    hidden: HiddenStore | None
    n_ctx: int
    n_batch: int
    n_seq: int
    n_vocab: int
    decode_seconds: float

    def decode_many(self, items: Sequence[SeqDecode]) -> list[Any]:
        """One batch for many sequences (as llama.cpp's `parallel` example): each item's tokens go at its
        sequence's own positions; returns per item a [len(item.logits_rows), n_vocab] array, or a list of
        ``TopLogits`` for a sequence with candidate rows (``set_candidates``). Chunks by n_batch."""
        parts: list[_Part] = []
        orders = []
        for item in items:
            seq = item.seq
            start = len(self._seqs[seq])
            if start + len(item.tokens) > self.n_ctx:
                raise ContextFull(start, len(item.tokens), self.n_ctx)
            rows, order = row_order(len(item.tokens), item.logits_rows)
            candidates = seq in self._candidates.specs
            if candidates and len(rows) > self._outputs_per_seq:
                self._candidates.set(seq, None)  # more rows than llama.cpp samples per sequence: whole ones
                candidates = False
            out: Any = [None] * len(rows) if candidates else np.empty((len(rows), self.n_vocab), dtype=np.float32)
            parts.append((seq, [int(token) for token in item.tokens], start, rows, 0, out))
            orders.append(order)
            if self.hidden is not None and item.tokens:
                self.hidden.decoding(seq, start)
        for chunk in _chunks(parts, self.n_batch):
            self._decode_chunk(chunk)
        return [_ordered(part[5], order) for part, order in zip(parts, orders, strict=True)]

    def _decode_chunk(self, chunk: list[_Part]) -> None:
        """Decode one batch and read back its rows. Between two decodes of a round this is most of the loop's own
        work, and it runs right after llama.cpp has streamed the weights through every cache, where each distinct
        thing touched costs: one pass fills the batch (a one-sequence context's sequence ids were written once, at
        start-up), one reads it back."""
        n_seq = self.n_seq
        token_at, position_at, wants, seq_at = self._batch_arrays
        j = 0
        for seq, tokens, start, rows, _, _ in chunk:
            for i, token in enumerate(tokens):
                token_at[j + i] = token
                position_at[j + i] = start + i
                wants[j + i] = 0
                if n_seq > 1:
                    seq_at[j + i][0] = seq
            for row in rows:
                wants[j + row] = 1
            j += len(tokens)
        self._run(j)
        store = self.hidden
        hidden = store.read(self._ctx, j) if store is not None else None
        j = 0
        for seq, tokens, _, rows, slot, out in chunk:
            self._seqs[seq].extend(tokens)
            if store is not None and hidden is not None:
                for i in range(len(tokens)):
                    store.append(seq, hidden[j + i])
            if rows:
                self._read(seq, out, slot, [j + row for row in rows])
            j += len(tokens)
        if hidden is not None:
            self._copied += hidden.nbytes
        if self._snapshots is not None:  # the snapshots now cover this decode's tokens of each sequence
            counts: dict[int, int] = {}
            for seq, tokens, *_ in chunk:
                counts[seq] = counts.get(seq, 0) + len(tokens)
            for seq, count in counts.items():
                self._snapshots.decoded(seq, count)

    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *, last: bool = False) -> list[Any]:
        """Append ``blocks[i]`` to sequence ``seqs[i]`` (each sequence once), in one batch, and hand every token's
        row (``last``: each block's last token's only): per sequence an array [rows, n_vocab], or a list of
        ``TopLogits`` (``set_candidates``). A round's every decode is this shape: the verify batch ([last, drafts],
        every row) and each draft step (the re-sync and the last token, then one token). ``decode_many`` does the
        same; this path touches less: it runs right after llama.cpp has streamed the weights through every cache,
        where each distinct step costs trips to memory (docs/method.md), so plain index loops, no helpers."""
        cached, specs = self._seqs, self._candidates.specs
        token_at, position_at, wants, seq_at = self._batch_arrays
        j = 0
        for k in range(len(seqs)):
            seq, block = seqs[k], blocks[k]
            start, n = len(cached[seq]), len(block)
            if not n:
                raise ValueError(f"decode_rows: sequence {seq}'s block is empty (each decodes one token or more)")
            if start + n > self.n_ctx:
                raise ContextFull(start, n, self.n_ctx)
            if j + n > self.n_batch or self.hidden is not None:  # (the general path: chunks, hidden rows)
                return rows_through_decode_many(self, seqs, blocks, last=last)
            if not last and n > self._outputs_per_seq and seq in specs:
                self._candidates.set(seq, None)  # more rows than llama.cpp samples per sequence: whole ones
            for i in range(n):
                token_at[j], position_at[j], wants[j] = block[i], start + i, not last or i == n - 1
                if self.n_seq > 1:
                    seq_at[j][0] = seq
                j += 1
        self._run(j)
        rows: list[Any] = []
        j = 0
        for k in range(len(seqs)):
            seq, block = seqs[k], blocks[k]
            n = len(block)
            cached[seq].extend(block)
            first, count = (j + n - 1, 1) if last else (j, n)
            spec = specs.get(seq)
            rows.append(self._candidates.read(first, count, self.n_vocab, spec) if spec is not None
                        else self._whole(range(first, first + count)))
            if self._snapshots is not None:
                self._snapshots.decoded(seq, n)
            j += n
        return rows

    def _read(self, seq: int, out: Any, start: int, outputs: Sequence[int]) -> None:
        """Copy the rows of these outputs (ascending) of the last batch, of sequence ``seq``, into ``out[start:]``
        (the next decode overwrites them): its candidates into a list, whole rows into an array."""
        if not isinstance(out, list):
            self._whole(outputs, out[start:start + len(outputs)])
        elif outputs[-1] - outputs[0] == len(outputs) - 1:  # consecutive (one sequence's block)
            out[start:start + len(outputs)] = self._candidates.read(outputs[0], len(outputs), self.n_vocab,
                                                                    self._candidates.specs[seq])
        else:
            for i, output in enumerate(outputs):
                out[start + i] = self._candidates.read(output, 1, self.n_vocab, self._candidates.specs[seq])[0]

    def _whole(self, outputs: Sequence[int], rows: np.ndarray | None = None) -> np.ndarray:
        """These output rows of the last batch, whole, copied (into ``rows`` when given: the next decode overwrites
        them)."""
        rows = np.empty((len(outputs), self.n_vocab), dtype=np.float32) if rows is None else rows
        for i, output in enumerate(outputs):
            rows[i] = np.ctypeslib.as_array(_llama.llama_get_logits_ith(self._ctx, output), shape=(self.n_vocab,))
        self._copied += rows.nbytes
        return rows

    def _run(self, n_tokens: int) -> None:
        """llama_decode the first ``n_tokens`` of the batch, timed until its outputs are ready: llama_decode may
        return before the backend has finished (a GPU computes asynchronously), and the first output read waits for
        it (``llama_synchronize``), so the wait is timed here, as the model's time, not left to the caller's first
        read (where it counted as the loop's own host time: ~12 us per decode on a CPU, the whole compute on a GPU)."""
        self._batch.n_tokens = n_tokens
        started = time.perf_counter()
        status = _llama.llama_decode(self._ctx, self._batch)
        if status == 0:
            _llama.llama_synchronize(self._ctx)
        self.decode_seconds += time.perf_counter() - started
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")

