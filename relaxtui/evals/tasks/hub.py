"""Loading gated or large benchmarks from the Hugging Face hub, or from a local file with the same columns.

The hub path is what users run (``datasets`` caches the download for offline reuse); ``--data FILE`` (JSON
lines, JSON or CSV with the hub's column names) is how tests and air-gapped machines supply the data.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.tasks.base import read_jsonl


def hub_token() -> str | None:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def read_local(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".csv":
        try:
            with path.open(encoding="utf-8", newline="") as stream:
                return list(csv.DictReader(stream))
        except (OSError, csv.Error, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read data file {path}: {exc}") from None
    if path.suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read data file {path}: {exc}") from None
        if not isinstance(rows, list):
            raise UserError(f"{path}: expected a JSON list of rows")
        return rows
    return read_jsonl(path)


def load_hub_rows(repo: str, *, config: str | None = None, split: str = "train", gated: bool = False,
                  how_to_get_access: str = "", **kwargs: Any) -> list[dict[str, Any]]:
    token = hub_token()
    if gated and not token:
        raise UserError(f"{repo} is gated on the Hugging Face hub and no token was found: {how_to_get_access}")
    try:
        import datasets
    except ImportError:
        raise UserError(f"loading {repo} needs the `datasets` package: pip install datasets "
                        "(or pass --data FILE with the rows)") from None
    try:
        dataset = datasets.load_dataset(repo, config, split=split, token=token, **kwargs)
    except Exception as exc:  # datasets raises many types; the message is what helps
        text = str(exc)
        if gated and any(word in text for word in ("gated", "401", "403", "access")):
            raise UserError(f"no access to gated dataset {repo}: {how_to_get_access}") from None
        raise UserError(f"could not load {repo} from the hub: {text.splitlines()[0] if text else exc!r}") from None
    return [dict(row) for row in dataset]
