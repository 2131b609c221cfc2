"""A thin, explicit wrapper over llama-cpp-python's low-level API (docs/architecture.md#llamacpp-pitfalls).

Why low-level: ``Llama(logits_all=True)`` and ``draft_model=`` allocate n_ctx × n_vocab floats. Here a
decode asks for logits only on the rows the caller names, copies exactly those rows out, and the KV cache
is rolled back with ``llama_memory_seq_rm``. A context holds ``n_seq`` sequences (llama.cpp's n_seq_max), each
with its own ``n_ctx`` tokens of KV cache in its own stream (``kv_unified`` off: a sequence attends only to its
own cells, and cells freed in one never move another's); every call names the sequence it acts on.

Recurrent and hybrid models (Qwen3.5, Qwen3-Next…) roll back through llama.cpp's recurrent-state snapshots,
bounded per sequence (``relaxtui.engine.memory``); every ``llama_memory_seq_rm`` result is checked. Batches are
decoded and their rows read back in ``relaxtui.engine.batching``. With ``mtp=True`` the context also keeps each
token's nextn hidden row for the model's MTP head (``relaxtui.engine.mtp``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from relaxtui import envvars
from relaxtui.checks import BadValue
from relaxtui.engine import native
from relaxtui.engine.api import MAX_DRAFT, Rows, RowSpec, SeqDecode
from relaxtui.engine.candidates import CandidateSamplers
from relaxtui.engine.chain import ChainDecoding
from relaxtui.engine.gguf import read_header
from relaxtui.engine.memory import DEFAULT_ROLLBACK_DEPTH, SequenceMemory, Snapshots
from relaxtui.engine.thinking import Thinking, find_thinking
from relaxtui.errors import UserError

WARMUP_MIN_ROWS = 2  # the narrowest warm-up block: llama.cpp's (BOS, EOS)

if TYPE_CHECKING:
    from relaxtui.engine.mtp import HiddenStore

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


def init_backend() -> None:
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
    (docs/architecture.md#llamacpp-pitfalls). Our set-up builds with AMX off; a build that has AMX keeps them off.
    RELAXTUI_EXTRA_BUFTS=0/1 overrides."""
    forced = envvars.optional_flag("RELAXTUI_EXTRA_BUFTS")
    if forced is not None:
        return forced
    init_backend()
    info = _llama.llama_print_system_info().decode(errors="replace")
    return "AMX" not in info


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


