"""GPQA Diamond (198 questions, 4 choices). Gated on the hub: loaded with the user's token, never shipped.

Choices [incorrect 1, 2, 3, correct] are shuffled with one ``random.Random(0)`` over the rows in order, as the
paper's reproduction prepares them (scripts/prepare_data.py; not the unseeded global shuffle lighteval uses).
Parse, as the reproduction does: the last boxed letter, else the last "answer is/:/= X", else the last "(X)",
in any case (evals/DATA_CARD.md, "Parsing conventions").
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, ClassVar

from relaxtui.engine.text import Message
from relaxtui.evals.tasks.base import Sample, Task, require, strip_think
from relaxtui.evals.tasks.hub import load_hub_rows, read_local

SYSTEM = ("Here are some example questions from experts. Answer the question by selecting one of the provided "
          "choices.")
USER = ("Question: {question}\nChoices:\n(A) {A}\n(B) {B}\n(C) {C}\n(D) {D}\nLet's think step by step. "
        "After reasoning, end with exactly:\nThe answer is (X).")
LETTERS = "ABCD"
COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
ACCESS = ("accept the terms at https://huggingface.co/datasets/Idavidrein/gpqa, then run "
          "`huggingface-cli login` or set HF_TOKEN (or pass --data FILE)")


# The three readings of graphcore-research/relaxed-spec-dec-repro, src/ens_spec_dec/tasks/gpqa_diamond.py, in the
# order they are tried; within each the last match wins, and every one ignores case.
# 1. A box whose body starts with the letter: "\boxed{" then optional spaces, an optional \text{ or \mathrm{, an
#    optional "(", then A-D and no brace until a "}". Whatever follows the letter is allowed, so \boxed{B) ...},
#    \boxed{D. 42 kJ} and also \boxed{Benzene} (B) or \boxed{Answer: C} (A) count.
BOXED_LETTER = re.compile(r"\\boxed\{\s*(?:\\(?:text|mathrm)\{\s*)?\(?\s*([A-D])[^{}]*\}", re.IGNORECASE)
# 2. "answer" then "is", ":" or "=", then optionally "**" and "(", then A-D. The reproduction also lists "final
#    answer" and "correct answer", which end in "answer" and so read the same letter. No word boundary follows
#    the letter: "the answer is definitely B" reads D.
STATED_LETTER = re.compile(r"answer\s*(?:is|:|=)\s*(?:\*\*)?\(?\s*([A-D])", re.IGNORECASE)
# 3. A letter in parentheses: "(C)" or "(c)".
BRACKETED_LETTER = re.compile(r"\(([A-D])\)", re.IGNORECASE)


def last_letter(pattern: re.Pattern[str], text: str) -> str | None:
    """The upper-cased letter of the last match of ``pattern`` in ``text``, or None."""
    letters = pattern.findall(text)
    return letters[-1].upper() if letters else None


def parse_letter(text: str) -> str | None:
    """GPQA's choice as the paper's reproduction reads it (evals/DATA_CARD.md, "Parsing conventions").

    After ``strip_think``: the last boxed letter, else the last stated one, else the last bracketed one. The
    reproduction writes the choice as "(B)"; here it is the bare letter, as the gold is.
    """
    text = strip_think(text)
    for pattern in (BOXED_LETTER, STATED_LETTER, BRACKETED_LETTER):
        letter = last_letter(pattern, text)
        if letter is not None:
            return letter
    return None


def rows_to_samples(rows: list[dict[str, Any]], where: str) -> list[Sample]:
    shuffler = random.Random(0)
    samples = []
    for index, row in enumerate(rows):
        require(row, COLUMNS, f"{where} row {index + 1}")
        # as the reproduction's scripts/prepare_data.py: [incorrect 1, 2, 3, correct] through one Random(0), texts
        # as the dataset has them (not stripped), so prompts and gold letters match the paper's
        items = [(str(row[f"Incorrect Answer {i}"]), False) for i in (1, 2, 3)] + [(str(row["Correct Answer"]), True)]
        shuffler.shuffle(items)
        choices = [text for text, _ in items]
        gold = LETTERS[next(i for i, (_, correct) in enumerate(items) if correct)]
        prompt = USER.format(question=str(row["Question"]), **dict(zip(LETTERS, choices, strict=True)))
        samples.append(Sample(str(row.get("Record ID") or f"gpqa-{index}"),
                              (Message("system", SYSTEM), Message("user", prompt)), gold))
    return samples


class Gpqa(Task):
    name: ClassVar[str] = "gpqa"
    version: ClassVar[int] = 3  # 2: answers read as the reproduction reads them; 3: its choice order
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
