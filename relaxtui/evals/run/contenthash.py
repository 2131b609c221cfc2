"""The sha256 of a whole model file, read once per version of the file and then remembered.

Why: the header-and-samples fingerprint (``engine.gguf.model_fingerprint``) reads ~1 MiB, so a file edited
between two of its 16 samples (a patched tensor, same name, same size) passed for the file a run folder was
made with. A full hash reads the file once (about a second a gigabyte); it is kept in
``$RELAXTUI_CACHE/content-sha256.json`` under the file's device, inode, size, mtime and ctime (ctime cannot be
set back; an edit within one timestamp tick of the hash, on a kernel with coarse timestamps, is the one it could
miss), so later runs pay a ``stat``.

The cache holds only digests this user's relaxtui computed (issue 47): each entry carries an HMAC-SHA256 of its key
and digest under a secret, ``content-sha256.key`` beside it (32 random bytes, mode 0600, made on first use). A
digest written in by hand, or a cache copied from elsewhere, fails its MAC, is dropped, and the file is hashed
again; a secret others can read (or that is not this user's) is replaced, which drops every entry. What is read is
bounded: the file's size, the number of entries, each entry's shape. Anyone who can read the secret can forge an
entry, as they could edit the model file itself; the MAC keeps out whoever can only write the cache (a shared or
copied ``RELAXTUI_CACHE``) and every hand edit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from relaxtui import envvars
from relaxtui.errors import UserError
from relaxtui.files import open_regular, read_regular_text, write_atomic

CACHE_FILE = "content-sha256.json"
SECRET_FILE = "content-sha256.key"
SECRET_BYTES = 32
VERSION = 2  # 1: an unsigned {key: digest} object, never believed now
MAX_ENTRIES = 256  # a few per model a user keeps; the oldest go first
MAX_CACHE_BYTES = 1 << 20  # 256 entries are about 40 KiB
_KEY = re.compile(r"[0-9]{1,20}:[0-9]{1,20}:[0-9]{1,20}:-?[0-9]{1,20}:-?[0-9]{1,20}")  # see _key
_HEX = re.compile(r"[0-9a-f]{64}")


def _cache_folder() -> Path:
    return envvars.directory("RELAXTUI_CACHE", Path.home() / ".cache" / "relaxtui")


def _key(stat_result: os.stat_result) -> str:
    s = stat_result
    return f"{s.st_dev}:{s.st_ino}:{s.st_size}:{s.st_mtime_ns}:{s.st_ctime_ns}"


def _mac(secret: bytes, key: str, digest: str) -> str:
    return hmac.digest(secret, f"{key}\n{digest}".encode("ascii"), "sha256").hex()


def _own_secret(path: Path) -> bytes | None:
    """The secret at ``path`` if it is this user's alone (a regular file, owned by this user, no access for group
    or others, SECRET_BYTES long); None otherwise."""
    try:
        with open_regular(path, "hash cache secret") as stream:
            info, data = os.fstat(stream.fileno()), stream.read(SECRET_BYTES + 1)
    except (OSError, UserError):
        return None
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077 or len(data) != SECRET_BYTES:
        return None
    return data


def _secret(path: Path) -> bytes | None:
    """This cache's secret: the one at ``path`` when it is this user's alone, else a new one put there (whole or not
    at all: written to a private temporary file, then linked into place if none is there, or renamed over one that
    failed the check); None where the folder cannot take one (the cache is then not used)."""
    found = _own_secret(path)
    if found is not None:
        return found
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(secrets.token_bytes(SECRET_BYTES))
            if path.exists() or path.is_symlink():
                os.replace(temporary, path)  # one that failed the check
            else:
                try:
                    os.link(temporary, path)  # only if still absent: two first uses agree on one secret
                except FileExistsError:
                    pass
        finally:
            Path(temporary).unlink(missing_ok=True)
    except OSError:
        return None
    return _own_secret(path)


def _load(path: Path, secret: bytes) -> dict[str, str]:
    """The entries of the cache at ``path`` whose MAC holds under ``secret`` (key -> digest); a cache that is
    missing, too big, of another shape or version, or has more than MAX_ENTRIES entries counts as empty."""
    try:
        value = json.loads(read_regular_text(path, MAX_CACHE_BYTES, "hash cache"))
    except (OSError, ValueError, RecursionError, UserError):
        return {}  # missing or damaged: a cache, rebuilt as files are hashed
    entries = value.get("entries") if isinstance(value, dict) and value.get("version") == VERSION else None
    if not isinstance(entries, dict) or len(entries) > MAX_ENTRIES:
        return {}
    known = {}
    for key, entry in entries.items():
        if not (_KEY.fullmatch(key) and isinstance(entry, list) and len(entry) == 2
                and all(isinstance(part, str) and _HEX.fullmatch(part) for part in entry)):
            continue
        digest, mac = entry
        if hmac.compare_digest(mac, _mac(secret, key, digest)):
            known[key] = digest
    return known


def _save(path: Path, secret: bytes, known: dict[str, str]) -> None:
    newest = list(known.items())[-MAX_ENTRIES:]
    entries = {key: [digest, _mac(secret, key, digest)] for key, digest in newest}
    try:
        write_atomic(path, json.dumps({"version": VERSION, "entries": entries}))
    except OSError:
        pass  # a read-only cache costs the next run another full read, nothing else


def content_sha256(path: Path) -> str:
    """The file's sha256 (hex), from the cache when this very version of the file was hashed before."""
    folder = _cache_folder()
    secret = _secret(folder / SECRET_FILE)
    cache = folder / CACHE_FILE
    known: dict[str, str] = {}
    try:
        with open_regular(path, "model file") as stream:
            key = _key(os.fstat(stream.fileno()))
            known = _load(cache, secret) if secret is not None else {}
            if key in known:
                return known[key]
            hasher = hashlib.sha256()  # hashlib.file_digest is 3.11+; we support 3.10
            while block := stream.read(1 << 20):
                hasher.update(block)
            digest = hasher.hexdigest()
    except OSError as exc:
        raise UserError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if secret is not None:
        known.pop(key, None)
        known[key] = digest  # newest last
        _save(cache, secret, known)
    return digest
