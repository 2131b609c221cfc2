"""Turning logits into the *processed* distributions p and q (SPEC §2), and drawing from them.

Both sides get the same processing: temperature, then top-k, then top-p (the Hugging Face order that the
paper's protocol follows). Temperature 0 means greedy: every rule falls back to exact argmax matching.
Randomness is always passed in as a ``np.random.Generator``; nothing here touches global state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxtui.errors import NumericsError, UserError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_k: int = 20  # 0 = off
    top_p: float = 0.95  # 1.0 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise UserError(f"--temperature must be >= 0 (got {self.temperature})")
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


def process(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed distribution over the whole vocabulary, float64, zeros outside the kept set.

    Greedy returns the one-hot of the argmax, so acceptance tests read the same either way.
    """
    vocab_size = logits.shape[-1]
    if params.greedy:
        one_hot = np.zeros(vocab_size)
        one_hot[int(np.argmax(logits))] = 1.0
        return one_hot
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
    probs = np.zeros(vocab_size)
    probs[kept] = kept_probs
    return probs


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
