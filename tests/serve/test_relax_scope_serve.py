"""--relax-scope and the rules since the paper on every face that takes them from a person: the command lines (a scope
or a draft length a rule cannot run with is one line, exit 2) and serve per request (a 400 naming the field; a scope
and each new rule answered on a tiny Qwen3-style GGUF whose template thinks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxtui.cli import build_parser
from relaxtui.serve.pair import LlamaServedPair
from relaxtui.session import ModelOptions
from tests.support.cli import fails_with
from tests.support.servers import raw, running
from tests.support.tiny_models import CHATML, QWEN3_THINKING, write_dense

NO_BLOCK = ("'thinking' needs a thinking block, and the verifier's tokenizer has no single <think> token: only 'all' "
            "runs with this verifier")
FLY_AT_ONE = "must be at least 2 for rule 'fly' (got 1): it keeps a rejected draft only when the drafts after it pass"


def chat_body(speculative: dict) -> dict:
    return {"messages": [{"role": "user", "content": "What is twelve times seven?"}], "max_tokens": 8,
            "temperature": 0.8, "seed": 1, "speculative": speculative}


@pytest.fixture(scope="module")
def thinking_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-thinking-serve")
    return {"thinking": write_dense(root / "tiny-qwen3-thinking.gguf", thinking=QWEN3_THINKING),
            "chatml": write_dense(root / "tiny-qwen3-chatml.gguf", thinking=CHATML)}


# -- the command lines --------------------------------------------------------------------------------------------
def test_every_face_with_a_rule_takes_a_scope():
    parser = build_parser()
    for argv in (["generate", "x"], ["chat"], ["serve"], ["eval", "math500"], ["tune", "math500"]):
        assert parser.parse_args(argv).relax_scope == "all"
        assert parser.parse_args([*argv, "--relax-scope", "thinking"]).relax_scope == "thinking"


def test_a_bad_scope_is_one_line(capsys):
    fails_with(capsys, ["generate", "x", "--relax-scope", "reasoning"],
               "--relax-scope must be one of all, thinking, answer (got 'reasoning')")


def test_a_chat_on_a_verifier_without_a_thinking_block_refuses_a_scope(capsys, monkeypatch):
    from relaxtui.tui.app import RelaxApp

    monkeypatch.setattr(RelaxApp, "run", lambda self: pytest.fail("the UI opened"))
    fails_with(capsys, ["chat", "--fake", "--relax-scope", "thinking"], f"--relax-scope {NO_BLOCK}")


def test_a_server_whose_default_scope_its_verifier_cannot_mark_does_not_start(capsys):
    """Found once the models load (the tags are the tokenizer's): one line after the loading line, never listening."""
    from relaxtui.cli import main

    assert main(["serve", "--fake", "--port", "0", "--relax-scope", "answer"]) == 2
    out, err = capsys.readouterr()
    assert "listening" not in out and "Traceback" not in err
    assert err.splitlines()[1:] == [f"relaxtui: error: --relax-scope {NO_BLOCK.replace('thinking', 'answer', 1)}"]


def test_a_server_whose_default_rule_cannot_run_at_its_n_does_not_start(capsys):
    fails_with(capsys, ["serve", "--fake", "--port", "0", "--rule", "fly", "--draft-max", "1"],
               f"--draft-max {FLY_AT_ONE}")


def test_a_chat_whose_rule_cannot_run_at_its_n_does_not_open(capsys, monkeypatch):
    from relaxtui.tui.app import RelaxApp

    monkeypatch.setattr(RelaxApp, "run", lambda self: pytest.fail("the UI opened"))
    fails_with(capsys, ["chat", "--fake", "--rule", "fly", "--draft-max", "1", "--draft-kind", "ngram"],
               f"--draft-max {FLY_AT_ONE}")


# -- serve, per request ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("speculative", "param", "message"), [
    ({"rule": "ensemble:0.5", "relax_scope": "thinking"}, "speculative.relax_scope", NO_BLOCK),
    ({"rule": "topk-delta:0.5", "relax_scope": "both"}, "speculative.relax_scope",
     "must be one of all, thinking, answer (got 'both')"),
    ({"rule": "fly", "draft_max": 1}, "speculative.draft_max", FLY_AT_ONE),
])
def test_a_request_a_rule_or_scope_cannot_serve_is_a_400_naming_its_field(speculative, param, message):
    with running() as (url, _):
        status, _, payload = raw(url, "POST", "/v1/chat/completions", chat_body(speculative))
    error = json.loads(payload)["error"]
    assert status == 400 and error["param"] == param, payload
    assert error["message"] == f"{param}: {message}"


