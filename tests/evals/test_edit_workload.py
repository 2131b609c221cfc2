"""A workload where output repeats input (issue 33, item 4): the shipped edit task file — it loads, every gold
scores correct on its own example and a reply that changes nothing does not — and bench's prompt sources
(``--workload edit``, ``--prompt-file``, ``--prompt``, the built-in ones), chosen before any model loads."""

from __future__ import annotations

import difflib
import json
import os
import statistics
from pathlib import Path

import pytest

from relaxtui.cli import main
from relaxtui.commands.bench_prompts import BENCH_PROMPTS, WORKLOADS, bench_prompts, file_prompts
from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.taskfile import load_task
from relaxtui.text import Message

ROOT = Path(__file__).resolve().parents[2]
EDIT = ROOT / "evals/examples/edit_code.toml"


def fails_with(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: ") and message in err, err


# -- the task file ---------------------------------------------------------------------------------------------------
def test_the_edit_task_file_loads_and_every_gold_scores_on_its_own_example():
    task = load_task(EDIT)
    samples, failures = task.check(None)
    assert failures == [] and len(samples) == 30 and task.reader.kind == "regex"
    assert {row["lang"] for _, row in task.rows()} == {"python", "json", "yaml", "sql"}
    for sample in samples:
        assert task.score(task.example_reply(sample), sample).correct, sample.id


def test_an_edit_is_judged_on_the_whole_text_of_the_last_code_block():
    task = load_task(EDIT)
    rows = {sample.id: sample for sample in task.load()}
    sources = {row["id"]: row["source"] for _, row in task.rows()}
    for ident, sample in rows.items():
        unchanged = f"```\n{sources[ident]}\n```"  # restating the prompt without the edit never scores
        assert not task.score(unchanged, sample).correct, ident
        # prose around the block and another indentation are fine: the last block, whitespace collapsed
        chatty = f"Here it is:\n```{ident.split('-')[0]}\n{sample.gold.replace(chr(10), chr(10) + '  ')}\n```\nDone."
        assert task.score(chatty, sample).correct, ident
    sample = rows["py-snake-case"]  # case counts: a rename is a rename
    assert not task.score(f"```\n{sample.gold.replace('first_name', 'First_name')}\n```", sample).correct
    assert not task.score(sample.gold, sample).correct  # no code block: nothing read


def test_the_edit_prompts_hold_the_text_the_answer_restates():
    task = load_task(EDIT)
    copied = []  # per row: the share of the answer's characters that come, in order, from the prompt's text
    for (_, row), sample in zip(task.rows(), task.load(), strict=True):
        system, user = sample.messages
        assert system.role == "system" and row["source"] in user.content and row["instruction"] in user.content
        blocks = difflib.SequenceMatcher(None, row["source"], row["gold"], autojunk=False).get_matching_blocks()
        copied.append(sum(block.size for block in blocks) / len(row["gold"]))
    assert min(copied) > 0.55 and statistics.mean(copied) > 0.85  # what a drafter copying the prompt can draft


def test_tasks_check_passes_on_the_edit_task_file(capsys):
    assert main(["tasks", "check", str(EDIT), "--show", "0"]) == 0
    out = capsys.readouterr().out
    assert "gold answers: 30/30 score correct" in out and "rows failing validation: none" in out


# -- bench's prompt sources ------------------------------------------------------------------------------------------
def test_the_built_in_prompts_and_the_typed_ones():
    default = bench_prompts()
    assert default.source == "built-in" and default.conversations == tuple(
        (Message("user", text),) for text in BENCH_PROMPTS[:2])
    assert len(bench_prompts(count=len(BENCH_PROMPTS)).conversations) == len(BENCH_PROMPTS)
    typed = bench_prompts(texts=["a", "b", "c"], count=1)  # every typed prompt runs, whatever --prompts says
    assert typed.source == "--prompt" and [c[0].content for c in typed.conversations] == ["a", "b", "c"]
    with pytest.raises(UserError, match=rf"--prompts must be in 1..{len(BENCH_PROMPTS)} \(got 9\)"):
        bench_prompts(count=9)


def test_the_edit_workload_is_the_task_files_prompts_as_eval_renders_them():
    chosen = bench_prompts(workload="edit", count=5)
    samples = load_task(ROOT / WORKLOADS["edit"]).load()
    assert chosen.source == "workload edit" and chosen.conversations == tuple(s.messages for s in samples[:5])
    assert len(bench_prompts(workload="edit", count=30).conversations) == 30
    with pytest.raises(UserError, match="--prompts must be in 1..30 \\(got 31\\); workload edit holds 30"):
        bench_prompts(workload="edit", count=31)


def test_a_prompt_file_of_lines_or_jsonl(tmp_path):
    lines = tmp_path / "prompts.txt"
    lines.write_text("first prompt\n\n  \nsecond {prompt}\nthird\n", encoding="utf-8")
    assert [c[0].content for c in file_prompts(lines)] == ["first prompt", "second {prompt}", "third"]
    rows = tmp_path / "prompts.jsonl"
    rows.write_text(json.dumps({"prompt": "line one\nline two"}) + "\n\n"
                    + json.dumps({"prompt": "edit this", "system": "You edit."}) + "\n", encoding="utf-8")
    assert file_prompts(rows) == [(Message("user", "line one\nline two"),),
                                  (Message("system", "You edit."), Message("user", "edit this"))]
    chosen = bench_prompts(prompt_file=rows, count=1)
    assert chosen.source == f"--prompt-file {rows}" and len(chosen.conversations) == 1


@pytest.mark.parametrize("content,message", [
    ('{"prompt": "ok"}\n{"prompt": 3}\n', ':2: must be an object with a "prompt" string'),
    ('{"prompt": "ok"}\nnot json\n', ":2: not JSON"),
    ('["prompt"]\n', ':1: must be an object with a "prompt" string'),
    ('{"prompt": "  "}\n', ':1: must be an object with a "prompt" string'),
    ('{"prompt": "x", "system": 1}\n', ':1: "system" must be a string'),
    ("\n\n", "holds no prompt"),
])
def test_a_bad_prompt_file_is_one_line_naming_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace('"', '"')):
        file_prompts(path)


