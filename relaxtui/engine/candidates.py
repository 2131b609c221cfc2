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

import array
import ctypes
import math
from collections.abc import Callable

from relaxtui.decoding.sampling import RowSpec, TopLogits

try:
    import llama_cpp as _llama
except ImportError:  # pragma: no cover - set-up problem: llama.py says so
    _llama = None


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


def _address_of(name: str) -> Callable[[int, int], int | None]:
    """llama.cpp's accessor of a sampling buffer's output row, typed to hand back the bare address (no pointer
    object per call)."""
    function = _llama.llama_cpp._lib[name]  # (a new function object: llama_cpp's own binding keeps its pointer type)
    function.argtypes, function.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.c_void_p
    return function  # type: ignore[no-any-return]


if _llama is not None:
    _IDS_AT = _address_of("llama_get_sampled_candidates_ith")
    _LOGITS_AT = _address_of("llama_get_sampled_logits_ith")
    _PROBS_AT = _address_of("llama_get_sampled_probs_ith")


def _numbers(kind: str, address: int, n: int) -> array.array | tuple[int | float]:
    """``n`` int32 ("i") or float32 ("f") values at ``address``, copied (one: as a bare number, the cheapest)."""
    if n == 1:
        return ((ctypes.c_int32 if kind == "i" else ctypes.c_float).from_address(address).value,)
    values = array.array(kind)
    values.frombytes(ctypes.string_at(address, 4 * n))
    return values


def available() -> bool:
    return _GGML is not None


def _iface(spec: RowSpec) -> object:
    """The sampler interface for ``spec`` (kept alive for the process: llama.cpp holds pointers into it)."""
    ggml = _GGML
    assert ggml is not None and _llama is not None

    def backend_apply(sampler: object, ctx: int, graph: int, data: object) -> None:
        row = data.contents  # type: ignore[attr-defined]
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
_IFACES: dict[RowSpec, object] = {}


class CandidateSamplers:
    """The candidate samplers of one context, one chain per sequence that asks for candidate rows."""

    def __init__(self, ctx: int) -> None:
        self._ctx = ctx
        self.specs: dict[int, RowSpec] = {}
        self._chains: dict[int, object] = {}

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

    def read_rows(self, outputs: list[int], vocab_size: int, spec: RowSpec) -> tuple[list[TopLogits], int]:
        """Output rows ``outputs`` (ascending) of the last decode, of a sequence with ``spec``'s sampler: their
        candidates, and the bytes copied out of llama.cpp for them. The sampler hands exactly min(k, vocabulary) per
        row, in buffers with one vocabulary-wide stride per output row. This runs per decode, right after llama.cpp
        has flushed every cache, where each distinct call costs tens of microseconds: rows one stride apart (one
        sequence's consecutive outputs, the verify batch) are found from two addresses per buffer, and rows are read
        as plain numbers (``array``), no numpy: the rules read greedy's argmax or a few dozen candidates, cheaper in
        Python floats (``TopLogits`` makes arrays only for those who ask)."""
        n = min(spec.k, vocab_size)
        row_bytes = 4 * vocab_size  # llama.cpp's sampling buffers keep a vocabulary-wide row per output
        ids_at = self._addresses(_IDS_AT, outputs, row_bytes)
        logits_at = self._addresses(_LOGITS_AT, outputs, row_bytes)
        probs_at = self._addresses(_PROBS_AT, outputs, row_bytes) if spec.normaliser else None
        rows = []
        for i in range(len(outputs)):
            ids, logits = _numbers("i", ids_at[i], n), _numbers("f", logits_at[i], n)  # (greedy's: n = 1)
            log_norm = None
            if probs_at is not None:  # the likeliest candidate's probability: log Σ exp without underflow
                probs = _numbers("f", probs_at[i], n)
                best = max(range(n), key=logits.__getitem__)
                log_norm = logits[best] - math.log(probs[best])
            rows.append(TopLogits(ids, logits, vocab_size, log_norm, complete=n >= vocab_size))
        return rows, 4 * n * (3 if spec.normaliser else 2) * len(outputs)

    def _addresses(self, at: Callable[[int, int], int | None], outputs: list[int], row_bytes: int) -> list[int]:
        """Where each output row of one sampling buffer starts: from the first and last asked when the rows are
        consecutive outputs (one sequence's batch) exactly one vocabulary row (``row_bytes``) apart, else each asked.
        (llama.cpp answers a row without candidates with another allocation: the stride check keeps that out.)"""
        first = at(self._ctx, outputs[0])
        last = at(self._ctx, outputs[-1]) if first and len(outputs) > 1 else first
        if first and last == first + row_bytes * (len(outputs) - 1) and outputs[-1] - outputs[0] == len(outputs) - 1:
            return [first + row_bytes * i for i in range(len(outputs))]
        found = [first, *(at(self._ctx, output) for output in outputs[1:-1]), last] if first else [first]
        if not all(found):
            raise RuntimeError(f"llama.cpp handed no sampled rows ({at.__name__}) for output rows {outputs}")
        return found  # type: ignore[return-value]

    def close(self) -> None:
        """Free the chains (after the context that pointed at them is freed)."""
        for chain in self._chains.values():
            _llama.llama_sampler_free(chain)
        self._chains.clear()
        self.specs.clear()
        self._ctx = None
