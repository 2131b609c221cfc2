"""`relaxtui tune`: the recommendation logic on hand-made summaries, and one tiny real run."""

from __future__ import annotations

import pytest

from relaxtui.cli import main
from relaxtui.evals.report import ConfigSummary
from relaxtui.evals.tune import recommend


def summary(label, rule, speedup, accuracy, ci=0.005, problems=50_000, knob=None, n=3):
    return ConfigSummary(label, rule, knob, n, problems, problems, accuracy, ci, 300.0, 0.0, 0.0, 0.8, 3.0,
                         10.0 * speedup, speedup, speedup)


def test_best_strict_first_then_relaxed_within_the_drop():
    summaries = [
        summary("no-spec", None, 1.0, 0.60),
        summary("strict N=2", "strict", 1.10, 0.60, n=2),
        summary("strict N=3", "strict", 1.20, 0.61),
        summary("cactus(1) N=3", "cactus", 1.35, 0.595, knob=1.0),  # faster, 1.5 points lower: accepted
        summary("mentored(0.95) N=3", "mentored", 1.50, 0.50, knob=0.95),  # faster but 11 points lower
        summary("ensemble(0.9) N=3", "ensemble", 1.15, 0.61, knob=0.9),  # not faster than strict
    ]
    advice = recommend(summaries, max_drop=2.0)
    assert advice.best_strict.label == "strict N=3"
    assert [s.label for s in advice.relaxed_winners] == ["cactus(1) N=3"]
    assert [s.label for s in advice.front] == ["strict N=3", "cactus(1) N=3", "mentored(0.95) N=3"]
    text = "\n".join(advice.lines())
    assert text.startswith("1. use strict speculation: strict N=3") and advice.caveat is None


def test_small_k_gets_the_honest_caveat():
    summaries = [summary("no-spec", None, 1.0, 0.4, ci=0.3, problems=5),
                 summary("strict N=3", "strict", 1.2, 0.4, ci=0.3, problems=5),
                 summary("cactus(1) N=3", "cactus", 1.3, 0.4, ci=0.3, problems=5, knob=1.0)]
    advice = recommend(summaries, max_drop=2.0)
    assert "with 5 problems the 95% interval is up to ±" in advice.caveat
    assert float(advice.caveat.split("±")[1].split()[0]) >= 30  # Wilson at 40% of 5 problems: about ±35


def test_even_all_wrong_answers_do_not_look_certain():
    advice = recommend([summary("no-spec", None, 1.0, 0.0, ci=0.0, problems=10),
                        summary("strict N=3", "strict", 1.2, 0.0, ci=0.0, problems=10)], max_drop=5.0)
    assert advice.caveat is not None and "10 problems" in advice.caveat


def test_when_strict_does_not_pay_say_so():
    advice = recommend([summary("no-spec", None, 1.0, 0.5), summary("strict N=3", "strict", 0.9, 0.5)],
                       max_drop=1.0)
    assert "does not pay on this machine" in advice.lines()[0]


@pytest.mark.model
def test_tiny_real_tune(capsys, tmp_path, test_model_path):
    code = main(["tune", "aime", "--limit", "2", "--max-tokens", "8", "--draft-max", "1", "2", "--rule", "cactus",
                 "--alpha", "1", "--verifier", str(test_model_path), "--drafters", str(test_model_path),
                 "--ctx-size", "1024", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "Pareto front:" in out and "strict N=1" in out and "cactus(1) N=" in out
    assert "caveat: only 2 problem" in out or "caveat: with 2 problems" in out
    assert (tmp_path / "summary.md").exists()
