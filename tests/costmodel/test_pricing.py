"""One pricing, one break-even (issue 31): the same rounds priced through every face's own path give one number,
the verifier alone prices at exactly 1, and a break-even above N + 1 is said to be unreachable everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxtui.costmodel.auto import AutoChoice, slower_line
from relaxtui.costmodel.bench import BenchResult, BenchRun, price_runs
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.costmodel.pricing import BreakEven, Rounds, break_even, priced_speedup, rounds_of_metrics
from relaxtui.costmodel.profiles import SHIPPED, CostProfile
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, RoundTiming, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.evals.analysis.report import render_table, summarise
from relaxtui.evals.run.results import GridPoint
from relaxtui.evals.run.units import WorkUnit, make_record
from relaxtui.evals.tasks.base import Sample, Score
from relaxtui.options import Speculative
from relaxtui.serve.render import Totals, stats
from tests.support.markov import VOCAB, fake, random_table

EOG = 5
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)
# a CPU-like machine: the verify block grows 0.6 steps per token, a draft token costs 0.4 steps; drafting linear,
# so the profile every face prices with carries these costs exactly
COSTS = LoopCosts(verify_s=(0.010, 0.016, 0.022, 0.028), draft_s=(0.004, 0.008, 0.012), resync_extra_s=0.002,
                  emit_s=0.0005, verifier_decode_s=0.0095, drafter_decode_s=0.0038)
MACHINE = COSTS.profile()  # "this-machine": what bench, chat, generate, eval, tune and serve price with here
PROFILES = [MACHINE, SHIPPED["paper-gb200"], SHIPPED["memory-bound"],
            CostProfile("unit", "", "", "", 10.0, 2.0, {1: 10.0, 2: 14.0, 4: 20.0}, draft_round_ms=1.0,
                        resync_ms=3.0, emit_ms=0.5)]


def run(draft_max: int, seed: int, max_tokens: int = 30) -> tuple[list[TokenEvent], Finished]:
    """One generation on the fake Markov pair (token 5 ends it, made rarer so some runs reach the budget)."""
    target = random_table(1)
    target[:, EOG] -= 2.0
    drafter = ModelDrafter(fake(target + random_table(2, scale=0.8)), VOCAB) if draft_max else None
    config = GenerationConfig(draft_max=draft_max, max_tokens=max_tokens, sampling=PLAIN, seed=seed)
    events = list(generate(fake(target, eog=EOG), [0], config, drafter=drafter))
    assert isinstance(events[-1], Finished)
    return [e for e in events if isinstance(e, TokenEvent)], events[-1]


def generations(draft_max: int, seeds: range = range(8)) -> list[tuple[list[TokenEvent], Finished]]:
    runs = [run(draft_max, seed) for seed in seeds]
    reasons = {finished.metrics.finish_reason for _, finished in runs}
    assert reasons == {"eog", "max_tokens"}, reasons  # both endings: the end-of-generation round must be priced
    return runs


class _Task:
    """The part of a task `make_record` reads."""

    name, version, scored = "t", "1", True

    def score(self, text: str, sample: Sample) -> Score:
        return Score(text, True)


def records(runs: list[tuple[list[TokenEvent], Finished]], point: GridPoint) -> list[dict]:
    """The eval records of these generations, written as an eval run writes them."""
    return [make_record(_Task(), WorkUnit(Sample(f"p{i}", (), None), point, point.label, 0, 0), finished)
            for i, (_, finished) in enumerate(runs)]


def serve_price(runs: list[tuple[list[TokenEvent], Finished]], profile: CostProfile, draft_max: int) -> float:
    """What a response whose choices are these generations carries."""
    totals = Totals()
    for events, finished in runs:
        totals.add(finished.metrics, len(events))
    body = stats(totals, Speculative(draft_max=draft_max), profile)
    assert body["priced_by"] == profile.name and "proxy_speedup" not in body
    return body["priced_speedup"]


def chat_price(events: list[TokenEvent], finished: Finished) -> float:
    """What the chat's statistics panel prices one reply at, fed as the TUI feeds it."""
    from relaxtui.tui.widgets.stats import StatsPanel, priced_reply

    panel = StatsPanel()
    panel.cost = COSTS
    panel.reset(3)
    panel.observe_many(events)
    panel.finish(finished.metrics)
    value = priced_reply(COSTS, panel.rounds())
    shown = "\n".join(panel.lines()).split("(this machine)")[1].split("x")[0].strip()
    assert shown == f"{value:.2f}"  # the panel shows that number
    return value


