"""Turning logits into the *processed* distributions p and q (docs/method.md), and drawing from them.

Both sides get the same processing: temperature, then top-k, then top-p (the Hugging Face order that the
paper's protocol follows). Temperature 0 means greedy: every rule falls back to exact argmax matching.
Randomness is always passed in as a ``np.random.Generator``; nothing here touches global state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relaxtui import checks
from relaxtui.engine.api import Row, as_array, as_plain, as_row
from relaxtui.engine.api import softmax as softmax  # (the rows' own; tests and rules' callers read it here)
from relaxtui.errors import NumericsError

_FEW = 256  # a distribution this short is drawn from in Python floats (sample)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_k: int = 20  # 0 = off
    top_p: float = 0.95  # 1.0 = off

    def __post_init__(self) -> None:
        checks.TEMPERATURE.check(self.temperature, "temperature")  # (named as the option table names them: each
        checks.TOP_K.check(self.top_k, "top_k")  # face spells them its own way, relaxtui.options)
        checks.TOP_P.check(self.top_p, "top_p")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Candidates:
    """A processed distribution on its support: ascending token ids and their probabilities (float64, sum 1).

    What top-k/top-p leave is a few dozen tokens of a 152k vocabulary: the rules, the draws and the reports work
    on these instead of whole rows (``process`` is their scatter over the vocabulary, the same numbers). ``ids``
    and ``probs`` may come as plain lists (a drafter's step on the engine's candidate rows: it runs between two
    decodes, where each first numpy call costs tens of microseconds) and become arrays when first read as such.
    Immutable by convention."""

    __slots__ = ("_ids", "_probs")

    def __init__(self, ids: np.ndarray | Sequence[int], probs: np.ndarray | Sequence[float]) -> None:
        self._ids, self._probs = ids, probs

    @property
    def ids(self) -> np.ndarray:
        """int64, ascending, unique."""
        self._ids = as_array(self._ids, np.int64)
        return self._ids

    @property
    def probs(self) -> np.ndarray:
        """float64, aligned with ids."""
        self._probs = as_array(self._probs, np.float64)
        return self._probs

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"Candidates(ids={list(self._ids)}, probs={list(self._probs)})"

    def as_lists(self) -> tuple[Sequence[int], Sequence[float]]:
        """(ids, probs) as plain Python numbers (read-only), without making arrays of them."""
        return as_plain(self._ids), as_plain(self._probs)

    def top_prob(self) -> float:
        """The largest probability (--draft-p-min's confidence), without making arrays."""
        probs = self._probs
        return float(probs.max()) if isinstance(probs, np.ndarray) else max(probs)

    def dense(self, vocab_size: int) -> np.ndarray:
        row = np.zeros(vocab_size)
        row[self.ids] = self.probs
        return row

    def held(self) -> tuple[np.ndarray | Sequence[int], np.ndarray | Sequence[float]]:
        """(ids, probs) as held, arrays or plain numbers (for a report that takes either), converting nothing."""
        return self._ids, self._probs

    def prob_of(self, token: int) -> float:
        """The probability of ``token`` (0 outside the support), without making arrays of plain numbers."""
        ids = self._ids
        if isinstance(ids, np.ndarray):
            at = int(ids.searchsorted(token))
            return float(self.probs[at]) if at < len(ids) and ids[at] == token else 0.0
        return self._probs[ids.index(token)] if token in ids else 0.0

    def pick(self, uniform: float | np.random.Generator) -> int:
        """The token ``sample(self.dense(V), rng)`` draws when ``uniform`` is ``rng``'s next (or ``rng`` itself),
        without the whole row: the inverse CDF over the support in id order has the same partial sums (the zeros
        between add nothing)."""
        return int(self._ids[self.index_at(uniform)])

    def index_at(self, uniform: float | np.random.Generator) -> int:
        """Where ``pick`` lands among the candidates (``sample(self.probs, rng)``); a generator is drawn from only
        once the probabilities have passed their checks. A support of thousands (top-p alone) is summed by numpy."""
        return _draw(self._probs, uniform)


def scatter(rows: Sequence[Candidates], vocab_size: int) -> np.ndarray:
    """[len(rows), vocab] whole rows of these candidates: one zeroed block (calloc'd pages cost nothing until
    written) with each row's few dozen entries set — no per-row allocation, no stacking copy."""
    block = np.zeros((len(rows), vocab_size))
    for i, row in enumerate(rows):
        block[i, row.ids] = row.probs
    return block


def bounds_support(params: SamplingParams, vocab_size: int) -> bool:
    """Whether the sampling settings leave a support smaller than the vocabulary (top-k on, or top-p below 1):
    then candidate rows are exact, and far cheaper than whole ones. Greedy's support is one token."""
    return params.greedy or 0 < params.top_k < vocab_size or params.top_p < 1.0


def candidate_count(params: SamplingParams, vocab_size: int, alternatives: int = 0) -> int | None:
    """How many of a row's largest logits the engine must hand for these settings to be exact: greedy's argmax (or
    the alternatives shown), else top-k's k; None when top-k is off (top-p alone needs the whole row sorted)."""
    if params.greedy:
        return max(1, alternatives)
    return params.top_k if 0 < params.top_k < vocab_size else None


def candidates(logits: Row | np.ndarray, params: SamplingParams) -> Candidates:
    """The processed distribution (docs/method.md: temperature, top-k, top-p) as candidates; greedy: the argmax."""
    row = as_row(logits)
    if params.greedy:
        return one_hot(row.argmax())
    return Candidates(*row.kept(params.temperature, params.top_k, params.top_p))


def one_hot(token: int) -> Candidates:
    """Greedy's processed distribution on its support: all the mass on ``token``."""
    return Candidates([token], [1.0])


def process(logits: Row | np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed distribution over the whole vocabulary, float64, zeros outside the kept set.

    Greedy returns the one-hot of the argmax, so acceptance tests read the same either way.
    """
    row = as_row(logits)
    probs = np.zeros(row.vocab_size)
    if params.greedy:
        probs[row.argmax()] = 1.0
        return probs
    kept, kept_probs = row.kept(params.temperature, params.top_k, params.top_p)
    probs[kept] = kept_probs
    return probs


def argmax(logits: Row | np.ndarray) -> int:
    """The likeliest id of a raw row, whole or candidates (a non-finite maximum raises)."""
    return as_row(logits).argmax()


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw from a non-negative (not necessarily normalised) vector. Never argmaxes zeros. A support
    of a few dozen ids is summed in Python floats: the same sequential partial sums as ``np.cumsum``, so the same
    draw, without numpy's cost per call on tiny arrays."""
    return _draw(probs, rng)


def _draw(probs: np.ndarray | Sequence[float], uniform: float | np.random.Generator) -> int:
    """``sample``'s index, from ``uniform`` (or the generator's next, drawn after the checks): a long array by
    ``np.cumsum``, anything short in plain floats (the same sequential sums; float32 ones would differ)."""
    if not isinstance(probs, np.ndarray) or (len(probs) <= _FEW and probs.dtype == np.float64):
        return _inverse_cdf(as_plain(probs), uniform)
    cumulative = np.cumsum(probs)
    total = _checked_total(float(cumulative[-1]))
    index = int(np.searchsorted(cumulative, (uniform if isinstance(uniform, float) else uniform.random()) * total,
                                side="right"))
    return min(index, len(probs) - 1)


def _inverse_cdf(probs: Sequence[float], uniform: float | np.random.Generator) -> int:
    """Where ``uniform`` × the total falls among the running sums of ``probs`` (plain floats): the first index whose
    running sum exceeds it (``bisect_right``), by one plain loop (a drafter draws between two decodes). A generator
    is drawn from only once the total has passed its checks (a refused row takes no uniform)."""
    cumulative = []
    total = 0.0
    for prob in probs:
        total += prob
        cumulative.append(total)
    _checked_total(total)
    target = (uniform if isinstance(uniform, float) else uniform.random()) * total
    for index, running in enumerate(cumulative):
        if running > target:
            return index
    return len(cumulative) - 1


def _checked_total(total: float) -> float:
    if not math.isfinite(total):  # a NaN or inf anywhere makes the running sum non-finite
        raise NumericsError(f"cannot sample from a distribution with non-finite mass ({total})")
    if not total > 0:
        raise NumericsError("cannot sample from an all-zero distribution")
    return total


class AheadGenerator(np.random.Generator):
    """numpy's default generator whose scalar ``random()`` hands the next double of a block drawn ahead: the same
    values in the same order as the generator's own scalar draws (a block of k doubles is k draws of the stream), at a
    list's cost. Why: the loops draw one uniform at a time right after a decode, where numpy's first call costs tens
    of microseconds (llama.cpp has flushed the caches) and a list's pop a few. Any other draw goes to numpy as is."""

    BLOCK = 64

    def __init__(self, seed: np.random.SeedSequence) -> None:
        super().__init__(np.random.PCG64(seed))
        self._ahead: list[float] = []

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        if size is not None or out is not None or dtype is not np.float64:
            if self._ahead:  # (a draw of another shape would come out of order: none of the loops asks for one)
                raise RuntimeError("AheadGenerator: scalar float64 draws only once it has drawn ahead")
            return super().random(size, dtype, out)
        if not self._ahead:
            self._ahead = super().random(self.BLOCK).tolist()[::-1]
        return self._ahead.pop()


def spawn_generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for drafting and for acceptance, so a change in one never shifts the other (each numpy's
    default generator, ``default_rng``, on its spawned seed; drawn ahead, ``AheadGenerator``)."""
    draft_seq, accept_seq = np.random.SeedSequence(seed).spawn(2)
    return AheadGenerator(draft_seq), AheadGenerator(accept_seq)
