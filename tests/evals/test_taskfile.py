"""Task files (`relaxtui eval FILE.toml`): the format, its one-line errors before any model loads, data sources,
`tasks check`, and the task-file version of math500 writing the built-in task's records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxtui.cli import main
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.fake import FakeBackend
from relaxtui.errors import UserError
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.taskfiles.taskfile import TaskFile, load_task
from relaxtui.evals.tasks import get

REPO = Path(__file__).resolve().parents[2]

BASIC = """name = "capitals"
version = 3
[data]
path = "rows.jsonl"
id = "id"
fields = ["id", "country", "capital"]
[prompt]
template = "What is the capital of {country}? Answer with the city only."
stop = ["\\n\\n"]
max_tokens = 16
[answer]
kind = "exact"
gold = "capital"
"""
ROWS = [{"id": "fr", "country": "France", "capital": "Paris"}, {"id": "jp", "country": "Japan", "capital": "Tokyo"}]


def write_task(folder: Path, toml: str = BASIC, rows: list | None = None, name: str = "rows.jsonl") -> Path:
    (folder / name).write_text("".join(json.dumps(row) + "\n" for row in (ROWS if rows is None else rows)))
    path = folder / "task.toml"
    path.write_text(toml)
    return path


def test_a_task_file_loads_as_a_task(tmp_path):
    task = get(str(write_task(tmp_path)))
    assert isinstance(task, TaskFile) and task.name == "capitals" and task.max_tokens == 16
    assert task.version.startswith("3+sha:") and len(task.version) == len("3+sha:") + 12
    samples = task.load()
    assert [s.id for s in samples] == ["fr", "jp"] and samples[0].gold == "Paris"
    assert samples[0].messages[0].content == "What is the capital of France? Answer with the city only."
    assert samples[0].meta == {"stop": ("\n\n",)}
    assert task.score("paris\n\nThe capital of Japan is Tokyo.", samples[0]).correct  # cut at the stop string
    assert not task.score("Lyon", samples[0]).correct


def test_the_version_digest_changes_with_the_file_and_its_data(tmp_path):
    first = load_task(write_task(tmp_path)).version
    assert load_task(write_task(tmp_path)).version == first  # same bytes, same identity
    assert load_task(write_task(tmp_path, rows=ROWS[:1])).version != first  # data edited, version not bumped
    assert load_task(write_task(tmp_path, BASIC.replace("max_tokens = 16", "max_tokens = 17"))).version != first


def test_raw_prompts_thinking_and_system_messages(tmp_path):
    raw = BASIC.replace('stop = ["\\n\\n"]', "chat = false\nthinking = false")
    sample = load_task(write_task(tmp_path, raw)).load()[0]
    assert sample.meta == {"raw": True, "thinking": False} and len(sample.messages) == 1
    system = BASIC.replace("[prompt]\n", '[prompt]\nsystem = "You answer about {country}."\n')
    messages = load_task(write_task(tmp_path, system)).load()[1].messages
    assert [(m.role, m.content[:20]) for m in messages] == [("system", "You answer about Jap"),
                                                             ("user", "What is the capital ")]


def test_csv_parquet_and_the_hub(tmp_path, monkeypatch):
    csv_task = BASIC.replace("rows.jsonl", "rows.csv")
    (tmp_path / "rows.csv").write_text("id,country,capital\nfr,France,Paris\n")
    path = tmp_path / "csv.toml"
    path.write_text(csv_task)
    assert [s.gold for s in load_task(path).load()] == ["Paris"]

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "rows.parquet")
    path.write_text(BASIC.replace("rows.jsonl", "rows.parquet"))
    assert [s.id for s in load_task(path).load()] == ["fr", "jp"]
    (tmp_path / "rows.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match="not a readable Parquet file"):
        load_task(path).load()
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    with pytest.raises(UserError, match="reading Parquet needs pyarrow"):
        load_task(path).load()

    asked = {}

    def fake_hub(repo, **kwargs):
        asked.update(kwargs, repo=repo)
        return [(f"{repo} row {n}", row) for n, row in enumerate(ROWS, start=1)]

    monkeypatch.setattr("relaxtui.evals.tasks.hub.load_hub_rows", fake_hub)
    path.write_text(BASIC.replace('path = "rows.jsonl"', 'hub = "someone/capitals"\nconfig = "en"\nsplit = "test"\n'
                                                         'revision = "abc123"'))
    assert [s.id for s in load_task(path).load()] == ["fr", "jp"]
    assert asked == {"repo": "someone/capitals", "config": "en", "split": "test", "revision": "abc123"}


# -- bad input: one line, exit 2, before any model loads ---------------------------------------------------------
BAD = [
    (BASIC.replace('kind = "exact"', 'kind = "fuzzy"'), None, "[answer]: kind 'fuzzy' is unknown (known: exact"),
    (BASIC.replace("{country}?", "{country} in {continent}?"), None,
     "[prompt] names field 'continent', which [data] fields does not declare (id, country, capital)"),
    (BASIC.replace('fields = ["id", "country", "capital"]\n', "").replace("{country}?", "{continent}?"), None,
     "rows.jsonl:1: missing field(s) continent (used by task.toml)"),
    (BASIC.replace('kind = "exact"', 'kind = "regex"\npattern = "(unclosed"'), None,
     "[answer]: pattern does not compile (missing ): (unclosed)"),
    (BASIC.replace('kind = "exact"\ngold = "capital"', 'kind = "code"'), None,
     "[answer]: tests is required for kind 'code': the row field holding its Python tests"),
    (BASIC, [ROWS[0], {"id": "jp", "country": "Japan"}], "rows.jsonl:2: missing field(s) capital"),
    (BASIC, [ROWS[0], ROWS[0]], "rows.jsonl:2: duplicate id 'fr' (first at"),
    (BASIC, [{**ROWS[0], "capital": None}], "rows.jsonl:1: field 'capital' (the gold answer) is null"),
    (BASIC.replace("version = 3\n", ""), None, "version is required (bump it when"),
    (BASIC.replace("max_tokens = 16", "max_token = 16"), None, "[prompt]: unknown key 'max_token'"),
    (BASIC.replace("{country}", "{country.__class__}"), None, "attribute and index access are not allowed"),
    (BASIC.replace("{country}", "{country:>999999}"), None, "conversions and format specs are not allowed"),
    (BASIC.replace("{country}", "{}"), None, "{} must name a row field"),
    (BASIC.replace("{country}?", "{country}? }"), None, "Single '}' encountered"),
    (BASIC.replace("[prompt]\n", "[prompt]\nchat = false\nsystem = 'x'\n"), None, "system needs chat = true"),
    (BASIC.replace('path = "rows.jsonl"', 'path = "rows.jsonl"\nhub = "x/y"'), None, "give exactly one"),
    (BASIC + "[extra]\n", None, "unknown key 'extra'"),
    ("name = [", None, "not valid TOML"),
]


@pytest.mark.parametrize("toml,rows,message", BAD, ids=range(len(BAD)))
def test_bad_task_files_fail_in_one_line_before_models_load(capsys, monkeypatch, tmp_path, toml, rows, message):
    def no_models(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad task file")
    monkeypatch.setattr("relaxtui.session.load_pair", no_models)
    path = write_task(tmp_path, toml, rows)
    assert main(["eval", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("relaxtui: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_tasks_check_renders_scores_the_gold_and_lists_failing_rows(capsys, tmp_path):
    assert main(["tasks", "check", str(write_task(tmp_path)), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "task capitals version 3+sha:" in out and "What is the capital of France?" in out
    assert "Japan" not in out and "gold answers: 2/2 score correct" in out and "rows failing validation: none" in out
    rows = [*ROWS, {"id": "xx", "country": "Nowhere"}, {"id": "de", "country": "Germany", "capital": "Berlin"}]
    marker = BASIC.replace('gold = "capital"', 'gold = "capital"\nexample = "It is {gold}."')  # a reader that is wrong
    assert main(["tasks", "check", str(write_task(tmp_path, marker, rows))]) == 1
    out = capsys.readouterr().out
    assert "gold answers: 0/3 score correct" in out and "rows failing validation: 4" in out
    assert "rows.jsonl:3: missing field(s) capital" in out and "row 'de': its gold answer does not score" in out
    assert main(["tasks", "check", "nope.toml"]) == 2


def test_a_regex_miss_shows_the_reply_tried_and_points_at_answer_example(capsys, tmp_path):
    """The issue: "(read 'None'; no answer found)" said neither what was tried nor what to change."""
    regex = BASIC.replace('kind = "exact"', 'kind = "regex"\npattern = \'ANSWER: (\\w+)\'')
    assert main(["tasks", "check", str(write_task(tmp_path, regex)), "--show", "0"]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "row 'fr'" in line)
    assert line.strip() == ("row 'fr': its gold answer does not score correct: kind 'regex' found no answer in the "
                            "reply tried, 'Paris' (the gold written out, as no [answer] example is set); set [answer] "
                            "example to a reply in your model's format, with {gold} for the gold "
                            "(docs/taskfiles.md#answer)")
    assert "None" not in out
    long_example = "x" * 100 + " {gold}"
    wrong = regex.replace('gold = "capital"', f'gold = "capital"\nexample = "{long_example}"')
    assert main(["tasks", "check", str(write_task(tmp_path, wrong)), "--show", "0"]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if "row 'jp'" in line)
    assert f"reply tried, {'x' * 80!r}… (26 more characters) ([answer] example); make [answer] example" in line
    read = BASIC.replace('gold = "capital"', 'gold = "capital"\nexample = "Rome"')  # read, but not the gold
    assert main(["tasks", "check", str(write_task(tmp_path, read)), "--show", "0"]) == 1
    assert "kind 'exact' read 'Rome' in the reply tried, 'Rome' ([answer] example)" in capsys.readouterr().out
    assert "\n### `[answer]`\n" in (REPO / "docs/taskfiles.md").read_text()  # the section #answer points at


def test_the_shipped_task_files_check_clean(capsys):
    for name in ("evals/math500.toml", "evals/examples/code_small.toml", "evals/examples/json_extract.toml",
                 "evals/examples/open_ended.toml"):
        assert main(["tasks", "check", str(REPO / name), "--show", "0"]) == 0, name
        out = capsys.readouterr().out
        assert "rows failing validation: none" in out, out


# -- the format proven: math500 as a task file writes the built-in task's records ---------------------------------
PIECES = [b"\\boxed{", b"}", b"9", b"1", b"2", b"0", b" x", b" ", b"Answer: ", b"\n"]


def text_backend(seed: int) -> FakeBackend:
    """A 10-token model whose tokens render as pieces of boxed answers — it likes to open a box, write a digit or
    two and close it — so that outputs parse, and some score, under math500's reading."""
    table = np.random.default_rng(seed).normal(scale=1.0, size=(10, 10))
    table[:, 0] += 1.5  # open a box
    table[0, 2:6] += 3.0  # a digit after "\boxed{"
    table[2:6, 1] += 2.0  # and close it
    return FakeBackend(lambda ctx: table[ctx[-1]], 10, pieces=PIECES)


