"""Shared fixtures: fake Markov models for the loop, and paths to the real test GGUFs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER, TEST_MODEL
from relaxtui.models.store import models_dir

VOCAB = 6


def random_table(seed: int, vocab: int = VOCAB, scale: float = 1.5) -> np.ndarray:
    """Logits of a first-order Markov LM: row = previous token."""
    return np.random.default_rng(seed).normal(scale=scale, size=(vocab, vocab))


@pytest.fixture
def markov_pair():
    """A verifier and a different drafter over the same 6-token vocabulary."""
    target = random_table(1)
    draft = target + random_table(2, scale=1.0)  # correlated but not equal
    return target, draft


def fake(table: np.ndarray, **kwargs) -> FakeBackend:
    return FakeBackend(markov_logits(table), table.shape[1], **kwargs)


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


def _model_path(name: str) -> Path:
    path = models_dir() / name
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: the test command installs it (scripts/bootstrap.py --models all)")
        pytest.skip(f"{path} missing; run `relaxtui models install-default --set all`")
    return path


@pytest.fixture(scope="session")
def test_model_path() -> Path:
    return _model_path(TEST_MODEL)


@pytest.fixture(scope="session")
def embedded_paths() -> tuple[Path, Path]:
    return _model_path(DEFAULT_VERIFIER), _model_path(DEFAULT_DRAFTER)
