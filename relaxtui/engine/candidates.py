"""Candidate rows from llama.cpp's backend sampling: each output row's k largest logits with their ids (and, when
asked, the row's log-normaliser at T=1), computed inside the graph — on the GPU when the model is there — so a
round copies a few hundred bytes per row out of llama.cpp instead of the whole vocabulary (0.6 MB for Qwen's).

llama.cpp's own top-k sampler keeps the logits but not the normaliser, and its ``dist`` sampler draws with its own
generator; relaxtui draws from the candidates itself (its generators, its rules). So this is a sampler of our own,
filled in from Python through llama.cpp's sampler interface: its ``backend_apply`` adds ``top_k`` and ``get_rows``
of those logits to the graph, and with the normaliser a softmax of the row gathered at the same ids (the
probability of the likeliest candidate gives log Σ exp = logit − log p without underflow). Its CPU ``apply`` is
never called: nothing here samples.

``CandidateSamplers`` holds one sampler chain per sequence of a context, replaced when a sequence asks for other
rows and freed with the context. Without the ggml library (an unusual build), ``available()`` is False and every
sequence keeps whole rows.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

from relaxtui.engine.api import RowSpec, TopLogits

try:
    import llama_cpp as _llama
except ImportError:  # pragma: no cover - set-up problem: llama.py says so
    _llama = None  # type: ignore[assignment]  # (a module or nothing: available() is then False)


def _ggml() -> ctypes.CDLL | None:
    """ggml as llama-cpp-python loads it beside libllama (the same files, ``LLAMA_CPP_LIB_PATH`` included), typed
    for the few graph ops the sampler adds."""
    if _llama is None:
        return None
    try:
        from llama_cpp._ggml import libggml as lib  # (its ggml-base symbols resolve through it)
    except (ImportError, OSError, RuntimeError, FileNotFoundError):
        return None
    tensor = ctypes.c_void_p
    for name, args in (("ggml_nelements", [tensor]), ("ggml_reshape_2d", [tensor, tensor, ctypes.c_int64,
                                                                            ctypes.c_int64]),
                       ("ggml_top_k", [tensor, tensor, ctypes.c_int]), ("ggml_get_rows", [tensor, tensor, tensor]),
                       ("ggml_soft_max", [tensor, tensor]), ("ggml_argmax", [tensor, tensor])):
        function = getattr(lib, name, None)
        if function is None:
            return None
        function.argtypes = args
        function.restype = ctypes.c_int64 if name == "ggml_nelements" else tensor
    return lib


_GGML = _ggml()


def _rows_at(name: str, kind: type) -> Callable[[int, int], Any]:
    """llama.cpp's accessor of a sampling buffer's output row, typed to hand back a pointer to ``kind`` (a slice of
    it reads a row as a list of plain numbers in one step)."""
    function = _llama.llama_cpp._lib[name]  # (a new function object: llama_cpp's own binding keeps its pointer type)
    function.argtypes, function.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.POINTER(kind)
    return function


if _llama is not None:
    _IDS_AT = _rows_at("llama_get_sampled_candidates_ith", ctypes.c_int32)
    _LOGITS_AT = _rows_at("llama_get_sampled_logits_ith", ctypes.c_float)
    _PROBS_AT = _rows_at("llama_get_sampled_probs_ith", ctypes.c_float)


def _address(pointer: Any) -> int:
    """Where a non-null typed pointer points."""
    return ctypes.addressof(pointer.contents)


def _top(ids: tuple[Any, int], logits: tuple[Any, int], probs: tuple[Any, int] | None, n: int,
         vocab_size: int) -> TopLogits:
    """A row's ``n`` candidates from the three sampling buffers, each given as (pointer, offset of the row) (``probs``
    None: no normaliser asked)."""
    (ids_at, i), (logits_at, j) = ids, logits
    values = logits_at[j:j + n]
    log_norm = None
    if probs is not None:  # the likeliest candidate's probability: log Σ exp without underflow
        best = max(range(n), key=values.__getitem__)
        log_norm = values[best] - math.log(probs[0][probs[1] + best])
    return TopLogits(ids_at[i:i + n], values, vocab_size, log_norm, n >= vocab_size)


def available() -> bool:
    return _GGML is not None


def _iface(spec: RowSpec) -> _llama.llama_sampler_i:
    """The sampler interface for ``spec`` (kept alive for the process: llama.cpp holds pointers into it)."""
    ggml = _GGML
    assert ggml is not None and _llama is not None

    # data: a ctypes pointer to llama_sampler_data, whose fields llama_cpp declares only in _fields_ (untyped)
    def backend_apply(sampler: object, ctx: int, graph: int, data: Any) -> None:
        row = data.contents
        n = ggml.ggml_nelements(row.logits)
        column = ggml.ggml_reshape_2d(ctx, row.logits, 1, n)  # get_rows picks rows: one logit per row
        top = (ggml.ggml_argmax(ctx, ggml.ggml_reshape_2d(ctx, row.logits, n, 1)) if spec.k == 1  # one pass, no sort
               else ggml.ggml_top_k(ctx, row.logits, min(spec.k, n)))
        row.candidates = top
        if spec.normaliser:
            probs = ggml.ggml_soft_max(ctx, row.logits)
            row.probs = ggml.ggml_get_rows(ctx, ggml.ggml_reshape_2d(ctx, probs, 1, n), top)
        row.logits = ggml.ggml_get_rows(ctx, column, top)

    iface = _llama.llama_sampler_i()
    callbacks = (_llama.llama_sampler_i_apply(lambda sampler, candidates: None),  # (never called: nothing samples)
                 _llama.llama_sampler_i_backend_init(lambda sampler, buffer_type, n_outputs: True),
                 _llama.llama_sampler_i_backend_apply(backend_apply))
    iface.apply, iface.backend_init, iface.backend_apply = callbacks  # no name: a str from a callback leaks
    _KEEP.append((iface, callbacks))
    return iface


_KEEP: list[object] = []
_IFACES: dict[RowSpec, _llama.llama_sampler_i] = {}


class CandidateSamplers:
    """The candidate samplers of one context, one chain per sequence that asks for candidate rows."""

    def __init__(self, ctx: int) -> None:
        self._ctx = ctx
        self.specs: dict[int, RowSpec] = {}
        self._chains: dict[int, object] = {}
        self.copied_bytes = 0  # candidates read out of llama.cpp so far

    def set(self, seq: int, spec: RowSpec | None) -> bool:
        """Hand ``seq`` candidate rows for ``spec`` from its next decode on (None: whole rows again); False when
        this build cannot (the sequence keeps whole rows). A change costs llama.cpp a graph reservation."""
        if spec == self.specs.get(seq):
            return True
        if not self._ctx:
            raise RuntimeError("the model is closed")
        if spec is not None and not available():
            return False
        chain = None
        if spec is not None:
            iface = _IFACES.get(spec) or _IFACES.setdefault(spec, _iface(spec))
            chain = _llama.llama_sampler_chain_init(_llama.llama_sampler_chain_default_params())
            _llama.llama_sampler_chain_add(chain, _llama.llama_sampler_init(ctypes.byref(iface), None))
        if not _llama.llama_set_sampler(self._ctx, seq, chain):
            if chain is not None:
                _llama.llama_sampler_free(chain)
            self._drop(seq)
            return False
        self._drop(seq)
        if spec is not None:
            self.specs[seq], self._chains[seq] = spec, chain
        return True

    def _drop(self, seq: int) -> None:
        self.specs.pop(seq, None)
        old = self._chains.pop(seq, None)
        if old is not None:
            _llama.llama_sampler_free(old)

    def read(self, first: int, count: int, vocab_size: int, spec: RowSpec) -> list[TopLogits]:
        """Output rows ``first .. first + count - 1`` of the last decode, of a sequence with ``spec``'s sampler: their
        candidates. The sampler hands exactly min(k, vocabulary) per row, in buffers with one vocabulary-wide stride
        per output row. This runs per decode, right after llama.cpp has flushed every cache, where each distinct
        step costs: one accessor call per buffer (rows one stride apart: one sequence's verify batch), each row
        read as plain numbers by one slice (greedy's one candidate by one index), no numpy: the rules read greedy's
        argmax or a few dozen candidates, cheaper in Python floats (``TopLogits`` makes arrays only when asked)."""
        n = min(spec.k, vocab_size)
        ids, logits = _IDS_AT(self._ctx, first), _LOGITS_AT(self._ctx, first)
        probs = _PROBS_AT(self._ctx, first) if spec.normaliser else None
        if count == 1 and ids and logits and (probs or not spec.normaliser):  # a draft step's row
            rows = [TopLogits((ids[0],), (logits[0],), vocab_size, None, n >= vocab_size) if n == 1 and probs is None
                    else _top((ids, 0), (logits, 0), (probs, 0) if probs else None, n, vocab_size)]
        else:
            at_ids = self._rows(_IDS_AT, ids, first, count, vocab_size)
            at_logits = self._rows(_LOGITS_AT, logits, first, count, vocab_size)
            at_probs = self._rows(_PROBS_AT, probs, first, count, vocab_size) if spec.normaliser else None
            rows = [_top(at_ids[i], at_logits[i], at_probs[i] if at_probs is not None else None, n, vocab_size)
                    for i in range(count)]
        self.copied_bytes += 4 * n * (3 if spec.normaliser else 2) * count
        return rows

    def _rows(self, at: Callable[[int, int], Any], first: Any, output: int, count: int,
              vocab_size: int) -> list[tuple[Any, int]]:
        """Where each of ``count`` consecutive output rows of one sampling buffer starts, as (pointer, offset), from
        its first row's pointer: one more call when the last row sits exactly ``count - 1`` vocabulary rows after
        it, else one call per row. (llama.cpp answers a row without candidates with another allocation: the stride
        check keeps that out.)"""
        if first and count > 1:
            last = at(self._ctx, output + count - 1)
            if last and _address(last) - _address(first) == 4 * vocab_size * (count - 1):
                return [(first, vocab_size * i) for i in range(count)]
        found = [(first, 0), *((at(self._ctx, output + i), 0) for i in range(1, count))]
        if not all(pointer for pointer, _ in found):
            raise RuntimeError(f"llama.cpp handed no sampled rows ({at.__name__}) for output rows {output}.."
                               f"{output + count - 1}")
        return found

    def close(self) -> None:
        """Free the chains (after the context that pointed at them is freed)."""
        for chain in self._chains.values():
            _llama.llama_sampler_free(chain)
        self._chains.clear()
        self.specs.clear()
        self._ctx = 0  # (NULL: closed)
