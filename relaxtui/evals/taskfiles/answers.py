"""Answer kinds of a task file: how a reply is read and judged, as a closed registry (no code in task files).

Each kind is a small reader built from the task file's ``[answer]`` table, with every option checked when the
file loads: ``exact`` (normalised string match), ``regex`` (a group of an RE2 pattern compiled at load), ``number``
(numeric match with a tolerance), ``choice`` (a letter, read as GPQA's reproduction reads it), ``boxed`` (the last
``\\boxed{}``), ``math`` (MATH-500's reading and math-verify equivalence, exactly as the built-in task), ``json``
(``answers_structured``), ``code`` (``answers_structured``: per-row tests in the sandbox) and ``none``
(open-ended: nothing is scored, the drift signals are the verdict). ``gold`` checks one row's gold answer at
load; ``example_reply`` is a reply that must score correct against it (``relaxtui tasks check``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, ClassVar

from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.tomltable import Table
from relaxtui.evals.tasks.base import Score, describe, strip_think
from relaxtui.evals.tasks.math500 import math_equal, parse_math
from relaxtui.evals.tasks.math_parsing import boxed_contents, strip_text_wrappers
from relaxtui.patterns import FLAG_PREFIXES, PatternError, compile_pattern

NO_ANSWER = "no answer found"


@dataclass(frozen=True)
class Normal:
    """String normalisation for comparing an answer with its gold: case, punctuation, whitespace."""

    case_sensitive: bool = False
    ignore_punctuation: bool = False
    collapse_whitespace: bool = True

    @classmethod
    def read(cls, table: Table) -> Normal:
        return cls(table.flag("case_sensitive", False), table.flag("ignore_punctuation", False),
                   table.flag("collapse_whitespace", True))

    def __call__(self, text: str) -> str:
        if self.ignore_punctuation:
            text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text)
        text = " ".join(text.split()) if self.collapse_whitespace else text.strip()
        return text if self.case_sensitive else text.casefold()


@dataclass(frozen=True)
class Locate:
    """Where in a reply the answer sits: after the last ``marker`` (to the end of its line; a marker at the end of
    a line reads the next non-empty one), or the last non-empty line, or the whole reply."""

    marker: str | None = None
    last_line: bool = False

    @classmethod
    def read(cls, table: Table) -> Locate:
        return cls(table.text("marker"), table.flag("last_line", False))

    def __call__(self, text: str) -> str:
        if self.marker is not None:
            at = text.rfind(self.marker)
            if at < 0:
                return ""
            rest = text[at + len(self.marker):].lstrip()
            return rest.splitlines()[0].strip() if rest else ""
        if self.last_line:
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return lines[-1] if lines else ""
        return text.strip()


def label(value: Any, where: str) -> str:
    """A gold answer written as text: a string, or a number as JSON files and the hub often write them."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise UserError(f"{where}: the gold answer must be a string or a number, not {describe(value)}")
    if not value.strip():
        raise UserError(f"{where}: the gold answer is empty")
    return value


class Reader:
    """One answer kind. ``prepare`` is what every kind sees of a reply (thinking removed unless told otherwise)."""

    kind: ClassVar[str]
    scored: ClassVar[bool] = True
    runs_code: ClassVar[bool] = False
    needs_gold: ClassVar[bool] = True  # a scored kind without a gold field cannot judge anything
    gold_key: ClassVar[str] = "gold"  # the [answer] key that names the row field holding the gold
    solution_key: ClassVar[str | None] = None  # the [answer] key naming a reference solution (tasks check)

    def __init__(self, table: Table) -> None:
        self.strip_think = table.flag("strip_think", True)
        self.example = table.text("example")  # a reply that should score correct; "{gold}" stands for the gold

    def prepare(self, text: str) -> str:
        return strip_think(text) if self.strip_think else text

    def gold(self, value: Any, where: str) -> Any:
        return label(value, where)

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def judge(self, parsed: Any, gold: Any) -> bool:
        raise NotImplementedError

    def score(self, text: str, gold: Any) -> Score:
        parsed = self.parse(self.prepare(text))
        if parsed is None:
            return Score(None, False, NO_ANSWER)
        return Score(parsed, self.judge(parsed, gold))

    def default_example(self, gold: Any) -> str | None:
        return str(gold)

    def example_reply(self, gold: Any) -> str | None:
        return self.example.replace("{gold}", str(gold)) if self.example else self.default_example(gold)


