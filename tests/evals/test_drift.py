"""Label-free drift signals: per record from what the loop computes, per config against its reference, in the
report's table, CSV, JSON (the contract), PNG and tune's advice."""

from __future__ import annotations

import csv
import json
import math

import pytest

from relaxtui.cli import main
from relaxtui.evals.analysis.degeneracy import is_degenerate, repetition_rate
from relaxtui.evals.analysis.drift import record_signals
from relaxtui.evals.analysis.report import render_drift_table, summarise
from relaxtui.evals.analysis.tune import recommend
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import ResultsStore
from tests.support.eval_runs import drift_run

CONTRACT = ("verifier_logprob", "out_of_support_rate", "repetition_rate", "length_ratio")


def test_repetition_rate_is_the_degeneracy_measure_as_a_number():
    assert repetition_rate([]) == 0.0 and repetition_rate(list(range(60))) == 0.0
    assert repetition_rate(list(range(30)) + [5] * 30) == pytest.approx(30 / 60)  # the tail "5 5 … 5"
    loop = [1, 2, 3, 4] * 2 + [7, 8] * 20
    assert repetition_rate(loop) == pytest.approx(40 / 48) and is_degenerate(loop)
    assert repetition_rate([1, 2] * 2 + [9]) == 0.0  # a tail must repeat 3 times


def test_record_signals_from_the_loops_per_token_numbers():
    signals = record_signals([1, 2, 3, 4], [-0.5, -1.0, -1.5, -1.0], [0.5, 0.25, 0.0, 1.0])
    assert signals["verifier_logprob"] == pytest.approx(-1.0)
    assert signals["verifier_logprob_processed"] == pytest.approx((math.log(0.5) + math.log(0.25)) / 3)
    assert signals["out_of_support_rate"] == pytest.approx(0.25) and signals["repetition_rate"] == 0.0
    missing = record_signals([1], [None], [1.0])  # a path with no row for that token records None, not a guess
    assert missing["verifier_logprob"] is None and missing["out_of_support_rate"] == 0.0
    assert record_signals([], (), ()) == dict.fromkeys(missing, None)


def test_report_json_carries_each_signal_with_its_paired_interval(capsys, tmp_path):
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "x", "verifier": "v.gguf", "drafter": "d.gguf", "temperature": 0.6}))
    for row in drift_run():
        store.append(row)
    assert main(["eval", "report", str(tmp_path / "run"), "--profile", "paper-gb200", "--json"]) == 0
    lines = {line["config"]: line for line in map(json.loads, capsys.readouterr().out.splitlines())}
    for line in lines.values():
        for name in CONTRACT:
            assert set(line[name]) >= {"delta", "ci_low", "ci_high"}, name
    assert all(lines["no-spec"][name]["delta"] is None for name in CONTRACT)  # no reference, no difference
    ensemble = lines["ensemble(0.8) N=3"]
    logprob = ensemble["verifier_logprob"]
    assert logprob["delta"] == pytest.approx(-0.3 - sum(0.01 * p + 0.001 * (p % 2) for p in range(6)) / 6)
    assert logprob["ci_low"] < logprob["delta"] < logprob["ci_high"] < 0 and logprob["pairs"] == 6
    assert ensemble["out_of_support_rate"]["delta"] == pytest.approx(0.1)
    assert ensemble["repetition_rate"]["delta"] == pytest.approx(0.05)
    ratio = ensemble["length_ratio"]
    expected = math.exp(sum(math.log((120 + p) / 100) for p in range(6)) / 6)
    assert ratio["value"] == pytest.approx(expected) and ratio["delta"] == pytest.approx(expected - 1)
    assert lines["strict N=3"]["out_of_support_rate"]["delta"] == 0.0
    with (tmp_path / "run" / "summary.csv").open() as stream:
        header = next(csv.reader(stream))
    assert {"verifier_logprob[delta]", "verifier_logprob[ci_low]", "length_ratio[ci_high]"} <= set(header)
    markdown = (tmp_path / "run" / "summary.md").read_text()
    assert "## Drift vs reference" in markdown and "Δlogp vs ref [95%]" in markdown
    assert (tmp_path / "run" / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_the_drift_table_shows_signals_and_intervals():
    table = render_drift_table(summarise(drift_run()))
    # a table wider than 120 columns is cut into blocks, each led by the config again
    ensemble = " ".join(line for line in table.splitlines() if line.startswith("ensemble(0.8) N=3"))
    assert "-1.150" in ensemble and "10.0%" in ensemble and "+10.0 [" in ensemble and "1.22x [1.21, 1.24]" in ensemble


def test_an_open_ended_task_is_judged_on_drift(capsys, tmp_path):
    summaries = summarise(drift_run(scored=False), [])
    assert not any(s.scored for s in summaries)
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "open", "verifier": "v.gguf", "drafter": "d.gguf"}))
    for row in drift_run(scored=False):
        store.append(row)
    assert main(["eval", "report", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "open-ended task (answer kind 'none'): nothing is scored, so the drift signals are the verdict" in out
    strict = next(line for line in out.splitlines() if line.startswith("strict N=3"))
    assert strict.split()[2:6] == ["-", "-", "-", "-"]  # no accuracy, no Δaccuracy
    assert (tmp_path / "run" / "pareto.png").exists()  # the drift panel alone


def test_tune_bounds_drift_beside_accuracy():
    from relaxtui.costmodel.profiles import SHIPPED

    profile = SHIPPED["paper-gb200-optimistic"]
    rows = drift_run()
    for row in rows:  # every config is right everywhere: accuracy cannot tell them apart
        row["correct"] = True
    summaries = summarise(rows, [profile])
    plain = recommend(summaries, max_drop=50, profile=profile)
    assert [s.label for s in plain.relaxed_winners] == ["ensemble(0.8) N=3"]  # accuracy alone lets it through
    assert "Δlogp -0.3" in "\n".join(plain.lines())  # and the drift sits beside it
    bounded = recommend(summaries, max_drop=50, profile=profile, max_drift=0.1)
    assert bounded.relaxed_winners == []
    assert "drift: more data would not help: its log-prob already falls further than that" in "\n".join(bounded.lines())
    loose = recommend(summaries, max_drop=50, profile=profile, max_drift=1.0)
    assert [s.label for s in loose.relaxed_winners] == ["ensemble(0.8) N=3"]
    open_ended = recommend(summarise(drift_run(scored=False), [profile]), max_drop=2, profile=profile)
    assert open_ended.max_drift == 0.1 and open_ended.relaxed_winners == []  # the default bound for `none` tasks
    assert "drift at most 0.1 nats/token" in "\n".join(open_ended.lines())


def test_an_open_ended_tasks_truncation_warning_speaks_of_drift_not_accuracy():
    from relaxtui.evals.analysis.report import warnings

    rows = drift_run(scored=False)
    for row in rows:
        row["truncated"] = True
    lines = warnings(summarise(rows))
    assert ("warning: strict N=3: 100% of answers hit the token budget, so its drift signals read cut-off answers; "
            "raise --max-tokens") in lines
    assert not any("accuracy" in line for line in lines if line.startswith("warning: strict"))
