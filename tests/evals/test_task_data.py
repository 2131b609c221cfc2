"""Every byte a task reads may be hostile (issue 17).

Loading a data file (``--data`` in any format a task reads, gzipped or not) or hub rows either yields samples
or raises one UserError line naming the file and the row; never another exception. LiveCodeBench's pickled
private tests can run nothing and cannot exhaust memory. Property tests fuzz bytes, JSON values, rows and
mutations of valid rows for every task; hand-written cases pin one example of each class of bad input.
"""

from __future__ import annotations

import base64
import csv
import gzip
import io
import json
import os
import pickle
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxtui.errors import UserError
from relaxtui.evals.tasks import get, lcb_data
from relaxtui.evals.tasks.base import Sample
from relaxtui.evals.tasks.lcb_data import MAX_TESTS_BYTES, decode_tests

TESTS = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]


def packed(value: Any, protocol: int = pickle.DEFAULT_PROTOCOL) -> str:
    """LiveCodeBench's private-test encoding: base64(zlib(pickle(value)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(value, protocol=protocol))).decode()


MATH_ROW = {"id": "p1", "problem": "What is $1+1$?", "answer": "2"}
VALID: dict[str, dict[str, Any]] = {
    "aime": MATH_ROW, "aime25": MATH_ROW, "math500": MATH_ROW,
    "gpqa": {"Record ID": "rec1", "Question": "What is 2+2?", "Correct Answer": "4", "Incorrect Answer 1": "3",
             "Incorrect Answer 2": "5", "Incorrect Answer 3": "six"},
    "lcb": {"question_id": "abc001_a", "question_content": "Add two numbers.", "starter_code": "",
            "public_test_cases": json.dumps(TESTS), "private_test_cases": packed(json.dumps(TESTS)),
            "metadata": json.dumps({"func_name": None})},
    "humaneval": {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "test": "def check(f):\n    pass\n",
                  "entry_point": "add"},
}
TASKS = tuple(VALID)
JSONL_ONLY = (".jsonl", ".jsonl.gz")  # the math tasks read JSON lines whatever the suffix
FORMATS = {task: JSONL_ONLY if task in ("aime", "aime25", "math500") else
           (".jsonl", ".json", ".csv", ".jsonl.gz", ".json.gz", ".csv.gz") for task in TASKS}


def encode(rows: list[Any], fmt: str) -> bytes:
    """``rows`` written in format ``fmt`` (CSV cells hold strings; other values are written as JSON)."""
    if fmt.startswith(".json") and not fmt.startswith(".jsonl"):
        data = json.dumps(rows).encode()
    elif fmt.startswith(".csv"):
        keys = list(dict.fromkeys(k for row in rows if isinstance(row, dict) for k in row))
        stream = io.StringIO(newline="")
        writer = csv.writer(stream)
        writer.writerow(keys)
        for row in rows:
            cells = row if isinstance(row, dict) else {}
            writer.writerow([v if isinstance(v := cells.get(k, ""), str) else json.dumps(v) for k in keys])
        data = stream.getvalue().encode("utf-8", "surrogatepass")
    else:
        data = b"".join(json.dumps(row).encode() + b"\n" for row in rows)
    return gzip.compress(data) if fmt.endswith(".gz") else data


def load(task: str, directory: Path, fmt: str, data: bytes) -> list[Sample] | UserError:
    """Load ``data`` as a ``fmt`` file: samples, or the UserError raised, which must be one non-empty line.
    Any other exception escapes and fails the test."""
    path = directory / f"data{fmt}"
    path.write_bytes(data)
    try:
        samples = get(task).load(path)
    except UserError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, message
        return exc
    assert isinstance(samples, list) and all(isinstance(s, Sample) for s in samples)
    return samples


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("task-data")


# Examples per fuzz test and task; RELAXTUI_FUZZ_EXAMPLES=5000 for a long hunt.
EXAMPLES = int(os.environ.get("RELAXTUI_FUZZ_EXAMPLES", "100"))
FUZZ = settings(deadline=None, max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
texts = st.text(max_size=12) | st.sampled_from(["", "\ud800", "a\udfffb", "{", "[]", "eJw=", "1" * 5000])
scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(texts, inner, max_size=4), max_leaves=16)


@pytest.mark.parametrize("task", TASKS)
@FUZZ
@given(data=st.data())
def test_random_bytes_load_or_fail_cleanly(task, workdir, data):
    fmt = data.draw(st.sampled_from(FORMATS[task]))
    raw = data.draw(st.binary(max_size=200) | st.builds(encode, st.just([VALID[task]]), st.just(fmt)).flatmap(
        lambda good: st.builds(lambda cut, flip: good[:cut] + bytes([flip]) + good[cut + 1:],
                               st.integers(0, len(good)), st.integers(0, 255))))
    load(task, workdir, fmt, raw)


@pytest.mark.parametrize("task", TASKS)
@FUZZ
@given(data=st.data())
def test_random_json_values_load_or_fail_cleanly(task, workdir, data):
    fmt = data.draw(st.sampled_from(FORMATS[task]))
    value = data.draw(json_values)
    rows = value if isinstance(value, list) else [value]
    load(task, workdir, fmt, encode(rows, fmt))


@pytest.mark.parametrize("task", TASKS)
@FUZZ
@given(data=st.data())
def test_random_rows_load_or_fail_cleanly(task, workdir, data):
    fmt = data.draw(st.sampled_from(FORMATS[task]))
    keys = st.sampled_from(sorted(VALID[task])) | texts
    rows = data.draw(st.lists(st.dictionaries(keys, json_values, max_size=8), min_size=1, max_size=3))
    load(task, workdir, fmt, encode(rows, fmt))


def mutated(row: dict[str, Any], draw: Any) -> dict[str, Any]:
    """``row`` with some fields dropped and some retyped; LiveCodeBench's nested fields mutated too."""
    row = dict(row)
    for key in draw(st.lists(st.sampled_from(sorted(row)), max_size=3, unique=True)):
        action = draw(st.sampled_from(("drop", "retype", "nested")))
        if action == "drop":
            del row[key]
        elif action == "retype":
            row[key] = draw(json_values)
        elif key in ("public_test_cases", "private_test_cases"):
            test = {**TESTS[0], **draw(st.dictionaries(st.sampled_from(["input", "output", "testtype"]),
                                                      json_values, max_size=2))}
            tests = draw(st.sampled_from([[test], [TESTS[0], test], test, [json.dumps(test)]]))
            row[key] = packed(json.dumps(tests)) if draw(st.booleans()) else json.dumps(tests)
        elif key == "metadata":
            row[key] = json.dumps(draw(json_values | st.fixed_dictionaries({"func_name": json_values})))
        else:
            row[key] = json.dumps(draw(json_values))  # valid JSON text where plain text belongs
    return row


