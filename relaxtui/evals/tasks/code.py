"""Shared by the code tasks: pulling the program out of a reply, and judging test outcomes."""

from __future__ import annotations

from typing import Any

from relaxtui.evals.sandbox import DEFAULT_TIMEOUT_S
from relaxtui.evals.tasks.base import Sample, Score, Task, strip_think


def extract_code(text: str) -> str | None:
    """The text between the last two lines that start with ``` (docs/protocols.md); None when there is no block."""
    lines = strip_think(text).splitlines()
    fences = [i for i, line in enumerate(lines) if line.strip().startswith("```")]
    if len(fences) < 2:
        return None
    start, end = fences[-2], fences[-1]
    code = "\n".join(lines[start + 1:end])
    return code if code.strip() else None


def same_output(actual: str, expected: str) -> bool:
    """LiveCodeBench-style stdout comparison: line by line, whitespace-insensitive, numbers within 1e-6."""
    actual_lines = [line.split() for line in actual.strip().splitlines()]
    expected_lines = [line.split() for line in expected.strip().splitlines()]
    if len(actual_lines) != len(expected_lines):
        return False
    for got_line, want_line in zip(actual_lines, expected_lines, strict=True):
        if got_line == want_line:
            continue
        if len(got_line) != len(want_line):
            return False
        for got, want in zip(got_line, want_line, strict=True):
            if got == want:
                continue
            try:
                if abs(float(got) - float(want)) > 1e-6:
                    return False
            except ValueError:
                return False
    return True


class CodeTask(Task):
    """A task judged by running the reply's last code block against tests in the sandbox."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def parse(self, text: str) -> str | None:
        return extract_code(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        raise NotImplementedError(f"{self.name} is judged by running tests: use score()")

    def score(self, text: str, sample: Sample) -> Score:
        code = self.parse(text)
        if code is None:
            return Score(None, False, "no code block")
        return self.run_tests(code, sample)

    def run_tests(self, code: str, sample: Sample) -> Score:
        raise NotImplementedError
