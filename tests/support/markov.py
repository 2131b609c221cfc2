"""Fake Markov models for the loop (a 6-token vocabulary, logits from a table whose row is the previous token),
the sampling settings the loop tests share, and the exact laws their Monte Carlo checks compare with."""

from __future__ import annotations

from collections import Counter

import numpy as np

from relaxtui.decoding.sampling import SamplingParams, softmax
from relaxtui.engine.fake import FakeBackend, markov_logits

VOCAB = 6

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)
GREEDY = SamplingParams(temperature=0.0)


def random_table(seed: int, vocab: int = VOCAB, scale: float = 1.5) -> np.ndarray:
    """Logits of a first-order Markov LM: row = previous token."""
    return np.random.default_rng(seed).normal(scale=scale, size=(vocab, vocab))


def fake(table: np.ndarray, **kwargs) -> FakeBackend:
    return FakeBackend(markov_logits(table), table.shape[1], **kwargs)


def cycle_table(mistake_after: int | None = None) -> np.ndarray:
    """Greedy chain t -> t+1 (mod V); optionally the drafter says t+2 after ``mistake_after``."""
    table = np.full((VOCAB, VOCAB), -5.0)
    for t in range(VOCAB):
        table[t, (t + 1) % VOCAB] = 5.0
    if mistake_after is not None:
        table[mistake_after] = -5.0
        table[mistake_after, (mistake_after + 2) % VOCAB] = 5.0
    return table


def first_token_counts(verifier, drafter, rule, sampling, vocab: int, runs: int) -> np.ndarray:
    """How often each token came first in ``runs`` seeded runs of the loop (N = 2, three tokens): what the Monte
    Carlo law tests compare with the exact first-token law."""
    from relaxtui.decoding.config import GenerationConfig
    from relaxtui.decoding.events import TokenEvent
    from relaxtui.decoding.loop import generate

    counts = np.zeros(vocab)
    for seed in range(runs):
        config = GenerationConfig(draft_max=2, max_tokens=3, sampling=sampling, seed=seed)
        first = next(e for e in generate(verifier, [0], config, drafter=drafter, rule=rule)
                     if isinstance(e, TokenEvent))
        counts[first.token_id] += 1
    return counts


def exact_two_step(table: np.ndarray, start: int) -> np.ndarray:
    """Exact joint distribution of the first two tokens of the verifier's Markov chain."""
    first = softmax(table[start])
    return np.array([[first[a] * softmax(table[a])[b] for b in range(VOCAB)] for a in range(VOCAB)])


def assert_two_step_law(counts: Counter, target: np.ndarray, runs: int) -> None:
    """The first two emitted tokens (counted over ``runs`` seeds from context [0]) follow the verifier's
    exact two-step law: every cell within 5 standard errors plus 0.002."""
    expected = exact_two_step(target, 0)
    observed = np.zeros_like(expected)
    for (a, b), c in counts.items():
        observed[a, b] = c / runs
    tolerance = 5 * np.sqrt(expected * (1 - expected) / runs) + 0.002
    assert np.all(np.abs(observed - expected) <= tolerance), np.abs(observed - expected).max()
