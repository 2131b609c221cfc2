"""Cost model against hand-computed values; bench and quantise on a real small model."""

from __future__ import annotations

import json

import pytest

from relaxtui.cli import main
from relaxtui.costmodel.model import (
    best_draft_length,
    expected_accepted,
    length_adjusted,
    predicted_speedup,
    verify_cost,
)
from relaxtui.engine.llama import LlamaModel


def test_expected_accepted_by_hand():
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(1.0, 4) == 4
    assert expected_accepted(0.0, 4) == 0


def test_predicted_speedup_by_hand():
    v = [1.0, 1.5, 2.0, 2.4]
    # l_accept 2, N 3: (2 + 1) / (v(4) + 3 * 0.2) = 3 / 3.0
    assert predicted_speedup(2.0, 3, 0.2, v) == pytest.approx(1.0)
    # GPU-like flat curve: (1.5 + 1) / (1 + 2 * 0.1)
    assert predicted_speedup(1.5, 2, 0.1, [1, 1, 1]) == pytest.approx(2.5 / 1.2)
    assert predicted_speedup(0.0, 0, 0.5, v) == 1.0


def test_verify_cost_extrapolates_linearly():
    assert verify_cost([1.0, 1.5, 2.0], 2) == 1.5
    assert verify_cost([1.0, 1.5, 2.0], 5) == pytest.approx(3.0)
    assert verify_cost([1.0], 3) == 3.0


def test_length_adjusted_speedup():
    assert length_adjusted(1.5, length_ar=100, length_relaxed=150) == pytest.approx(1.0)
    assert length_adjusted(1.5, 100, 0) == 0.0


def test_best_draft_length():
    # cheap drafter, flat verify: longer drafts keep paying
    n, s = best_draft_length(0.9, 0.05, [1.0] * 9, 8)
    assert n == 8 and s == pytest.approx((expected_accepted(0.9, 8) + 1) / (1 + 8 * 0.05))
    # CPU-like steep verify curve and an expensive drafter: don't speculate
    assert best_draft_length(0.5, 0.6, [1, 2, 3, 4, 5], 4) == (0, 1.0)


@pytest.mark.model
def test_short_real_bench_produces_every_field(capsys, test_model_path):
    code = main(["bench", "--verifier", str(test_model_path), "--drafter", str(test_model_path), "--n-max", "2",
                 "--max-tokens", "12", "--prompts", "1", "--repeats", "2", "--passes", "1", "--ctx-size", "512",
                 "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["c_rel"] > 0 and len(result["v"]) == 3 and result["v"][0] == 1.0
    assert result["baseline_tokens_per_s"] > 0 and result["peak_rss_mb"] > 0
    assert [run["n"] for run in result["runs"]] == [1, 2]
    for run in result["runs"]:
        for key in ("tokens_per_s", "speedup", "predicted_speedup", "acceptance_rate", "python_share"):
            assert run[key] >= 0, key
        assert run["acceptance_rate"] > 0.9  # the model drafting for itself
    assert sum(run["best"] for run in result["runs"]) == 1


@pytest.mark.model
def test_bench_text_marks_the_best_n(capsys, test_model_path):
    assert main(["bench", "--verifier", str(test_model_path), "--draft-kind", "ngram", "--n-max", "2",
                 "--max-tokens", "8", "--prompts", "1", "--repeats", "2", "--ctx-size", "512"]) == 0
    out = capsys.readouterr().out
    assert "c_rel" in out and "v(k)" in out and out.count("<- best") == 1


@pytest.mark.model
def test_quantise_a_small_model_and_load_it(tmp_path, capsys, test_model_path):
    target = tmp_path / "smol-q8_0.gguf"
    assert main(["models", "quantize", str(test_model_path), str(target), "--type", "q8_0"]) == 0
    with LlamaModel(target, n_ctx=128) as model:
        assert model.header.quantisation == "Q8_0"
        logits = model.decode(model.tokenize("Hello"), logits_rows=[-1])
        assert logits.shape == (1, model.n_vocab)
    assert not list(tmp_path.glob("*.partial"))