# -- one pricing -------------------------------------------------------------------------------------------------
def test_one_set_of_rounds_prices_to_one_number_in_every_face():
    runs = generations(3)
    metrics = [finished.metrics for _, finished in runs]
    expected = {p.name: priced_speedup(p, rounds_of_metrics(metrics)) for p in PROFILES}
    assert len(set(expected.values())) == len(PROFILES)  # the profiles differ: agreement below is not a coincidence
    predicted, priced = price_runs(MACHINE, PROFILES, metrics)  # bench: predicted, and one column per --profile
    assert predicted == expected[MACHINE.name] and priced == expected
    rows = records(runs, GridPoint("strict", None, 3))
    (summary,) = summarise(rows, PROFILES)  # eval and tune (tune's advice reads these summaries)
    assert summary.proxy == expected
    for profile in PROFILES:  # serve: a response with these choices
        assert serve_price(runs, profile, 3) == expected[profile.name]
    # one reply, as chat shows it and generate judges it, against the same function on its own rounds
    for events, finished in runs[:3]:
        alone = priced_speedup(MACHINE, rounds_of_metrics([finished.metrics]))
        assert chat_price(events, finished) == alone
        assert summarise(records([(events, finished)], GridPoint("strict", None, 3)), [MACHINE])[0].proxy[
            MACHINE.name] == alone
        line = slower_line(COSTS, 3, finished.metrics.mean_accepted_length, rounds_of_metrics([finished.metrics]))
        assert (line is None) == (alone >= 1.0) and (line is None or f"({alone:.2f}x" in line)


def test_the_end_of_generation_round_is_paid_on_both_sides():
    """A generation that ended on its end token paid a round for it; the verifier alone pays a step for it too."""
    rounds = Rounds.of([3, 3, 1], 9, end_tokens=1)
    cost = 3 * 0 + (20 + 6 + 1) * 2 + (14 + 2 + 1) + 9 * 0.5
    assert priced_speedup(PROFILES[3], rounds) == pytest.approx((10 * 10 + 9 * 0.5) / cost)
    assert rounds.verifier_alone() == Rounds({0: 10}, 9)
    assert Rounds.of([1], 2) + Rounds.of([1, 0], 1, end_tokens=1) == Rounds({1: 2, 0: 1}, 3, end_tokens=1)


# -- the verifier alone is 1 by construction ---------------------------------------------------------------------
def test_the_verifier_alone_prices_at_exactly_one_in_every_face():
    runs = generations(0)
    metrics = [finished.metrics for _, finished in runs]
    for m in metrics:  # whatever the ending: one round per token, plus the end token's
        assert m.rounds == m.output_tokens + (m.finish_reason == "eog")
        for profile in PROFILES:
            assert priced_speedup(profile, rounds_of_metrics([m])) == 1.0
    for profile in PROFILES:
        assert priced_speedup(profile, rounds_of_metrics(metrics)) == 1.0
        assert serve_price(runs, profile, 0) == 1.0
    rows = records(runs, GridPoint(None, None, 0)) + records(generations(3), GridPoint("strict", None, 3))
    base = next(s for s in summarise(rows, PROFILES) if s.is_baseline)
    assert base.proxy == {p.name: 1.0 for p in PROFILES}
    table = render_table(summarise(rows, [MACHINE]))
    # wall-clock and priced (the table may wrap its columns into blocks, each led by the config)
    assert sum(line.count("1.000x") for line in table.splitlines() if line.startswith("no-spec")) >= 2