def test_the_scope_a_request_ran_under_is_in_its_stats():
    with running() as (url, _):
        status, _, payload = raw(url, "POST", "/v1/chat/completions", chat_body({"rule": "fly:0.3:2"}))
    assert status == 200, payload
    stats = json.loads(payload)["relaxtui"]["stats"]
    assert (stats["rule"], stats["relax_scope"]) == ("fly[W=2]", "all")


@pytest.mark.model
@pytest.mark.parametrize("scope", ["all", "thinking", "answer"])
@pytest.mark.parametrize("rule", ["fly:0.3", "topk-delta:0.5", "topk-ratio:0.5", "threshold:0.5", "mars:0.9"])
def test_each_new_rule_and_scope_is_served_on_a_model_that_thinks(thinking_models, rule, scope):
    options = ModelOptions(verifier=str(thinking_models["thinking"]), drafter=str(thinking_models["thinking"]),
                           ctx_size=256)
    with running(LlamaServedPair(options)) as (url, _):
        status, _, payload = raw(url, "POST", "/v1/chat/completions", chat_body({"rule": rule, "relax_scope": scope}))
    assert status == 200, payload
    reply = json.loads(payload)
    assert reply["relaxtui"]["stats"]["relax_scope"] == scope and reply["usage"]["completion_tokens"] > 0


@pytest.mark.model
def test_a_model_whose_template_never_thinks_refuses_a_scope_per_request(thinking_models):
    options = ModelOptions(verifier=str(thinking_models["chatml"]), drafter=str(thinking_models["chatml"]),
                           ctx_size=256)
    with running(LlamaServedPair(options)) as (url, _):
        status, _, payload = raw(url, "POST", "/v1/chat/completions",
                                 chat_body({"rule": "topk-delta:0.5", "relax_scope": "thinking"}))
        ok, _, _ = raw(url, "POST", "/v1/chat/completions", chat_body({"rule": "topk-delta:0.5"}))
    error = json.loads(payload)["error"]
    assert status == 400 and error["param"] == "speculative.relax_scope" and ok == 200
    assert "the verifier's chat template never marks one (it writes no <think>)" in error["message"]


@pytest.mark.model
def test_generate_refuses_a_scope_and_a_draft_length_in_one_line(capsys, thinking_models):
    chatml, thinking = str(thinking_models["chatml"]), str(thinking_models["thinking"])
    common = ["--ctx-size", "256", "--max-tokens", "4", "--quiet"]
    fails_with(capsys, ["generate", "x", "--verifier", chatml, "--drafter", chatml, *common, "--rule", "ensemble:0.5",
                        "--relax-scope", "thinking"],
               "--relax-scope 'thinking' needs a thinking block, and the verifier's chat template never marks one")
    fails_with(capsys, ["generate", "x", "--verifier", thinking, "--drafter", thinking, *common, "--rule", "fly",
                        "--draft-max", "1"], f"--draft-max {FLY_AT_ONE}")
    from relaxtui.cli import main

    assert main(["generate", "x", "--verifier", thinking, "--drafter", thinking, *common, "--rule", "fly",
                 "--relax-scope", "thinking"]) == 0
