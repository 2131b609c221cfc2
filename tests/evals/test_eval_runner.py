"""The eval runner: results written as they finish, resumed without loss or repeats, reports rebuilt."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from relaxtui.cli import main
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.fake import FakeBackend
from relaxtui.errors import UserError
from relaxtui.evals.analysis.degeneracy import is_degenerate
from relaxtui.evals.analysis.report import pareto_front, summarise
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.tasks import get
from tests.support.eval_runs import DIGITS, PLAN


def digit_backend(seed: int) -> FakeBackend:
    """A 10-token 'model' whose tokens render as digits: its outputs parse as AIME integers."""
    table = np.random.default_rng(seed).normal(size=(10, 10))
    return FakeBackend(lambda ctx: table[ctx[-1]], 10, pieces=DIGITS)


def fake_run(tmp_path, plan, samples, should_stop=lambda: False, written=None):
    store = ResultsStore(tmp_path / "run")
    verifier, drafter = digit_backend(1), ModelDrafter(digit_backend(2), 10)
    run_eval(get("aime"), samples, plan, RunIdentity({"task": "aime", "note": "fake"}), store, verifier, drafter,
             lambda sample: [len(sample.id) % 10], on_sample=(written.append if written is not None else
                                                               lambda _: None), should_stop=should_stop)
    return store


def test_runner_writes_every_point_problem_and_seed(tmp_path):
    samples = get("aime").load()[:3]
    store = fake_run(tmp_path, PLAN, samples)
    records = list(store.records())
    assert len(records) == 3 * 3 * 2  # configs x problems x repeats
    assert {r["config"]["label"] for r in records} == {"no-spec", "strict N=2", "mentored(0.5) N=2"}
    assert {r["seed"] for r in records} == {0, 1}
    first = records[0]
    for key in ("task", "problem_id", "config", "seed", "output", "parsed", "correct", "output_tokens", "truncated",
                "degenerate", "rounds", "drafted", "accepted", "per_position_acceptance", "decode_s",
                "tokens_per_s"):
        assert key in first, key
    assert first["task_version"] == get("aime").version and first["output_tokens"] == 3


def test_a_killed_run_resumes_with_nothing_lost_and_nothing_twice(tmp_path):
    samples = get("aime").load()[:3]
    written = []
    fake_run(tmp_path, PLAN, samples, should_stop=lambda: len(written) >= 7, written=written)
    path = tmp_path / "run" / "results.jsonl"
    with path.open("a") as stream:
        stream.write('{"config_id": "torn')  # the line a kill interrupted
    kept = [json.loads(line) for line in path.read_text().splitlines()[:-1]]
    assert len(kept) == 7
    resumed = []
    store = fake_run(tmp_path, PLAN, samples, written=resumed)
    records = list(store.records())
    assert len(resumed) == 18 - 7 and len(records) == 18
    keys = [(r["config_id"], r["problem_id"], r["seed"]) for r in records]
    assert len(set(keys)) == len(keys)
    assert records[:7] == kept  # what was there is untouched


def test_another_run_in_the_same_folder_is_refused(tmp_path):
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "aime", "max_tokens": 32}))
    with pytest.raises(UserError, match=r"holds results of another run \(differs in max_tokens \(was 32, now 64\)\)"):
        ResultsStore(tmp_path / "run").open_run(RunIdentity({"task": "aime", "max_tokens": 64}))


def test_summary_and_speedup_against_the_baseline(tmp_path):
    store = fake_run(tmp_path, PLAN, get("aime").load()[:2])
    summaries = summarise(store.records())
    assert [s.label for s in summaries] == ["no-spec", "strict N=2", "mentored(0.5) N=2"]
    baseline = summaries[0]
    assert baseline.speedup == pytest.approx(1.0) and baseline.samples == 4
    records = list(store.records())
    base = {(r["problem_id"], r["seed"]): r["tokens_per_s"] for r in records if r["config"]["rule"] is None}
    for s in summaries[1:]:
        # geometric mean over problems of the per-(problem, seed) tokens/s ratios against the verifier alone
        ratios = [math.log(r["tokens_per_s"] / base[(r["problem_id"], r["seed"])])
                  for r in records if r["config"]["label"] == s.label]
        assert len(ratios) == 4 and s.speedup == pytest.approx(math.exp(sum(ratios) / 4))  # 2 seeds per problem
        assert 0 < s.acceptance_rate <= 1


def test_pareto_front():
    assert pareto_front([(1, 50), (1.2, 45), (1.1, 40), (0.9, 55)]) == [(0.9, 55), (1, 50), (1.2, 45)]


def test_degeneracy_flag():
    assert is_degenerate([1, 2, 3, 4] * 2 + [7, 8] * 20)
    assert is_degenerate(list(range(30)) + [5] * 30)
    assert not is_degenerate(list(range(60)))
    assert not is_degenerate([1, 2] * 5)  # too short to call


# -- CLI: bad input ---------------------------------------------------------------------------------------------
def fails(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("relaxtui: error: ") and err.count("\n") == 1 and message in err, err


def test_unknown_task(capsys):
    fails(capsys, ["eval", "mmlu"], "unknown task 'mmlu'; known tasks: aime, aime25, math500, gpqa, lcb, humaneval")


def test_malformed_data_file_names_the_line(capsys, tmp_path):
    data = tmp_path / "aime.jsonl"
    data.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", oops}\n')
    fails(capsys, ["eval", "aime", "--data", str(data)], f"{data}:2: malformed JSON")


def test_missing_field_names_the_line(capsys, tmp_path):
    data = tmp_path / "aime.jsonl"
    data.write_text('{"id": "a", "problem": "1+1"}\n')
    fails(capsys, ["eval", "aime", "--data", str(data)], f"{data}:1: missing field(s) answer")


def test_gated_dataset_without_a_token(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no stored login either
    fails(capsys, ["eval", "gpqa"], "Idavidrein/gpqa is gated on the Hugging Face hub and no token was found")


def test_out_not_writable(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fails(capsys, ["eval", "aime", "--limit", "1", "--out", str(blocker / "sub")], "is not writable")


def test_folder_of_another_run_is_refused_before_loading_models(capsys, tmp_path):
    out = tmp_path / "run"
    ResultsStore(out).open_run(RunIdentity({"task": "math500"}))
    fails(capsys, ["eval", "aime", "--limit", "1", "--out", str(out)], "holds results of another run")


@pytest.mark.parametrize("argv,message", [
    (["eval", "aime", "--rule", "nope"], "--rule must name a known rule (got 'nope'"),
    (["eval", "aime", "--rule", "mentored", "--alpha", "2"], "out of range for 'mentored'"),
    (["eval", "aime", "--limit", "0"], "--limit must be >= 1"),
    (["eval", "aime", "--draft-max", "0"], "--draft-max must be in 1..64 (got 0)"),
    (["eval", "report"], "relaxtui eval report: the following arguments are required: directory"),
])
def test_bad_eval_options(capsys, argv, message):
    fails(capsys, argv, message)


def test_report_of_a_folder_without_results(capsys, tmp_path):
    fails(capsys, ["eval", "report", str(tmp_path)], "is not an eval run folder")


# -- real model ---------------------------------------------------------------------------------------------------
@pytest.mark.model
def test_real_eval_writes_resumes_and_reports(capsys, tmp_path, test_model_path):
    out = tmp_path / "aime"
    argv = ["eval", "aime", "--limit", "2", "--max-tokens", "32", "--verifier", str(test_model_path), "--drafter",
            str(test_model_path), "--no-spec", "--ctx-size", "1024", "--out", str(out)]
    assert main(argv) == 0
    first = (out / "results.jsonl").read_text().splitlines()
    assert len(first) == 4  # (no-spec + strict) x 2 problems
    for record in map(json.loads, first):  # what the proxy speed-up needs is in every record
        assert len(record["draft_lengths"]) == record["rounds"] and sum(record["draft_lengths"]) == record["drafted"]
        assert record["output_tokens"] > 0
    profile = json.loads((out / "measured-profile.json").read_text())  # this machine, priced at load time
    assert profile["name"] == "this-machine" and profile["verifier_ar_ms"] > 0 and profile["drafter_ms"] > 0
    assert set(profile["verify_ms"]) >= {"1", "4"}  # blocks up to N + 1 = 4
    assert main(argv) == 0  # resume: everything is done, nothing runs twice
    assert (out / "results.jsonl").read_text().splitlines() == first
    capsys.readouterr()
    (out / "summary.md").unlink()
    assert main(["eval", "report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no-spec" in printed and "strict N=3" in printed and "priced this-machine" in printed
    assert (out / "summary.md").exists() and (out / "summary.csv").exists()
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_rule_specs_can_pin_their_own_knob():
    plan = EvalPlan(rules=("strict", "cactus:1", "mentored:0.7", "ensemble"), alphas=(), draft_max=(3,),
                    no_spec=True)
    labels = [p.label for p in plan.points()]
    assert labels == ["no-spec", "strict N=3", "cactus(1) N=3", "mentored(0.7) N=3", "ensemble(0.95) N=3",
                      "ensemble(0.9) N=3", "ensemble(0.8) N=3"]
    with pytest.raises(UserError, match="the knob after ':' must be a number"):
        EvalPlan(rules=("cactus:big",))
    with pytest.raises(UserError, match="out of range for 'mentored'"):
        EvalPlan(rules=("mentored:1.2",))


def test_a_stop_mid_sample_records_nothing_unfinished_and_the_run_resumes(tmp_path):
    """Ctrl-C lands at the next round: the sample in flight is dropped, everything finished is kept."""
    plan = EvalPlan(rules=("strict",), draft_max=(2,), no_spec=True, repeats=1, max_tokens=30,
                    sampling=SamplingParams(1.0, 0, 1.0))
    samples = get("aime").load()[:3]
    polls = []

    def stop_on_poll_40() -> bool:  # the loop polls once per round; a sample takes more than 10 rounds
        polls.append(1)
        return len(polls) >= 40

    store = fake_run(tmp_path, plan, samples, should_stop=stop_on_poll_40)
    kept = list(store.records())
    assert 0 < len(kept) < 6
    assert all(r["output_tokens"] == 30 and r["finish_reason"] == "max_tokens" for r in kept)
    resumed = list(fake_run(tmp_path, plan, samples).records())
    assert resumed[: len(kept)] == kept and len(resumed) == 6
    assert len({(r["config_id"], r["problem_id"], r["seed"]) for r in resumed}) == 6


def test_the_run_is_problem_major_so_drift_hits_every_config_alike(tmp_path):
    samples = get("aime").load()[:2]
    records = list(fake_run(tmp_path, PLAN, samples).records())
    order = [(r["problem_id"], r["seed"]) for r in records]
    configs = len({r["config_id"] for r in records})
    # each (problem, seed) runs under every config before the next one starts
    assert order == [pair for pair in dict.fromkeys(order) for _ in range(configs)]


def test_sequences_per_context_are_part_of_the_run_identity():
    from relaxtui.session import ModelOptions

    options = ModelOptions(verifier="v.gguf", drafter="d.gguf")
    alone = RunIdentity.of(get("aime"), options, PLAN, thinking=None, data=None).settings
    batched = RunIdentity.of(get("aime"), replace(options, parallel=4), PLAN, thinking=None, data=None).settings
    assert "parallel" not in alone and batched == {**alone, "parallel": 4}
