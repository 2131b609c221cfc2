"""Rolling back, copying and checkpointing a context's sequences, exactly: on a KV cache and on recurrent memory.

Recurrent and hybrid models (Qwen3.5, Qwen3-Next, Nemotron-H…) hold one state per sequence instead of a cell per
token, so a rollback needs llama.cpp's recurrent-state snapshots (context parameter ``n_rs_seq``). Their contract,
read from src/llama-memory-recurrent.cpp (``seq_rm``, ``s_copy``), src/models/delta-net-base.cpp and the CPU
``gated_delta_net`` op, and checked on a tiny random qwen35:

- a decode writes snapshot ``s`` = the state ``s`` tokens before the end of that sequence's part of the ubatch,
  for ``s`` < its token count (and ≤ ``n_rs_seq``); llama.cpp keeps a sequence's last ``n_rs_seq + 1`` tokens
  in one ubatch, and asserts ``n_ubatch > n_rs_seq + 1``;
- ``llama_memory_seq_rm(mem, seq, p0, -1)`` then marks ``cell.pos - p0 + 1`` positions removed (the next decode
  reads that snapshot), once: a second partial removal before the next decode is refused, as is one deeper than
  ``n_rs_seq``. A removal within ``n_rs_seq`` that reaches past the last decode's tokens is *accepted* and the
  next decode starts from a stale snapshot (a wrong state, measured: logits off by ~3); so the room is tracked
  here and such a rollback refused before llama.cpp sees it;
- deeper than the snapshots, a rollback restores a saved copy of the recurrent state and trims the KV cells (what
  llama-server does with a "speculative checkpoint": ``llama_state_seq_*_ext`` with ``PARTIAL_ONLY``, then
  ``llama_memory_seq_rm``); the tokens kept after the checkpoint are then decoded again;
- ``llama_memory_seq_cp`` shares the source's state cell (copied on the first decode of either sequence), so
  only a whole sequence with no removal pending can be copied, and neither side can roll back until it decodes.
  The destination's own pending removal survives the copy, so it is cleared first.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from relaxtui.checks import BadValue
from relaxtui.errors import UserError

try:
    import llama_cpp as _llama
except ImportError as exc:  # pragma: no cover - set-up problem, not a code path
    raise UserError("llama-cpp-python is not installed; run scripts/bootstrap.py (see README)") from exc

if TYPE_CHECKING:
    from relaxtui.engine.mtp import HiddenStore

DEFAULT_ROLLBACK_DEPTH = 16  # snapshots per sequence unless told: pass the run's largest N (each is a state copy)
# llm_arch_supports_rs_rollback (src/llama-arch.cpp): elsewhere llama.cpp clamps n_rs_seq to 0
SNAPSHOT_ARCHS = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                            "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})


class RollbackError(RuntimeError):
    """A rollback (or prompt copy) the model's memory cannot do exactly. The loop checks ``can_rollback`` /
    ``require_rollback`` first, so reaching this is a bug, never a silently wrong state."""


@dataclass(frozen=True)
class Checkpoint:
    """A sequence's recurrent state saved at ``tokens`` (empty ``state`` on a KV cache, which needs none)."""

    seq: int
    tokens: tuple[int, ...]
    state: bytes


class Snapshots:
    """The rollback room of each sequence of a recurrent context with ``limit`` snapshots per sequence."""

    def __init__(self, limit: int, n_seq: int, requested: int) -> None:
        self.limit, self.requested = limit, requested  # requested: the depth asked for (clamped to the context)
        self._room = [0] * n_seq  # trailing tokens a rollback can remove now
        self._pending = [False] * n_seq  # a removal waits for the sequence's next decode

    def decoded(self, seq: int, count: int) -> None:
        """A decode put ``count`` tokens of ``seq`` in one llama_decode call."""
        self._room[seq], self._pending[seq] = min(count - 1, self.limit), False

    def rolled_back(self, seq: int) -> None:
        self._room[seq], self._pending[seq] = 0, True

    def forget(self, seq: int) -> None:
        self._room[seq], self._pending[seq] = 0, False

    def shared(self, src: int, dst: int) -> None:
        self._room[src] = self._room[dst] = 0
        self._pending[dst] = False

    def refusal(self, seq: int, remove: int) -> str | None:
        """Why removing the last ``remove`` tokens of ``seq`` cannot be done exactly now (None: it can)."""
        if remove <= self._room[seq]:
            return None
        if self.limit == 0:
            return "this context keeps no recurrent-state snapshots"
        if self._pending[seq]:
            return "its last rollback is pending until its next decode"
        return (f"its recurrent state can go back {self._room[seq]} tokens now (the snapshots of its last decode; "
                f"{self.limit} at most)")

    def share_refusal(self, src: int, length: int, n_src: int) -> str | None:
        if length != n_src:
            return "recurrent memory holds only the whole sequence's current state"
        if self._pending[src]:
            return "its rollback is pending until its next decode"
        return None

    def require(self, depth: int, name: str, n_ctx: int) -> None:
        """One-line refusal of drafts of ``depth`` tokens that this context could not roll back."""
        if depth <= self.limit:
            return
        if self.limit == 0:
            reason = ("llama.cpp keeps no recurrent-state snapshots for this architecture" if self.requested
                      else "it was loaded with no recurrent-state snapshots")
            raise BadValue("draft_max", f"must be 0 with {name}: a recurrent/hybrid model that cannot roll back a "
                                        f"rejected draft ({reason})")
        if self.limit < self.requested:
            raise BadValue("ctx_size", f"{n_ctx} is too small for drafts of {depth} tokens on the recurrent/hybrid "
                                       f"model {name} (at most {self.limit})")
        raise UserError(f"{name} is a recurrent/hybrid model loaded with {self.limit} recurrent-state snapshots "
                        f"per sequence: drafts of {depth} tokens need {depth}")