class Exact(Reader):
    kind = "exact"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.normal, self.locate = Normal.read(table), Locate.read(table)

    def parse(self, text: str) -> str | None:
        return self.locate(text) or None

    def judge(self, parsed: Any, gold: Any) -> bool:
        return self.normal(str(parsed)) == self.normal(str(gold))

    def default_example(self, gold: Any) -> str:
        return f"{self.locate.marker} {gold}" if self.locate.marker else str(gold)


class Regex(Exact):
    """The answer is one group of a pattern (compiled by RE2 when the file loads: linear-time on any reply, see
    ``relaxtui.patterns``), then compared as ``exact`` does."""

    kind = "regex"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        if self.locate.marker is not None or self.locate.last_line:
            raise table.error("marker", "and last_line do not apply to kind 'regex': the pattern says where")
        flags = table.texts("flags")
        for name in flags:
            if name not in FLAG_PREFIXES:
                raise table.error("flags", f"holds {name!r}; known: {', '.join(FLAG_PREFIXES)}")
        source = table.text("pattern", required=True)
        try:
            self.pattern = compile_pattern(source, flags)
        except PatternError as exc:
            raise table.error("pattern", str(exc)) from None
        group = table.raw("group")
        if group is None:
            group = 1 if self.pattern.groups else 0
        if isinstance(group, bool) or not isinstance(group, int | str):
            raise table.error("group", f"must be a group number or name, not {describe(group)}")
        if isinstance(group, int) and not 0 <= group <= self.pattern.groups:
            raise table.error("group", f"is {group} but the pattern has {self.pattern.groups} group(s)")
        if isinstance(group, str) and group not in self.pattern.groupindex:
            raise table.error("group", f"{group!r} is not a named group of the pattern")
        self.group = group
        self.last = table.choice("match", "last", ("first", "last")) == "last"

    def parse(self, text: str) -> str | None:
        match = None
        if self.last:
            for match in self.pattern.finditer(text):  # noqa: B007 - the last one is wanted
                pass
        else:
            match = self.pattern.search(text)  # the first: one linear pass, not a list of every match
        if match is None:
            return None
        found = match.group(self.group)
        if found is None:  # the group did not take part in the match
            return None
        return found.strip() or None


NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


def to_number(text: str) -> float | None:
    """The one number ``text`` is (``1,024``, ``-3.5``, ``2e3``), or None."""
    text = text.strip().rstrip(".")
    match = NUMBER.fullmatch(text)
    if match is None:
        return None
    value = float(text.replace(",", ""))
    return value if math.isfinite(value) else None


class Number(Reader):
    """The last number of the located text, equal to the gold within ``tolerance`` (absolute) or ``relative``."""

    kind = "number"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.locate = Locate.read(table)
        self.tolerance = table.number("tolerance", 1e-6)
        self.relative = table.number("relative", 0.0)

    def gold(self, value: Any, where: str) -> float:
        number = to_number(label(value, where))
        if number is None:
            raise UserError(f"{where}: the gold answer {str(value)[:40]!r} is not a number")
        return number

    def parse(self, text: str) -> str | None:
        found = NUMBER.findall(self.locate(text))
        return found[-1] if found else None

    def judge(self, parsed: Any, gold: Any) -> bool:
        value = to_number(str(parsed))
        return value is not None and abs(value - gold) <= max(self.tolerance, self.relative * abs(gold))

    def default_example(self, gold: Any) -> str:
        shown = f"{gold:g}" if float(gold).is_integer() and abs(gold) < 1e15 else repr(gold)
        return f"{self.locate.marker} {shown}" if self.locate.marker else shown


