"""The verifier's own multi-token-prediction (MTP, "nextn") head as a drafter, through llama.cpp's MTP context.

How llama.cpp drives it (common/speculative.cpp, ``common_speculative_impl_draft_mtp``; src/models/qwen35.cpp
``graph_mtp``): the MTP block is one extra decoder layer stored after the trunk (``block_count`` counts it,
``{arch}.nextn_predict_layers`` says how many). Its input at position ``p`` is the pair (token ``x_p``, the
verifier's hidden row ``h_{p-1}``: its final hidden state after the output norm, for the token before), its
output predicts ``x_{p+1}``, and it attends over its own KV cache of such pairs. So:

- after the verifier decodes tokens, the head "catches up": it decodes the pairs for those positions (no logits)
  so its KV cache mirrors the verifier's prefix — here lazily, at the next draft, and only for the tokens the
  verifier kept (rejected drafts are never decoded by the head, so nothing of it needs rolling back);
- a draft starts from the token the verifier will decode next (``last``) paired with ``h`` of the verifier's last
  cached token, and returns the logits of the first draft token; each further step feeds the token just drafted
  with the head's *own* hidden row of the step before (chained, as llama.cpp does for a single head);
- the draft steps' KV entries are speculative and dropped at the next catch-up, where the real pairs (with the
  verifier's hidden rows of the verified tokens) replace them. The first step's pair is exactly the real pair of
  position ``n`` (``last`` with ``h_{n-1}``), so it is kept when the verifier does cache ``last`` there.

The target context outputs the hidden row of every token (``llama_set_embeddings_nextn(ctx, True, False)``);
``LlamaModel(mtp=True)`` keeps those rows per sequence in a ``HiddenStore`` until the head has consumed them.
The head's context is ``LLAMA_CONTEXT_TYPE_MTP`` on the same model (or on a separate MTP-only GGUF: the same
metadata with only the MTP block's tensors, which llama.cpp's qwen35 loader accepts), decoded through
``llama_batch_ext_*`` + ``llama_process``; one batch both catches a sequence up and takes its first draft step.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp as _llama  # (importable: relaxtui.engine.llama, imported above, checked it is installed)
import numpy as np

from relaxtui.checks import BadValue
from relaxtui.engine.gguf import read_header
from relaxtui.engine.gguf_check import mtp_layers
from relaxtui.engine.llama import LlamaModel, default_threads, init_backend, use_extra_buffers
from relaxtui.engine.memory import RollbackError
from relaxtui.errors import ContextFull, UserError

try:
    from llama_cpp import llama_cpp_ext as llama_ext
except ImportError as exc:  # pragma: no cover - an older llama-cpp-python
    raise UserError("this llama-cpp-python has no MTP bindings (llama_cpp_ext); install 0.3.36 (see README)") from exc


# Architectures with an MTP graph (LLM_GRAPH_TYPE_DECODER_MTP in src/models/*.cpp, llama-cpp-python 0.3.36): on
# any other, an MTP context would silently run the trunk's graph.
MTP_ARCHS = frozenset({"bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe",
                       "glm5-next", "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35"})


class HiddenStore:
    """The verifier's nextn hidden rows, per sequence, for positions [``kept_from(seq)``, cached length): what
    the MTP head needs to catch up. The head drops what it has consumed (``drop_before``), so this holds the
    tokens decoded since the last draft (a prompt, until its first draft) plus one row."""

    def __init__(self, n_seq: int, n_embd: int) -> None:
        self.n_embd = n_embd
        self._rows: list[list[np.ndarray]] = [[] for _ in range(n_seq)]
        self._start = [0] * n_seq
        self._low = [0] * n_seq  # the sequence's cache is unchanged below this since the head's last look
        self._last = [0] * n_seq  # where the sequence's last decode started
        self.consumer: object | None = None  # the one MTP head that drops what it consumed

    def read(self, ctx: int, n_tokens: int) -> np.ndarray:
        """The rows of the last decode (one per token, in batch order), copied: the next decode overwrites them."""
        pointer = llama_ext.llama_get_embeddings_nextn(ctx)
        if not pointer:
            raise RuntimeError("llama.cpp returned no nextn hidden rows (was the context set to output them?)")
        return np.ctypeslib.as_array(pointer, shape=(n_tokens, self.n_embd)).copy()

    def append(self, seq: int, row: np.ndarray) -> None:
        self._rows[seq].append(row)

    def kept_from(self, seq: int) -> int:
        return self._start[seq]

    def end(self, seq: int) -> int:
        return self._start[seq] + len(self._rows[seq])

    def rows(self, seq: int, start: int, stop: int) -> np.ndarray:
        """Rows of positions [start, stop) as [stop - start, n_embd]; position -1 (before the first token) is a
        zero row, as llama.cpp's driver starts a sequence."""
        first = max(start, 0)
        if start < -1 or stop > self.end(seq) or first < stop and first < self._start[seq]:
            raise RollbackError(f"hidden rows {start}..{stop} of sequence {seq} are not kept "
                                f"(kept: {self._start[seq]}..{self.end(seq)})")
        out = np.zeros((max(0, stop - start), self.n_embd), dtype=np.float32)
        if stop > first:
            out[first - start:] = np.stack(self._rows[seq][first - self._start[seq]:stop - self._start[seq]])
        return out

    def decoding(self, seq: int, position: int) -> None:
        """A decode of ``seq`` starts at ``position``."""
        self._last[seq] = position

    def last_decode(self, seq: int) -> np.ndarray:
        """The rows of the sequence's last decode that are still cached (and not yet consumed by the head)."""
        return self.rows(seq, max(min(self._last[seq], self.end(seq)), self._start[seq]), self.end(seq))

    def unchanged_below(self, seq: int) -> int:
        """Positions below this hold the same tokens as when the head last called ``seen(seq)``."""
        return self._low[seq]

    def seen(self, seq: int) -> None:
        self._low[seq] = self.end(seq)

    def truncate(self, seq: int, position: int) -> None:
        """The verifier rolled back to ``position`` tokens."""
        self._low[seq] = min(self._low[seq], position)
        if position <= self._start[seq]:
            self._rows[seq], self._start[seq] = [], position
        else:
            del self._rows[seq][position - self._start[seq]:]

    def drop_before(self, seq: int, position: int) -> None:
        cut = min(max(0, position - self._start[seq]), len(self._rows[seq]))
        del self._rows[seq][:cut]
        self._start[seq] += cut

    def clear(self, seq: int) -> None:
        self._rows[seq], self._start[seq], self._low[seq] = [], 0, 0

    def copy(self, src: int, dst: int, length: int) -> None:
        start = min(self._start[src], length)
        self._rows[dst], self._start[dst], self._low[dst] = self._rows[src][:length - start], start, 0