@pytest.mark.parametrize("task", TASKS)
@FUZZ
@given(data=st.data())
def test_mutated_valid_rows_load_or_fail_cleanly(task, workdir, data):
    fmt = data.draw(st.sampled_from(FORMATS[task]))
    rows = [VALID[task], mutated(VALID[task], data.draw)]
    result = load(task, workdir, fmt, encode(rows, fmt))
    assert isinstance(result, UserError) or len(result) == 2


@pytest.mark.parametrize("task,fmt", [(task, fmt) for task in TASKS for fmt in FORMATS[task]])
def test_valid_rows_load_in_every_format(task, fmt, workdir):
    samples = load(task, workdir, fmt, encode([VALID[task]] * 2, fmt))
    assert isinstance(samples, list) and len(samples) == 2, samples


hub_values = json_values | st.binary(max_size=8) | st.datetimes() | st.tuples(texts)


@pytest.mark.parametrize("task", ["gpqa", "lcb"])
@FUZZ
@given(data=st.data())
def test_hub_rows_load_or_fail_cleanly(task, data):
    """Hub rows (``datasets`` may give bytes, datetimes, tuples) go through the same row checks as files."""
    from relaxtui.evals.tasks import gpqa, lcb

    keys = st.sampled_from(sorted(VALID[task])) | texts
    rows = data.draw(st.lists(st.dictionaries(keys, hub_values, max_size=8) | st.builds(
        lambda row, extra: {**row, **extra}, st.just(VALID[task]), st.dictionaries(keys, hub_values, max_size=2)),
        min_size=1, max_size=3))
    try:
        samples = (gpqa if task == "gpqa" else lcb).rows_to_samples(rows, "acme/dataset")
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("acme/dataset row "), exc
    else:
        assert len(samples) == len(rows)


