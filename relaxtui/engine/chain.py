"""``decode_chain``: a model drafter's whole draft in one call into ``draft_chain.c`` (``relaxtui.engine.native``).

A chain runs where its C step reproduces the Python one exactly: one sequence per context (the batch's sequence ids
stay 0), candidate rows without the normaliser (greedy's argmax, or top-k's k candidates with 0 < top_k <= k), no
recurrent snapshots or hidden rows to keep, the chain built. Anywhere else ``decode_chain`` answers None and the drafter
takes its Python step, which stays the reference (tests/engine/test_draft_chain.py holds them bit for bit equal).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from functools import cache
from typing import Any

from relaxtui.engine import native
from relaxtui.engine.api import MAX_DRAFT, ChainSampling, DraftChain, RowSpec, TopLogits
from relaxtui.engine.batching import BatchDecoding
from relaxtui.errors import ContextFull

try:
    import llama_cpp as _llama
except ImportError:  # pragma: no cover - set-up problem: llama.py says so
    _llama = None  # type: ignore[assignment]

_DONE, _DECODE_FAILED = 0, 1  # draft_chain.c's statuses (the others hand a row back)


def chains(spec: RowSpec | None, sampling: ChainSampling, n: int) -> bool:
    """Whether the C step picks exactly as the Python one on rows of ``spec`` (and the chain is built)."""
    if (native.library() is None or not _layout_agrees() or spec is None or spec.normaliser or n < 1
            or spec.k > native.MAX_CANDIDATES):
        return False
    if sampling.temperature == 0:
        return spec.k == 1  # (more candidates come in no order: the argmax needs its pass)
    return 0 < sampling.top_k <= spec.k and len(sampling.uniforms) >= n


def pick(row: TopLogits, sampling: ChainSampling, step: int) -> tuple[int, tuple[list[int], list[float]] | None] | None:
    """One step of the chain on a row in hand (the fake backend's chain): the C pick, the same as ``decode_chain``'s;
    None where it hands the row back (a mass that is not finite)."""
    ids, logits = row.as_lists()
    if sampling.temperature == 0:
        return (int(ids[0]), None) if math.isfinite(logits[0]) else None
    k = len(ids)
    lib = native.library()
    assert lib is not None
    kept_ids, kept_probs, token = (ctypes.c_int32 * k)(), (ctypes.c_double * k)(), ctypes.c_int32()
    kept = lib.relaxtui_kept_pick((ctypes.c_int32 * k)(*ids), (ctypes.c_float * k)(*logits), k, sampling.temperature,
                                  sampling.top_k, sampling.top_p, sampling.uniforms[step], kept_ids, kept_probs,
                                  ctypes.byref(token))
    return (token.value, (kept_ids[:kept], kept_probs[:kept])) if kept else None


def _function(name: str) -> int:
    """The address of llama.cpp's ``name`` (the chain calls it through a pointer: no header, no link)."""
    return ctypes.cast(getattr(_llama.llama_cpp._lib, name), ctypes.c_void_p).value or 0


class _Call(ctypes.Structure):
    """draft_chain.c's ``chain_call``: a context's chain, set once (its output arrays sized for the longest draft and
    the most candidates), so a draft's call converts five numbers, not two dozen arguments."""

    _fields_ = [("ctx", ctypes.c_void_p), ("batch", ctypes.c_void_p), ("decode", ctypes.c_void_p),
                ("synchronize", ctypes.c_void_p), ("candidates_at", ctypes.c_void_p), ("logits_at", ctypes.c_void_p),
                ("uniforms", ctypes.c_void_p), ("tokens", ctypes.c_void_p), ("raw_ids", ctypes.c_void_p),
                ("raw_logits", ctypes.c_void_p), ("kept_n", ctypes.c_void_p), ("kept_ids", ctypes.c_void_p),
                ("kept_probs", ctypes.c_void_p), ("status", ctypes.c_int32), ("decode_status", ctypes.c_int32),
                ("seconds", ctypes.c_double)]


def _call(ctx: int, batch: Any) -> tuple[_Call, tuple[Any, ...]]:
    """A context's ``_Call`` and the arrays it points into (kept alive beside it)."""
    steps, k = MAX_DRAFT + 1, native.MAX_CANDIDATES
    arrays = ((ctypes.c_double * steps)(), (ctypes.c_int32 * steps)(), (ctypes.c_int32 * (steps * k))(),
              (ctypes.c_float * (steps * k))(), (ctypes.c_int32 * steps)(), (ctypes.c_int32 * (steps * k))(),
              (ctypes.c_double * (steps * k))())
    addresses = [ctypes.addressof(array) for array in arrays]
    return _Call(ctx, ctypes.addressof(batch), *_FUNCTIONS, *addresses), arrays


class ChainDecoding(BatchDecoding):
    """``decode_chain`` of a ``LlamaModel`` (a mixin over the same context state as ``BatchDecoding``)."""

    _chain: tuple[_Call, tuple[Any, ...]] | None = None

    def decode_chain(self, seq: int, block: Sequence[int], n: int, sampling: ChainSampling) -> DraftChain | None:
        """Append ``block`` to ``seq``, then draft ``n`` tokens from its last row on: each picked (``sampling``) and,
        but the last, decoded. None where the chain does not apply (the caller's Python step then: see the module)."""
        spec = self._candidates.specs.get(seq)
        cached = self._seqs[seq]
        if (self.n_seq != 1 or self.hidden is not None or self._snapshots is not None or not block
                or len(block) > self.n_batch or n > MAX_DRAFT + 1 or not chains(spec, sampling, n)):
            return None
        assert spec is not None
        if len(cached) + len(block) + n - 1 > self.n_ctx:
            raise ContextFull(len(cached), len(block) + n - 1, self.n_ctx)
        if self._chain is None:
            self._chain = _call(self._ctx, self._batch)
        call, (uniforms, tokens_at, raw_ids, raw_logits, kept_n, kept_ids, kept_probs) = self._chain
        token_at, position_at, wants, _ = self._batch_arrays
        start = len(cached)
        for i, token in enumerate(block):
            token_at[i], position_at[i], wants[i] = token, start + i, 0
        wants[len(block) - 1] = 1
        greedy = sampling.temperature == 0
        for i in range(0 if greedy else n):
            uniforms[i] = sampling.uniforms[i]
        k = min(spec.k, self.n_vocab)
        lib = native.library()
        assert lib is not None
        drafted = lib.relaxtui_draft_chain(ctypes.byref(call), len(block), start + len(block), n, k, greedy,
                                           sampling.temperature, sampling.top_k, sampling.top_p)
        self.decode_seconds += call.seconds
        status = call.status
        tokens = tokens_at[:drafted]
        decoded = drafted - 1 if status in (_DONE, _DECODE_FAILED) else drafted  # (the last pick is not decoded)
        if status != _DECODE_FAILED or drafted:  # (a failed first decode decoded nothing)
            cached.extend(block)
            cached.extend(tokens[:decoded])
        if status == _DECODE_FAILED:
            raise RuntimeError(f"llama_decode failed with status {call.decode_status}")
        rows, kept = [], []
        ids, logits = raw_ids[:drafted * k], raw_logits[:drafted * k]  # (one conversion each: right after decodes)
        for step in range(drafted):
            at = step * k
            rows.append(TopLogits(ids[at:at + k], logits[at:at + k], self.n_vocab, None, k >= self.n_vocab))
            kept.append(None if greedy else (kept_ids[at:at + kept_n[step]], kept_probs[at:at + kept_n[step]]))
        self._copied += 8 * k * drafted
        stopped = None
        if status != _DONE:  # (the row the chain left: the last decode's output, still in llama.cpp's buffers)
            stopped = self._candidates.read(len(block) - 1 if drafted == 0 else 0, 1, self.n_vocab, spec)[0]
        return DraftChain(tokens, rows, kept, stopped)


def _functions() -> tuple[int, int, int, int]:
    """llama.cpp's four functions the chain calls (zeros where this binding, or llama_cpp, is missing: no chain)."""
    try:
        return (_function("llama_decode"), _function("llama_synchronize"),
                _function("llama_get_sampled_candidates_ith"), _function("llama_get_sampled_logits_ith"))
    except AttributeError:
        return 0, 0, 0, 0


_BATCH_FIELDS = ["n_tokens", "token", "embd", "pos", "n_seq_id", "seq_id", "logits"]  # draft_chain.c's llama_batch


@cache
def _layout_agrees() -> bool:
    """Whether llama-cpp-python's llama_batch is the one draft_chain.c declares (the same fields, the same size) and
    the four functions are there: the chain writes the batch and calls them through raw addresses."""
    lib = native.library()
    if _llama is None or lib is None or not all(_functions()):
        return False
    batch = _llama.llama_batch
    return ([name for name, *_ in batch._fields_] == _BATCH_FIELDS
            and ctypes.sizeof(batch) == lib.relaxtui_batch_size())


_FUNCTIONS = _functions()
