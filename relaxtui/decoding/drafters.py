"""Drafters: small things that propose the next N tokens with their probabilities q.

A drafter's lifecycle follows llama.cpp's common/speculative.h: ``begin(prompt)`` → ``draft(context, n)``
per round. The model drafter keeps its own KV cache and re-synchronises by common prefix with the context
it is given, so it never needs to be told which drafts were accepted. Its model's own record of cached
tokens is the single source of truth, so anything else that uses the model (a timing) cannot desync it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from relaxtui.decoding.backend import Backend
from relaxtui.decoding.prefill import ReusePolicy, common_prefix, prefill
from relaxtui.decoding.sampling import SamplingParams, process, sample


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    probs: np.ndarray  # [n, target vocab] processed q_i
    logits: np.ndarray | None  # [n, target vocab] raw drafter logits, None for non-model drafters
    seconds: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)


class Drafter(Protocol):
    kind: str

    def begin(self, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = ...) -> bool: ...
    def draft(self, context: Sequence[int], n: int, sampling: SamplingParams,
              rng: np.random.Generator) -> Draft: ...
    def next_distribution(self, sampling: SamplingParams) -> tuple[np.ndarray, np.ndarray]: ...


def _confidence(q: np.ndarray, logits: np.ndarray, sampling: SamplingParams) -> float:
    """The drafter's top probability; at greedy q is one-hot, so read the raw softmax (T=1) instead."""
    if not sampling.greedy:
        return float(q.max())
    top = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - top).sum())


def fit_vocab(logits: np.ndarray, target_vocab: int) -> np.ndarray:
    """Drafter and verifier vocabularies may differ by ≤128 padding entries: pad or cut to the target's,
    with -inf so padded ids are never proposed."""
    size = logits.shape[-1]
    if size == target_vocab:
        return logits
    if size > target_vocab:
        return logits[..., :target_vocab]
    pad = np.full(logits.shape[:-1] + (target_vocab - size,), -np.inf, dtype=logits.dtype)
    return np.concatenate([logits, pad], axis=-1)


def propose(logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator,
            p_min: float = 0.0) -> tuple[int, np.ndarray] | None:
    """One draft step from the drafter's (fitted) logits: (token, processed q), or None when the drafter's top
    probability is below ``p_min`` (llama.cpp's --draft-p-min: an unsure drafter wastes verify width).
    Shared by the one-sequence drafter and the batched loop, so both draw the same way from the same stream."""
    q = process(logits, sampling)
    if p_min > 0 and _confidence(q, logits, sampling) < p_min:
        return None
    return sample(q, rng), q


class ModelDrafter:
    """A GGUF LM sharing the verifier's vocabulary (checked before use by ``check_vocab``)."""

    kind = "model"

    def __init__(self, model: Backend, target_vocab: int, *, p_min: float = 0.0) -> None:
        self.model = model
        self.target_vocab = target_vocab
        self.p_min = p_min  # stop drafting when the drafter's top probability falls below this
        self._last_draft: list[int] = []
        self._last_context: list[int] = []

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        return fit_vocab(logits, self.target_vocab)

    def begin(self, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Prefill everything but the last prompt token (the first draft step decodes it); False if stopped."""
        return prefill(self.model, prompt[:-1], reuse=reuse, should_stop=should_stop)[1]

    def resync(self, context: Sequence[int]) -> list[int]:
        """Roll back to the common prefix with ``context``; return the tokens still to decode (at least the
        last one, whose logits give the first draft position)."""
        keep = min(common_prefix(self.model.cached_tokens, context), len(context) - 1)
        self.model.rollback(keep)
        return list(context[keep:])

    def _sync(self, context: Sequence[int]) -> np.ndarray:
        """Roll back to the common prefix, decode the rest of the context, return the last logits row."""
        return self._fit(self.model.decode(self.resync(context), logits_rows=[-1])[0])

    def draft(self, context: Sequence[int], n: int, sampling: SamplingParams,
              rng: np.random.Generator) -> Draft:
        started = time.perf_counter()
        n = max(0, min(n, self.room(context)))
        tokens: list[int] = []
        probs, raw = [], []
        if n > 0:
            logits = self._sync(context)
            for i in range(n):
                step = propose(logits, sampling, rng, self.p_min)
                if step is None:
                    break
                tokens.append(step[0])
                probs.append(step[1])
                raw.append(logits)
                if i + 1 < n:
                    logits = self._fit(self.model.decode([step[0]], logits_rows=[0])[0])
        return self.finish(context, tokens, probs, raw, started)

    def room(self, context: Sequence[int]) -> int:
        return self.model.n_ctx - len(context)

    def finish(self, context: Sequence[int], tokens: list[int], probs: list[np.ndarray], raw: list[np.ndarray],
               started: float) -> Draft:
        """Package a draft and remember it (``next_distribution`` continues from it)."""
        self._last_context, self._last_draft = list(context), tokens
        empty = np.empty((0, self.target_vocab))
        return Draft(tokens, np.stack(probs) if probs else empty, np.stack(raw) if raw else empty,
                     time.perf_counter() - started)

    def next_distribution(self, sampling: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """q and raw logits one step past the last full draft (the relaxed-bonus rules need it)."""
        logits = self._sync([*self._last_context, *self._last_draft])
        return process(logits, sampling), logits
