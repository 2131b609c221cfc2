"""GPQA Diamond (198 questions, 4 choices). Gated on the hub: loaded with the user's token, never shipped.

Choices are shuffled with one ``random.Random(0)`` over the rows in order (the paper's protocol, not the
unseeded global shuffle lighteval uses). Parse: a boxed letter, else the last "answer is (X)" / "answer: X",
else the last "(X)".
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.engine.text import Message
from relaxtui.evals.tasks.base import Sample, Task, require, strip_think
from relaxtui.evals.tasks.hub import load_hub_rows, read_local
from relaxtui.evals.tasks.math_parsing import boxed_contents, strip_text_wrappers

SYSTEM = ("Here are some example questions from experts. Answer the question by selecting one of the provided "
          "choices.")
USER = ("Question: {question}\nChoices:\n(A) {A}\n(B) {B}\n(C) {C}\n(D) {D}\nLet's think step by step. "
        "After reasoning, end with exactly:\nThe answer is (X).")
LETTERS = "ABCD"
COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
ACCESS = ("accept the terms at https://huggingface.co/datasets/Idavidrein/gpqa, then run "
          "`huggingface-cli login` or set HF_TOKEN (or pass --data FILE)")


def parse_letter(text: str) -> str | None:
    text = strip_think(text)
    for body in reversed(boxed_contents(text)):
        letter = re.fullmatch(r"\(?([A-D])\)?\.?", strip_text_wrappers(body))
        if letter:
            return letter.group(1)
    stated = re.findall(r"answer\s*(?:is|:)\s*\(?\**\s*([A-D])\b", text, flags=re.IGNORECASE)
    if stated:
        return stated[-1].upper()
    bracketed = re.findall(r"\(([A-D])\)", text)
    return bracketed[-1] if bracketed else None


def rows_to_samples(rows: list[dict[str, Any]], where: str) -> list[Sample]:
    shuffler = random.Random(0)
    samples = []
    for index, row in enumerate(rows):
        require(row, COLUMNS, f"{where} row {index + 1}")
        correct = str(row["Correct Answer"]).strip()
        choices = [correct, *(str(row[f"Incorrect Answer {i}"]).strip() for i in (1, 2, 3))]
        shuffler.shuffle(choices)
        gold = LETTERS[choices.index(correct)]
        prompt = USER.format(question=str(row["Question"]).strip(), **dict(zip(LETTERS, choices, strict=True)))
        samples.append(Sample(str(row.get("Record ID") or f"gpqa-{index}"),
                              (Message("system", SYSTEM), Message("user", prompt)), gold))
    return samples


class Gpqa(Task):
    name: ClassVar[str] = "gpqa"
    version: ClassVar[int] = 1
    description: ClassVar[str] = "GPQA Diamond, 198 four-choice questions (gated on the hub)"

    def load(self, data: Path | None = None) -> list[Sample]:
        if data is not None:
            return rows_to_samples(read_local(data), str(data))
        rows = load_hub_rows("Idavidrein/gpqa", config="gpqa_diamond", split="train", gated=True,
                             how_to_get_access=ACCESS)
        return rows_to_samples(rows, "Idavidrein/gpqa")

    def parse(self, text: str) -> str | None:
        return parse_letter(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed == gold