def prompt_tokens(sample) -> list[int]:  # type: ignore[no-untyped-def]
    """A prompt that depends on the rendered text, so two tasks agree only if their prompts do."""
    text = "".join(m.role + m.content for m in sample.messages)
    return [sum(map(ord, text)) % 10, len(text) % 10]


def records_of(task, tmp_path: Path, samples) -> list[dict]:  # type: ignore[no-untyped-def]
    plan = EvalPlan(rules=("strict", "mentored"), alphas=(0.7,), draft_max=(3,), no_spec=True, repeats=2,
                    max_tokens=12, sampling=SamplingParams(1.0, 0, 1.0))
    store = ResultsStore(tmp_path / str(task.version).replace(":", "_").replace("+", "_"))
    run_eval(task, samples, plan, RunIdentity({"task": task.name, "task_version": task.version}), store,
             text_backend(1), ModelDrafter(text_backend(2), 10), prompt_tokens)
    return list(store.records())


TIMING = ("decode_s", "prefill_s", "tokens_per_s", "finished_at")


def test_math500_as_a_task_file_gives_identical_records(tmp_path):
    builtin, declared = get("math500"), get(str(REPO / "evals" / "math500.toml"))
    assert declared.name == builtin.name and declared.max_tokens == builtin.max_tokens
    assert declared.load() == builtin.load()  # same ids, prompts (messages) and gold answers, in the same order
    ids = {"math500-3", "math500-24", "math500-45", "math500-65", "math500-76", "math500-79", "math500-87",
           "math500-89", "math500-107", "math500-116"}  # answers such as 9, 2, 10 and 21 that the fake can write
    samples = [s for s in builtin.load() if s.id in ids]
    mine, theirs = records_of(declared, tmp_path, samples), records_of(builtin, tmp_path, samples)
    assert len(mine) == len(theirs) == len(samples) * 2 * 3 > 0
    assert any(r["parsed"] for r in theirs) and any(r["correct"] for r in theirs)  # the check has teeth
    assert {r["task_version"] for r in mine} == {declared.version} and {r["task_version"] for r in theirs} == {2}
    for a, b in zip(mine, theirs, strict=True):
        # only the task version differs, and with it the config ids (they hash the run's identity); timings vary
        assert a["config_id"] != b["config_id"]
        same = {k: v for k, v in a.items() if k not in ("config_id", "task_version", *TIMING)}
        assert same == {k: v for k, v in b.items() if k not in ("config_id", "task_version", *TIMING)}


