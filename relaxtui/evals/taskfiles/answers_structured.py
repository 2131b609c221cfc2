"""The structured answer kinds of a task file: ``json`` (the reply holds JSON that matches a schema or fields) and
``code`` (the reply's program passes the row's own tests in the sandbox).

Kept apart from ``answers`` because both read more than a string: a JSON value found in prose or a fenced block,
checked against ``jsonshape``'s schema subset; a program run by ``relaxtui.evals.sandbox.run_python``.
"""

from __future__ import annotations

import json
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.answers import Normal, Reader
from relaxtui.evals.taskfiles.jsonshape import check_schema, same_json, violation
from relaxtui.evals.taskfiles.tomltable import Table
from relaxtui.evals.tasks.base import Score, describe
from relaxtui.evals.tasks.code import extract_code

MAX_TIMEOUT_S = 120.0


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """Strict JSON: NaN and Infinity are refused, as a JSON reader elsewhere would refuse them."""
    return json.loads(text, parse_constant=_no_constants)


def find_json(text: str) -> Any:
    """The JSON value a reply holds: the last fenced block, else the whole reply, else the first object or
    array that decodes where a ``{`` or ``[`` opens; None when there is none (a JSON ``null`` is no answer)."""
    candidates = []
    block = extract_code(text) if "```" in text else None
    if block is not None:
        candidates.append(block)
    candidates.append(text.strip())
    for candidate in candidates:
        try:
            return loads(candidate)
        except (ValueError, RecursionError):
            continue
    decoder = json.JSONDecoder(parse_constant=_no_constants)
    for start, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):
                continue
            return value
    return None


class JsonAnswer(Reader):
    """Correct when the reply's JSON matches ``schema`` (a table, or JSON text), has the ``required`` top-level
    fields, and — with a gold field — equals the gold on the ``compare`` fields (default: every gold field).
    Strings are compared after ``Normal`` (case and whitespace, as ``exact``); numbers as numbers."""

    kind = "json"
    needs_gold = False

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        schema = table.raw("schema")
        if isinstance(schema, str):
            try:
                schema = loads(schema)
            except (ValueError, RecursionError) as exc:
                raise table.error("schema", f"is not valid JSON ({exc})") from None
        if schema is not None:
            check_schema(schema, f"{table.where} schema")
        self.schema = schema
        self.required = table.texts("required")
        self.compare = table.texts("compare")
        self.normal = Normal.read(table)

    def gold(self, value: Any, where: str) -> Any:
        if isinstance(value, str):
            try:
                value = loads(value)
            except (ValueError, RecursionError) as exc:
                raise UserError(f"{where}: the gold answer is not valid JSON ({exc})") from None
        if self.compare and not isinstance(value, dict):
            raise UserError(f"{where}: compare names fields, so the gold must be an object, not {describe(value)}")
        missing = [name for name in self.compare if name not in value]
        if missing:
            raise UserError(f"{where}: the gold object has no field {missing[0]!r} named in compare")
        if self.schema is not None and (problem := violation(value, self.schema)):
            raise UserError(f"{where}: the gold answer does not match the schema ({problem})")
        return value

    def _same(self, a: Any, b: Any) -> bool:
        if isinstance(a, str) and isinstance(b, str):
            return self.normal(a) == self.normal(b)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(self._same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self._same(a[k], b[k]) for k in a)
        return same_json(a, b)

    def score(self, text: str, gold: Any) -> Score:
        value = find_json(self.prepare(text))
        if value is None:
            return Score(None, False, "no JSON found")
        shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
        if self.schema is not None and (problem := violation(value, self.schema)):
            return Score(shown, False, f"schema: {problem}")
        if self.required:
            if not isinstance(value, dict):
                return Score(shown, False, f"expected an object with {', '.join(self.required)}")
            missing = [name for name in self.required if name not in value]
            if missing:
                return Score(shown, False, f"missing field {missing[0]!r}")
        if gold is None:
            return Score(shown, True)
        if not isinstance(gold, dict):
            same = self._same(value, gold)
            return Score(shown, same, "" if same else "differs from gold")
        if not isinstance(value, dict):
            return Score(shown, False, "expected an object")
        for name in self.compare or tuple(gold):
            if name not in value or not self._same(value[name], gold[name]):
                return Score(shown, False, f"field {name!r} differs from gold")
        return Score(shown, True)

    def default_example(self, gold: Any) -> str | None:
        return None if gold is None else f"```json\n{json.dumps(gold, ensure_ascii=False)}\n```"


class CodeAnswer(Reader):
    """The reply's last code block (lines between the last two lines starting with ```), followed by the row's
    tests, runs in the sandbox; correct when it exits cleanly within ``timeout_s``. ``fenced = false`` takes an
    unfenced reply whole."""

    kind = "code"
    runs_code = True
    gold_key = "tests"
    solution_key = "solution"

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.timeout_s = table.number("timeout_s", 6.0, low=0.1)
        if self.timeout_s > MAX_TIMEOUT_S:
            raise table.error("timeout_s", f"must be at most {MAX_TIMEOUT_S:g} (got {self.timeout_s:g})")
        self.fenced = table.flag("fenced", True)

    def gold(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise UserError(f"{where}: the tests must be Python source text, not {describe(value)}")
        if not value.strip():
            raise UserError(f"{where}: the tests are empty (a code task needs tests for every row)")
        return value

    def parse(self, text: str) -> str | None:
        code = extract_code(text)
        if code is None and not self.fenced and text.strip():
            code = text
        return code

    def score(self, text: str, gold: Any) -> Score:
        from relaxtui.evals.sandbox import run_python

        code = self.parse(self.prepare(text))
        if code is None:
            return Score(None, False, "no code block")
        result = run_python(f"{code}\n\n{gold}\n", timeout_s=self.timeout_s)
        detail = "timeout" if result.timed_out else (result.stderr.strip().splitlines() or [""])[-1][:200]
        if result.ok and not result.finished:  # exit code 0 is the program's to choose: sys.exit(0) before the tests
            detail = "stopped before its tests ran to the end"
        return Score(code, result.finished, "" if result.finished else detail or f"exit code {result.returncode}")

    def default_example(self, gold: Any) -> None:
        return None  # a reference solution comes from the row (``solution = FIELD``), not from the tests
