"""The rows a model hands the loops, and what a row answers: one interface for both kinds.

A raw logits row comes whole (``WholeRow``: a view of the engine's float32 [rows, vocab] block, never a copy) or as
its top (``TopLogits``: the k largest logits and their ids, what llama.cpp's backend sampling hands). Both answer
the same questions, each the cheapest way its kind allows, so no caller asks which kind it holds:

    vocab_size, complete       the vocabulary it is a row of; whether it holds every id's logit
    argmax()                   the likeliest id (a non-finite maximum raises)
    log_norm, log_prob(token)  log Σ exp(logits) and log p(token) at T=1 (None where a top has no normaliser, or the
                               token is outside it)
    top_prob()                 the largest probability at T=1 (--draft-p-min's confidence at greedy)
    shown()                    the T=1 distribution a greedy round reports, and the ids it is over
    kept(T, top_k, top_p)      what temperature, top-k and top-p keep: ascending ids and their probabilities
    vocab_logits()             the whole raw row, for the rules that read logits (None from a top)
    fitted(vocab_size)         the same row for another vocabulary size (a drafter's padding)

``as_rows``/``as_row`` adapt a bare array from a caller that has one: the one place the kinds are told apart. Pure
numpy and plain Python; nothing here touches a model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast, overload

import numpy as np

from relaxtui.errors import NumericsError


def as_array(values: np.ndarray | Sequence, dtype: type) -> np.ndarray:
    """``values`` as an array, made once (rows and candidates keep plain numbers until asked for arrays)."""
    return values if isinstance(values, np.ndarray) else np.array(values, dtype=dtype)


def as_plain(values: np.ndarray | Sequence) -> Sequence:
    """``values`` as plain Python numbers, converting only an array."""
    return values.tolist() if isinstance(values, np.ndarray) else values


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Raw distribution in float64 ("raw" = softmax of logits at T=1, docs/method.md)."""
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


@dataclass(frozen=True, slots=True)
class RowSpec:
    """What a sequence asks the engine for instead of whole logits rows: each row's ``k`` largest raw logits with
    their ids (llama.cpp computes them in the graph, on the GPU when the model is there) and, with ``normaliser``,
    the row's log-normaliser at T=1 (a pass over the vocabulary, paid only by consumers of log p(x))."""

    k: int
    normaliser: bool = False


def _non_finite(value: float, token: int) -> NumericsError:
    return NumericsError(f"the logits hold a non-finite value ({value}) at token {token}")


class WholeRow:
    """One raw logits row over the whole vocabulary: a view of the engine's block (O(1) to make, nothing copied).

    Its log-normaliser is computed once, when first asked (one float32 exp pass with a float64 sum: 1e-7 relative,
    far inside what the drift signals resolve, and several times cheaper than a float64 softmax of the row)."""

    __slots__ = ("logits", "_log_norm")
    complete = True  # every id's logit is here

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self._log_norm: float | None = None

    @property
    def vocab_size(self) -> int:
        return self.logits.shape[-1]

    def __repr__(self) -> str:
        return f"WholeRow(vocab_size={self.vocab_size})"

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """The row as numpy sees it (``np.asarray(row)``): the engine's array itself."""
        return self.logits if dtype is None else self.logits.astype(dtype)

    def argmax(self) -> int:
        """The likeliest id; refuses NaN/+inf (numpy's argmax returns the first NaN, as if it were the best)."""
        best = int(np.argmax(self.logits))
        value = float(self.logits[best])
        if not math.isfinite(value):
            raise _non_finite(value, best)
        return best

    @property
    def log_norm(self) -> float:
        """log Σ exp(logits) over the row."""
        norm = self._log_norm
        return norm if norm is not None else self._exp()[2]

    def log_prob(self, token: int) -> float:
        """log p(token) at T=1."""
        return float(self.logits[token]) - self.log_norm

    def top_prob(self) -> float:
        """The largest probability at T=1 (a float64 pass: a threshold compares it)."""
        top = float(self.logits.max())
        return 1.0 / float(np.exp(self.logits.astype(np.float64) - top).sum())

    def shown(self) -> tuple[np.ndarray, None]:
        """(p at T=1 over the vocabulary, float32; None: the ids are the vocabulary's): what a greedy round shows."""
        z, total, _ = self._exp()
        z /= total
        return z, None

    def _exp(self) -> tuple[np.ndarray, float, float]:
        """(exp(logits − max) in float32, its float64 sum, the log-normaliser), which it keeps."""
        top = np.max(self.logits)
        z = np.asarray(self.logits, dtype=np.float32) - np.float32(top)
        np.exp(z, out=z)
        total = float(z.sum(dtype=np.float64))
        self._log_norm = float(top) + math.log(total)
        return z, total, self._log_norm

    def kept(self, temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, np.ndarray]:
        """(ascending ids, their tempered probabilities renormalised over what top-k then top-p keep), float64."""
        kept, probs = _kept_of(self.logits, temperature, top_k, top_p)
        if len(kept) < self.vocab_size:  # (the whole vocabulary is already in order)
            order = np.argsort(kept, kind="stable")
            kept, probs = kept[order], probs[order]
        return kept.astype(np.int64, copy=False), probs

    def vocab_logits(self) -> np.ndarray:
        return self.logits

    def fitted(self, vocab_size: int) -> WholeRow:
        """Cut to ``vocab_size`` ids, or padded with -inf (never proposed)."""
        size = self.vocab_size
        if size == vocab_size:
            return self
        if size > vocab_size:
            return WholeRow(self.logits[:vocab_size])
        return WholeRow(np.concatenate([self.logits, np.full(vocab_size - size, -np.inf, dtype=self.logits.dtype)]))