# -- fuzz: whatever the file says, loading is a task or one UserError line -----------------------------------------
def to_toml(table: dict, prefix: str = "") -> str:
    """A TOML writer for generated documents (strings as JSON writes them, which TOML basic strings read)."""
    lines, subtables = [], []
    for key, value in table.items():
        if isinstance(value, dict):
            subtables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {json.dumps(value)}")
    text = "\n".join(lines) + "\n"
    for key, value in subtables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        text += f"[{name}]\n" + to_toml(value, name)
    return text


names = st.sampled_from(["id", "country", "capital", "q", "a", "tests", "gold", "x y", "0"]) | st.text(max_size=6)
values = (st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=20)
          | st.sampled_from(["exact", "regex", "number", "choice", "boxed", "math", "json", "code", "none", "(x",
                             "{country}", "{q} {a}", "rows.jsonl", "ABCD", "[a-z]+", '{"type": "object"}']))
options = st.dictionaries(st.sampled_from(["kind", "gold", "pattern", "group", "tests", "letters", "schema", "marker",
                                           "compare", "required", "template", "system", "chat", "stop", "max_tokens",
                                           "path", "id", "fields", "thinking", "tolerance", "timeout_s"]) | names,
                          values | st.lists(names, max_size=3), max_size=6)
documents = st.fixed_dictionaries({"name": values, "version": values, "data": options, "prompt": options,
                                   "answer": options}) | st.dictionaries(names, values | options, max_size=4)
