"""``--draft-kind mtp`` through every face — generate, eval (one and two sequences at once), tune, bench, the chat's
TUI — and its bad input, on the tiny random GGUFs written at test time. Mechanics only: random weights draft
badly, so these tests check that each face drafts with the MTP head and keeps greedy output, not speed."""

from __future__ import annotations

import json

import pytest

from relaxtui.cli import main
from relaxtui.evals.run.results import MEASURED_PROFILE
from tests.support.cli import fails_with
from tests.support.tiny_models import write_qwen35

pytestmark = pytest.mark.model
ONE_THREAD = ["--threads", "1"]  # other tests share the cores


def finished(capsys, argv: list[str]) -> dict:
    """Run ``generate --json`` and return its last (finished) line."""
    assert main(["generate", "hello there", "--json", "--temperature", "0", "-n", "16", "--ctx-size", "256",
                 *ONE_THREAD, *argv]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["type"] == "finished"
    return last


# -- generate ---------------------------------------------------------------------------------------------------
def test_generate_drafts_with_the_verifiers_own_head_or_an_mtp_only_gguf(capsys, tiny, tmp_path):
    """Greedy: the verifier alone's text with its own head, with the MTP-only GGUF, and with that GGUF beside a
    verifier that holds no MTP layers (the head's hidden rows come from the same trunk)."""
    alone = finished(capsys, ["-m", str(tiny.qwen35), "--no-spec"])
    own = finished(capsys, ["-m", str(tiny.qwen35), "--draft-kind", "mtp"])
    separate = finished(capsys, ["-m", str(tiny.qwen35), "--draft-kind", "mtp", "--drafter", str(tiny.mtp_only)])
    bare = write_qwen35(tmp_path / "tiny-qwen35-no-mtp.gguf", mtp_layers=0)
    beside = finished(capsys, ["-m", str(bare), "--draft-kind", "mtp", "--drafter", str(tiny.mtp_only)])
    for run in (own, separate, beside):
        assert run["text"] == alone["text"] and run["metrics"]["drafted"] > 0


# -- eval -------------------------------------------------------------------------------------------------------
def eval_argv(tiny, out, *extra: str) -> list[str]:
    return ["eval", "aime", "--limit", "2", "--max-tokens", "8", "--temperature", "0", "-m", str(tiny.qwen35),
            "--draft-kind", "mtp", "--rule", "strict", "cactus:1", "--no-spec", "--ctx-size", "1024", *ONE_THREAD,
            "--out", str(out), *extra]


def records(out) -> dict[tuple[str, str], dict]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return {(r["config_id"], r["problem_id"]): r for r in map(json.loads, lines)}


def test_eval_runs_the_mtp_head_one_and_two_sequences_at_once(capsys, tiny, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(eval_argv(tiny, one)) == 0
    report = capsys.readouterr().out
    assert "tiny-qwen35-mtp.gguf / mtp" in report and "degen" in report and "len" in report
    assert main(eval_argv(tiny, two, "--parallel", "2")) == 0
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["draft_kind"] == "mtp" and manifest["drafter"] == "mtp" and manifest["parallel"] == 2
    first, second = records(one), records(two)
    assert len(first) == 6 and {p for _, p in first} == {p for _, p in second}  # 3 configs x 2 problems
    by_label = {(r["config"]["label"], r["problem_id"]): r for r in second.values()}
    for record in first.values():  # greedy: the same tokens with K = 2 as one at a time
        other = by_label[(record["config"]["label"], record["problem_id"])]
        assert other["output"] == record["output"], record["config"]["label"]
        assert (record["drafted"] > 0) == (record["config"]["rule"] is not None)


# -- tune -------------------------------------------------------------------------------------------------------
def test_tune_takes_the_mtp_kind_alone_or_beside_a_small_lm(capsys, tiny, tmp_path):
    base = ["tune", "aime", "--limit", "1", "--max-tokens", "6", "-m", str(tiny.qwen35), "--draft-max", "2",
            "--rule", "cactus", "--alpha", "1", "--ctx-size", "1024", *ONE_THREAD]
    assert main([*base, "--draft-kind", "mtp", "--out", str(tmp_path / "alone")]) == 0
    manifest = json.loads((tmp_path / "alone" / "mtp" / "manifest.json").read_text())
    assert manifest["draft_kind"] == "mtp" and manifest["drafter"] == "mtp"
    capsys.readouterr()
    assert main([*base, "--drafters", "mtp", str(tiny.dense), "--out", str(tmp_path / "both")]) == 0
    printed = capsys.readouterr().out
    assert "strict N=2 [mtp]" in printed and "strict N=2 [tiny-qwen3-dense]" in printed
    assert (tmp_path / "both" / "mtp" / MEASURED_PROFILE).exists()


# -- bench ------------------------------------------------------------------------------------------------------
def test_bench_times_the_mtp_pair_one_and_two_sequences(capsys, tiny):
    base = ["bench", "-m", str(tiny.qwen35), "--draft-kind", "mtp", "--draft-max", "2", "--max-tokens", "16",
            "--prompts", "1", "--passes", "1", "--ctx-size", "256", "--json", *ONE_THREAD]
    assert main([*base, "--repeats", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["drafter_kind"] == "mtp" and result["c_rel"] > 0 and [r["n"] for r in result["runs"]] == [1, 2]
    assert main([*base, "--parallel", "1,2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["settings"]["drafter"] == "mtp"
    assert {(r["k"], r["mode"]) for r in result["parallel"]} == {(1, "no-spec"), (1, "strict"), (2, "no-spec"),
                                                                 (2, "strict")}


# -- chat -------------------------------------------------------------------------------------------------------
async def test_the_chat_shows_the_mtp_kind_and_keeps_it_across_switches(tiny):
    from textual.widgets import Select

    from relaxtui.session import ModelOptions
    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import ChatSettings, LlamaChatEngine
    from relaxtui.tui.widgets.status import StatusLine
    from tests.support.pilot import SIZE, send, wait_until

    options = ModelOptions(str(tiny.qwen35), "mtp", ctx_size=512, threads=1, draft_kind="mtp", rollback_depth=3)
    engine = LlamaChatEngine(options)
    app = RelaxApp(engine, ChatSettings(drafter="mtp", max_tokens=12, temperature=0.0))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.ready)
            assert "drafter mtp (MTP head)" in str(app.query_one(StatusLine).render())
            assert app.query_one("#set-drafter", Select).value == "mtp"  # offered, so applying settings keeps it
            await send(pilot, app, "hi")
            assert app.last_metrics.drafted > 0 and engine.drafter_kind == "mtp"
        own = engine.drafter
        engine.set_drafter("none", lambda _: None)
        engine.set_drafter("mtp", lambda _: None)  # back to the pair's head (a second one would be refused)
        assert engine.drafter is own and "mtp" in engine.drafter_choices()
    finally:
        engine.close()


# -- bad input: one line, exit 2, before decoding ---------------------------------------------------------------
def test_mtp_bad_input_is_one_line_before_anything_decodes(capsys, monkeypatch, tiny):
    from relaxtui.tui.app import RelaxApp

    def no_screen(self):  # noqa: ANN001
        raise AssertionError("the UI opened")

    def no_model(*_, **__):  # noqa: ANN002, ANN003
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(RelaxApp, "run", no_screen)
    import relaxtui.session as session

    monkeypatch.setattr(session, "LlamaModel", no_model)  # the headers alone refuse these
    generate = ["generate", "hi", *ONE_THREAD]
    fails_with(capsys, [*generate, "-m", str(tiny.dense), "--draft-kind", "mtp"],
               "tiny-qwen3-dense.gguf has no MTP layers (qwen3.nextn_predict_layers is 0): it cannot draft for itself "
               "(llama.cpp has no MTP head for qwen3 models)")
    fails_with(capsys, [*generate, "-m", str(tiny.qwen35), "--draft-kind", "mtp", "--drafter", str(tiny.dense)],
               "tiny-qwen3-dense.gguf has no MTP layers")
    other = "the MTP layers in tiny-qwen35-mtp-only.gguf are for qwen35, the verifier tiny-qwen3-dense.gguf is qwen3"
    for command in (generate, ["chat"], ["eval", "aime", "--limit", "1", "--out", "/nonexistent/never-made"],
                    ["bench"]):
        fails_with(capsys, [*command, "-m", str(tiny.dense), "--draft-kind", "mtp", "--drafter", str(tiny.mtp_only)],
                   other)
    monkeypatch.undo()  # the snapshots' room is known once the context exists: refused after loading, before decoding
    fails_with(capsys, [*generate, "-m", str(tiny.qwen35), "--draft-kind", "mtp", "--ctx-size", "16",
                        "--draft-max", "20"],
               "--ctx-size 16 is too small for drafts of 20 tokens on the recurrent/hybrid model tiny-qwen35-mtp.gguf")


# -- recurrent-state snapshots: what the draft length needs, no more ----------------------------------------------
@pytest.mark.parametrize("draft_kind,drafter", [("mtp", "mtp"), ("model", "qwen35")])
def test_contexts_keep_the_snapshots_the_draft_length_needs_and_no_more(monkeypatch, tiny, draft_kind, drafter):
    """The verifier keeps N snapshots (a verify batch [last, x_1..x_N] rolls back N at most), so strict greedy at N
    takes no checkpoint of it; a hybrid LM drafter keeps none (it drafts from a checkpoint restored after each
    draft). Output: the verifier alone's."""
    from relaxtui.decoding.config import GenerationConfig
    from relaxtui.decoding.drafters import ModelDrafter
    from relaxtui.decoding.loop import generate
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.session import ModelOptions, load_pair

    saved = []
    real = LlamaModel.checkpoint
    monkeypatch.setattr(LlamaModel, "checkpoint", lambda self, seq: saved.append(self) or real(self, seq))
    config = GenerationConfig(draft_max=3, max_tokens=24, sampling=SamplingParams(0.0, 0, 1.0))
    name = "mtp" if drafter == "mtp" else str(tiny.qwen35)
    outputs = []
    for options in (ModelOptions(str(tiny.qwen35), None, ctx_size=256, threads=1, rollback_depth=3),
                    ModelOptions(str(tiny.qwen35), name, ctx_size=256, threads=1, rollback_depth=3,
                                 draft_kind=draft_kind)):
        pair = load_pair(options)
        try:
            assert pair.verifier.rollback_limit == 3
            if isinstance(pair.drafter, ModelDrafter):  # a test may look inside; the package may not
                assert pair.drafter.model.rollback_limit == 0
            *_, done = generate(pair.verifier, pair.verifier.tokenize("Once upon a time"), config,
                                drafter=pair.drafter if options.drafter else None)
            outputs.append(list(done.token_ids))
            assert pair.verifier not in saved
        finally:
            pair.close()
    assert outputs[0] == outputs[1] and done.metrics.drafted > 0