def test_a_prompt_file_must_be_a_bounded_regular_utf8_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):  # checked before a byte is read: never a hang
        file_prompts(fifo)
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (4 << 20) + b"\n")
    with pytest.raises(UserError, match="larger than 4 MiB"):
        file_prompts(big)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(UserError, match="not UTF-8"):
        file_prompts(latin)


def test_bench_takes_one_source_and_refuses_a_bad_one_before_any_model_loads(capsys, tmp_path):
    absent = ["-m", "absent-verifier.gguf"]  # never reached: the prompt source is checked first
    fails_with(capsys, ["bench", "--workload", "edit", "--prompt", "x", *absent],
               "--prompt and --workload are two sources of prompts: give one")
    fails_with(capsys, ["bench", "--workload", "edit", "--prompt-file", str(tmp_path / "p.txt"), *absent],
               "--workload and --prompt-file are two sources of prompts: give one")
    fails_with(capsys, ["bench", "--prompt-file", str(tmp_path / "absent.txt"), *absent], "absent.txt")
    fails_with(capsys, ["bench", "--workload", "edit", "--prompts", "31", *absent], "workload edit holds 30")
    fails_with(capsys, ["bench", "--workload", "nope"], "invalid choice: 'nope'")
    fails_with(capsys, ["bench", "--parallel", "1,2", "--workload", "edit", "--prompt", "x", *absent],
               "two sources of prompts")
    fails_with(capsys, ["bench", "--parallel", "1,2", "--draft-cut", "priced", *absent],
               "--draft-cut priced goes with the draft-length bench; --parallel verifies drafts whole")


@pytest.mark.model
def test_bench_runs_on_the_edit_workload_with_a_model_free_kind(capsys, test_model_path):
    assert main(["bench", "--verifier", str(test_model_path), "--draft-kind", "ngram-simple", "--workload", "edit",
                 "--prompts", "1", "--n-max", "2", "--max-tokens", "8", "--repeats", "2", "--passes", "1",
                 "--ctx-size", "512", "--threads", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["settings"]["prompts_from"] == "workload edit" and result["settings"]["prompts"] == 1
    assert result["drafter_kind"] == "ngram-simple" and [run["n"] for run in result["runs"]] == [1, 2]