rows = st.lists(st.dictionaries(names, values, max_size=4) | values, max_size=3)


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(document=documents, data=rows, use_valid=st.booleans())
def test_any_task_file_loads_or_fails_in_one_line(tmp_path, document, data, use_valid):
    if use_valid:  # start from a valid file and let the generated tables replace some of its parts
        document = {"name": "t", "version": 1, "data": {"path": "rows.jsonl", **document.get("data", {})},
                    "prompt": {"template": "{country}", **document.get("prompt", {})},
                    "answer": {"kind": "exact", "gold": "capital", **document.get("answer", {})}}
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*data, *ROWS]))
    path = tmp_path / "fuzz.toml"
    path.write_text(to_toml(document), encoding="utf-8", errors="surrogatepass")
    try:
        task = load_task(path)
        samples = task.load()
        for sample in samples:
            task.score(sample.messages[-1].content, sample)
    except UserError as exc:
        assert str(exc) and "\n" not in str(exc), str(exc)


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(BASIC)), junk=st.binary(max_size=8))
def test_a_damaged_task_file_fails_in_one_line(tmp_path, cut, junk):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    path = tmp_path / "task.toml"
    path.write_bytes(BASIC.encode()[:cut] + junk + BASIC.encode()[cut:])
    try:
        load_task(path).load()
    except UserError as exc:
        assert str(exc) and "\n" not in str(exc), str(exc)