class SequenceMemory:
    """Per-sequence rollback, prompt copies and checkpoints of a ``LlamaModel``'s context, exact on a KV cache
    and on recurrent memory alike (a mixin: it uses the model's ``_ctx``, ``_memory``, ``_seqs``, ``_snapshots``,
    ``hidden`` and ``_followers``)."""

    _ctx: int
    _memory: int
    _seqs: list[list[int]]
    _snapshots: Snapshots | None
    _followers: list[tuple[Callable[[int, int, int], None], Callable[[], None]]]
    hidden: HiddenStore | None
    path: Path
    n_ctx: int

    @property
    def rollback_limit(self) -> int | None:
        """How many trailing tokens a rollback can remove at most (recurrent-state snapshots per sequence; 0: it
        cannot roll back at all); None on a KV cache, where any rollback works."""
        return None if self._snapshots is None else self._snapshots.limit

    def require_rollback(self, depth: int) -> None:
        """Refuse, in one line before anything is decoded, a model that cannot roll back drafts of ``depth``
        tokens (a rejected draft would otherwise leave its state wrong)."""
        if self._snapshots is not None:
            self._snapshots.require(depth, self.path.name, self.n_ctx)

    def can_rollback(self, seq: int, position: int) -> bool:
        """Whether ``rollback(seq, position)`` can be done exactly now. Always on a KV cache (and rolling
        back to 0 always: it empties the sequence); on recurrent memory within the snapshots of the sequence's
        last decode, once; with an MTP head, only back to where its hidden rows are kept."""
        return self._rollback_refusal(seq, position) is None

    def _rollback_refusal(self, seq: int, position: int) -> str | None:
        n = len(self._seqs[seq])
        if position >= n or position <= 0:
            return None
        if self._snapshots is not None and (refusal := self._snapshots.refusal(seq, n - position)):
            return refusal
        if self.hidden is not None and position - 1 < self.hidden.kept_from(seq):
            return f"the MTP head's hidden rows are kept from position {self.hidden.kept_from(seq)} only"
        return None

    def rollback(self, seq: int, position: int) -> None:
        """Keep the first ``position`` tokens of sequence ``seq``; raises ``RollbackError`` when that cannot be
        done exactly (check ``can_rollback`` first), leaving the sequence as it was."""
        n = len(self._seqs[seq])
        if position >= n:
            return
        if position <= 0:
            self.clear(seq)
            return
        refusal = self._rollback_refusal(seq, position)
        if refusal is not None:
            raise RollbackError(f"cannot roll sequence {seq} of {self.path.name} back from {n} to {position} "
                                f"tokens: {refusal}")
        if not _llama.llama_memory_seq_rm(self._memory, seq, position, -1):
            raise RollbackError(f"llama.cpp refused to roll sequence {seq} back from {n} to {position} tokens")
        del self._seqs[seq][position:]
        if self._snapshots is not None:
            self._snapshots.rolled_back(seq)
        if self.hidden is not None:
            self.hidden.truncate(seq, position)

    def checkpoint(self, seq: int) -> Checkpoint:
        """Save sequence ``seq``'s recurrent state, for a rollback deeper than the snapshots allow (a drafter
        that decodes its drafts one at a time; a draft longer than ``rollback_limit``). Nothing on a KV cache."""
        if self._snapshots is None:
            return Checkpoint(seq, tuple(self._seqs[seq]), b"")
        flags = _llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY  # the recurrent part; KV cells are trimmed instead
        size = _llama.llama_state_seq_get_size_ext(self._ctx, seq, flags)
        data = (ctypes.c_uint8 * size)()
        if _llama.llama_state_seq_get_data_ext(self._ctx, data, size, seq, flags) != size:
            raise RollbackError(f"llama.cpp could not save the state of sequence {seq}")
        return Checkpoint(seq, tuple(self._seqs[seq]), bytes(data))

    def restore(self, checkpoint: object) -> None:
        """Roll the checkpoint's sequence back to where it was saved (its tokens must still be the cache's
        prefix); then decode the tokens to keep after it again."""
        if not isinstance(checkpoint, Checkpoint):  # (the protocol hands checkpoints back as opaque objects)
            raise TypeError(f"not a checkpoint of this model: {type(checkpoint).__name__}")
        seq, n = checkpoint.seq, len(checkpoint.tokens)
        if tuple(self._seqs[seq][:n]) != checkpoint.tokens:
            raise RollbackError(f"sequence {seq} no longer continues the checkpoint's {n} tokens")
        if self.hidden is not None and len(self._seqs[seq]) > n and 0 < n and n - 1 < self.hidden.kept_from(seq):
            raise RollbackError(f"the MTP head's hidden rows of sequence {seq} are kept from position "
                                f"{self.hidden.kept_from(seq)} only")
        if self._snapshots is not None and len(self._seqs[seq]) > n:
            data = (ctypes.c_uint8 * len(checkpoint.state)).from_buffer_copy(checkpoint.state)
            if _llama.llama_state_seq_set_data_ext(self._ctx, data, len(data), seq,
                                                   _llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != len(data):
                raise RollbackError(f"llama.cpp could not restore the state of sequence {seq}")
            self._snapshots.forget(seq)
        if len(self._seqs[seq]) > n:
            if not _llama.llama_memory_seq_rm(self._memory, seq, n, -1):  # the state is at n already: trims KV
                raise RollbackError(f"llama.cpp refused to trim sequence {seq} to its checkpoint ({n} tokens)")
            del self._seqs[seq][n:]
            if self.hidden is not None:
                self.hidden.truncate(seq, n)

    def reset(self) -> None:
        _llama.llama_memory_clear(self._memory, True)
        for seq, tokens in enumerate(self._seqs):
            tokens.clear()
            self._forget(seq)

    def clear(self, seq: int) -> None:
        """Empty one sequence (a finished slot, before it is refilled); the others keep their caches."""
        if not _llama.llama_memory_seq_rm(self._memory, seq, -1, -1):
            raise RollbackError(f"llama.cpp refused to clear sequence {seq}")
        self._seqs[seq].clear()
        self._forget(seq)

    def _forget(self, seq: int) -> None:
        if self._snapshots is not None:
            self._snapshots.forget(seq)
        if self.hidden is not None:
            self.hidden.clear(seq)

    # -- prompt sharing -------------------------------------------------------------------------------
    def can_share_prefix(self, src: int, dst: int, length: int) -> bool:
        """Whether ``share_prefix(src, dst, length)`` can be done exactly. A KV cache can copy any prefix;
        recurrent memory holds only the current state, so there only all of ``src`` (not rolled back since its
        last decode) can be copied."""
        return self._share_refusal(src, dst, length) is None

    def _share_refusal(self, src: int, dst: int, length: int) -> str | None:
        if src == dst or not 0 <= length <= len(self._seqs[src]):
            return f"sequence {src} holds {len(self._seqs[src])} tokens"
        if length == 0:
            return None  # an empty copy is a clear
        if self._snapshots is not None and (refusal := self._snapshots.share_refusal(src, length,
                                                                                     len(self._seqs[src]))):
            return refusal
        if self.hidden is not None and length - 1 < self.hidden.kept_from(src):
            return f"the MTP head's hidden rows are kept from position {self.hidden.kept_from(src)} only"
        return None

    def share_prefix(self, src: int, dst: int, length: int) -> None:
        """Make sequence ``dst`` hold the first ``length`` cached tokens of ``src`` without decoding them (a
        prompt another sequence already prefilled). Each sequence has its own KV stream and llama.cpp copies
        only whole streams: copy it all, then drop the rest. The data copy runs at the start of the next decode
        on this context (a memcpy of the stream, ~0.1 s for the 1.5B verifier at 4096 tokens per sequence, which
        that decode's time includes) — against seconds of prefill on a CPU. On recurrent memory the copy shares
        the state cell until either sequence decodes, so only a whole sequence can be copied and neither can roll
        back before then (``can_share_prefix``)."""
        if src == dst or not 0 <= length <= len(self._seqs[src]):
            raise ValueError(f"cannot share {length} tokens of sequence {src} with sequence {dst}")
        refusal = self._share_refusal(src, dst, length)
        if refusal is not None:
            raise RollbackError(f"cannot copy {length} tokens of sequence {src} to sequence {dst}: {refusal}")
        if length == 0:
            self.clear(dst)
            return
        if self._snapshots is not None:
            self.clear(dst)  # a removal pending on dst would otherwise apply to the copied state
        _llama.llama_memory_seq_cp(self._memory, src, dst, -1, -1)  # replaces all of dst's cells
        if length < len(self._seqs[src]) and not _llama.llama_memory_seq_rm(self._memory, dst, length, -1):
            raise RollbackError(f"llama.cpp refused to trim the copy of sequence {src} to {length} tokens")
        self._seqs[dst][:] = self._seqs[src][:length]  # in place: tokens_of hands out this list
        if self._snapshots is not None:
            self._snapshots.shared(src, dst)
        if self.hidden is not None:
            self.hidden.copy(src, dst, length)
        for shared, _ in self._followers:
            shared(src, dst, length)

    def follow(self, *, shared: Callable[[int, int, int], None], closing: Callable[[], None]) -> None:
        """For a context that follows this one (an MTP head): ``shared(src, dst, length)`` after every prompt
        copy, ``closing()`` before this model is freed."""
        self._followers.append((shared, closing))
