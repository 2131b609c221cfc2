"""Answer kinds of task files on hand-written cases (lighteval-style: the cases are data).

``tests/evals/data/answers/<kind>.json`` holds groups of cases (the ``[answer]`` options, then replies with their
gold, whether they score correct, what is read, and why), plus option sets that must be refused with a
one-line message naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.answers import kinds
from relaxtui.evals.taskfiles.jsonshape import check_schema, violation
from relaxtui.evals.taskfiles.taskfile import read_answer
from relaxtui.evals.taskfiles.tomltable import Table

CASES = Path(__file__).parent / "data" / "answers"
KINDS = tuple(kinds())


def case_file(kind: str) -> dict:
    return json.loads((CASES / f"{kind}.json").read_text(encoding="utf-8"))


def table(kind: str, options: dict) -> Table:
    """The [answer] table the options describe, with the field that holds each row's gold named."""
    extra = {} if kind == "none" else {kinds()[kind].gold_key: "gold"}
    return Table({"kind": kind, **extra, **options}, f"case.toml: [answer] ({kind})")


def cases() -> list:
    found = []
    for kind in KINDS:
        for group_number, group in enumerate(case_file(kind)["groups"], start=1):
            for number, case in enumerate(group["cases"], start=1):
                found.append(pytest.param(kind, group["options"], case, id=f"{kind}-{group_number}.{number}"))
    return found


@pytest.mark.parametrize("kind,options,case", cases())
def test_answer_cases(kind, options, case):
    reader, _, _ = read_answer(table(kind, options))
    gold = None if case["gold"] is None else reader.gold(case["gold"], "case")
    score = reader.score(case["reply"], gold)
    assert score.correct is case["correct"], (case["why"], score)
    if "parsed" in case:
        assert score.parsed == case["parsed"], case["why"]


def errors() -> list:
    return [pytest.param(kind, error["options"], error["message"], id=f"{kind}-error-{number}")
            for kind in KINDS for number, error in enumerate(case_file(kind)["errors"], start=1)]


@pytest.mark.parametrize("kind,options,message", errors())
def test_bad_options_are_one_line_naming_the_key(kind, options, message):
    with pytest.raises(UserError) as raised:
        read_answer(table(kind, options))
    text = str(raised.value)
    assert message in text and "\n" not in text and text.startswith("case.toml: [answer]"), text


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_well_formed_case_file(kind):
    data = case_file(kind)
    assert data["kind"] == kind and data["groups"]
    replies = [(json.dumps(g["options"], sort_keys=True), c["reply"]) for g in data["groups"] for c in g["cases"]]
    assert len(replies) == len(set(replies))
    for group in data["groups"]:
        for case in group["cases"]:
            assert set(case) <= {"reply", "gold", "correct", "why", "parsed"} and case["why"].strip()
    if kind != "none":  # every scored kind has a case that is right and one that is wrong
        outcomes = {c["correct"] for g in data["groups"] for c in g["cases"]}
        assert outcomes == {True, False}


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(UserError, match=r"kind 'fuzzy' is unknown \(known: exact, regex, number, choice, boxed, "
                                        r"math, json, code, none\)"):
        read_answer(Table({"kind": "fuzzy"}, "t.toml: [answer]"))


def test_a_code_task_without_tests_is_refused():
    with pytest.raises(UserError, match=r"tests is required for kind 'code': the row field holding its Python tests"):
        read_answer(Table({"kind": "code"}, "t.toml: [answer]"))


def test_gold_answers_are_checked_per_row():
    number, _, _ = read_answer(table("number", {}))
    with pytest.raises(UserError, match="is not a number"):
        number.gold("twelve", "data.jsonl:3: field 'answer'")
    choice, _, _ = read_answer(table("choice", {}))
    with pytest.raises(UserError, match="not one of the letters ABCD"):
        choice.gold("F", "row 1")
    code, _, _ = read_answer(table("code", {}))
    with pytest.raises(UserError, match="the tests are empty"):
        code.gold("  ", "row 2")
    json_kind, _, _ = read_answer(table("json", {"compare": ["id"]}))
    with pytest.raises(UserError, match="no field 'id' named in compare"):
        json_kind.gold('{"x": 1}', "row 3")


def test_json_schema_subset():
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                                               "kind": {"anyOf": [{"const": "a"}, {"type": "integer"}]}}}
    check_schema(schema, "s")
    assert violation({"tags": ["x"], "kind": "a"}, schema) is None
    assert violation({"tags": ["x", "y", "z"]}, schema) == "$.tags: more than 2 items"
    assert violation({"tags": [1]}, schema) == "$.tags[0]: expected string, got integer"
    assert violation({"kind": True}, schema) == "$.kind: matches none of anyOf"
    assert violation(True, {"type": "integer"}) == "$: expected integer, got boolean"  # true is not 1


def test_a_code_answer_that_exits_0_before_the_row_tests_is_wrong():
    """The row's tests follow the block; a block that ends the program first never ran them."""
    code, _, _ = read_answer(table("code", {}))
    tests = "assert add(2, 2) == 4"
    assert code.score("```python\ndef add(a, b):\n    return a + b\n```", tests).correct
    wrong = code.score("```python\nimport sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n```", tests)
    assert not wrong.correct and wrong.detail == "stopped before its tests ran to the end"
    assert code.score("```python\ndef add(a, b):\n    return 0\n```", tests).correct is False
