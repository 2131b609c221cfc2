"""What every task shares: the Sample it yields, the Task base class, data-file loading, think-stripping.

Following lighteval: one file per benchmark with its prompt template (citing its source), a pure
record → sample function, and an explicit ``version`` that goes into every result record ("increment when
the dataset or the prompt changes").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.engine.text import Message
from relaxtui.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    return Path(os.environ.get("RELAXTUI_EVALS_DATA", REPO_ROOT / "evals" / "data"))


@dataclass(frozen=True)
class Sample:
    id: str
    messages: tuple[Message, ...]
    gold: Any
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Score:
    parsed: Any
    correct: bool
    detail: str = ""


THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL | re.IGNORECASE)
THINK_UNCLOSED = re.compile(r"<think>.*", re.DOTALL | re.IGNORECASE)


def strip_think(text: str) -> str:
    """What the answer parsers see of a reply: thinking removed the way the paper's reproduction does (SPEC §5).

    graphcore-research/relaxed-spec-dec-repro, ``src/ens_spec_dec/tasks/_text.py``: every closed
    ``<think>…</think>`` block goes with the whitespace after it, then everything from a ``<think>`` that is
    never closed to the end of the reply (so a reply that is still thinking parses to nothing, while text
    written before that tag stays); tags match in any case; a ``</think>`` without an opening tag (the prompt
    owned it) stays in place, and the reasoning before it is parsed too. The result is stripped.
    """
    return THINK_UNCLOSED.sub("", THINK_BLOCK.sub("", text)).strip()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file; a malformed line is a UserError naming the file and line."""
    if not path.is_file():
        raise UserError(f"data file not found: {path}")
    rows = []
    try:
        with path.open(encoding="utf-8") as stream:
            for number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{number}: malformed JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise UserError(f"{path}:{number}: expected a JSON object")
                rows.append(row)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read data file {path}: {exc}") from None
    return rows


def require(row: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}")


class Task:
    """A benchmark: load samples, parse an output, judge it."""

    name: ClassVar[str]
    version: ClassVar[int]
    description: ClassVar[str] = ""
    max_tokens: ClassVar[int] = 4096  # a sensible default budget for this task

    def load(self, data: Path | None = None) -> list[Sample]:
        raise NotImplementedError

    def parse(self, text: str) -> Any:
        """The parsed answer, or None."""
        raise NotImplementedError

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        raise NotImplementedError

    def score(self, text: str, sample: Sample) -> Score:
        parsed = self.parse(text)
        return Score(parsed, parsed is not None and self.is_correct(parsed, sample.gold))


TaskFactory = Callable[[], Task]
