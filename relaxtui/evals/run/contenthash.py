"""The sha256 of a whole model file, read once per version of the file and then remembered.

Why: the header-and-samples fingerprint (``engine.gguf.model_fingerprint``) reads ~1 MiB, so a file edited
between two of its 16 samples (a patched tensor, same name, same size) passed for the file a run folder was
made with. A full hash reads the file once (about a second a gigabyte); it is kept in
``$RELAXTUI_CACHE/content-sha256.json`` under the file's device, inode, size, mtime and ctime (ctime cannot be
set back; an edit within one timestamp tick of the hash, on a kernel with coarse timestamps, is the one it could
miss), so later runs pay a ``stat``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from relaxtui import envvars
from relaxtui.errors import UserError
from relaxtui.files import open_regular, read_regular_text

CACHE_FILE = "content-sha256.json"
MAX_ENTRIES = 256  # a few per model a user keeps; the oldest go first


def _cache_path() -> Path:
    return envvars.directory("RELAXTUI_CACHE", Path.home() / ".cache" / "relaxtui") / CACHE_FILE


def _key(stat: os.stat_result) -> str:
    return f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"


def _load(path: Path) -> dict[str, str]:
    try:
        value = json.loads(read_regular_text(path, 1 << 20, "hash cache"))
    except (OSError, ValueError, UserError):
        return {}  # missing or damaged: a cache, rebuilt as files are hashed
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def content_sha256(path: Path) -> str:
    """The file's sha256 (hex), from the cache when this very version of the file was hashed before."""
    try:
        with open_regular(path, "model file") as stream:
            key = _key(os.fstat(stream.fileno()))
            cache = _cache_path()
            known = _load(cache)
            if key in known:
                return known[key]
            hasher = hashlib.sha256()  # hashlib.file_digest is 3.11+; we support 3.10
            while block := stream.read(1 << 20):
                hasher.update(block)
            digest = hasher.hexdigest()
    except OSError as exc:
        raise UserError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    known[key] = digest
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(dict(list(known.items())[-MAX_ENTRIES:])), encoding="utf-8")
        os.replace(temporary, cache)
    except OSError:
        pass  # a read-only cache costs the next run another full read, nothing else
    return digest