# -- a hub dataset through the real `datasets` client, offline (tests/support/fake_hub.py stands in for the hub) ---
HUB_README = b"""---
configs:
- config_name: en
  data_files:
  - split: train
    path: en_train.jsonl
  - split: test
    path: en_test.jsonl
- config_name: de
  data_files:
  - split: test
    path: de_test.jsonl
---
# capitals (a stand-in)
"""


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def test_a_hub_dataset_loads_by_name_config_split_and_revision_through_datasets(tmp_path):
    from tests.support.fake_hub import FakeHub, FakeRepo

    with FakeHub() as hub:
        repo = hub.add("acme/capitals", FakeRepo({
            "README.md": HUB_README, "en_train.jsonl": jsonl([{"id": "it", "country": "Italy", "capital": "Rome"}]),
            "en_test.jsonl": jsonl(ROWS), "de_test.jsonl": jsonl([{"id": "fr", "country": "Frankreich",
                                                                   "capital": "Paris"}])}, "dataset"))
        toml = BASIC.replace('path = "rows.jsonl"', f'hub = "acme/capitals"\nconfig = "en"\nsplit = "test"\n'
                                                     f'revision = "{repo.sha}"')
        path = tmp_path / "task.toml"
        path.write_text(toml)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
        environ.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")

        def check() -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "relaxtui.cli", "tasks", "check", str(path), "--show", "2"],
                                  env=environ, cwd=REPO, capture_output=True, text=True, timeout=300)

        result = check()
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert f"hub acme/capitals (config en, split test, revision {repo.sha}): 2 rows" in out
        assert "What is the capital of France?" in out and "What is the capital of Japan?" in out
        assert "Italy" not in out and "Frankreich" not in out  # the other split and the other config
        assert "gold answers: 2/2 score correct" in out
        assert any(r.path.endswith("/en_test.jsonl") for r in hub.requests)
        assert not any(r.path.endswith("/de_test.jsonl") for r in hub.requests)  # (datasets fetches every split)

        path.write_text(toml.replace(repo.sha, "f" * 40))  # a revision the hub does not have
        result = check()
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("relaxtui: error: ") and "acme/capitals" in result.stderr, result.stderr
        assert f"Revision '{'f' * 40}' doesn't exist" in result.stderr, result.stderr


# -- chat or raw completion, thinking on or off: what the verifier reads -------------------------------------------
class TemplateModel:
    """Just what ``sample_tokenizer`` reads of a model: a chat template that shows the roles and the thinking
    switch, and a tokenizer that records what it was given."""

    bos, eos = 1, 2

    class header:  # noqa: N801 - mirrors LlamaModel.header
        chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                         "{% if enable_thinking is defined %}<think={{ enable_thinking }}>{% endif %}<assistant>")

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, bool]] = []

    def token_piece(self, token: int, special: bool = True) -> bytes:
        return {1: b"<s>", 2: b"</s>"}[token]

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        self.calls.append((text, add_special, parse_special))
        return [len(text)]


def rendered(toml: str, tmp_path: Path, thinking: bool | None = None) -> tuple[str, bool, bool]:
    from relaxtui.evals.run.pair import sample_tokenizer

    model = TemplateModel()
    sample = load_task(write_task(tmp_path, toml)).load()[0]
    sample_tokenizer(model, thinking=thinking)(sample)  # type: ignore[arg-type]
    (call,) = model.calls
    return call


QUESTION = "What is the capital of France? Answer with the city only."


def test_chat_or_raw_prompts_and_thinking_reach_the_verifier(tmp_path):
    assert rendered(BASIC, tmp_path) == (f"<user>{QUESTION}<assistant>", False, True)  # the chat template's own
    raw = BASIC.replace("[prompt]\n", "[prompt]\nchat = false\n")
    assert rendered(raw, tmp_path) == (QUESTION, True, False)  # the text itself, BOS added, no special tokens
    off = BASIC.replace("[prompt]\n", "[prompt]\nthinking = false\n")
    assert rendered(off, tmp_path) == (f"<user>{QUESTION}<think=False><assistant>", False, True)
    on = BASIC.replace("[prompt]\n", "[prompt]\nthinking = true\n")
    assert rendered(on, tmp_path)[0].endswith("<think=True><assistant>")
    assert rendered(off, tmp_path, thinking=True)[0].endswith("<think=True><assistant>")  # --thinking overrides
    system = BASIC.replace("[prompt]\n", '[prompt]\nsystem = "Be brief about {country}."\n')
    assert rendered(system, tmp_path)[0] == f"<system>Be brief about France.<user>{QUESTION}<assistant>"