pickles = st.binary(max_size=64) | st.builds(
    lambda good, cut, flip: good[:cut] + bytes([flip]) + good[cut + 1:],
    st.builds(lambda value, protocol: pickle.dumps(json.dumps(value), protocol=protocol), json_values,
              st.integers(0, pickle.HIGHEST_PROTOCOL)), st.integers(0, 40), st.integers(0, 255))


@FUZZ
@given(pickled=pickles)
def test_random_and_mutated_pickles_decode_or_fail_cleanly(pickled):
    try:
        tests = decode_tests(base64.b64encode(zlib.compress(pickled)).decode(), "row 1")
    except UserError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(tests, list) and all(isinstance(t["input"], str) for t in tests)


# --- hand-written: one case per class of bad input, with the words of its error --------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def lcb(**fields: Any) -> dict[str, Any]:
    return {**VALID["lcb"], **fields}


def raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


CASES = [  # (task, format, file bytes, what the message says)
    ("gpqa", ".json", raw("[1, 2]"), "data.json row 1: expected a JSON object, not a number"),
    ("gpqa", ".json", raw('{"rows": []}'), "expected a JSON list of rows, not an object"),
    ("aime", ".jsonl", raw("[]\n"), "data.jsonl:1: expected a JSON object, not a list"),
    ("aime", ".jsonl", encode([{**MATH_ROW, "problem": 5}], ".jsonl"), "field 'problem' must be a string, not a num"),
    ("math500", ".jsonl", encode([{**MATH_ROW, "answer": 2.5}], ".jsonl"), "'answer' must be a string or an integer"),
    ("humaneval", ".jsonl", encode([{**VALID["humaneval"], "prompt": None}], ".jsonl"), "'prompt' must be a string"),
    ("lcb", ".jsonl", encode([lcb(metadata=[1])], ".jsonl"), "field 'metadata': must be a JSON object, not a list"),
    ("lcb", ".jsonl", encode([lcb(metadata="[1]")], ".jsonl"), "field 'metadata': must be a JSON object, not a list"),
    ("lcb", ".jsonl", encode([lcb(question_content={"a": 1})], ".jsonl"), "'question_content' must be a string"),
    ("gpqa", ".jsonl", encode([{k: v for k, v in VALID["gpqa"].items() if k != "Question"}], ".jsonl"),
     "data.jsonl:1: missing field(s) Question"),
    ("humaneval", ".jsonl.gz", gzip.compress(b'{"task_id": "\xff"}\n'), "data.jsonl.gz:1: not UTF-8 at byte 13"),
    ("humaneval", ".jsonl.gz", b'{"task_id": "x"}\n', "not a valid gzip file (Not a gzipped file"),
    ("humaneval", ".jsonl.gz", gzip.compress(encode([VALID["humaneval"]], ".jsonl"))[:-12], "not a valid gzip file"),
    ("humaneval", ".jsonl.gz", gzip.compress(b"x" * 1000)[:12] + b"\xff" * 40, "not a valid gzip file"),
    ("lcb", ".jsonl", encode([lcb(metadata="{oops")], ".jsonl"), "field 'metadata': malformed JSON"),
    ("lcb", ".jsonl", encode([lcb(public_test_cases="not json")], ".jsonl"),
     "field 'public_test_cases': neither JSON (malformed JSON (Expecting value"),
    ("lcb", ".jsonl", encode([lcb(private_test_cases="eJz///8=")], ".jsonl"), "nor packed tests (zlib: Error -3"),
    ("lcb", ".jsonl", encode([lcb(private_test_cases="eJzz")], ".jsonl"), "truncated (incomplete zlib stream)"),
    ("lcb", ".jsonl", encode([lcb(public_test_cases="[1]")], ".jsonl"), "'public_test_cases' test 1: expected a JSON"),
    ("lcb", ".jsonl", encode([lcb(public_test_cases='{"input": "1"}')], ".jsonl"), "must be a list of test cases"),
    ("lcb", ".jsonl", encode([lcb(public_test_cases="123")], ".jsonl"), "must be a list of test cases, not a number"),
    ("lcb", ".jsonl", encode([lcb(private_test_cases=packed(json.dumps([{"input": 1, "output": "2"}])))], ".jsonl"),
     "'private_test_cases' test 1: field 'input' must be a string, not a number"),
    ("lcb", ".jsonl", encode([lcb(private_test_cases=packed(json.dumps([{"input": "1"}])))], ".jsonl"),
     "'private_test_cases' test 1: missing field(s) output"),
    ("lcb", ".jsonl", encode([lcb(private_test_cases=7)], ".jsonl"), "must be a JSON string or a list of test cases"),
    ("lcb", ".jsonl", encode([lcb(metadata='{"func_name": "f\\"]; import os"}')], ".jsonl"), "a Python identifier"),
    ("humaneval", ".jsonl", encode([{**VALID["humaneval"], "entry_point": "add)\nimport os"}], ".jsonl"),
     "'entry_point' must be a Python identifier"),
    ("gpqa", ".jsonl", encode([{**VALID["gpqa"], "Correct Answer": ["4"]}], ".jsonl"),
     "field 'Correct Answer' must be a string, not a list"),
    ("gpqa", ".jsonl", encode([{**VALID["gpqa"], "Incorrect Answer 2": 5}], ".jsonl"), "must be a string, not a num"),
    ("gpqa", ".csv", raw("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\nQ,4,3\n"),
     "data.csv row 1: field 'Incorrect Answer 2' must be a string, not null"),
    ("gpqa", ".json", raw(DEEP), "data.json: JSON nested too deeply"),
    ("aime", ".jsonl", raw(DEEP + "\n"), "data.jsonl:1: JSON nested too deeply"),
    ("lcb", ".jsonl", encode([lcb(metadata=DEEP)], ".jsonl"), "field 'metadata': JSON nested too deeply"),
    ("lcb", ".jsonl", encode([lcb(public_test_cases=DEEP)], ".jsonl"), "'public_test_cases': JSON nested too deeply"),
    ("aime", ".jsonl", raw('{"id": ' + "9" * 5000 + "}\n"), "data.jsonl:1: unreadable JSON (Exceeds the limit"),
    ("aime", ".jsonl", encode([MATH_ROW], ".jsonl") + b'{"id": "\xc3"}\n', "data.jsonl:2: not UTF-8 at byte 8"),
    ("gpqa", ".csv", raw("Question,Correct Answer\nQ,4\nR,\udcff\n"), "data.csv: not UTF-8 at line 3, byte 30"),
    ("gpqa", ".json", raw('[{"Question": "\xe9"}]').replace(b"\xc3\xa9", b"\xe9"), "data.json: not UTF-8 at byte 15"),
    ("aime", ".jsonl", raw('{"id": "a", "problem": "\\ud800", "answer": "1"}\n'), "unpaired surrogate (U+D800)"),
    ("lcb", ".csv", encode([lcb(question_content="x" * 200_000)], ".csv"), "data.csv row 1: malformed CSV (field"),
]


