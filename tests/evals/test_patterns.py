"""Patterns from task files run on RE2: catastrophic ones finish on any text (a gold, a reply), and features that
need backtracking are refused when the file loads, in one line naming the field and the feature."""

from __future__ import annotations

import json
import re

import pytest

from relaxtui.cli import main
from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.jsonshape import check_schema, violation
from relaxtui.evals.taskfiles.taskfile import load_task
from relaxtui.patterns import PatternError, compile_pattern

# Each of these takes Python's re longer than the age of the universe on the text beside it (exponential
# backtracking); RE2 answers in microseconds. The per-test timeout turns a regression into a failure, not a hang.
CATASTROPHIC = [
    (r"(a+)+$", (), "a" * 40 + "!"),
    (r"((.+)+)+X", ("dotall",), "ab\n" * 5_000),
    (r"(x+x+)+y", (), "x" * 5_000),
    (r"^(\w+\s?)*$", (), "word " * 2_000 + "!"),
]


def regex_task(folder, pattern: str, gold: str, flags: tuple[str, ...] = ()):
    (folder / "rows.jsonl").write_text(json.dumps({"id": "r1", "q": "say it", "a": gold}) + "\n")
    path = folder / "task.toml"
    path.write_text(
        'name = "patterns"\nversion = 1\n[data]\npath = "rows.jsonl"\nid = "id"\n'
        '[prompt]\ntemplate = "{q}"\nmax_tokens = 8\n'
        f'[answer]\nkind = "regex"\ngold = "a"\npattern = {json.dumps(pattern)}\nflags = {json.dumps(list(flags))}\n')
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source,flags,text", CATASTROPHIC, ids=range(len(CATASTROPHIC)))
def test_catastrophic_patterns_finish_and_answer_as_re_would(source, flags, text):
    pattern = compile_pattern(source, flags)
    assert pattern.search(text) is None  # each text is built to just miss: the case that backtracks forever
    assert pattern.search(text.rstrip("!") + ("X" if "X" in source else "y" if "y" in source else "")) is not None


@pytest.mark.timeout(60)
def test_tasks_check_on_a_catastrophic_pattern_and_a_41_character_gold_finishes(capsys, tmp_path):
    path = regex_task(tmp_path, r"(a+)+$", "a" * 40 + "!")
    assert main(["tasks", "check", str(path), "--show", "0"]) == 1  # the gold does not score: said, not hung
    assert "row 'r1': its gold answer does not score" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_a_models_own_reply_is_scored_in_linear_time(tmp_path):
    task = load_task(regex_task(tmp_path, r"((.+)+)+X", "ab", ("dotall",)))
    sample = task.load()[0]
    reply = "ab\n" * 20_000  # what a model may write: long, and no X in it
    assert task.score(reply, sample).correct is False
    assert task.parse("ab\n" * 50 + "X") is not None


REFUSED = [
    (r"(a)\1", "uses a backreference (\\1)"),
    (r"(?P<q>['\"]).*(?P=q)", "uses a named backreference (?P=…)"),
    (r"answer(?=:)", "uses a lookahead (?=…)"),
    (r"answer(?!s)", "uses a negative lookahead (?!…)"),
    (r"(?<=is )\w+", "uses a lookbehind (?<=…)"),
    (r"(?<!not )true", "uses a negative lookbehind (?<!…)"),
    (r"(?>a+)b", "uses an atomic group (?>…)"),
    (r"a++b", "uses a possessive quantifier (++)"),
    (r"done\Z", "uses \\Z (write \\z for the end of the text)"),
    (r"(?x) a b", "uses the verbose flag (?x)"),
    (r"(unclosed", "does not compile (missing ): (unclosed)"),
]


@pytest.mark.parametrize("source,said", REFUSED, ids=range(len(REFUSED)))
def test_features_re2_lacks_are_refused_at_tasks_check_in_one_line(capsys, tmp_path, source, said):
    assert main(["tasks", "check", str(regex_task(tmp_path, source, "x"))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"[answer]: pattern {said}" in err, err
    assert "RE2" in err or "does not compile" in err


def test_flags_and_named_groups_work_as_before(tmp_path):
    task = load_task(regex_task(tmp_path, r"^answer: (?P<v>\w+)$", "x", ("ignorecase", "multiline")))
    assert task.parse("thinking\nANSWER: Paris\nmore") == "Paris"
    with pytest.raises(PatternError, match="flag 'verbose' is unknown"):
        compile_pattern("a", ("verbose",))
    with pytest.raises(PatternError, match="at most 4096"):
        compile_pattern("a" * 5000)


def test_a_reply_holding_a_lone_surrogate_is_matched_not_raised():
    pattern = compile_pattern(r"(\w+)!")
    assert pattern.search("x\ud800 yes!").group(1) == "yes"
    assert [match.span() for match in pattern.finditer("a!\udfffb!")] == [(0, 2), (3, 5)]  # offsets in the text given


@pytest.mark.timeout(60)
def test_json_schema_patterns_run_on_re2_too():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^(a+)+$"}}}
    check_schema(schema, "[answer] schema")
    assert violation({"code": "a" * 40 + "!"}, schema) == "$.code: does not match pattern '^(a+)+$'"
    assert violation({"code": "aaa"}, schema) is None
    with pytest.raises(UserError, match=r"pattern: uses a backreference \(\\1\), which RE2"):
        check_schema({"type": "string", "pattern": r"(a)\1"}, "[answer] schema")


@pytest.mark.timeout(60)
def test_the_first_match_is_one_linear_pass_not_a_list_of_every_match(tmp_path):
    """Listing every match restarts after each one: `x.*y|x` on 400k x's scans ~8e10 characters that way."""
    path = regex_task(tmp_path, r"(x.*y|x)", "x", ("dotall",))
    path.write_text(path.read_text() + 'match = "first"\n')
    assert load_task(path).parse("x" * 400_000) == "x"


READINGS = [  # pattern, text: matches read as Python's re reads them
    (r"answer: (\w+)", "answer: a, then answer: b. Final answer: c!"),
    (r"(\d+)\s*apples", "3 apples, 14 apples, 15 pears, 92 apples"),
    (r"(?P<n>-?\d+)", "from -3 to 7 to 12"),
    (r"\[(.*?)\]", "[one] and [two] and [three]"),
    (r"\\boxed\{([^{}]*)\}", "so \\boxed{4}, no: \\boxed{5}"),
]


@pytest.mark.parametrize("source,text", READINGS, ids=range(len(READINGS)))
def test_first_and_last_read_as_python_re_reads_them(source, text):
    pattern = compile_pattern(source)
    reference = [m.group(1) for m in re.finditer(source, text)]
    assert pattern.search(text).group(1) == reference[0]
    assert [m.group(1) for m in pattern.finditer(text)] == reference


def test_a_pattern_holding_a_lone_surrogate_is_refused_not_a_traceback():
    with pytest.raises(PatternError, match=r"holds a lone surrogate \(U\+D800\) at character 1"):
        compile_pattern("a\ud800")
    with pytest.raises(UserError, match="pattern: holds a lone surrogate"):
        check_schema({"type": "string", "pattern": "a\ud800"}, "[answer] schema")
