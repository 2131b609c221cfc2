"""Cost profiles, proxy speed-up, auto N and calibration against hand-computed values; bench on a real model."""

from __future__ import annotations

import json

import pytest

from relaxtui.cli import main
from relaxtui.costmodel.auto import (
    break_even_length,
    choose_draft_length,
    expected_accepted,
    position_acceptance,
    predicted_speedup,
)
from relaxtui.costmodel.calibrate import LoopCosts, calibrate
from relaxtui.costmodel.pricing import Rounds, break_even, priced_ms, priced_speedup
from relaxtui.costmodel.profiles import SHIPPED, CostProfile, load_profile
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.llama import LlamaModel
from relaxtui.errors import UserError
from tests.support.markov import fake, random_table

# -- cost profiles and the proxy speed-up (docs/metrics.md) ------------------------------------------------------
UNIT = CostProfile("unit", "test", "v", "d", verifier_ar_ms=10.0, drafter_ms=2.0, verify_ms={1: 10.0, 2: 14.0, 4: 20.0})


def test_proxy_speedup_by_hand_with_a_varying_draft_length():
    # rounds of 3, 1, 0 and 3 drafts: verify blocks k = 4, 2, 1, 4 (t_V(1) = t_AR); 9 output tokens
    lengths = [3, 1, 0, 3]
    cost = (20 + 3 * 2) + (14 + 1 * 2) + 10 + (20 + 3 * 2)
    assert priced_ms(UNIT, Rounds.of(lengths, 0)) == pytest.approx(cost)
    assert priced_speedup(UNIT, Rounds.of(lengths, 9)) == pytest.approx(9 * 10 / cost)
    # ended on an end-of-generation token: its round is paid, and the verifier alone pays one step for it too
    assert priced_speedup(UNIT, Rounds.of(lengths, 9, end_tokens=1)) == pytest.approx(10 * 10 / cost)


def test_verify_cost_between_measured_points_is_interpolated_and_past_them_refused():
    assert UNIT.verify_cost_ms(3) == pytest.approx(17.0)  # halfway between k=2 (14) and k=4 (20)
    gb200 = SHIPPED["paper-gb200"]
    assert gb200.verify_cost_ms(2) == gb200.verify_cost_ms(4) == 30.503  # below the first point: its value
    assert gb200.verify_cost_ms(8) == pytest.approx(30.448 + (30.905 - 30.448) * 2 / 5)
    with pytest.raises(UserError, match="no verify cost for a block of k=22 tokens \\(21 drafts\\)"):
        gb200.round_cost_ms(21)


def test_optimistic_pricing_on_a_constructed_record():
    """The paper's optimistic mode: a round costs one AR token plus d drafter tokens, whatever k is."""
    optimistic = SHIPPED["paper-gb200-optimistic"]
    record = {"output_tokens": 40, "draft_lengths": [5, 5, 5, 5, 5, 5, 5, 5, 3, 0]}
    cost = 8 * (12.448 + 5 * 3.929) + (12.448 + 3 * 3.929) + 12.448
    assert priced_speedup(optimistic, Rounds.of(record["draft_lengths"], record["output_tokens"])) == \
        pytest.approx(40 * 12.448 / cost)
    # the measured-pricing twin charges the verify block instead (30.448 ms at k=6)
    assert SHIPPED["paper-gb200"].round_cost_ms(5) == pytest.approx(30.448 + 5 * 3.929)


def test_extra_costs_of_a_measured_profile_are_priced():
    profile = CostProfile("m", "", "", "", 10.0, 2.0, {1: 10.0, 2: 14.0}, draft_round_ms=1.0, resync_ms=3.0,
                          emit_ms=0.5)
    # two rounds of 1 draft (one fully accepted), 3 tokens, one extra drafter step
    cost = 2 * (14 + 2 + 1) + 3.0 + 3 * 0.5 + 2.0
    rounds = Rounds.of([1, 1], 3, extra_draft_steps=1, full_rounds=1)
    assert priced_ms(profile, rounds) == pytest.approx(cost)
    assert priced_speedup(profile, rounds) == pytest.approx(3 * 10.5 / cost)
    # break-even: (14 + 2 + 1) + L·0.5 = L·(10 + 0.5), so L = 17 / 10, and there the priced speed-up is exactly 1
    assert break_even(profile, 1).length == pytest.approx(17 / 10)
    length = break_even(profile, 1).steps
    assert length * 10.5 / (17 + length * 0.5) == pytest.approx(1.0)


