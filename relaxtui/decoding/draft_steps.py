"""The draft step every drafter with a distribution shares (a model drafter, the MTP head): fit the row to the
verifier's vocabulary, propose a token (with q on its support), and assemble the ``Draft``.

Its own module so the drafters that use it import it at the top, and none imports another drafter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

from relaxtui.decoding.drafting import Draft, DraftRequest
from relaxtui.decoding.sampling import (
    Candidates,
    SamplingParams,
    argmax,
    candidate_count,
    candidates,
    one_hot,
)
from relaxtui.engine.api import Row, RowSpec, TopLogits, WholeRow, as_row, as_rows

__all__ = ["draw_uniforms", "drafter_rows", "fit_vocab", "make_draft", "propose"]


def _greedy_confidence(logits: Row | np.ndarray) -> float:
    """The drafter's top probability at greedy, where q is one-hot: the raw softmax (T=1) instead (candidate rows:
    from the engine's argmax and normaliser, asked for when p_min is on)."""
    return as_row(logits).top_prob()


@overload
def fit_vocab(logits: np.ndarray, target_vocab: int) -> np.ndarray: ...
@overload
def fit_vocab(logits: TopLogits, target_vocab: int) -> TopLogits: ...
@overload
def fit_vocab(logits: Row | np.ndarray, target_vocab: int) -> Row | np.ndarray: ...
def fit_vocab(logits: Row | np.ndarray, target_vocab: int) -> Row | np.ndarray:
    """Drafter and verifier vocabularies may differ by ≤128 padding entries: pad or cut to the target's,
    with -inf so padded ids are never proposed. A row comes as the engine hands it: a bare array (a whole row of
    its [rows, vocab] block), or a row object (candidates)."""
    if isinstance(logits, (TopLogits, WholeRow)):
        return logits.fitted(target_vocab)
    size = logits.shape[-1]
    if size == target_vocab:
        return logits
    if size > target_vocab:
        return logits[..., :target_vocab]
    pad = np.full(logits.shape[:-1] + (target_vocab - size,), -np.inf, dtype=logits.dtype)
    return np.concatenate([logits, pad], axis=-1)


def propose(logits: Row | np.ndarray, sampling: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
            uniform: float | None = None) -> tuple[int, Candidates | None] | None:
    """One draft step from the drafter's (fitted) logits: (token, processed q on its support), or None when the
    drafter's top probability is below ``p_min`` (llama.cpp's --draft-p-min: an unsure drafter wastes verify
    width). The draw takes ``uniform`` when the caller drew it before the draft's first decode (``draw_uniforms``),
    else ``rng``'s next, and needs only the support: no pass over a whole row, no numpy on candidate rows; greedy
    needs no draw at all, and its q (the one-hot of the token) is left None for ``make_draft`` to make once the draft
    is done. This runs between two decodes, where each first call into numpy costs tens of microseconds."""
    if sampling.greedy:
        token = argmax(logits)
        if p_min > 0 and _greedy_confidence(logits) < p_min:
            return None
        return token, None
    q = candidates(logits, sampling)
    if p_min > 0 and q.top_prob() < p_min:
        return None
    return q.pick(rng if uniform is None else uniform), q


def draw_uniforms(request: DraftRequest, n: int, p_min: float = 0.0) -> list[float] | None:
    """The uniforms a sampled draft of ``n`` tokens draws with, taken from the request's generator before its first
    decode: the values one draw per step takes, in the same order. None — one draw per step — where the draft may
    end early (--draft-p-min: drawing ahead would take uniforms no step uses) and at greedy, which draws nothing."""
    if request.sampling.greedy or n <= 0 or p_min > 0:
        return None
    drawn = []
    for _ in range(n):  # (one at a time: the acceptance's draws warmed this path, an array of n would not be)
        drawn.append(request.rng.random())
    return drawn


def make_draft(tokens: list[int], q: list[Candidates | None], raw: Sequence[Row | np.ndarray], vocab: int,
               seconds: float) -> Draft:
    """A drafter's Draft from its steps: q on its support (what the support path reads; greedy's one-hot where a
    step left it None) and the rows as they came, whole or the engine's candidates (what a rule that reads logits
    gets; the dense path builds whole q from ``q`` only when it runs: ``Draft.dense_probs``)."""
    steps = [step if step is not None else one_hot(token) for token, step in zip(tokens, q, strict=True)]
    return Draft(tokens, None, as_rows(raw), seconds, q=tuple(steps))


def drafter_rows(request: DraftRequest, p_min: float, vocab_size: int, drafter_vocab: int) -> RowSpec | None:
    """The rows a model drafter asks its engine for on this request: candidates (the top k; the argmax, or the
    alternatives shown, at greedy; with the normaliser where --draft-p-min or a shown q(x) reads the raw
    probability) unless the rule reads raw logits or the sampling leaves the whole vocabulary. A drafter with
    padding ids past the verifier's vocabulary asks for as many more (cut off, they leave the top k)."""
    k = candidate_count(request.sampling, vocab_size, request.alternatives)
    if request.whole_rows or k is None:
        return None
    extra = max(0, drafter_vocab - vocab_size)
    normaliser = request.sampling.greedy and (p_min > 0 or request.alternatives > 0)
    if normaliser and extra:
        return None  # the normaliser would count the padding ids the whole-row path cuts first
    return RowSpec(k + extra, normaliser)
