"""Turning logits into the *processed* distributions p and q (SPEC §2), and drawing from them.

Both sides get the same processing: temperature, then top-k, then top-p (the Hugging Face order that the
paper's protocol follows). Temperature 0 means greedy: every rule falls back to exact argmax matching.
Randomness is always passed in as a ``np.random.Generator``; nothing here touches global state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxtui.errors import NumericsError, UserError

MIN_TEMPERATURE = 1e-5  # below this (and above 0) logits / T overflow to inf and every draw is NaN: vLLM's epsilon


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_k: int = 20  # 0 = off
    top_p: float = 0.95  # 1.0 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise UserError(f"--temperature must be >= 0 (got {self.temperature})")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise UserError(f"--temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g} (got "
                            f"{self.temperature:g}: logits / T would overflow)")
        if self.top_k < 0:
            raise UserError(f"--top-k must be >= 0, 0 = off (got {self.top_k})")
        if not 0 < self.top_p <= 1:
            raise UserError(f"--top-p must be in (0, 1] (got {self.top_p})")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Raw distribution in float64 (SPEC: "raw" = softmax of logits at T=1)."""
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


@dataclass(frozen=True, slots=True)
class Candidates:
    """A processed distribution on its support: ascending token ids and their probabilities (float64, sum 1).

    What top-k/top-p leave is a few dozen tokens of a 152k vocabulary: the rules, the draws and the reports work
    on these instead of whole rows (``process`` is their scatter over the vocabulary, the same numbers)."""

    ids: np.ndarray  # int64, ascending, unique
    probs: np.ndarray  # float64, aligned with ids

    def dense(self, vocab_size: int) -> np.ndarray:
        row = np.zeros(vocab_size)
        row[self.ids] = self.probs
        return row

    def draw(self, rng: np.random.Generator) -> int:
        """The token ``sample(self.dense(V), rng)`` draws, without the whole row: the inverse CDF over the support
        in id order has the same partial sums (the zeros between add nothing), so one uniform picks the same id."""
        return int(self.ids[sample(self.probs, rng)])


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


def candidates(logits: np.ndarray, params: SamplingParams) -> Candidates:
    """The processed distribution (SPEC §2: temperature, top-k, top-p) as candidates; greedy: the argmax."""
    if params.greedy:
        return Candidates(np.array([int(np.argmax(logits))]), np.ones(1))
    kept, kept_probs = _kept(logits, params)
    order = np.argsort(kept, kind="stable")
    return Candidates(kept[order].astype(np.int64, copy=False), kept_probs[order])


def process(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed distribution over the whole vocabulary, float64, zeros outside the kept set.

    Greedy returns the one-hot of the argmax, so acceptance tests read the same either way.
    """
    vocab_size = logits.shape[-1]
    if params.greedy:
        one_hot = np.zeros(vocab_size)
        one_hot[int(np.argmax(logits))] = 1.0
        return one_hot
    kept, kept_probs = _kept(logits, params)
    probs = np.zeros(vocab_size)
    probs[kept] = kept_probs
    return probs


def _kept(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The ids top-k/top-p keep (in no particular order) and their renormalised tempered probabilities."""
    vocab_size = logits.shape[-1]
    if 0 < params.top_k < vocab_size:
        kept = np.argpartition(logits, -params.top_k)[-params.top_k:]
    else:
        kept = np.arange(vocab_size)
    kept_probs = softmax(logits[kept], params.temperature)
    if params.top_p < 1.0:
        order = np.argsort(-kept_probs, kind="stable")
        cumulative = np.cumsum(kept_probs[order])
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it stays)
        n_keep = int(np.searchsorted(cumulative, params.top_p - 1e-9, side="left")) + 1  # 1e-9: float sums
        chosen = order[:n_keep]
        kept, kept_probs = kept[chosen], kept_probs[chosen]
        kept_probs = kept_probs / kept_probs.sum()
    return kept, kept_probs


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw from a non-negative (not necessarily normalised) vector. Never argmaxes zeros."""
    cumulative = np.cumsum(probs)
    total = cumulative[-1]
    if not np.isfinite(total):  # a NaN or inf anywhere makes the running sum non-finite
        raise NumericsError(f"cannot sample from a distribution with non-finite mass ({total})")
    if not total > 0:
        raise NumericsError("cannot sample from an all-zero distribution")
    index = int(np.searchsorted(cumulative, rng.random() * total, side="right"))
    return min(index, len(probs) - 1)


def spawn_generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for drafting and for acceptance, so a change in one never shifts the other."""
    draft_seq, accept_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(draft_seq), np.random.default_rng(accept_seq)