@pytest.mark.parametrize("task,fmt,data,message", CASES, ids=[f"{c[0]}-{c[3][:40]}" for c in CASES])
def test_bad_input_is_one_user_error_line(task, fmt, data, message, workdir):
    result = load(task, workdir, fmt, data)
    assert isinstance(result, UserError) and message in str(result), result


def test_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="data file not found"):
        get("gpqa").load(tmp_path / "none.csv")


# --- LiveCodeBench's pickled tests -------------------------------------------------------------------------------

class OpensAFile:
    """Unpickling this calls ``open(path, "w")``: with the stock unpickler the file appears."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return open, (self.path, "w")


class RunsAShell:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.path}",)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("payload", [OpensAFile, RunsAShell])
def test_a_pickle_payload_never_runs(payload, protocol, tmp_path, workdir):
    marker = tmp_path / "pwned"
    for value in (payload(str(marker)), [payload(str(marker))], {"input": payload(str(marker))}):
        row = lcb(private_test_cases=packed(value, protocol))
        result = load("lcb", workdir, ".jsonl", encode([row], ".jsonl"))
        assert isinstance(result, UserError) and "refused" in str(result), result
        assert not marker.exists()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_legitimate_pickled_json_string_decodes_as_before(protocol):
    tests = TESTS + [{"input": "[1, 2]\n3", "output": "[0]", "testtype": "functional"}]
    assert decode_tests(packed(json.dumps(tests), protocol)) == tests
    if protocol >= 3:  # bytes have their own opcodes from protocol 3 on (before, they pickle as a call)
        assert decode_tests(packed(json.dumps(tests).encode(), protocol)) == tests  # json reads bytes too
    assert decode_tests(json.dumps(tests)) == tests and decode_tests(tests) == tests
    assert decode_tests("") == decode_tests(None) == decode_tests("[]") == []


@pytest.mark.parametrize("pickled,why", [
    (pickle.dumps({1, 2}), "refused opcode EMPTY_SET"),
    (pickle.dumps(bytearray(b"x"), protocol=5), "refused opcode BYTEARRAY8"),
    (b"\x80\x04]r\xff\xff\xff\x7f.", "memo index 2147483647 out of range"),  # a 16 GiB memo in CPython's unpickler
    (b"\x80\x04(" + b"N" * 200_000 + b"l.", "more than 100000 opcodes"),
    (b"\x80\x04P0\n.", "refused opcode PERSID"),
    (b"\x80\x04X\xff\xff\xff\x7f", "ValueError"),  # claims 2 GiB of text that is not there
    (pickle.dumps(5), "must hold a JSON string, not a number"),
    (pickle.dumps([TESTS]), "must hold a JSON string, not a list"),
    (pickle.dumps("not json"), "(unpacked): malformed JSON"),
    (b"garbage", "refused pickled data"),
])
def test_pickles_of_anything_but_plain_values_are_refused(pickled, why):
    with pytest.raises(UserError, match="private") as caught:
        decode_tests(base64.b64encode(zlib.compress(pickled)).decode(), "row 1: field 'private_test_cases'")
    assert why in str(caught.value)


def test_safe_unpickler_refuses_globals_and_persistent_ids():
    with pytest.raises(pickle.UnpicklingError, match="refused global"):
        lcb_data.SafeUnpickler(io.BytesIO(pickle.dumps(OpensAFile("/nonexistent/x")))).load()
    with pytest.raises(pickle.UnpicklingError, match="refused persistent id"):
        lcb_data.SafeUnpickler(io.BytesIO(b"\x80\x04P0\n.")).load()


def zlib_bomb(megabytes: int) -> bytes:
    """A zlib stream of ``megabytes`` MiB of zeros, built in milliseconds: after a full flush, compressing the
    same chunk again gives the same bytes, so the middle is one compressed MiB repeated."""
    chunk, compressor = bytes(2**20), zlib.compressobj(9)
    head = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    return head + middle * (megabytes - 1) + compressor.flush()


def test_a_zlib_bomb_is_refused_at_the_cap():
    bomb = base64.b64encode(zlib_bomb(1024)).decode()  # 1 GiB from about 1.4 MB of text
    assert len(bomb) < 2 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=f"decompress to more than {MAX_TESTS_BYTES >> 20} MiB: refused"):
            decode_tests(bomb, "row 1: field 'private_test_cases'")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_TESTS_BYTES + 64 * 2**20  # output and its joined copy: the cap bounds memory


def test_overlong_packed_text_is_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(lcb_data, "MAX_PACKED_CHARS", 1000)
    with pytest.raises(UserError, match="packed test cases longer than"):
        decode_tests("eJ" + "A" * 2000, "row 1")


def test_a_gzip_bomb_is_refused_at_the_cap(monkeypatch, workdir):
    from relaxtui.evals.tasks import base

    monkeypatch.setattr(base, "MAX_GZIP_BYTES", 2**20)
    row = encode([VALID["humaneval"]], ".jsonl")
    for fmt, data in ((".jsonl.gz", row * (2**21 // len(row))), (".json.gz", b" " * 2**21)):
        result = load("humaneval", workdir, fmt, gzip.compress(data))
        assert isinstance(result, UserError) and "decompresses to more than 1 MiB: refused" in str(result)


def test_a_functional_test_whose_output_is_hostile_json_fails_without_crashing():
    """The generated program's stdout is parsed as JSON when scoring: too deep or too long is a failed test."""
    from relaxtui.evals.tasks.lcb import LiveCodeBench

    task = LiveCodeBench(timeout_s=10)
    for printed in ("'[' * 100000 + ']' * 100000", "'9' * 5000"):
        sample = Sample("f", (), None, {"func_name": "f", "tests": [
            {"input": "1", "output": "1", "testtype": "functional"}]})
        score = task.score(f"```python\ndef f(x):\n    print({printed})\n    raise SystemExit(0)\n```", sample)
        assert not score.correct and score.detail == "test 1: unparsable output", score
