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

from relaxtui.evals.tasks.base import (
    Located,
    Sample,
    Task,
    field_label,
    field_str,
    numbered,
    read_rows,
    require,
    strip_think,
)
from relaxtui.evals.tasks.hub import load_hub_rows
from relaxtui.text import Message

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
    """Samples from rows in memory, named ``where row N`` in errors."""
    return located_to_samples(numbered(rows, where))


def located_to_samples(rows: list[Located]) -> list[Sample]:
    shuffler = random.Random(0)
    samples = []
    for index, (where, row) in enumerate(rows):
        require(row, COLUMNS, where)
        # as the reproduction's scripts/prepare_data.py: [incorrect 1, 2, 3, correct] through one Random(0), texts
        # as the dataset has them (not stripped), so prompts and gold letters match the paper's
        items = [(field_str(row, f"Incorrect Answer {i}", where), False) for i in (1, 2, 3)]
        items.append((field_str(row, "Correct Answer", where), True))
        shuffler.shuffle(items)
        choices = [text for text, _ in items]
        gold = LETTERS[next(i for i, (_, correct) in enumerate(items) if correct)]
        prompt = USER.format(question=field_str(row, "Question", where), **dict(zip(LETTERS, choices, strict=True)))
        ident = field_label(row, "Record ID", where) if row.get("Record ID") else f"gpqa-{index}"
        samples.append(Sample(ident, (Message("system", SYSTEM), Message("user", prompt)), gold))
    return samples


class Gpqa(Task):
    name: ClassVar[str] = "gpqa"
    version: ClassVar[int] = 3  # 2: answers read as the reproduction reads them; 3: its choice order
    description: ClassVar[str] = "GPQA Diamond, 198 four-choice questions (gated on the hub)"

    def load(self, data: Path | None = None) -> list[Sample]:
        if data is not None:
            return located_to_samples(read_rows(data))
        return located_to_samples(load_hub_rows("Idavidrein/gpqa", config="gpqa_diamond", split="train", gated=True,
                                                how_to_get_access=ACCESS))

    def parse(self, text: str) -> str | None:
        return parse_letter(text)

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        return parsed == gold