def test_old_records_without_a_finish_reason_price_as_they_always_did():
    """A record from before ``finish_reason`` was kept counts no end token: its price does not change."""
    row = {"config": {"draft_max": 0}, "output_tokens": 9, "rounds": 10, "draft_lengths": [0] * 10}
    from relaxtui.costmodel.pricing import rounds_of_records

    assert priced_speedup(PROFILES[3], rounds_of_records([row])) == pytest.approx(9 * 10.5 / (100 + 9 * 0.5))
    assert priced_speedup(PROFILES[3], rounds_of_records([{**row, "finish_reason": "eog"}])) == 1.0


# -- break-even that knows its bounds ----------------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "reachable"), [(1.0, True), (3.99, True), (4.0, False), (5.64, False),
                                                  (-0.5, False), (math.inf, False), (math.nan, False)])
def test_a_break_even_past_n_plus_one_or_below_zero_is_unreachable(steps, reachable):
    even = BreakEven(3, steps)
    assert even.reachable is reachable and (even.length == steps if reachable else even.length is None)
    if reachable:
        assert even.need() == f"at N=3 it would need a mean accepted length of {steps:.2f} to break even"
    else:
        assert even.need().startswith("no acceptance rate makes N=3 pay on this machine")
        assert even.below(4.0)  # every run is below a break-even it cannot reach


def test_break_even_is_the_round_in_verifier_steps_and_named_by_its_profile():
    assert break_even(MACHINE, 3).steps == pytest.approx((28 + 12) / 10)  # 4.0: exactly N + 1, so never
    assert not break_even(MACHINE, 3).reachable and break_even(MACHINE, 1).steps == pytest.approx(2.0)
    assert break_even(MACHINE, 1).length is None  # N=1 yields at most 2 tokens: matching is not paying
    assert break_even(PROFILES[3], 3).length == pytest.approx((20 + 3 * 2 + 1) / 10)  # 2.7 < 4: reachable
    gb200 = break_even(SHIPPED["paper-gb200"], 1)
    assert gb200.length is None and "pay under profile paper-gb200" in gb200.need()  # 2.77 > 2
    assert break_even(SHIPPED["paper-gb200"], 3).length == pytest.approx((30.503 + 3 * 3.929) / 12.448)


def test_every_face_says_when_no_acceptance_rate_pays():
    from relaxtui.commands.bench import break_even_cell
    from relaxtui.commands.bench import slower_line as bench_line
    from relaxtui.commands.profiles import describe
    from relaxtui.evals.analysis.tune import recommend
    from relaxtui.tui.widgets.stats import StatsPanel
    from tests.support.eval_runs import summary

    never = "no acceptance rate makes N=3 pay on this machine"
    # bench: the table cell and the sentence under it
    run_ = BenchRun(3, 10.0, 0.6, 0.62, 0.8, 3.2, 5.64, 0.02, 100, best=True)
    assert break_even_cell(run_).strip() == "never"
    assert break_even_cell(BenchRun(3, 10.0, 0.6, 0.62, 0.8, 3.2, 3.9, 0.02, 100)).strip() == "3.900"
    result = BenchResult(0.05, 0.02, 0.4, [1.0], {}, 10.0, 0.02, [run_], 100.0, "model")
    assert never in bench_line(result) and "5.64 to break even" not in bench_line(result)
    assert result.as_dict()["runs"][0]["break_even_length"] is None
    # generate's verdict and --draft-max auto
    slow = Rounds.of([3] * 10, 20, end_tokens=1)
    assert never in slower_line(COSTS, 3, 2.0, slow)
    choice = AutoChoice(0, {0: 1.0, 3: 0.7}, (0.5,), {3: break_even(MACHINE, 3)})
    assert never in choice.line() and "4.00 to break even" not in choice.line()
    # tune's advice, under the profile that drives it
    steep = CostProfile("unit", "", "", "", 10.0, 2.0, {1: 10.0, 4: 40.0})  # (40 + 6) / 10 = 4.6 > 4
    advice = recommend([summary("no-spec", None, 1.0, 0.5), summary("strict N=3", "strict", 0.6, 0.5)],
                       max_drop=1.0, profile=steep)
    assert "no acceptance rate makes N=3 pay under profile unit" in "\n".join(advice.lines())
    # chat's statistics: one short line in the sidebar
    panel = StatsPanel()
    panel.cost = COSTS
    panel.reset(3)
    for index in range(4):  # rounds of 3 drafts, one accepted each: 2 tokens a round, priced 84 / 164 ms
        panel.counters.observe_round(RoundTiming(index, 3, 1, 0.0, 0.01, 0.0, 0.0))
        panel.tokens += 2
    lines = panel.lines()
    assert f"{84 / 164:.2f}x" in lines[-2] and lines[-1] == " no acceptance rate pays at N=3" and len(lines[-1]) <= 32
    # profiles show
    shown = describe(SHIPPED["paper-gb200"])
    assert "never (needs 2.766, max 2)" in shown and "no acceptance rate makes N pay" in shown


