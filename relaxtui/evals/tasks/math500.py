"""MATH-500 (the 311 problems MMATH keeps): free-form answers, compared with math-verify (gold first).

Prompt: the same step-by-step boxed-answer template as AIME (docs/protocols.md). Parse: the last ``\\boxed{}``, else
the text after the last answer marker. Data: evals/data (MIT, evals/DATA_CARD.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.evals.tasks.aime import MARKER, record_to_sample
from relaxtui.evals.tasks.base import Sample, Task, data_dir, field_label, read_rows, strip_think
from relaxtui.evals.tasks.math_parsing import boxed_contents, strip_text_wrappers


def parse_math(text: str) -> str | None:
    text = strip_think(text)
    boxes = boxed_contents(text)
    if boxes:
        return strip_text_wrappers(boxes[-1]) or None
    markers = list(MARKER.finditer(text))
    if markers:
        line = text[markers[-1].end():].strip().splitlines()
        answer = line[0].strip().rstrip(".").strip() if line else ""
        answer = re.sub(r"^\$+|\$+$", "", answer).strip()
        return answer or None
    return None


def math_equal(gold: str, predicted: str) -> bool:
    """math-verify with gold first (its argument order matters); exact string match as the cheap first try."""
    if strip_text_wrappers(gold) == predicted:
        return True
    from math_verify import parse, verify  # type: ignore[import-untyped]  # math-verify ships no type information

    try:
        return bool(verify(parse(f"${gold}$"), parse(f"${predicted}$")))
    except Exception:  # math-verify raises on unparsable LaTeX; that is simply "not equal"
        return False


class Math500(Task):
    name: ClassVar[str] = "math500"
    version: ClassVar[int] = 2  # 2: thinking stripped as the paper's reproduction strips it
    description: ClassVar[str] = "MATH-500 (311 problems), math-verify equivalence"

    def load(self, data: Path | None = None) -> list[Sample]:
        path = data or data_dir() / "math500.jsonl"
        samples = []
        for where, row in read_rows(path, by_suffix=False):
            sample = record_to_sample(row, where)
            samples.append(Sample(sample.id, sample.messages, field_label(row, "answer", where)))
        return samples

    def parse(self, text: str) -> str | None:
        return parse_math(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed is not None and math_equal(str(gold), str(parsed))