class LlamaModel(SequenceMemory, ChainDecoding):
    """One GGUF model with one context: tokenise, decode a batch with chosen logits rows, roll back, draft in one
    call (``decode_chain``). ``n_ctx`` is per sequence: the context holds ``n_seq × n_ctx`` tokens."""

    def __init__(self, path: str | os.PathLike[str], *, n_ctx: int = 4096, n_threads: int | None = None,
                 n_gpu_layers: int = 0, n_batch: int = 512, n_seq: int = 1,
                 rollback_depth: int = DEFAULT_ROLLBACK_DEPTH, mtp: bool = False,
                 warmup: bool | None = None) -> None:
        """``rollback_depth``: the longest draft this context will verify and roll back (recurrent-state snapshots
        per sequence on a recurrent/hybrid model; nothing on a transformer). ``mtp``: load the GGUF's MTP (nextn)
        layers and keep each decoded token's nextn hidden row, for ``relaxtui.engine.mtp.MtpHead``. ``warmup``:
        decode one throwaway block as wide as the widest verify ``rollback_depth`` announces, at load
        (``_warm_up``), as llama.cpp's tools warm up; None: unless ``RELAXTUI_WARMUP=0`` (llama.cpp's
        ``--no-warmup``)."""
        warm_env = envvars.flag("RELAXTUI_WARMUP", True)  # a bad value: before any load
        native.library()  # (RELAXTUI_NATIVE too)
        warm = warm_env if warmup is None else warmup
        self.path = Path(path)
        self.header = read_header(self.path)  # clear error for a missing or non-GGUF file
        if n_ctx < 16:
            raise BadValue("ctx_size", f"must be at least 16 (got {n_ctx})")
        if not 1 <= n_seq <= _llama.llama_max_parallel_sequences():
            raise BadValue("parallel", f"must be in 1..{_llama.llama_max_parallel_sequences()} (got {n_seq})")
        if rollback_depth < 0:
            raise UserError(f"rollback depth must be >= 0 (got {rollback_depth})")
        init_backend()
        model_params = _llama.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        model_params.use_extra_bufts = use_extra_buffers()
        model_params.load_mtp = mtp
        from relaxtui.engine.gguf_check import check_loadable  # hyper-parameters llama.cpp would abort on
        check_loadable(self.header)
        self._model = _llama.llama_model_load_from_file(os.fsencode(self.path), model_params)
        if not self._model:
            raise UserError(f"llama.cpp could not load the model: {self.path}")
        self._vocab = _llama.llama_model_get_vocab(self._model)
        self._eog: dict[int, bool] = {}  # llama.cpp's answers per token id (is_eog, token_piece)
        self._pieces: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})  # [special] -> token id -> piece
        self.n_mtp_layers = int(_llama.llama_model_n_layer_nextn(self._model))
        from relaxtui.engine.mtp import MTP_ARCHS  # (lazy: mtp imports this module)
        # an MTP architecture without MTP layers of its own still keeps hidden rows, for an MTP-only GGUF's head
        if mtp and not self.n_mtp_layers and self.header.architecture not in MTP_ARCHS:
            _llama.llama_model_free(self._model)
            raise UserError(f"{self.path.name} has no MTP layers ({self.header.architecture}.nextn_predict_layers "
                            "is 0): it cannot draft for itself")
        # recurrent state (Mamba, RWKV) or recurrent layers beside attention (Qwen3.5, Nemotron-H): rollback is
        # bounded by the snapshots the context keeps
        self.is_recurrent = bool(_llama.llama_model_is_recurrent(self._model) or
                                 _llama.llama_model_is_hybrid(self._model))
        n_ctx = min(n_ctx, max(16, _llama.llama_model_n_ctx_train(self._model)))
        self._ctx = self._new_context(n_ctx, n_seq, n_batch, n_threads,
                                      min(rollback_depth, n_ctx - 1) if self.is_recurrent else 0)
        # llama.cpp may pad the context (to a multiple of 256); the limit the user asked for is the one we keep
        self.n_seq = n_seq
        self.n_ctx = min(n_ctx, _llama.llama_n_ctx(self._ctx) // n_seq)
        self.n_batch = int(_llama.llama_n_batch(self._ctx))  # never hand llama_decode more tokens than this
        self.n_vocab = _llama.llama_vocab_n_tokens(self._vocab)
        self.n_embd = int(_llama.llama_model_n_embd_out(self._model))
        # recurrent memory: what each sequence can roll back now; None on a KV cache (any rollback works)
        self._snapshots = (Snapshots(int(_llama.llama_n_rs_seq(self._ctx)), n_seq, rollback_depth)
                           if self.is_recurrent else None)
        self._batch = _llama.llama_batch_init(self.n_batch, 0, 1)
        for j in range(self.n_batch):  # one sequence id per token, always; sequence 0 unless a batch says otherwise
            self._batch.n_seq_id[j] = 1
            self._batch.seq_id[j][0] = 0
        # the batch's per-token arrays (each read of a ctypes field makes a new pointer object: read them once)
        self._batch_arrays = (self._batch.token, self._batch.pos, self._batch.logits, self._batch.seq_id)
        self._memory = _llama.llama_get_memory(self._ctx)
        # the tokens in each sequence's KV cache, in order (what prefix reuse compares against)
        self._seqs: list[list[int]] = [[] for _ in range(n_seq)]
        self.hidden: HiddenStore | None = None  # each decoded token's nextn hidden row, for an MTP head
        self._followers: list[tuple[Callable[[int, int, int], None], Callable[[], None]]] = []
        if mtp:
            from relaxtui.engine.mtp import HiddenStore, llama_ext
            llama_ext.llama_set_embeddings_nextn(self._ctx, True, False)  # a row for every token, not only outputs
            self.hidden = HiddenStore(n_seq, self.n_embd)
        self._candidates = CandidateSamplers(self._ctx)  # sequences that get candidate rows, not whole ones
        self._outputs_per_seq = min(self.n_batch, MAX_DRAFT + 1)  # the rows a candidate sequence can output at once
        self.decode_seconds = 0.0  # time spent inside llama_decode, for the Python-overhead share
        self._copied = 0  # whole logits rows and hidden rows copied out of llama.cpp (copied_bytes adds candidates)
        self.warmed_rows = 0  # the warm-up block's width: 0 when skipped or refused
        self._warm_tried = False
        # (a model loaded with warmup=False keeps the block it would warm with, for warm_up; none under
        # RELAXTUI_WARMUP=0)
        self._warm_rows = (min(max(WARMUP_MIN_ROWS, rollback_depth + 1), self._outputs_per_seq, self.n_ctx)
                           if warm or warm_env else 0)
        if warm:
            self.warm_up()

    def warm_up(self) -> None:
        """The load's warm-up block (``_warm_up``) now: for a model loaded with ``warmup=False`` by a face that takes
        input first and warms on its model thread after (chat). Once; nothing under ``RELAXTUI_WARMUP=0``."""
        if not self._warm_tried and self._warm_rows:
            self._warm_tried = True  # (a refused block is not tried again: a later one would clear a live cache)
            self._warm_up(self._warm_rows)

    def _new_context(self, n_ctx: int, n_seq: int, n_batch: int, n_threads: int | None, n_rs_seq: int) -> int:
        threads = n_threads or default_threads()
        ctx_params = _llama.llama_context_default_params()
        # llama.cpp keeps a sequence's last n_rs_seq + 1 tokens in one ubatch and asserts that fits; it caps the
        # batch at the context it is asked for (then pads the context to 256 anyway: asking for more is free)
        ctx_params.n_ctx = max(n_ctx * n_seq, n_rs_seq + 2 if n_rs_seq else 0)
        ctx_params.n_batch = max(min(n_batch, n_ctx * n_seq), n_rs_seq + 2 if n_rs_seq else 0)
        ctx_params.n_ubatch = ctx_params.n_batch
        ctx_params.n_seq_max = n_seq
        ctx_params.n_rs_seq = n_rs_seq
        ctx_params.kv_unified = False
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.no_perf = True
        # a sequence with candidate rows (backend sampling) outputs a whole verify batch (llama.cpp's default is 1);
        # no more: llama.cpp reserves its sampling graph for this many rows per sequence at every change of sampler
        ctx_params.n_outputs_max_per_seq = min(ctx_params.n_batch, MAX_DRAFT + 1)
        ctx = _llama.llama_init_from_model(self._model, ctx_params)
        if not ctx:
            _llama.llama_model_free(self._model)
            snapshots = f" with {n_rs_seq} recurrent-state snapshots per sequence" if n_rs_seq else ""
            raise UserError(f"llama.cpp could not create a context of {n_seq} × {n_ctx} tokens{snapshots} for "
                            f"{self.path}")
        n_rs, n_ubatch = _llama.llama_n_rs_seq(ctx), _llama.llama_n_ubatch(ctx)
        if n_rs and n_ubatch <= n_rs + 1:  # GGML_ASSERT(n_ubatch > n_keep_tail) at the first decode
            _llama.llama_free(ctx)
            _llama.llama_model_free(self._model)
            raise UserError(f"a micro-batch of {n_ubatch} tokens is too small for {n_rs} recurrent-state "
                            f"snapshots: {self.path.name}")
        return ctx

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
        known = self._eog.get(token)
        if known is None:  # (asked per emitted token: a dict remembers what llama.cpp answered)
            known = self._eog[token] = bool(_llama.llama_vocab_is_eog(self._vocab, token))
        return known

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry's raw text (as llama.cpp compares vocabularies), not the rendered piece."""
        return _llama.llama_vocab_get_text(self._vocab, token) or b""

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes ``token`` renders as (asked per emitted token: remembered, the vocabulary never changes)."""
        pieces = self._pieces[special]
        piece = pieces.get(token)
        if piece is None:
            piece = pieces[token] = self._render(token, special)
        return piece

    def _render(self, token: int, special: bool) -> bytes:
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

    @cached_property
    def thinking(self) -> Thinking:
        """The thinking block its tokenizer and chat template mark (engine/thinking.py), found once."""
        return find_thinking(lambda text: self.tokenize(text, add_special=False, parse_special=True),
                             lambda token: self.token_piece(token, special=True), self.header.chat_template)

    def metadata(self, key: str) -> str | None:
        value = self.header.metadata.get(key)
        return value if isinstance(value, str) else None

    # -- decoding ---------------------------------------------------------------------------------
    def tokens_of(self, seq: int) -> Sequence[int]:
        return self._seqs[seq]

    def hidden_of(self, seq: int) -> np.ndarray:
        """The nextn hidden rows [n, n_embd] of ``seq``'s last decode (``mtp=True``), as far as it is still
        cached: what a drafter that reads the verify batch ([last, drafts]) sees after the rollback."""
        if self.hidden is None:
            raise RuntimeError(f"{self.path.name} keeps no hidden rows (load it with mtp=True)")
        return self.hidden.last_decode(seq)

    def _warm_up(self, rows: int) -> None:
        """Decode one throwaway block of ``rows`` tokens, every row an output (on candidate rows where this context
        has them), then forget it. llama.cpp grows its output buffers, its backend-sampling buffers and its graph at
        the first batch that needs them: on this 2-core CPU that added 40-60 ms to a generation's first 9-row
        verify, which a one-shot run of a light drafter pays in its decode time. llama.cpp's own tools decode a
        (BOS, EOS) block at load (``common_init_from_params``), before their clock starts; this warms as wide as the
        verifies ``rollback_depth`` announces, at load, untimed and uncounted. Best effort: a block llama.cpp
        refuses leaves nothing behind (``warmed_rows`` stays 0), and the first real decode says why."""
        token = self.bos if self.bos >= 0 else 0
        token_at, position_at, wants, seq_at = self._batch_arrays
        for j in range(rows):
            token_at[j], position_at[j], wants[j] = token, j, 1
            seq_at[j][0] = 0
        self._batch.n_tokens = rows
        sampled = self.n_seq == 1 and self._candidates.set(0, RowSpec(1))
        try:
            if _llama.llama_decode(self._ctx, self._batch) == 0:
                self.warmed_rows = rows
        finally:
            if sampled:
                self._candidates.set(0, None)
            _llama.llama_memory_clear(self._memory, True)

    @property
    def copied_bytes(self) -> int:
        """Logits rows (whole or candidates) and hidden rows copied out of llama.cpp so far: what rounds move to
        Python."""
        return self._copied + self._candidates.copied_bytes

    def decode(self, seq: int, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> Rows:
        """Append ``tokens`` at sequence ``seq``'s position; return logits for ``logits_rows`` (indices into
        ``tokens``, negative allowed): a float32 array [len(logits_rows), n_vocab], or ``TopLogits`` per row for a
        sequence with candidate rows. Chunks by n_batch."""
        return self.decode_many([SeqDecode(seq, tokens, logits_rows)])[0]

    def set_candidates(self, seq: int, spec: RowSpec | None) -> bool:
        """From the next decode on, hand ``seq``'s logits rows as candidates (``TopLogits``: its top ``spec.k``
        computed by llama.cpp) instead of whole rows; None: whole rows again. False: this build cannot (whole rows
        stay). A context of several sequences keeps whole rows: llama.cpp 0.3.36 hands some rows of the wrong
        token when a micro-batch holds several tokens of non-adjacent sequences (its split_equal path;
        ``scripts/probe_backend_sampling.py --sequences`` shows it), where whole rows stay right."""
        if spec is not None and self.n_seq > 1:
            return False
        return self._candidates.set(seq, spec)

    def close(self) -> None:
        for _, closing in getattr(self, "_followers", ()):
            closing()
        if getattr(self, "_ctx", None):
            _llama.llama_batch_free(self._batch)
            _llama.llama_free(self._ctx)
            if hasattr(self, "_candidates"):
                self._candidates.close()  # (after the context that pointed at its samplers)
            _llama.llama_model_free(self._model)
            self._ctx = 0  # (NULL: closed)

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

