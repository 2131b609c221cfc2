"""A thin, explicit wrapper over llama-cpp-python's low-level API (SPEC §6 pitfalls).

Why low-level: ``Llama(logits_all=True)`` and ``draft_model=`` allocate n_ctx × n_vocab floats. Here a
decode asks for logits only on the rows the caller names, copies exactly those rows out, and the KV cache
is rolled back with ``llama_memory_seq_rm``. A context holds ``n_seq`` sequences (llama.cpp's n_seq_max), each
with its own ``n_ctx`` tokens of KV cache in its own stream (``kv_unified`` off: a sequence attends only to its
own cells, and cells freed in one never move another's); the one-sequence methods act on sequence 0.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from relaxtui import envvars
from relaxtui.decoding.backend import SeqDecode, SequenceView, row_order
from relaxtui.engine.gguf import read_header
from relaxtui.errors import ContextFull, UserError

try:
    import llama_cpp as _llama
except ImportError as exc:  # pragma: no cover - set-up problem, not a code path
    raise UserError("llama-cpp-python is not installed; run scripts/bootstrap.py (see README)") from exc

_backend_lock = threading.Lock()
_backend_ready = False


def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if envvars.flag("RELAXTUI_LLAMA_LOG", strict=False):  # no raising in a callback from C: checked at init
        os.write(2, text)


_LOG_CALLBACK = _llama.llama_log_callback(_quiet_log)  # keep a reference: llama.cpp holds the pointer


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            envvars.flag("RELAXTUI_LLAMA_LOG")  # a bad value is one line here, not ignored in the callback
            _llama.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
            _llama.llama_backend_init()
            _backend_ready = True


def use_extra_buffers() -> bool:
    """llama.cpp's extra buffer types repack Q4_0/Q4_K weights for fast multi-token GEMM — the verify batch and
    a Q4_0 drafter gain 25-40% — but a build with AMX kernels segfaults in them on VMs that advertise AMX
    (SPEC §6). Our set-up builds with AMX off; a build that has AMX keeps them off. RELAXTUI_EXTRA_BUFTS=0/1
    overrides."""
    forced = envvars.optional_flag("RELAXTUI_EXTRA_BUFTS")
    if forced is not None:
        return forced
    _init_backend()
    info = _llama.llama_print_system_info().decode(errors="replace")
    return "AMX" not in info


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


class LlamaModel:
    """One GGUF model with one context: tokenise, decode a batch with chosen logits rows, roll back.
    ``n_ctx`` is per sequence: the context holds ``n_seq × n_ctx`` tokens."""

    def __init__(self, path: str | os.PathLike[str], *, n_ctx: int = 4096, n_threads: int | None = None,
                 n_gpu_layers: int = 0, n_batch: int = 512, n_seq: int = 1) -> None:
        self.path = Path(path)
        self.header = read_header(self.path)  # clear error for a missing or non-GGUF file
        if n_ctx < 16:
            raise UserError(f"--ctx-size must be at least 16 (got {n_ctx})")
        if not 1 <= n_seq <= _llama.llama_max_parallel_sequences():
            raise UserError(f"--parallel must be in 1..{_llama.llama_max_parallel_sequences()} (got {n_seq})")
        _init_backend()
        model_params = _llama.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        model_params.use_extra_bufts = use_extra_buffers()
        from relaxtui.engine.gguf_check import check_loadable  # hyper-parameters llama.cpp would abort on
        check_loadable(self.header)
        self._model = _llama.llama_model_load_from_file(os.fsencode(self.path), model_params)
        if not self._model:
            raise UserError(f"llama.cpp could not load the model: {self.path}")
        self._vocab = _llama.llama_model_get_vocab(self._model)
        n_ctx = min(n_ctx, max(16, _llama.llama_model_n_ctx_train(self._model)))
        threads = n_threads or default_threads()
        ctx_params = _llama.llama_context_default_params()
        ctx_params.n_ctx = n_ctx * n_seq
        ctx_params.n_batch = min(n_batch, n_ctx * n_seq)
        ctx_params.n_ubatch = min(n_batch, n_ctx * n_seq)
        ctx_params.n_seq_max = n_seq
        ctx_params.kv_unified = False
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.no_perf = True
        self._ctx = _llama.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            _llama.llama_model_free(self._model)
            raise UserError(f"llama.cpp could not create a context of {n_seq} × {n_ctx} tokens for {self.path}")
        # llama.cpp may pad the context (to a multiple of 256); the limit the user asked for is the one we keep
        self.n_seq = n_seq
        self.n_ctx = min(n_ctx, _llama.llama_n_ctx(self._ctx) // n_seq)
        self.n_batch = ctx_params.n_batch  # never hand llama_decode more tokens than the context's n_batch
        self.n_vocab = _llama.llama_vocab_n_tokens(self._vocab)
        self._batch = _llama.llama_batch_init(self.n_batch, 0, 1)
        self._memory = _llama.llama_get_memory(self._ctx)
        # the tokens in each sequence's KV cache, in order (what prefix reuse compares against)
        self._seqs: list[list[int]] = [[] for _ in range(n_seq)]
        self.decode_seconds = 0.0  # time spent inside llama_decode, for the Python-overhead share

    # -- vocabulary -------------------------------------------------------------------------------
    @property
    def vocab_type(self) -> int:
        return int(_llama.llama_vocab_type(self._vocab))

    @property
    def bos(self) -> int:
        return int(_llama.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(_llama.llama_vocab_eos(self._vocab))

    @property
    def add_bos(self) -> bool:
        return bool(_llama.llama_vocab_get_add_bos(self._vocab))

    def is_eog(self, token: int) -> bool:
        return bool(_llama.llama_vocab_is_eog(self._vocab, token))

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry's raw text (as llama.cpp compares vocabularies), not the rendered piece."""
        return _llama.llama_vocab_get_text(self._vocab, token) or b""

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        n = _llama.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = _llama.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:n]

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (_llama.llama_token * capacity)()
        n = _llama.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            tokens = (_llama.llama_token * capacity)()
            n = _llama.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
        return list(tokens[:n])

    def metadata(self, key: str) -> str | None:
        value = self.header.metadata.get(key)
        return value if isinstance(value, str) else None

    # -- decoding ---------------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Tokens currently in sequence 0's KV cache."""
        return len(self._seqs[0])

    @property
    def cached_tokens(self) -> Sequence[int]:
        return self._seqs[0]

    def tokens_of(self, seq: int) -> Sequence[int]:
        return self._seqs[seq]

    def sequence(self, seq: int) -> SequenceView:
        """Sequence ``seq`` as a one-sequence backend (prefill, drafters and timings run on it unchanged)."""
        return SequenceView(self, seq)

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> np.ndarray:
        """Append ``tokens`` at sequence 0's position; return logits for ``logits_rows`` (indices into
        ``tokens``, negative allowed) as a float32 array [len(logits_rows), n_vocab]. Chunks by n_batch."""
        return self.decode_many([SeqDecode(0, tokens, logits_rows)])[0]

    def decode_many(self, items: Sequence[SeqDecode]) -> list[np.ndarray]:
        """One batch for many sequences (as llama.cpp's `parallel` example): each item's tokens go at its
        sequence's own positions; returns one [len(item.logits_rows), n_vocab] array per item."""
        blocks, orders = [], []
        flat: list[tuple[int, int, int, np.ndarray | None]] = []  # (seq, token, position, logits row to fill)
        for item in items:
            cached = self._seqs[item.seq]
            if len(cached) + len(item.tokens) > self.n_ctx:
                raise ContextFull(len(cached), len(item.tokens), self.n_ctx)
            rows, order = row_order(len(item.tokens), item.logits_rows)
            block = np.empty((len(rows), self.n_vocab), dtype=np.float32)
            blocks.append(block)
            orders.append(order)
            slot = {row: i for i, row in enumerate(rows)}
            flat += [(item.seq, int(t), len(cached) + j, block[slot[j]] if j in slot else None)
                     for j, t in enumerate(item.tokens)]
        for start in range(0, len(flat), self.n_batch):
            self._decode_chunk(flat[start:start + self.n_batch])
        return [block[order] if order != list(range(len(block))) else block
                for block, order in zip(blocks, orders, strict=True)]

    def _decode_chunk(self, chunk: Sequence[tuple[int, int, int, np.ndarray | None]]) -> None:
        batch = self._batch
        batch.n_tokens = len(chunk)
        for j, (seq, token, position, target) in enumerate(chunk):
            batch.token[j] = token
            batch.pos[j] = position
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = seq
            batch.logits[j] = target is not None
        started = time.perf_counter()
        status = _llama.llama_decode(self._ctx, batch)
        self.decode_seconds += time.perf_counter() - started
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")
        for j, (seq, token, _, target) in enumerate(chunk):
            self._seqs[seq].append(token)
            if target is not None:
                target[:] = np.ctypeslib.as_array(_llama.llama_get_logits_ith(self._ctx, j), shape=(self.n_vocab,))

    def rollback(self, position: int) -> None:
        """Drop every cached token of sequence 0 at ``position`` and after (the cache keeps [0, position))."""
        self.rollback_seq(0, position)

    def rollback_seq(self, seq: int, position: int) -> None:
        if position < len(self._seqs[seq]):
            _llama.llama_memory_seq_rm(self._memory, seq, position, -1)
            del self._seqs[seq][position:]

    def reset(self) -> None:
        _llama.llama_memory_clear(self._memory, True)
        for tokens in self._seqs:
            tokens.clear()

    def clear_seq(self, seq: int) -> None:
        """Empty one sequence (a finished slot, before it is refilled); the others keep their caches."""
        _llama.llama_memory_seq_rm(self._memory, seq, -1, -1)
        self._seqs[seq].clear()

    def share_prefix(self, src: int, dst: int, length: int) -> None:
        """Make sequence ``dst`` hold the first ``length`` cached tokens of ``src`` without decoding them (a
        prompt another sequence already prefilled). Each sequence has its own KV stream and llama.cpp copies
        only whole streams: copy it all, then drop the rest. The data copy runs at the start of the next decode
        on this context (a memcpy of the stream, ~0.1 s for the 1.5B verifier at 4096 tokens per sequence, which
        that decode's time includes) — against seconds of prefill on a CPU."""
        if src == dst or length > len(self._seqs[src]):
            raise ValueError(f"cannot share {length} tokens of sequence {src} with sequence {dst}")
        _llama.llama_memory_seq_cp(self._memory, src, dst, -1, -1)  # replaces all of dst's cells
        if not _llama.llama_memory_seq_rm(self._memory, dst, length, -1):
            raise RuntimeError("llama.cpp cannot trim a copied sequence of this model (recurrent memory)")
        self._seqs[dst][:] = self._seqs[src][:length]  # in place: cached_tokens hands out this list

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            _llama.llama_batch_free(self._batch)
            _llama.llama_free(self._ctx)
            _llama.llama_model_free(self._model)
            self._ctx = None

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