def test_memory_bound_profile_and_its_c_rel():
    assert load_profile("memory-bound").c_rel == pytest.approx(0.1)
    fast = load_profile("memory-bound:0.05")
    assert fast.round_cost_ms(4) == pytest.approx(1 + 4 * 0.05)  # v(k) = 1 for every k
    with pytest.raises(UserError, match="memory-bound:C takes a number"):
        load_profile("memory-bound:cheap")


def test_profile_files_round_trip_and_bad_files_are_one_clear_error(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(UNIT.to_json())
    assert load_profile(str(path)) == UNIT
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not a valid JSON cost profile"):
        load_profile(str(bad))
    bad.write_text(json.dumps({"name": "x", "drafter_ms": 1}))
    with pytest.raises(UserError, match="missing verifier_ar_ms"):
        load_profile(str(bad))
    bad.write_text(json.dumps({"name": "x", "verifier_ar_ms": 1, "drafter_ms": 1, "verify_ms": {"2": "fast"}}))
    with pytest.raises(UserError, match="malformed cost profile"):
        load_profile(str(bad))
    bad.write_text('{"name": "x", "verifier_ar_ms": 10, "drafter_ms": 1, "verify_ms": {"2": 12}, "emit_ms": NaN}')
    with pytest.raises(UserError, match="every time must be a finite number"):
        load_profile(str(bad))
    with pytest.raises(UserError, match="unknown cost profile 'gb300'"):
        load_profile("gb300")


def test_profiles_command(capsys):
    assert main(["profiles", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SHIPPED)
    assert main(["profiles", "show", "paper-gb200"]) == 0
    shown = capsys.readouterr().out
    assert "t_AR 12.448 ms, t_D 3.929 ms" in shown and "k=21: 32.270 ms" in shown
    assert main(["profiles", "show", "nope"]) == 2


# -- auto draft length and break-even ----------------------------------------------------------------------------
def cpu_like(c_rel: float, verify_slope: float) -> LoopCosts:
    """Round costs with a verify block growing by ``verify_slope`` steps per token (1 s per AR step)."""
    return LoopCosts(tuple(1.0 + verify_slope * k for k in range(9)), tuple(c_rel * n for n in range(1, 9)), 0.0,
                     0.0, 1.0, c_rel)


def test_expected_accepted_and_position_rates_by_hand():
    assert expected_accepted([0.5, 0.5, 0.5], 3) == pytest.approx((0.5 + 0.25 + 0.125, 0.125))
    assert expected_accepted([0.9], 2) == pytest.approx((0.9 + 0.81, 0.81))  # the last rate repeats
    # position 3 was reached twice: too few to trust its 2/2, it takes the pooled rate (capped by position 2's)
    assert position_acceptance([100, 50, 2], [50, 40, 2]) == pytest.approx([0.5, 0.8, 92 / 152])
    assert position_acceptance([100, 3], [90, 0]) == pytest.approx([0.9, 90 / 103])


def test_auto_picks_zero_where_nothing_pays_and_the_best_n_where_one_does():
    steep = cpu_like(c_rel=0.4, verify_slope=0.8)  # a 2-core CPU: verification compute-bound
    choice = choose_draft_length(steep, [0.8] * 8, 6)
    assert choice.draft_max == 0 and all(choice.predicted[n] < 1 for n in range(1, 7))
    # a round of 1 draft costs 1 + 0.8 + 0.4 = 2.2 steps, more than the 2 tokens it can yield: no rate pays
    assert "predicted slower" in choice.line() and "no acceptance rate makes N=1 pay" in choice.line()
    flat = cpu_like(c_rel=0.05, verify_slope=0.02)  # a GPU: verify block nearly free
    choice = choose_draft_length(flat, [0.9] * 8, 6)
    expected = {n: (1 + expected_accepted([0.9] * 8, n)[0]) / (1 + 0.02 * n + 0.05 * n) for n in range(1, 7)}
    best = max(expected, key=expected.get)
    assert choice.draft_max == best > 0
    assert choice.predicted[best] == pytest.approx(expected[best])
    assert predicted_speedup(flat, [0.9] * 8, best) == pytest.approx(expected[best])
    assert break_even_length(flat, 2).length == pytest.approx(1 + 0.04 + 0.1)


def test_calibration_on_fake_models_fills_every_cost():
    verifier, draft = fake(random_table(1)), ModelDrafter(fake(random_table(2)), 6)
    costs = calibrate(verifier, draft, max_block=4, sampling=SamplingParams(1.0, 0, 1.0), repeats=2,
                      context=[0, 1, 2, 3, 4, 5, 0, 1])
    assert len(costs.verify_s) == 4 and len(costs.draft_s) == 3
    assert all(t > 0 for t in (*costs.verify_s, *costs.draft_s, costs.verifier_decode_s, costs.drafter_decode_s))
    profile = costs.profile(blocks=7)  # what every face prices with (`pricing`)
    assert profile.round_cost_ms(2) > 1e3 * costs.verify_s[2] and profile.verify_cost_ms(3) == 1e3 * costs.verify_s[2]
    assert profile.round_cost_ms(6) > profile.round_cost_ms(3)  # past the calibrated sizes: the curves continue
    with pytest.raises(UserError, match="no verify cost for a block of k=7"):
        costs.profile().round_cost_ms(6)  # unless asked for, a profile prices only what was calibrated
    assert len(verifier.tokens_of(0)) == 0 and len(draft.model.tokens_of(0)) == 0  # caches left empty


@pytest.mark.model
def test_short_real_bench_produces_every_field(capsys, tmp_path, test_model_path):
    saved = tmp_path / "here.json"
    code = main(["bench", "--verifier", str(test_model_path), "--drafter", str(test_model_path), "--draft-max", "2",
                 "--max-tokens", "12", "--prompts", "1", "--repeats", "2", "--passes", "1", "--ctx-size", "512",
                 "--profile", "paper-gb200", "--profile", "memory-bound:0.2", "--save-profile", str(saved), "--json",
                 "--rows", "both"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    profile = load_profile(str(saved))  # this machine's profile, loadable as --profile elsewhere
    assert sorted(profile.verify_ms) == [1, 2, 3] and profile.verifier_ar_ms > 0 and profile.drafter_ms >= 0
    for run in result["runs"]:
        assert set(run["proxy_speedup"]) == {"paper-gb200", "memory-bound:0.2"}
        # a round costs a positive number of verifier steps; more than 1 only on a quiet machine (a busy one can
        # time the N+1 block under the single step), so the test does not ask it
        assert run["predicted_speedup"] > 0 and run["break_even_steps"] > 0
        assert run["break_even_length"] is None or run["break_even_length"] == run["break_even_steps"] < run["n"] + 1
    assert result["c_rel"] > 0 and len(result["v"]) == 3 and result["v"][0] == 1.0
    assert result["baseline_tokens_per_s"] > 0 and result["peak_rss_mb"] > 0
    assert [run["n"] for run in result["runs"]] == [1, 2]
    for run in result["runs"]:
        for key in ("tokens_per_s", "speedup", "wall_clock_speedup", "predicted_speedup", "acceptance_rate",
                    "python_share"):
            assert run[key] >= 0, key
        assert run["wall_clock_speedup"] == run["speedup"] and run["priced_speedup"] == run["proxy_speedup"]
        assert run["acceptance_rate"] > 0.9  # the model drafting for itself
    # one N marked best, or none and a note saying why (whether a run was disturbed is the machine's doing)
    best = [run["n"] for run in result["runs"] if run["best"]]
    assert best == [result["best_n"]] if best else (result["best_n"] is None and result["best_note"])
    assert isinstance(profile.timing_spread, float) and isinstance(profile.timing_stable, bool)
    # issue 21's host costs: greedy on the engine's candidate rows copies one candidate a row (its id and logit: 8
    # bytes); on whole rows (--rows both: the same runs again) a verifier-alone round copies one logits row (SmolLM2:
    # 49,152 floats). A speculative round copies its verify rows and its draft rows, so more, either way
    assert result["settings"]["rows"] == "both"
    candidate, whole = 8, 49152 * 4
    baseline = result["baseline"]
    assert baseline["n"] == 0 and baseline["copied_bytes_per_round"] == candidate == \
        result["baseline_copied_bytes_per_round"]
    assert baseline["whole_rows"]["copied_bytes_per_round"] == whole
    assert baseline["host_ms_per_round"] > 0 and baseline["whole_rows"]["host_ms_per_round"] > 0
    for run in result["runs"]:
        assert run["host_ms_per_round"] > 0 and candidate < run["copied_bytes_per_round"] <= \
            (2 * run["n"] + 2) * candidate
        assert whole < run["whole_rows"]["copied_bytes_per_round"] <= (2 * run["n"] + 2) * whole
        assert run["whole_rows"]["tokens_per_s"] > 0


@pytest.mark.model
def test_bench_text_marks_the_best_n(capsys, test_model_path):
    assert main(["bench", "--verifier", str(test_model_path), "--draft-kind", "ngram", "--n-max", "2",
                 "--max-tokens", "8", "--prompts", "1", "--repeats", "2", "--ctx-size", "512"]) == 0
    out = capsys.readouterr().out
    # one N marked best, or none and the line saying why (a busy machine may leave every N unstable)
    assert "c_rel" in out and "v(k)" in out and out.count("<- best") + out.count("no N marked best") == 1
    assert "wall-clock" in out and "predicted" in out and "break-even" in out


def test_bench_says_when_speculation_is_slower_or_when_measurement_and_model_disagree():
    from relaxtui.commands.bench import slower_line
    from relaxtui.costmodel.bench import BenchResult, BenchRun

    def result(measured: float, predicted: float, break_even: float = 3.9) -> BenchResult:
        run = BenchRun(3, 10.0, measured, predicted, 0.8, 3.2, break_even, 0.02, 100, best=True)
        return BenchResult(0.05, 0.02, 0.4, [1.0], {}, 10.0, 0.02, [run], 100.0, "model")

    assert slower_line(result(1.2, 1.1)) is None
    slower = slower_line(result(0.8, 0.82))
    assert slower.startswith("speculation is slower than the verifier alone here: best N=3 wall-clock 0.80x")
    assert "mean accepted length of 3.90 to break even (it reached 3.20)" in slower
    # past N + 1 = 4 no acceptance rate can reach it: the sentence says so instead of naming a target
    never = slower_line(result(0.8, 0.82, break_even=5.64))
    assert "no acceptance rate makes N=3 pay on this machine" in never and "5.64 to break even" not in never
    assert slower_line(result(1.3, 0.8)).startswith("wall-clock and predicted disagree: best N=3 wall-clock 1.30x")


def test_bench_refuses_a_profile_that_cannot_price_its_draft_lengths(capsys, tmp_path):
    short = tmp_path / "short.json"
    short.write_text(CostProfile("short", "", "", "", 10.0, 1.0, {1: 10.0, 2: 12.0, 3: 13.0}).to_json())
    assert main(["bench", "--draft-max", "5", "--profile", str(short)]) == 2
    assert "no verify cost for a block of k=6 tokens" in capsys.readouterr().err


@pytest.mark.model
def test_quantise_a_small_model_and_load_it(tmp_path, capsys, test_model_path):
    target = tmp_path / "smol-q8_0.gguf"
    assert main(["models", "quantize", str(test_model_path), str(target), "--type", "q8_0"]) == 0
    with LlamaModel(target, n_ctx=128) as model:
        assert model.header.quantisation == "Q8_0"
        logits = model.decode(0, model.tokenize("Hello"), logits_rows=[-1])
        assert logits.shape == (1, model.n_vocab)
    assert not list(tmp_path.glob("*.partial"))
