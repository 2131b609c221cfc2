"""Shared fixtures: fake Markov models for the loop, the tiny random GGUFs, models timed on a fake clock, and paths to
the real test GGUFs. Helpers that tests import live in ``tests/support/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER, TEST_MODEL
from relaxtui.models.store import models_dir

if TYPE_CHECKING:
    from tests.support.tiny_models import TinyModels

# The helpers in tests/support/ assert too (fails_with, the law checks): rewritten like test modules, a failure shows
# the values compared. That needs registering before anything imports them, so the fixtures below import them inside.
pytest.register_assert_rewrite("tests.support")


@pytest.fixture
def markov_pair():
    """A verifier and a different drafter over the same 6-token vocabulary."""
    from tests.support.markov import random_table

    target = random_table(1)
    draft = target + random_table(2, scale=1.0)  # correlated but not equal
    return target, draft


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The tiny GGUFs (tests/support/tiny_models.py), written once per test session."""
    from tests.support.tiny_models import write_all

    return write_all(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture
def fake_pair(tmp_path):
    """A verifier and two drafters as GGUF headers, loaded as FakeModels timed on a fake clock."""
    from tests.support.fake_clock import FakeClock, FakeModel
    from tests.support.gguf_files import gguf_bytes

    paths = []
    for name in ("verifier.gguf", "a.gguf", "cheap.gguf"):
        path = tmp_path / name
        path.write_bytes(gguf_bytes({"general.architecture": "qwen2"}, vocab=8))
        paths.append(path)
    FakeModel.clock = FakeClock()
    return paths


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
