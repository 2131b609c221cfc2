"""The whole-file hash cache (relaxtui.evals.run.contenthash) holds only digests it computed itself (issue 47).

Why: ``$RELAXTUI_CACHE/content-sha256.json`` maps a file's (device, inode, size, mtime, ctime) to its sha256, and a
run folder's model fingerprint trusts it. A digest written into it by hand was returned as the file's: a model
edited after the fact could pass for the one a run folder was made with. Each entry now carries a MAC under a
secret only this user can read; an entry that fails it is dropped and the file hashed again.
"""

from __future__ import annotations

import hashlib
import json
import stat

import pytest

from relaxtui.evals.run import contenthash
from relaxtui.evals.run.contenthash import content_sha256


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + b"x" * 5000)
    return path


def cache_file(tmp_path):
    return tmp_path / "cache" / contenthash.CACHE_FILE


def test_a_forged_digest_in_the_cache_is_not_returned(model, tmp_path):
    real = hashlib.sha256(model.read_bytes()).hexdigest()
    assert content_sha256(model) == real
    forged = "0" * 64
    text = cache_file(tmp_path).read_text()
    assert real in text
    cache_file(tmp_path).write_text(text.replace(real, forged))  # the entry for this very file, another digest
    assert content_sha256(model) == real
    assert forged not in cache_file(tmp_path).read_text()  # dropped, the file hashed again


def test_an_entry_made_under_another_secret_is_not_returned(model, tmp_path, monkeypatch):
    """A whole cache copied from elsewhere (its MACs made with that cache's secret) is not believed here."""
    real = hashlib.sha256(model.read_bytes()).hexdigest()
    content_sha256(model)
    key = next(iter(json.loads(cache_file(tmp_path).read_text())["entries"]))
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("RELAXTUI_CACHE", str(elsewhere))
    secret = contenthash._secret(elsewhere / contenthash.SECRET_FILE)
    assert secret is not None
    forged = "1" * 64
    entry = [forged, contenthash._mac(secret, key, forged)]
    cache_file(tmp_path).write_text(json.dumps({"version": contenthash.VERSION, "entries": {key: entry}}))
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    assert content_sha256(model) == real


def test_the_secret_is_the_users_alone(model, tmp_path):
    content_sha256(model)
    secret = tmp_path / "cache" / contenthash.SECRET_FILE
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == contenthash.SECRET_BYTES
    before = secret.read_bytes()
    secret.chmod(0o644)  # readable by others: anyone could forge with it, so it is replaced (and the cache with it)
    real = hashlib.sha256(model.read_bytes()).hexdigest()
    assert content_sha256(model) == real
    assert secret.read_bytes() != before and stat.S_IMODE(secret.stat().st_mode) == 0o600


@pytest.mark.parametrize("text", [
    json.dumps({"version": 2, "entries": {f"1:{i}:2:3:4": ["a" * 64, "b" * 64] for i in range(5000)}}),
    json.dumps({"version": 2, "entries": {"1:2:3:4:5": "not a pair"}}),
    json.dumps({"version": 2, "entries": [1, 2]}),
    json.dumps({"1:2:3:4:5": "a" * 64}),  # the unsigned format before this one
    "[" * 100_000, "{not json", "",
], ids=["too-many", "not-a-pair", "a-list", "unsigned", "deep", "not-json", "empty"])
def test_a_cache_of_any_shape_is_read_without_error_and_never_believed(model, tmp_path, text):
    content_sha256(model)
    cache_file(tmp_path).write_text(text)
    assert content_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    kept = json.loads(cache_file(tmp_path).read_text())["entries"]
    assert len(kept) <= contenthash.MAX_ENTRIES


def test_a_cache_folder_that_takes_no_secret_still_hashes(model, tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(contenthash.tempfile, "mkstemp", refused)  # as a read-only folder does
    assert content_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    assert not cache_file(tmp_path).exists()  # nothing kept that could not be signed