# -- serve's this-machine profile, kept between starts -----------------------------------------------------------
def test_this_machine_is_measured_once_then_read_back_and_an_unstable_one_is_not_kept(tmp_path, monkeypatch):
    from dataclasses import replace

    from relaxtui.costmodel import profile_cache

    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path))
    measured: list[str] = []

    def measure(profile: CostProfile) -> str:
        measured.append(profile.name)
        return profile.to_json()

    key = {"verifier": ["/m/v.gguf", 10, 1], "threads": 1}
    first = profile_cache.this_machine(key, lambda: measure(MACHINE))
    again = profile_cache.this_machine(key, lambda: measure(MACHINE))
    assert (first.cached, again.cached, len(measured)) == (False, True, 1) and again.profile == MACHINE
    assert first.path == again.path and first.path.parent == tmp_path / "profiles"
    other = profile_cache.this_machine({**key, "threads": 2}, lambda: measure(MACHINE))  # another setting: measured
    assert not other.cached and other.path != first.path and len(measured) == 2
    first.path.write_text("{damaged")
    assert not profile_cache.this_machine(key, lambda: measure(MACHINE)).cached and len(measured) == 3
    shaky = replace(MACHINE, timing_stable=False)
    key = {**key, "threads": 3}
    assert profile_cache.this_machine(key, lambda: measure(shaky)).profile.timing_stable is False
    assert not profile_cache.this_machine(key, lambda: measure(shaky)).cached and len(measured) == 5  # not kept


def test_a_kept_profile_is_read_back_only_for_its_own_key_and_when_it_can_be_a_measurement(tmp_path, monkeypatch):
    """Issue 47: a kept profile was trusted as written once its fields parsed: a file copied from another pair's key
    priced this one, and verify_ms of a billion steps was read back. Now each is measured over, with one warning."""
    import json

    from relaxtui.costmodel import profile_cache

    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path))
    measured: list[str] = []

    def measure() -> str:
        measured.append("measured")
        return MACHINE.to_json()

    key, other = {"verifier": ["/m/v.gguf", 10, 1], "threads": 1}, {"verifier": ["/m/w.gguf", 20, 2], "threads": 1}
    first = profile_cache.this_machine(key, measure)
    target = profile_cache.this_machine(other, measure).path
    target.write_bytes(first.path.read_bytes())  # another key's file under this key's name
    said: list[str] = []
    found = profile_cache.this_machine(other, measure, log=said.append)
    assert not found.cached and len(measured) == 3 and len(said) == 1 and str(target) in said[0]
    kept = json.loads(first.path.read_text())
    profile = kept.get("profile", kept)
    profile["verify_ms"]["2"] = profile["verifier_ar_ms"] * 1e6  # a block of 2 priced as a million steps
    first.path.write_text(json.dumps(kept))
    said.clear()
    found = profile_cache.this_machine(key, measure, log=said.append)
    assert not found.cached and found.profile == MACHINE and len(said) == 1 and "v(2)" in said[0]
    assert profile_cache.this_machine(key, measure).cached and len(measured) == 4  # measured over, kept again