Choose = Callable[[np.ndarray], int]


def greedy(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


class MtpHead:
    """The MTP head of a verifier loaded with ``LlamaModel(..., mtp=True)``, for the verifier's ``n_seq``
    sequences. Per round, for each drafting sequence: ``first(seq, last)`` gives q for the first draft token
    (catching the head up with what the verifier kept), ``step(seq, token)`` q for the next, chained; then the
    verifier decodes ``[last, drafts]`` and rolls back as usual. Nothing else to call: the head follows the
    verifier's cache (rollbacks, cleared sequences, copied prompts) by itself. ``path``: a separate GGUF that
    holds the MTP layers (alone, or with a trunk); default the verifier's own."""

    def __init__(self, model: LlamaModel, path: str | os.PathLike[str] | None = None, *,
                 n_threads: int | None = None, n_gpu_layers: int = 0) -> None:
        if model.hidden is None:
            raise UserError(f"{model.path.name} was loaded without its MTP layers (LlamaModel(..., mtp=True))")
        if model.hidden.consumer is not None:
            raise RuntimeError(f"{model.path.name} already has an MTP head (one per verifier: it consumes the rows)")
        if model.header.architecture not in MTP_ARCHS:
            raise UserError(f"llama.cpp has no MTP head for {model.header.architecture} models ({model.path.name})")
        self.model = model
        self.path = Path(path) if path is not None else model.path
        self._own_model = None
        head_model = model._model
        if path is not None:
            head_model = self._own_model = self._load(self.path, model, n_gpu_layers)
        try:
            n_layers = int(_llama.llama_model_n_layer_nextn(head_model))
            if n_layers != 1:
                raise UserError(f"{self.path.name} has {n_layers} MTP layers; relaxtui drives exactly one MTP head "
                                "(chained heads are not supported yet)")
            self._ctx = self._context(head_model, model, n_threads)
        except BaseException:
            if self._own_model:
                _llama.llama_model_free(self._own_model)
            raise
        self._batch = _llama.llama_batch_ext_init(self._ctx)
        self._memory = _llama.llama_get_memory(self._ctx)
        self.n_seq, self.n_ctx, self.n_vocab, self.n_embd = model.n_seq, model.n_ctx, model.n_vocab, model.n_embd
        self.n_batch = int(_llama.llama_n_batch(self._ctx))
        # per sequence: the tokens whose real pairs (x_p, h_{p-1}) fill the head's cache at 0..len-1; how many
        # positions the cache holds (more while a draft is in it); the head's own last hidden row (chaining)
        self._kept: list[list[int]] = [[] for _ in range(self.n_seq)]
        self._cached = [0] * self.n_seq
        self._chain: list[np.ndarray | None] = [None] * self.n_seq
        self.decode_seconds = 0.0  # time inside llama_process on the head's context
        self.copied_bytes = 0  # logits and hidden rows copied out of llama.cpp
        self.calls = 0  # llama_process calls
        self.rows = 0  # token rows decoded (catch-up pairs and draft steps)
        model.hidden.consumer = self
        model.follow(shared=self._shared, closing=self.close)

    @staticmethod
    def _load(path: Path, verifier: LlamaModel, n_gpu_layers: int) -> int:
        from relaxtui.engine.gguf_check import check_loadable
        header = check_loadable(path)
        if mtp_layers(header) == 0:
            raise UserError(f"{path.name} has no MTP layers (nextn_predict_layers is 0)")
        if header.architecture != verifier.header.architecture:
            raise UserError(f"the MTP layers in {path.name} are for {header.architecture}, the verifier "
                            f"{verifier.path.name} is {verifier.header.architecture}")
        init_backend()
        params = _llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = use_extra_buffers()
        params.load_mtp = True
        loaded = _llama.llama_model_load_from_file(os.fsencode(path), params)
        if not loaded:
            raise UserError(f"llama.cpp could not load the MTP layers: {path}")
        width = int(_llama.llama_model_n_embd_out(loaded))
        vocab = int(_llama.llama_vocab_n_tokens(_llama.llama_model_get_vocab(loaded)))
        if (width, vocab) != (verifier.n_embd, verifier.n_vocab):
            _llama.llama_model_free(loaded)
            raise UserError(f"the MTP layers in {path.name} (width {width}, vocabulary {vocab}) do not fit the "
                            f"verifier {verifier.path.name} (width {verifier.n_embd}, vocabulary {verifier.n_vocab})")
        return loaded

    def _context(self, head_model: int, model: LlamaModel, n_threads: int | None) -> int:
        threads = n_threads or default_threads()
        params = _llama.llama_context_default_params()
        params.ctx_type = _llama.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = model._ctx
        params.n_ctx = model.n_ctx * model.n_seq
        params.n_batch = params.n_ubatch = model.n_batch
        params.n_seq_max = model.n_seq
        params.n_rs_seq = 0
        params.kv_unified = False
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        ctx = _llama.llama_init_from_model(head_model, params)
        if not ctx:
            raise UserError(f"llama.cpp could not create an MTP context for {self.path.name}")
        if llama_ext.llama_get_ctx_other(ctx) == model._ctx:  # the head would share the verifier's KV cache
            _llama.llama_free(ctx)
            raise UserError(f"{self.path.name}: MTP heads that share the verifier's cache (Gemma 4 assistants) "
                            "are not supported yet")
        # hidden rows for chaining: unmasked, i.e. one per batch row. Masked ("only the logits rows"), llama.cpp's
        # qwen35 MTP graph hands over its first n_outputs rows, not the output rows — right only when every row is
        # an output, as in llama.cpp's driver but not in a batch that also catches the head up (measured).
        llama_ext.llama_set_embeddings_nextn(ctx, True, False)
        return ctx

    # -- following the verifier --------------------------------------------------------------------------------
    def sync(self, seqs: Sequence[int] | None = None) -> None:
        """Catch the head up with the verifier's cache now (e.g. after a long prefill, to release its hidden
        rows); drafting does this itself."""
        self._run([(seq, None) for seq in (range(self.n_seq) if seqs is None else seqs)])

    def _drop(self, seq: int, keep: int) -> None:
        if self._cached[seq] > keep:
            if not _llama.llama_memory_seq_rm(self._memory, seq, keep, -1):  # a plain KV cache: always works
                raise RollbackError(f"llama.cpp refused to trim the MTP head's cache of sequence {seq} to {keep}")
            self._cached[seq] = keep
        del self._kept[seq][keep:]
        self._chain[seq] = None

    def _shared(self, src: int, dst: int, length: int) -> None:
        """The verifier copied a prompt: copy the head's cache of it too (whole stream, then trimmed)."""
        keep = min(length, len(self._kept[src]))
        _llama.llama_memory_seq_cp(self._memory, src, dst, -1, -1)
        self._cached[dst] = self._cached[src]
        self._kept[dst] = self._kept[src][:]
        self._drop(dst, keep)

    # -- drafting ----------------------------------------------------------------------------------------------
    def first(self, items: Sequence[tuple[int, int]]) -> np.ndarray:
        """For each (seq, last) — ``last`` the token the verifier decodes next at the end of ``seq`` — q of the
        first draft token: logits [len(items), n_vocab]."""
        return self._run(list(items))

    def step(self, items: Sequence[tuple[int, int]]) -> np.ndarray:
        """For each (seq, token) — ``token`` the draft token just chosen from that sequence's last q — q of the
        next draft token, from the pair (token, the head's hidden row of the step before)."""
        batch = []
        for seq, token in items:
            chain = self._chain[seq]
            if chain is None:
                raise RuntimeError(f"MTP step for sequence {seq} without a first step since the verifier moved")
            if self._cached[seq] >= self.n_ctx:
                raise ContextFull(self._cached[seq], 1, self.n_ctx)
            batch.append((seq, token, self._cached[seq], chain, True))
        logits = self._process(batch)
        for seq, _ in items:
            self._cached[seq] += 1
        return logits

    def propose(self, items: Sequence[tuple[int, int]], n: int | Sequence[int],
                choose: Choose = greedy) -> list[tuple[list[int], np.ndarray]]:
        """Draft ``n`` tokens (one count, or one per item) for each (seq, last), each chosen from its q by
        ``choose`` (greedy by default); returns per item (tokens, q rows [n, n_vocab])."""
        counts = [n] * len(items) if isinstance(n, int) else list(n)
        out: list[tuple[list[int], list[np.ndarray]]] = [([], []) for _ in items]
        live = [i for i, count in enumerate(counts) if count > 0]
        logits = self.first([items[i] for i in live]) if live else np.empty((0, self.n_vocab), np.float32)
        while live:
            for i, row in zip(live, logits, strict=True):
                out[i][0].append(choose(row))
                out[i][1].append(row)
            live = [i for i in live if len(out[i][0]) < counts[i]]
            if live:
                logits = self.step([(items[i][0], out[i][0][-1]) for i in live])
        return [(tokens, np.stack(rows) if rows else np.empty((0, self.n_vocab), np.float32))
                for tokens, rows in out]

    def _run(self, items: list[tuple[int, int | None]]) -> np.ndarray:
        """Catch the named sequences up with the verifier (the pairs of the tokens it cached since), then, for
        items with a token, decode the first draft pair; one llama_process where it fits in a batch."""
        store = self.model.hidden
        if store is None:  # (__init__ refuses a verifier without one, and a verifier keeps its store)
            raise RuntimeError(f"{self.model.path.name} has no hidden rows for its MTP head")
        catch_up, drafts = [], []
        for seq, last in items:
            tokens, kept = self.model.tokens_of(seq), self._kept[seq]
            low = min(store.unchanged_below(seq), len(kept), len(tokens))  # compare only the rest
            same = next((i for i in range(low, min(len(kept), len(tokens))) if kept[i] != tokens[i]),
                        min(len(kept), len(tokens)))
            self._drop(seq, same)
            if len(tokens) > same:
                hidden = store.rows(seq, same - 1, len(tokens) - 1)
                catch_up += [(seq, tokens[p], p, hidden[p - same], False) for p in range(same, len(tokens))]
            if last is not None:
                if len(tokens) >= self.n_ctx:
                    raise ContextFull(len(tokens), 1, self.n_ctx)
                drafts.append((seq, last, len(tokens), store.rows(seq, len(tokens) - 1, len(tokens))[0], True))
        if len(catch_up) + len(drafts) > self.n_batch:
            for start in range(0, len(catch_up), self.n_batch):
                self._process(catch_up[start:start + self.n_batch])
            catch_up = []
        logits = self._process(catch_up + drafts)[-len(drafts):] if drafts else self._process(catch_up)
        for seq, _ in items:
            tokens = self.model.tokens_of(seq)
            self._kept[seq] = list(tokens)
            self._cached[seq] = len(tokens)
            store.drop_before(seq, len(tokens) - 1)  # the last row starts the next draft
            store.seen(seq)
        for seq, last, *_ in drafts:
            self._kept[seq].append(last)  # the real pair of position n, kept while the verifier caches `last`
            self._cached[seq] += 1
        return logits

    def _process(self, rows: Sequence[tuple[int, int, int, np.ndarray, bool]]) -> np.ndarray:
        """Decode (seq, token, position, hidden row, wants logits) rows; logits of the wanted ones, in order; the
        head's hidden row of each wanted row becomes its sequence's chain row."""
        if not rows:
            return np.empty((0, self.n_vocab), np.float32)
        batch = self._batch
        _llama.llama_batch_ext_clear(batch)
        position = _llama.llama_pos(0)
        for seq, token, pos, hidden, wanted in rows:
            idx = _llama.llama_batch_ext_add_token(batch, seq, token)
            if idx < 0:
                raise RuntimeError(f"llama_batch_ext_add_token failed with {idx}")
            position.value = pos
            row = np.ascontiguousarray(hidden, dtype=np.float32)
            embd = _llama.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
            if not (_llama.llama_batch_ext_set_pos(batch, idx, ctypes.byref(position)) and
                    _llama.llama_batch_ext_set_embd_token(batch, idx, embd) and
                    _llama.llama_batch_ext_set_output_logits(batch, idx, wanted)):
                raise RuntimeError("could not build the MTP batch")
        started = time.perf_counter()
        status = _llama.llama_process(self._ctx, _llama.LLAMA_PROCESS_TYPE_DECODE, batch)
        self.decode_seconds += time.perf_counter() - started
        self.calls += 1
        self.rows += len(rows)
        if status != 0:
            raise RuntimeError(f"llama_process (MTP head) failed with status {status}")
        wanted_rows = [(i, seq) for i, (seq, *_rest, wanted) in enumerate(rows) if wanted]
        out = np.empty((len(wanted_rows), self.n_vocab), dtype=np.float32)
        for k, (i, seq) in enumerate(wanted_rows):
            out[k] = np.ctypeslib.as_array(_llama.llama_get_logits_ith(self._ctx, i), shape=(self.n_vocab,))
            chain = llama_ext.llama_get_embeddings_nextn_ith(self._ctx, i)
            if not chain:
                raise RuntimeError("llama.cpp returned no hidden row for an MTP step")
            self._chain[seq] = np.ctypeslib.as_array(chain, shape=(self.n_embd,)).copy()
        self.copied_bytes += out.nbytes + len(wanted_rows) * self.n_embd * 4
        return out

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            _llama.llama_batch_ext_free(self._batch)
            _llama.llama_free(self._ctx)
            self._ctx = 0  # (NULL: closed)
            if self._own_model:
                _llama.llama_model_free(self._own_model)
                self._own_model = None
            if self.model.hidden is not None and self.model.hidden.consumer is self:
                self.model.hidden.consumer = None

    def __enter__(self) -> MtpHead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def check_mtp_files(verifier: Path, drafter: Path | None) -> None:
    """The MTP layers a run drafts with, from the GGUF headers alone (before any model loads): the verifier's own,
    or an MTP-only GGUF's for the verifier's architecture."""
    target = read_header(verifier)
    if drafter is None:
        if not mtp_layers(target):
            hint = ("an MTP-only GGUF for it can be given as the drafter" if target.architecture in MTP_ARCHS else
                    f"llama.cpp has no MTP head for {target.architecture} models")
            raise BadValue("draft_kind", f"mtp: {verifier.name} has no MTP layers ({target.architecture}."
                                         f"nextn_predict_layers is 0): it cannot draft for itself ({hint})")
        return
    head = read_header(drafter)
    if not mtp_layers(head):
        raise BadValue("draft_kind", f"mtp: {drafter.name} has no MTP layers ({head.architecture}.nextn_predict_layers "
                                     "is 0): it is no MTP drafter (a small LM drafts with {draft_kind} model)",
                       ("draft_kind",))
    if head.architecture != target.architecture:
        raise UserError(f"the MTP layers in {drafter.name} are for {head.architecture}, the verifier {verifier.name} "
                        f"is {target.architecture}")