class WholeRows(Sequence[WholeRow]):
    """A decode's whole rows as a sequence of ``WholeRow``: the [rows, vocab] block itself (``block``), each row a
    view made when indexed — what the engine hands for whole rows, so the block is never copied or split up front."""

    __slots__ = ("block",)

    def __init__(self, block: np.ndarray) -> None:
        self.block = block

    def __len__(self) -> int:
        return len(self.block)

    @overload
    def __getitem__(self, index: int) -> WholeRow: ...
    @overload
    def __getitem__(self, index: slice) -> WholeRows: ...

    def __getitem__(self, index: int | slice) -> WholeRow | WholeRows:
        if isinstance(index, slice):
            return WholeRows(self.block[index])
        return WholeRow(self.block[index])

    def __iter__(self) -> Iterator[WholeRow]:
        return (WholeRow(row) for row in self.block)

    def __repr__(self) -> str:
        return f"WholeRows({self.block.shape[0]} × {self.block.shape[-1]})"

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        return self.block if dtype is None else self.block.astype(dtype)


class TopLogits:
    """The top of one raw logits row as the engine hands it: the ``k`` largest logits and their ids (in no
    particular order) and, when asked, log Σ exp(logits) over the whole row (so log p(x) at T=1 = logit(x) − it).

    Top-k/top-p with ``top_k <= k`` need nothing else: ``kept`` gives, from it, the same processed distribution as
    from the whole row. Immutable by convention. ``ids`` and ``logits`` may come as plain number sequences (greedy's
    one-candidate rows do, from the engine) and become arrays when first read as such: most such rows are only asked
    their ``argmax``, and right after a decode the first numpy call costs tens of microseconds on a CPU whose caches
    the model's weights have flushed."""

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
                raise _non_finite(value, int(self._ids[0]))
            return int(self._ids[0])
        top = self.logits.max()
        if not np.isfinite(top):
            raise _non_finite(float(top), int(self.ids[np.argmax(self.logits)]))
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

    def top_prob(self) -> float:
        """The largest probability at T=1, from the normaliser (a row asked for it: ``RowSpec.normaliser``)."""
        if self.log_norm is None:
            raise ValueError("a candidate row's top probability needs its normaliser (RowSpec(normaliser=True))")
        return math.exp(max(self.as_lists()[1]) - self.log_norm)

    def shown(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(p at T=1 over the candidates, their ids), or (None, None) without the normaliser: nothing to show (and
        the ids stay plain numbers)."""
        probs = self.probs()
        return (probs, self.ids) if probs is not None else (None, None)

    def kept(self, temperature: float, top_k: int, top_p: float) -> tuple[Sequence[int], Sequence[float]]:
        """``WholeRow.kept`` on the engine's top k (top_k <= k): the same float64 steps on Python floats (to an ulp:
        exp and the sums' order differ), as plain lists. A drafter runs this between two decodes, right after
        llama.cpp has flushed the caches, where each numpy call costs tens of microseconds and each distinct piece of
        Python code a few: so plain loops over a few dozen numbers, in one function."""
        held = len(self)
        if not self.complete and not 0 < top_k <= held:
            raise ValueError(f"top-k {top_k} needs more than the {held} candidates a row holds")
        ids, values = self.as_lists()
        if 0 < top_k < held:  # the top_k largest (ties at the edge: any of them, as argpartition picks)
            chosen = sorted(range(held), key=values.__getitem__, reverse=True)[:top_k]
            ids, values = [ids[i] for i in chosen], [values[i] for i in chosen]
        top = max(values) / temperature  # = max(value / T): a positive divisor keeps the order and rounds the max alike
        weights = []
        total = 0.0
        for value in values:
            weight = math.exp(value / temperature - top)
            weights.append(weight)
            total += weight
        kept = []
        mass = 0.0
        if top_p < 1.0:
            # the likeliest first (stable: ties keep their order), up to the token whose mass reaches top_p
            for i in sorted(range(len(weights)), key=weights.__getitem__, reverse=True):
                prob = weights[i] / total
                kept.append((ids[i], prob))
                mass += prob  # (the kept mass, added in the same order as the whole row's cumulative sum)
                if mass >= top_p - 1e-9:  # 1e-9: float sums
                    break
        else:
            for i, weight in enumerate(weights):
                kept.append((ids[i], weight / total))
            mass = 1.0
        kept.sort()
        kept_ids, kept_probs = [], []
        for token, prob in kept:
            kept_ids.append(token)
            kept_probs.append(prob / mass if mass != 1.0 else prob)
        return kept_ids, kept_probs

    def vocab_logits(self) -> np.ndarray | None:
        """The whole raw row where the candidates are all of it (-inf at a fitted row's pads); None otherwise."""
        if not self.complete:
            return None
        row = np.full(self.vocab_size, -np.inf, dtype=np.float32)
        row[self.ids] = self.logits
        return row

    def fitted(self, vocab_size: int) -> TopLogits:
        """The same row for a vocabulary of ``vocab_size`` (a drafter's padding ids beyond it dropped)."""
        if vocab_size == self.vocab_size:
            return self
        keep = self.ids < vocab_size
        return TopLogits(self.ids[keep], self.logits[keep], vocab_size, self.log_norm, self.complete)


def _kept_of(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The ids top-k then top-p keep of a whole row (in no particular order) and their renormalised tempered
    probabilities."""
    vocab_size = logits.shape[-1]
    if 0 < top_k < vocab_size:
        kept = np.argpartition(logits, -top_k)[-top_k:]
    else:
        kept = np.arange(vocab_size)
    kept_probs = softmax(logits[kept], temperature)
    if top_p < 1.0:
        order = np.argsort(-kept_probs, kind="stable")
        cumulative = np.cumsum(kept_probs[order])
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it stays)
        n_keep = int(np.searchsorted(cumulative, top_p - 1e-9, side="left")) + 1  # 1e-9: float sums
        chosen = order[:n_keep]
        kept, kept_probs = kept[chosen], kept_probs[chosen]
        kept_probs = kept_probs / kept_probs.sum()
    return kept, kept_probs


def position(ids: np.ndarray, token: int) -> int | None:
    """Where ``token`` sits in a candidate row's ids (in no particular order); None when it is not there."""
    at = np.flatnonzero(ids == token)
    return int(at[0]) if len(at) else None


Row = WholeRow | TopLogits  # one raw logits row: whole (the dense path) or its top (candidate rows)
Rows = np.ndarray | Sequence[Row]  # one decode's rows: a whole [rows, vocab] block (until the engine hands
# WholeRows), WholeRows, or each row's top


def as_row(row: Row | np.ndarray) -> Row:
    """A row with the row interface: a bare array (a caller's own, or the engine's until it hands rows) wrapped."""
    return WholeRow(row) if isinstance(row, np.ndarray) else row


def as_rows(rows: Rows | Sequence[Row | np.ndarray]) -> Sequence[Row]:
    """Rows with the row interface: a [rows, vocab] block as ``WholeRows`` (no copy), a list of arrays wrapped
    (a list holds one kind: its first row tells)."""
    if isinstance(rows, np.ndarray):
        return WholeRows(rows)
    if len(rows) and isinstance(rows[0], np.ndarray):
        return [WholeRow(row) for row in cast(Sequence[np.ndarray], rows)]  # (a list of arrays, by its first)
    return cast(Sequence[Row], rows)  # (rows already)


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