def test_serve_prices_with_the_profile_it_is_given(capsys):
    from relaxtui.serve.pair import FakeServedPair
    from relaxtui.serve.scheduler import Scheduler
    from tests.support.cli import fails_with

    for spec, name in ((None, "memory-bound:0.1"), ("paper-gb200", "paper-gb200")):  # the fake pair: no costs
        scheduler = Scheduler(lambda: FakeServedPair(1), max_queue=1, profile=spec, log=lambda _: None)
        scheduler.start(wait=True)
        assert scheduler.state == "ready" and scheduler.profile_name == name
        scheduler.close(1.0)
    fails_with(capsys, ["serve", "--fake", "--profile", "this-machine"], "needs real models")
    fails_with(capsys, ["serve", "--fake", "--profile", "gb300"], "unknown cost profile 'gb300'")


# -- a verdict prices the rounds that ran (issue 44, Found 7) ------------------------------------------------------
# a 2-core CPU and a drafter that runs no model (suffix): a verify block costs about one more step per token
# (v(9) = 9.12 steps), drafting costs nothing
CPU_FREE_DRAFTER = LoopCosts(verify_s=tuple(0.010 * (1 + 1.015 * k) for k in range(9)), draft_s=(0.0,) * 8,
                             resync_extra_s=0.0, emit_s=0.0005, verifier_decode_s=0.0095, drafter_decode_s=0.0)


def test_generates_verdict_prices_the_widths_the_cut_verified_not_n():
    """Issue 44: a suffix run at N=8 whose priced cut verified drafts of 0-2 tokens was told "a round costs 9.12
    verifier steps" (a round of 8 drafts, which never ran)."""
    rounds = Rounds.of([0] * 60 + [1] * 30 + [2] * 10, 110, full_rounds=10)  # 110 tokens in 100 rounds
    line = slower_line(CPU_FREE_DRAFTER, 8, 1.10, rounds)
    speedup = priced_speedup(CPU_FREE_DRAFTER.profile(), rounds)
    assert line.startswith(f"speculation was slower than the verifier alone here ({speedup:.2f}x")
    assert "9.12" not in line and "N=8 pay" not in line and "yields at most 9 tokens" not in line
    steps = (60 * 1 + 30 * 2.015 + 10 * 3.03) / 100  # what these rounds cost on average, in verifier steps
    assert "0–2 drafts" in line and f"{steps:.2f} verifier steps" in line and "at most 1.50 tokens" in line


def test_a_break_even_of_the_rounds_that_ran_agrees_with_their_priced_speed_up():
    """Below the break-even exactly when the same rounds price below 1.0x, whatever their widths, extra drafter
    steps and re-syncs; rounds that all verified N drafts give N's own break-even."""
    from relaxtui.costmodel.pricing import rounds_break_even

    rng = np.random.default_rng(44)
    checked = 0
    for profile in PROFILES:
        for _ in range(60):
            widths = [int(k) for k in rng.integers(0, 4, size=int(rng.integers(1, 40)))]
            accepted = [int(rng.integers(0, k + 1)) for k in widths]
            full = sum(a == k and k > 0 for a, k in zip(accepted, widths, strict=True))
            tokens = len(widths) + sum(accepted)
            rounds = Rounds.of(widths, tokens, full_rounds=full, extra_draft_steps=int(rng.integers(0, 5)))
            mean_length = tokens / len(widths)
            even = rounds_break_even(profile, rounds, 3)
            speedup = priced_speedup(profile, rounds)
            if abs(speedup - 1) > 1e-9:
                assert even.below(mean_length) == (speedup < 1), (profile.name, widths, accepted)
                checked += 1
        uniform = Rounds.of([3] * 7, 15)
        assert rounds_break_even(profile, uniform, 3) == break_even(profile, 3)
    assert checked > 200


