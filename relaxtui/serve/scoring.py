"""Prompt log-probabilities for scoring clients: ``echo`` with ``logprobs`` on ``/v1/completions`` (what
lm-evaluation-harness sends for every log-likelihood request: multiple choice, perplexity).

The numbers are the verifier's own, at temperature 1 and with no top-k/top-p (vLLM's prompt logprobs): token i's
log p(t_i | t_0..t_{i-1}), the first token's ``None`` (nothing comes before it), the ``top`` likeliest ids at each
position, and the row after the last token (a one-token completion is drawn from it). They are computed by the
model the server already holds, on the model thread, in a sequence of the running context:

**How a scoring request rides the batch.** It is queued like any generation (same queue, same bound, same drain):
one ``ReadJob`` per prompt (``decoding/batched.py``), whose read is a ``Scoring``. The batched loop gives it a free
sequence between two rounds and calls it there — on the model thread, while every other sequence waits between
rounds — where the prompt is decoded, in chunks, with every row kept; the loop's ``Read`` event hands the result
back to the scheduler. No second model is loaded. A long prompt holds the other sequences for its decode, as a lone
prefill does.

``prompt_logprobs`` is the one function that calls the model (adapt it, and only it, to a change of the model
API).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxtui.decoding.sampling import SamplingParams, process, sample, spawn_generators
from relaxtui.engine.api import Model

SCORE_CHUNK = 256  # at most this many prompt tokens per decode call, every row kept (155 MB of rows at 152k vocab)
Top = tuple[tuple[int, float], ...]  # (token id, log-prob), likeliest first


@dataclass(frozen=True)
class ScoredPrompt:
    """One prompt scored by the verifier."""

    tokens: tuple[int, ...]
    logprobs: tuple[float | None, ...]  # per token: log p(token | the tokens before it); the first is None
    top: tuple[Top | None, ...]  # per token: the likeliest ids at its position (None for the first)
    next_logprobs: np.ndarray  # [n_vocab] log-probs after the last token: what a one-token completion is drawn from
    seconds: float  # the model thread's time on it


def prompt_logprobs(model: Model, seq: int, tokens: Sequence[int], top: int, *,
                    chunk: int = SCORE_CHUNK) -> ScoredPrompt:
    """Decode ``tokens`` into sequence ``seq`` of ``model`` (emptied first), every row kept, and score each token
    under the rows before it. Called on the model thread only, with a sequence no generation holds.

    The chunks are balanced (a 260-token prompt is 130 + 130, not 256 + 4): llama.cpp's CPU kernels compute a row
    one way in a small batch and another way in a large one (measured on this project's build: SmolLM2 switches at
    64 tokens and its scores move by up to 0.35 nats; the 1.5B Q4_K_M verifier computes chunks of 88 tokens as one
    batch does, chunks of 66 within 0.03 nats of it), and the same way for every large size. Balanced chunks of at
    most ``chunk`` are all at least ``chunk // 2`` tokens long, so a prompt's rows come out as one decode of the
    whole prompt computes them (what llama-cpp-python's ``eval`` does), up to float summation noise."""
    started = time.perf_counter()
    tokens = [int(t) for t in tokens]
    model.set_candidates(seq, None)  # whole rows: every token's log-prob needs its row's normaliser and its logit
    model.clear(seq)
    logprobs: list[float | None] = [None]
    tops: list[Top | None] = [None]
    last = np.empty(0)
    for start, end in balanced_chunks(len(tokens), chunk):
        part = tokens[start:end]
        rows = np.asarray(model.decode(seq, part, range(len(part))), dtype=np.float32)
        normaliser = _log_normaliser(rows)
        scored = min(len(part), len(tokens) - start - 1)  # row r predicts the token after it; the last row, none
        logprobs += [float(rows[r, tokens[start + r + 1]]) - float(normaliser[r]) for r in range(scored)]
        tops += tops_of(rows[:scored], normaliser[:scored], top)
        last = rows[-1].astype(np.float64) - normaliser[-1]
    return ScoredPrompt(tuple(tokens), tuple(logprobs), tuple(tops), last, time.perf_counter() - started)


def balanced_chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """[start, end) of the fewest chunks of at most ``chunk`` that cover ``n`` tokens, their sizes within one."""
    count = max(1, -(-n // chunk))
    bounds = [n * i // count for i in range(count + 1)]
    return list(zip(bounds, bounds[1:], strict=False))


def _log_normaliser(rows: np.ndarray) -> np.ndarray:
    """log Σ exp(row) per row, in float64 (the sum of 150k terms loses digits in float32)."""
    peak = rows.max(axis=1)
    return peak.astype(np.float64) + np.log(np.exp(rows - peak[:, None]).sum(axis=1, dtype=np.float64))


def tops_of(rows: np.ndarray, normaliser: np.ndarray, k: int) -> list[Top]:
    """Each row's ``k`` likeliest ids and their log-probs, computed as a token's own log-prob is (so the likeliest
    token's log-prob equals its row's first entry exactly: what a client's "is greedy" check compares)."""
    if k <= 0 or not len(rows):
        return [() for _ in range(len(rows))]
    k = min(k, rows.shape[1])
    ids = np.argpartition(-rows, k - 1, axis=1)[:, :k]
    out = []
    for r in range(len(rows)):
        best = ids[r][np.argsort(-rows[r, ids[r]], kind="stable")]
        out.append(tuple((int(i), float(rows[r, i]) - float(normaliser[r])) for i in best))
    return out


@dataclass(frozen=True)
class NextToken:
    """The one completion token of a ``max_tokens: 1`` scoring request."""

    token: int
    logprob: float
    top: Top


def next_token(scored: ScoredPrompt, sampling: SamplingParams, seed: int, top: int) -> NextToken:
    """The token after the prompt: the argmax at temperature 0, else drawn from the processed distribution
    (temperature, top-k, top-p) with ``seed``; its log-prob is the verifier's at temperature 1, like the prompt's."""
    row = scored.next_logprobs
    if sampling.greedy:
        token = int(np.argmax(row))
    else:
        token = sample(process(row, sampling), spawn_generators(seed)[1])
    return NextToken(token, float(row[token]), tops_of(row[None], np.zeros(1), top)[0])


class Scoring:
    """A scoring request's read (``batched.ReadJob.read``): the prompt's scores, or what went wrong as a line."""

    def __init__(self, tokens: Sequence[int], top: int) -> None:
        self.tokens, self.top = list(tokens), top

    def __call__(self, model: Model, seq: int) -> ScoredPrompt | str:
        try:
            return prompt_logprobs(model, seq, self.tokens, self.top)
        except Exception as exc:  # noqa: BLE001 - this request's failure, never the batch's
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
