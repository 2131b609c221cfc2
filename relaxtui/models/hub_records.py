"""Provenance records of hub pulls: ``ggml_models/.hub/NAME.json``, one per linked file.

Why checked on reading: a record is a file on disk that anyone (or a crash, or a disk) may have changed. It
only adds provenance and lets an ``hf:`` name resolve offline, so a damaged one is skipped with one warning
line on stderr, never a traceback in ``models list`` or a pull.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from relaxtui.files import FileRefused, read_regular_bytes
from relaxtui.models.hub_answers import MAX_SIZE, REPO_ID, SHA256, first_line, name_problem, show
from relaxtui.models.store import models_dir

RECORDS = ".hub"  # folder inside ggml_models/ with one provenance record per linked file
MAX_RECORD = 1 << 20  # a record is well under 1 KiB
_FIELDS: dict[str, type] = {"repo": str, "file": str, "revision": str, "size": int, "sha256": str}
_OPTIONAL: dict[str, type] = {"requested": str, "requested_revision": str, "endpoint": str, "blob": str,
                              "mtime": int, "pulled_at": str, "parts": list}
_WARNED: set[str] = set()


def records_dir(directory: Path | None = None) -> Path:
    return (directory or models_dir()) / RECORDS


def record_problem(record: object) -> str | None:
    """Why a record cannot be used, or None if it can."""
    if not isinstance(record, dict):
        return f"it is a {type(record).__name__}, not an object"
    for key, kind in (*_FIELDS.items(), *_OPTIONAL.items()):
        if key in _OPTIONAL and key not in record:
            continue
        value = record.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{key} is {show(value)}, not a {kind.__name__}"
    if not REPO_ID.fullmatch(record["repo"]) or ".." in record["repo"]:
        return f"repo {show(record['repo'])} is not OWNER/NAME"
    if name_problem(record["file"]) or not record["revision"].isprintable():
        return f"file {show(record['file'])} or revision {show(record['revision'])} is not a usable name"
    if not 0 <= record["size"] <= MAX_SIZE or not SHA256.fullmatch(record["sha256"]):
        return f"size {show(record['size'])} or sha256 {show(record['sha256'])} is not valid"
    parts = record.get("parts", [])
    if not all(isinstance(part, str) and not name_problem(part) and "/" not in part for part in parts):
        return f"parts is {show(parts)}, not a list of file names"
    return None


def _skip(path: Path, why: str) -> None:
    """Say once per process which record is ignored and why (its link still works as a plain local file)."""
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        print(f"relaxtui: warning: ignoring the damaged hub record {show(str(path), 200)}: {why}", file=sys.stderr)


def read_records(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Link name -> provenance record, damaged records skipped (see the module's docstring)."""
    records = {}
    folder = records_dir(directory)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:  # a FIFO or a device named like a record: skipped, never waited on (relaxtui.files)
            record = json.loads(read_regular_bytes(path, MAX_RECORD, "hub record").decode("utf-8"))
        except FileRefused as exc:
            _skip(path, exc.reason)
            continue
        except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            _skip(path, f"not readable JSON ({first_line(exc, 80)})")
            continue
        problem = record_problem(record)
        if problem:
            _skip(path, problem)
            continue
        records[path.stem] = record
    return records


def hub_source(name: str, records: dict[str, dict[str, Any]]) -> str | None:
    """``hf:REPO@COMMIT7`` for a linked file with a record, for ``models list``."""
    record = records.get(name)
    return f"hf:{record['repo']}@{record['revision'][:7]}" if record else None