def test_stop_strings_reach_the_generation_config(tmp_path):
    from relaxtui.evals.run.results import GridPoint
    from relaxtui.evals.run.units import WorkUnit, unit_config

    sample = load_task(write_task(tmp_path)).load()[0]
    plan = EvalPlan(max_tokens=16, sampling=SamplingParams(1.0, 0, 1.0))
    config, _ = unit_config(plan, WorkUnit(sample, GridPoint("strict", None, 3), "c", 0, 0))
    assert config.stop == ("\n\n",)


# -- a row that fails at run time is recorded as failed with its reason, and the run goes on ------------------------
FAILING_ROWS = [ROWS[0], {"id": "long", "country": "Ruritania " * 40, "capital": "Strelsau"},
                {"id": "odd", "country": "Freedonia", "capital": "Fredonia"}, ROWS[1]]


def char_tokens(sample) -> list[int]:  # type: ignore[no-untyped-def]
    """One token per character; the chat template refuses the "Freedonia" row (as a real one may refuse a row)."""
    text = sample.messages[-1].content
    if "Freedonia" in text:
        raise UserError("the model's chat template failed: no such country")
    return [ord(char) % 10 for char in text]


@pytest.mark.parametrize("n_seq", [1, 2], ids=["one-sequence", "batched"])
def test_a_row_that_fails_at_run_time_is_recorded_with_its_reason_and_the_run_goes_on(tmp_path, monkeypatch, n_seq):
    from relaxtui.evals.analysis.report import summarise, warnings

    task = load_task(write_task(tmp_path, rows=FAILING_ROWS))
    samples = task.load()
    judge = task.reader.judge

    def crashing(parsed, gold):  # type: ignore[no-untyped-def]
        if gold == "Tokyo":  # the reader breaks on one row
            raise ValueError("cannot compare")
        return judge(parsed, gold)

    monkeypatch.setattr(task.reader, "judge", crashing)
    table = np.random.default_rng(1).normal(size=(10, 10))
    verifier = FakeBackend(lambda ctx: table[ctx[-1]], 10, n_ctx=200, pieces=PIECES, n_seq=n_seq)
    drafter = ModelDrafter(FakeBackend(lambda ctx: table[ctx[-1]], 10, n_ctx=200, pieces=PIECES, n_seq=n_seq), 10)
    plan = EvalPlan(rules=("strict",), draft_max=(3,), no_spec=True, max_tokens=6,
                    sampling=SamplingParams(1.0, 0, 1.0))
    store = ResultsStore(tmp_path / "run")
    identity = RunIdentity({"task": task.name, "task_version": task.version})
    run_eval(task, samples, plan, identity, store, verifier, drafter, char_tokens)
    records = list(store.records())
    assert len(records) == len(FAILING_ROWS) * 2  # every unit has its record: no row stopped the run
    by_row: dict[str, list[dict]] = {}
    for record in records:
        by_row.setdefault(record["problem_id"], []).append(record)
    for record in by_row["long"]:
        assert record["failed"] and not record["correct"] and record["output_tokens"] == 0
        assert record["detail"].startswith("failed: the prompt has ") and "the context holds 200" in record["detail"]
        assert record["verifier_logprob"] is None and record["finish_reason"] == "failed"
    for record in by_row["odd"]:
        assert record["failed"] and record["detail"] == "failed: the model's chat template failed: no such country"
    for record in by_row["jp"]:  # generated, then the reader failed on it
        assert record["failed"] and record["output_tokens"] > 0 and not record["correct"]
        assert record["detail"] == "failed: ValueError: cannot compare"
    for record in by_row["fr"]:
        assert not record["failed"] and record["output_tokens"] > 0 and record["verifier_logprob"] is not None
    summaries = summarise(records)
    assert [s.failed for s in summaries] == [3, 3]
    assert "warning: strict N=3: 3 of 4 samples failed at run time and count as wrong" in "\n".join(
        warnings(summaries))
    run_eval(task, samples, plan, identity, store, verifier, drafter, char_tokens)  # resumed: nothing to redo
    assert len(list(store.records())) == len(records)
