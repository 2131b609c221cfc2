"""A round's rows, kept for a what-if replay of other rules on the same drafts (docs/metrics.md#replayed-speed-up).

The verify batch computes the verifier's row at every drafted position, the ones past the first rejection too; a
rule's acceptance test reads only the processed p_i and q_i there and the drafted x_i. So a strict run that keeps
them (``GenerationConfig.record_rows``) tells, for any rule that reads nothing more, how often it would have
accepted each of those drafts (``costmodel/replay.py``), without generating again.

What is kept, per drafted position, for p and for q: the processed distribution (temperature, top-k, top-p, as
the round's rule saw it) on its support when that holds at most ``K_MAX`` ids — exact — else its ``K_MAX``
likeliest ids and the mass left out; and the drafted token's own probability, exact either way. Bounded: at most
``2 · (K_MAX · 8 + 12) + 4`` bytes per drafted position (ids int32, probabilities float32, the drafted token's
float64), so a generation of L tokens at draft length N keeps at most ``(L + 1) · N`` positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import RoundRows, SparseRows
from relaxtui.decoding.sampling import Candidates, SamplingParams, candidates, one_hot
from relaxtui.engine.api import Rows, as_rows

__all__ = ["K_MAX", "POSITION_BYTES", "record_round", "sparse_rows"]

K_MAX = 32  # entries kept per row: top-k's default 20 and the supports top-p leaves at T <= 1 fit whole
POSITION_BYTES = 2 * (K_MAX * 8 + 4 + 8) + 4  # p and q (ids, probs, rest, at_x) and the drafted token


def record_round(index: int, draft: Draft | None, rows: Rows, sampling: SamplingParams, n_accepted: int,
                 has_distribution: bool) -> RoundRows:
    """The rows of one round: ``rows`` are the verifier's N+1 raw rows of the batch [last, x_1..x_N] (read before
    the verifier decodes again: an engine's rows are views of its buffer), ``draft`` what was verified."""
    tokens = list(draft.tokens) if draft is not None else []
    if not tokens:
        return RoundRows(index, (), n_accepted, _EMPTY, _EMPTY, has_distribution)
    assert draft is not None
    verifier_rows = as_rows(rows)
    p = [candidates(verifier_rows[i], sampling) for i in range(len(tokens))]
    q = [_q_at(draft, i, x) for i, x in enumerate(tokens)]
    return RoundRows(index, tuple(tokens), n_accepted, sparse_rows(p, tokens), sparse_rows(q, tokens),
                     has_distribution)


def _q_at(draft: Draft, i: int, x: int) -> Candidates:
    """q_i on its support, as the acceptance step reads it: the drafter's candidates, else its whole row's
    non-zeros; a draft with neither is greedy's (the drafter's argmax is the token it drafted)."""
    if i < len(draft.q):
        return draft.q[i]
    if draft.probs is not None:
        row = np.asarray(draft.probs[i])
        ids = np.flatnonzero(row)
        return Candidates(ids, row[ids])
    return one_hot(x)


def sparse_rows(rows: Sequence[Candidates], tokens: Sequence[int], k_max: int = K_MAX) -> SparseRows:
    """Each distribution as its ``k_max`` likeliest entries (all of them when they fit), likeliest first, with the
    mass left out and the drafted token's exact probability; read-only arrays."""
    n = len(rows)
    width = min(k_max, max((len(row) for row in rows), default=0))
    ids = np.full((n, width), -1, dtype=np.int32)
    probs = np.zeros((n, width), dtype=np.float32)
    rest = np.zeros(n, dtype=np.float32)
    at_x = np.zeros(n, dtype=np.float64)
    for r, (row, x) in enumerate(zip(rows, tokens, strict=True)):
        row_ids, row_probs = row.ids, row.probs
        at_x[r] = row.prob_of(x)
        keep = np.argpartition(row_probs, -width)[-width:] if len(row_probs) > width else np.arange(len(row_probs))
        keep = keep[np.argsort(-row_probs[keep], kind="stable")]
        ids[r, :len(keep)] = row_ids[keep]
        probs[r, :len(keep)] = row_probs[keep]
        rest[r] = max(0.0, float(row_probs.sum()) - float(row_probs[keep].sum())) if len(keep) < len(row_probs) \
            else 0.0
    for array in (ids, probs, rest, at_x):
        array.flags.writeable = False
    return SparseRows(ids, probs, rest, at_x)


_EMPTY = sparse_rows([], [])