def test_bench_judges_each_n_by_the_rounds_it_ran():
    """Issue 44: bench showed N=1 at 1.019x "below its own break-even" (1.29 vs 1.864): most of its rounds verified
    no draft (a suffix drafter with nothing to propose), which the break-even of rounds of one draft ignored."""
    from types import SimpleNamespace

    from relaxtui.commands.bench import break_even_cell
    from relaxtui.costmodel.bench import runs_break_even

    machine = LoopCosts(verify_s=(0.010, 0.01864), draft_s=(0.0,), resync_extra_s=0.0, emit_s=0.0,
                        verifier_decode_s=0.0095, drafter_decode_s=0.0).profile()
    ran = SimpleNamespace(output_tokens=129, draft_lengths=(0,) * 70 + (1,) * 30, extra_draft_steps=0,
                          full_accept_rounds=29, finish_reason="max_tokens")
    speedup, _ = price_runs(machine, [], [ran])
    assert speedup == pytest.approx(129 / (70 + 30 * 1.864))  # 1.02x: it paid
    assert break_even(machine, 1).steps == pytest.approx(1.864)  # rounds of one draft each, which is not what ran
    even = runs_break_even(machine, 1, [ran])
    assert even.steps == pytest.approx((70 + 30 * 1.864) / 100) and not even.below(1.29)
    run_ = BenchRun(1, 10.0, 1.019, speedup, 0.97, 1.29, even.steps, 0.02, 129, break_even_most=even.most,
                    draft_widths=even.widths)
    assert break_even_cell(run_).strip() == "–" and run_.break_even == even


def test_chats_sidebar_judges_the_rounds_that_ran():
    """The same for chat's statistics: rounds of 0-2 drafts at N=8 are not told what rounds of 8 would need."""
    from relaxtui.tui.widgets.stats import StatsPanel

    panel = StatsPanel()
    panel.cost = CPU_FREE_DRAFTER
    panel.reset(8)
    for index, (drafted, accepted) in enumerate([(0, 0)] * 6 + [(1, 0)] * 3 + [(2, 0)]):
        panel.counters.observe_round(RoundTiming(index, drafted, accepted, 0.0, 0.01, 0.0, 0.0))
        panel.tokens += 1 + accepted
    last = panel.lines()[-1]
    assert "N=8" not in last and last == " no rate pays at 0.5 drafts" and len(last) <= 32  # 6 x 0, 3 x 1, 1 x 2


def test_tunes_advice_judges_strict_by_the_rounds_it_ran():
    """tune's "speculation does not pay here" line: a suffix drafter's strict N=3, cut to 0-1 drafts, is judged by
    those rounds (from its records), not by rounds of 3 drafts."""
    from relaxtui.evals.analysis.tune import recommend

    machine = CPU_FREE_DRAFTER.profile()
    widths = [0] * 12 + [1] * 8
    rows = [{"problem_id": f"p{i}", "seed": 0, "config_id": "strict", "correct": False, "output_tokens": 24,
             "rounds": 20, "drafted": 8, "accepted": 4, "draft_lengths": widths, "full_accept_rounds": 4,
             "extra_draft_steps": 0, "decode_s": 1.0, "prefill_s": 0.1, "tokens_per_s": 24.0, "truncated": True,
             "degenerate": False, "finish_reason": "max_tokens", "config": {"rule": "strict", "knob": None,
                                                                           "draft_max": 3, "label": "strict N=3"}}
            for i in range(6)]
    alone = [{**row, "config_id": "alone", "rounds": 24, "drafted": 0, "accepted": 0, "draft_lengths": [0] * 24,
              "full_accept_rounds": 0, "config": {"rule": None, "knob": None, "draft_max": 0, "label": "no-spec"}}
             for row in rows]
    summaries = summarise(alone + rows, [machine])
    line = recommend(summaries, max_drop=1.0, profile=machine).lines()[1]
    speedup = priced_speedup(machine, Rounds.of(widths * 6, 24 * 6, full_rounds=24))
    assert line.startswith(f"1. speculation does not pay here: the best strict config, strict N=3, reaches "
                           f"{speedup:.2f}x")
    steps = (12 + 8 * 2.015) / 20  # the rounds that ran, not a round of 3 drafts (4.05 steps)
    assert "verified 0–1 drafts" in line and f"{steps:.2f} verifier steps a round" in line and "4.05" not in line