class Choice(Reader):
    """A letter, read in GPQA's order (evals/DATA_CARD.md): the last boxed letter, else the last "answer is X",
    else the last "(X)"; a reply that is only a letter (``B``, ``B.``, ``(B)``) reads that letter."""

    kind = "choice"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        letters = table.text("letters", "ABCD")
        if not letters.isalpha() or len(set(letters.upper())) != len(letters):
            raise table.error("letters", f"must be distinct letters, e.g. ABCD (got {letters!r})")
        self.letters = letters.upper()
        cls = f"[{re.escape(self.letters)}]"
        self.readings = (
            re.compile(r"\\boxed\{\s*(?:\\(?:text|mathrm)\{\s*)?\(?\s*(" + cls + r")[^{}]*\}", re.IGNORECASE),
            re.compile(r"answer\s*(?:is|:|=)\s*(?:\*\*)?\(?\s*(" + cls + ")", re.IGNORECASE),
            re.compile(r"\((" + cls + r")\)", re.IGNORECASE),
        )
        self.alone = re.compile(r"\(?(" + cls + r")[).:]?", re.IGNORECASE)

    def gold(self, value: Any, where: str) -> str:
        letter = label(value, where).strip().upper()
        if len(letter) != 1 or letter not in self.letters:
            raise UserError(f"{where}: the gold answer {str(value)[:40]!r} is not one of the letters {self.letters}")
        return letter

    def parse(self, text: str) -> str | None:
        for pattern in self.readings:
            found = pattern.findall(text)
            if found:
                return found[-1].upper()
        alone = self.alone.fullmatch(text.strip())
        return alone.group(1).upper() if alone else None

    def judge(self, parsed: Any, gold: Any) -> bool:
        return parsed == gold

    def default_example(self, gold: Any) -> str:
        return f"The answer is ({gold})."


class Boxed(Reader):
    """The last ``\\boxed{}`` (nested braces balanced, ``\\text{}`` wrappers removed), compared as ``exact``."""

    kind = "boxed"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.normal = Normal.read(table)

    def parse(self, text: str) -> str | None:
        boxes = boxed_contents(text)
        return (strip_text_wrappers(boxes[-1]) or None) if boxes else None

    def judge(self, parsed: Any, gold: Any) -> bool:
        return self.normal(str(parsed)) == self.normal(strip_text_wrappers(str(gold)))

    def default_example(self, gold: Any) -> str:
        return f"\\boxed{{{gold}}}"


class MathAnswer(Reader):
    """MATH-500's reading and equivalence, the very functions of the built-in task (so records match it)."""

    kind = "math"

    def parse(self, text: str) -> str | None:
        return parse_math(text)

    def judge(self, parsed: Any, gold: Any) -> bool:
        return math_equal(str(gold), str(parsed))

    def score(self, text: str, gold: Any) -> Score:
        parsed = self.parse(self.prepare(text))  # as Task.score does, so records equal the built-in task's
        return Score(parsed, parsed is not None and self.judge(parsed, gold))

    def default_example(self, gold: Any) -> str:
        return f"\\boxed{{{gold}}}"


class Unscored(Reader):
    """Open-ended: no gold, nothing judged; the report's drift signals are the verdict."""

    kind = "none"
    scored = False
    needs_gold = False

    def gold(self, value: Any, where: str) -> None:
        return None

    def score(self, text: str, gold: Any) -> Score:
        return Score(None, False, "open-ended: not scored")

    def default_example(self, gold: Any) -> None:
        return None


def kinds() -> dict[str, type[Reader]]:
    from relaxtui.evals.taskfiles.answers_structured import CodeAnswer, JsonAnswer

    return {cls.kind: cls for cls in (Exact, Regex, Number, Choice, Boxed, MathAnswer, JsonAnswer, CodeAnswer,
                                      Unscored)}


def make_reader(table: Table) -> Reader:
    """The reader the ``[answer]`` table describes; an unknown kind or option is one line naming it."""
    known = kinds()
    kind = table.text("kind", required=True)
    if kind not in known:
        raise table.error("kind", f"{kind!r} is unknown (known: {', '.join(known)})")
    return known[kind](table)
