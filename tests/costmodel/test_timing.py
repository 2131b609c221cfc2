"""Timings that check themselves (issue 18): warm-up, outliers dropped, implausible results re-measured then flagged,
and never recommended — by `models pair` nor marked best by `bench`. Every test runs on a fake clock or on
constructed numbers: nothing here depends on this machine's speed."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from relaxtui.cli import main
from relaxtui.costmodel.bench import BenchResult, BenchRun, mark_best
from relaxtui.costmodel.calibrate import LoopCosts, calibrate
from relaxtui.costmodel.profiles import CostProfile, load_profile
from relaxtui.costmodel.timing import (
    K_OUTLIER,
    MIN_REPEATS,
    RETRIES,
    Timing,
    c_rel_problem,
    check_runs,
    jump_problem,
    measure,
    measure_many,
    outliers,
    summarize,
)
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.models import pairing
from relaxtui.models.pairing import Candidate, rank, recommended
from tests.support.fake_clock import FakeClock, FakeModel
from tests.support.markov import fake, random_table


def scripted(clock: FakeClock, durations: Iterable[float]) -> Callable[[], None]:
    """An action whose n-th call takes the n-th duration."""
    steps = iter(durations)

    def action() -> None:
        clock.now += next(steps)

    return action


# -- the routine -----------------------------------------------------------------------------------------------------
def test_a_cold_first_sample_and_an_outlier_are_dropped_and_the_warm_median_reported():
    clock = FakeClock()
    samples = [2.9294, 0.0240, 0.0242, 0.0238, 0.0241, 0.4, 0.0239, 0.0240]  # cold page cache, then a stall
    timing = measure(scripted(clock, samples), repeats=8, warmup=0, clock=clock)
    assert timing.median == pytest.approx(0.0240)
    assert sorted(timing.dropped) == pytest.approx([0.4, 2.9294]) and len(timing.kept) == 6
    assert timing.stable and timing.attempts == 1
    assert timing.low == pytest.approx(0.0238) and timing.high == pytest.approx(0.0242)
    assert timing.spread == pytest.approx(0.0004 / 0.0240)
    assert "24.0 ms" in timing.describe() and "2 dropped" in timing.describe()


def test_the_warm_up_is_never_sampled():
    clock = FakeClock()
    timing = measure(scripted(clock, [2.9, 0.024, 0.024, 0.025, 0.024]), repeats=4, warmup=1, clock=clock)
    assert timing.median == pytest.approx(0.024) and timing.dropped == () and len(timing.kept) == 4
    assert 2.9 not in timing.kept


def test_a_wide_spread_is_re_measured_and_flagged_unstable_when_it_stays_wide():
    clock = FakeClock()
    wide = [0.10, 0.20, 0.30, 0.15, 0.25]  # no single outlier: the machine itself is unsteady
    timing = measure(scripted(clock, wide * (RETRIES + 1)), repeats=5, warmup=0, clock=clock)
    assert not timing.stable and timing.attempts == RETRIES + 1
    assert "span" in timing.reason and timing.spread > 0.5


def test_a_wide_first_attempt_that_settles_is_stable_on_the_re_measurement():
    clock = FakeClock()
    timing = measure(scripted(clock, [0.10, 0.20, 0.30, 0.15, 0.25] + [0.1, 0.101, 0.099, 0.1, 0.1]), repeats=5,
                     warmup=0, clock=clock)
    assert timing.stable and timing.attempts == 2 and timing.median == pytest.approx(0.1)


def test_too_few_repeats_are_raised_to_the_minimum():
    clock = FakeClock()
    timing = measure(scripted(clock, [0.1] * MIN_REPEATS), repeats=1, warmup=0, clock=clock)
    assert len(timing.kept) == MIN_REPEATS


def test_outlier_rule_by_hand():
    assert outliers([1.0, 50.0]) == [False, False]  # two samples: neither can be told from the other
    # MAD 0: the floor (5% of the median) decides, not a zero-width band
    assert outliers([1.0, 1.0, 1.0, 1.04, 1.2]) == [False, False, False, False, True]
    # median 10, MAD 1: the band is K_OUTLIER x 1.4826 x 1
    limit = K_OUTLIER * 1.4826
    assert outliers([9.0, 10.0, 11.0, 10.0, 10.0 + limit + 0.01]) == [False, False, False, False, True]
    assert summarize([5.0]).spread == 0.0 and summarize([5.0]).stable


def test_an_implausible_set_is_re_measured_then_every_member_flagged():
    clock = FakeClock()
    verifier = scripted(clock, [0.024] * 30)
    drafter = scripted(clock, [0.0002] * 30)  # c_rel 0.008: no steady machine gives that for these models

    def implausible(found: Sequence[Timing]) -> str | None:
        return c_rel_problem(found[1].median / found[0].median)

    timings = measure_many([verifier, drafter], repeats=4, warmup=0, clock=clock, check=implausible)
    assert all(not t.stable and "c_rel 0.008" in t.reason for t in timings)
    assert all(t.attempts == RETRIES + 1 for t in timings)


def test_a_cold_verifier_step_is_re_measured_against_its_warm_median():
    clock = FakeClock()
    verifier = scripted(clock, [2.9294] * 4 + [0.024] * 4)  # the first attempt on a cold machine, then warm
    drafter = scripted(clock, [0.010] * 8)
    timings = measure_many([verifier, drafter], repeats=4, warmup=0, clock=clock,
                           check=lambda found: jump_problem(found[0].median, 0.024))
    assert all(t.stable for t in timings) and timings[0].attempts == 2
    assert timings[1].median / timings[0].median == pytest.approx(0.010 / 0.024)


def test_plausibility_bounds():
    assert c_rel_problem(0.4) is None and c_rel_problem(0.01) and c_rel_problem(6.0)
    # a tiny drafter for a huge verifier: the file-size ratio lowers the bound
    assert c_rel_problem(0.004, size_ratio=0.005) is None
    assert jump_problem(0.3, 0.024) and jump_problem(0.2, 0.024) is None and jump_problem(5.0, None) is None


# -- models pair ----------------------------------------------------------------------------------------------------
def candidate(name: str, c_rel: float, stable: bool = True) -> Candidate:
    return Candidate(Path(name), 1, "Q4_0", c_rel, None, stable=stable, spread=0.02,
                     unstable_reason=None if stable else "c_rel 0.010 is outside the plausible 0.02..5")


def test_ranking_puts_an_unstable_candidate_after_every_stable_one():
    ranked = rank([candidate("cheap-but-unstable.gguf", 0.01, stable=False), candidate("b.gguf", 0.6),
                   candidate("a.gguf", 0.4), Candidate(Path("other.gguf"), 1, "Q4_0", None, "vocabularies differ")])
    assert [c.path.name for c in ranked] == ["a.gguf", "b.gguf", "cheap-but-unstable.gguf", "other.gguf"]
    assert recommended(ranked).path.name == "a.gguf"
    assert recommended([candidate("x.gguf", 0.01, stable=False)]) is None


def test_pair_flags_an_implausible_candidate_and_never_puts_it_first(fake_pair):
    verifier, a, cheap = fake_pair
    steps = {"verifier.gguf": 0.024, "a.gguf": 0.010, "cheap.gguf": 0.0002}  # cheap: c_rel 0.008, every attempt
    FakeModel.cost = staticmethod(lambda name, index: steps[name])
    step, results = pairing.pair(verifier, [cheap, a], repeats=4, clock=FakeModel.clock, open_model=FakeModel)
    assert step == pytest.approx(0.024)
    assert [c.path.name for c in results] == ["a.gguf", "cheap.gguf"]
    first, flagged = results
    assert first.stable and first.c_rel == pytest.approx(0.010 / 0.024)
    assert not flagged.stable and "c_rel" in flagged.unstable_reason and flagged.c_rel < first.c_rel
    assert recommended(results) is first


def test_pair_warms_the_verifier_up_before_timing_it(fake_pair):
    verifier, a, _ = fake_pair
    # its first two decodes pay the page cache (the prefill and the warm-up step): never sampled
    FakeModel.cost = staticmethod(lambda name, index: 2.9294 if name == "verifier.gguf" and index < 2 else
                                  (0.024 if name == "verifier.gguf" else 0.010))
    step, results = pairing.pair(verifier, [a], repeats=4, clock=FakeModel.clock, open_model=FakeModel)
    assert step == pytest.approx(0.024) and results[0].stable
    assert results[0].c_rel == pytest.approx(0.010 / 0.024)


def test_pair_command_marks_the_unstable_candidate_and_recommends_the_stable_one(fake_pair, capsys, monkeypatch):
    verifier, a, cheap = fake_pair
    steps = {"verifier.gguf": 0.024, "a.gguf": 0.010, "cheap.gguf": 0.0002}
    FakeModel.cost = staticmethod(lambda name, index: steps[name])
    monkeypatch.setattr(pairing, "pair", functools.partial(pairing.pair, clock=FakeModel.clock,
                                                           open_model=FakeModel))
    assert main(["models", "pair", str(verifier), str(cheap), str(a)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("a.gguf", "cheap.gguf"))]
    assert rows[0].startswith("a.gguf") and "unstable" not in rows[0]
    assert rows[1].startswith("cheap.gguf") and "unstable: re-run on an idle machine" in rows[1]
    assert "Use one: --drafter a.gguf" in out and "verifier step 24.0 ms" in out


# -- bench -----------------------------------------------------------------------------------------------------------
def bench_run(n: int, speedup: float, *, stable: bool = True) -> BenchRun:
    return BenchRun(n, 10.0 * speedup, speedup, speedup, 0.8, 2.5, 2.0, 0.02, 100, stable=stable,
                    unstable_reason=None if stable else "1 of 2 runs took 4.9x the time a typical run takes")


def test_bench_marks_best_only_among_stable_ns_and_says_why():
    runs, note = mark_best([bench_run(1, 1.1), bench_run(2, 11.504, stable=False), bench_run(3, 1.2)])
    assert [r.n for r in runs if r.best] == [3]
    assert "N=2" in note and "re-run on an idle machine" in note
    result = BenchResult(0.024, 0.01, 0.4, [1.0], {"verify_s": [0.024], "draft_s": [0.01], "resync_extra_s": 0.0,
                                                   "emit_s": 0.0001, "stable": True, "spread": 0.04},
                         2.83, 0.02, runs, 100.0, "model", best_note=note)
    from relaxtui.commands.bench import render

    text = render(result, "v.gguf", "d.gguf")
    best_lines = [line for line in text.splitlines() if "<- best" in line]
    assert len(best_lines) == 1 and best_lines[0].lstrip().startswith("3 ")
    assert "11.504x" in text and "N=2 unstable:" in text and "wall-clock" in text
    data = result.as_dict()
    assert data["best_n"] == 3 and data["runs"][0]["wall_clock_speedup"] == data["runs"][0]["speedup"] == 1.1
    json.dumps(data)


def test_bench_marks_no_best_when_the_verifier_alone_was_unstable():
    runs, note = mark_best([bench_run(1, 11.5), bench_run(2, 9.0)], baseline_reason="2 of 2 runs took 5.6x …")
    assert not any(r.best for r in runs) and note.startswith("no N marked best: the verifier-alone runs")
    result = BenchResult(0.024, 0.01, 0.4, [1.0], {}, 2.83, 0.02, runs, 100.0, "model")
    assert result.best is None and result.as_dict()["best_n"] is None
    from relaxtui.commands.bench import slower_line

    assert slower_line(result) is None  # nothing to compare against


@dataclass
class Run:
    decode_s: float
    priced_s: float


def test_a_run_far_off_its_priced_time_is_re_run_in_place():
    collected = {0: [Run(5.6, 1.0), Run(1.0, 1.0)], 1: [Run(0.9, 1.0), Run(1.05, 1.0)], 2: [Run(1.1, 1.0),
                                                                                            Run(1.0, 1.0)]}
    reran: list[tuple[int, int]] = []

    def rerun(n: int, index: int) -> Run:
        reran.append((n, index))
        return Run(1.02, 1.0)

    check = check_runs(collected, lambda runs: sum(r.priced_s for r in runs), rerun)
    assert reran == [(0, 0)] and collected[0][0].decode_s == 1.02
    assert not check.excluded and not check.reasons and check.reruns[0] == 1


def test_a_run_that_stays_off_is_left_out_and_its_n_flagged():
    collected = {0: [Run(1.0, 1.0), Run(1.0, 1.0)], 1: [Run(4.9, 1.0), Run(1.05, 1.0)], 2: [Run(1.1, 1.0),
                                                                                            Run(1.0, 1.0)]}
    check = check_runs(collected, lambda runs: sum(r.priced_s for r in runs), lambda n, i: Run(4.9, 1.0))
    assert check.excluded == {(1, 0)} and check.reruns[1] == RETRIES
    assert "1 of 2 runs took 4.8x" in check.reasons[1] and "after 2 re-run(s)" in check.reasons[1]
    assert [r.decode_s for r in check.kept(1, collected[1])] == [1.05]


# -- calibration and saved profiles ---------------------------------------------------------------------------------
def test_calibration_records_its_spread_and_a_saved_profile_keeps_it(tmp_path):
    # the verifier alone (an n-gram drafter's case): the drafter interface is not what this test is about
    costs = calibrate(fake(random_table(1)), None, max_block=3, sampling=SamplingParams(1.0, 0, 1.0), repeats=3,
                      context=[0, 1, 2, 3, 4, 5, 0, 1])
    assert costs.spread >= 0 and isinstance(costs.stable, bool)
    profile = costs.profile("here", verifier="v", drafter="d", hardware="h")
    assert profile.timing_spread == costs.spread and profile.timing_stable == costs.stable
    path = tmp_path / "here.json"
    path.write_text(profile.to_json())
    assert load_profile(str(path)) == profile
    flagged = LoopCosts((1.0, 1.5), (0.4,), 0.0, 0.0, 1.0, 0.4, spread=0.8, stable=False, unstable_reason="x")
    assert flagged.profile("p", verifier="v", drafter="d", hardware="h").timing_stable is False


def test_profile_timing_fields_are_validated_and_absent_from_shipped_profiles(tmp_path):
    assert "timing_spread" not in load_profile("paper-gb200").to_json()
    base = json.loads(CostProfile("x", "", "", "", 10.0, 1.0, {1: 10.0}).to_json())
    for field, value, message in [("timing_spread", -1, "timing_spread is -1"),
                                  ("timing_spread", "wide", "timing_spread is 'wide'"),
                                  ("timing_stable", 1, "timing_stable is 1")]:
        path = tmp_path / "p.json"
        path.write_text(json.dumps({**base, field: value}))
        with pytest.raises(UserError, match=message):
            load_profile(str(path))
