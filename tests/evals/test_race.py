"""The race's rules and books: the decision rule, the level split, the bounded values, the allocation policy,
planning strict runs, and a run folder's record restored to the same race (its guarantee: test_race_guarantee)."""

from __future__ import annotations

import json
import math

import pytest

from relaxtui.evals.analysis.race import (
    BREAKS,
    BUDGET_SPENT,
    EXHAUSTED,
    HOLDS,
    NO_PAY,
    RACING,
    Candidate,
    Interval,
    PairedOutcome,
    Race,
    RaceRules,
    SettingSpec,
    allocate,
    decide,
    problems_to_decide,
)

F, T = False, True
ALL = ("accuracy", "drift", "speed")


@pytest.mark.parametrize("above, below, want", [
    ((F, F, F), (F, F, F), RACING),
    ((T, T, T), (F, F, F), HOLDS),
    ((T, T, F), (F, F, F), RACING),  # capable, speed still open
    ((F, F, F), (T, F, F), BREAKS),
    ((F, F, F), (F, T, F), BREAKS),  # drift alone breaks it
    ((T, T, F), (F, F, T), NO_PAY),
    ((F, F, F), (T, F, T), BREAKS),  # both: capability says more
    ((T, T, T), (F, F, F), HOLDS),
])
def test_the_decision_rule(above, below, want):
    assert decide(dict(zip(ALL, above, strict=True)), dict(zip(ALL, below, strict=True))) == want


def test_the_level_is_split_over_criteria_and_family():
    assert RaceRules(confidence=0.95).criteria == ("accuracy", "speed")
    assert RaceRules(confidence=0.95).sequence_alpha == pytest.approx(0.05)  # two criteria: 2.5% a side
    three = RaceRules(confidence=0.9, max_drift=0.1, family=4)
    assert three.criteria == ALL and three.sequence_alpha == pytest.approx(2 * 0.1 / 12)
    open_ended = RaceRules(max_drop=None, max_drift=0.1, judge_speed=False)
    assert open_ended.criteria == ("drift",) and open_ended.sequence_alpha == pytest.approx(0.1)
    with pytest.raises(ValueError, match="max_drift"):
        RaceRules(max_drop=None)
    for confidence in (0.5, 1.0):
        with pytest.raises(ValueError):
            RaceRules(confidence=confidence)


def test_values_are_bounded_as_documented():
    """Accuracy as it is; drift and speed clipped to a lopsided window on their thresholds."""
    rules = RaceRules(max_drift=0.1)
    assert rules.bounded("accuracy", -0.5) == -0.5 and rules.value_range("accuracy") == (-1.0, 1.0)
    assert rules.value_range("drift") == pytest.approx((-1.1, 0.15))
    assert rules.bounded("drift", -3.0) == pytest.approx(-1.1) and rules.bounded("drift", 0.1) == 0.1
    assert rules.bounded("drift", 0.2) == pytest.approx(0.15)
    assert rules.bounded("speed", 1.2) == pytest.approx(math.log(1.2))
    assert rules.bounded("speed", 100.0, needed_speedup=1.1) == pytest.approx(math.log(1.65))
    assert rules.bounded("speed", 0.01, needed_speedup=1.1) == pytest.approx(math.log(0.55))
    with pytest.raises(ValueError):
        rules.bounded("speed", 0.0)
    with pytest.raises(ValueError):
        RaceRules(drift_above=0.0)
    assert rules.threshold("accuracy", 1.0) == -0.02 and rules.threshold("speed", 1.05) == math.log(1.05)


def test_problems_to_decide():
    thresholds = {"accuracy": -0.05, "speed": 0.0}
    assert problems_to_decide(0, {}, thresholds) == 0.0  # look first
    on = {"accuracy": Interval(-0.05, -0.2, 0.1), "speed": Interval(0.3, 0.1, 0.5)}
    assert problems_to_decide(20, on, thresholds) == math.inf
    # accuracy leans above (gap 0.05, half-width 0.1: 4x the problems), speed already shown above
    leaning = {"accuracy": Interval(0.0, -0.1, 0.1), "speed": Interval(0.3, 0.1, 0.5)}
    assert problems_to_decide(20, leaning, thresholds) == pytest.approx(80)
    # speed leans below and decides alone, however far accuracy is
    bad = {"accuracy": Interval(0.0, -0.1, 0.1), "speed": Interval(-0.1, -0.2, 0.0 + 1e-9)}
    assert problems_to_decide(20, bad, thresholds) == pytest.approx(20)


def test_allocation_goes_closest_first_within_the_budget():
    candidates = [Candidate("far", "N=3", 20, 400), Candidate("near", "N=3", 20, 30),
                  Candidate("mid", "N=2", 20, 100)]
    strict = {"N=3": 20, "N=2": 20}
    assert allocate(candidates, strict, batch=5, task_size=100) == {"near": 5, "mid": 5, "far": 5}
    # "near" costs 5 + 5 strict; "mid" needs its own strict (10): only "far" fits the rest, riding on N=3's
    assert allocate(candidates, strict, batch=5, task_size=100, budget_left=15) == {"near": 5, "far": 5}
    assert allocate(candidates, strict, batch=5, task_size=100, budget_left=9) == {}
    assert allocate(candidates, strict, batch=5, task_size=22) == {"near": 2, "mid": 2, "far": 2}
    assert allocate(candidates, strict, batch=5, task_size=100, budget_left=29, repeats=2) == {"near": 5}
    assert allocate(candidates, strict, batch=5, task_size=100, budget_left=30, repeats=2) == {"near": 5, "far": 5}


def outcome(pid: str, accuracy: float = 0.0, speedup: float = 1.5) -> PairedOutcome:
    return PairedOutcome(pid, accuracy=accuracy, speedup=speedup)


def run_rounds(race: Race, rounds: int, accuracy: dict[str, float]) -> None:
    for _ in range(rounds):
        plan = race.plan()
        if plan.empty:
            return
        for pair, ids in plan.strict.items():
            race.record_strict(pair, ids)
        for name, ids in plan.settings.items():
            race.record(name, [outcome(pid, accuracy[name], 1.5 if name != "slow" else 0.9) for pid in ids])


def new_race(budget: int | None = None, problems: int = 60) -> Race:
    specs = [SettingSpec("bad", "N=3"), SettingSpec("slow", "N=3"), SettingSpec("tie", "N=2")]
    return Race.start(RaceRules(max_drop=0.05, batch=4), specs, [f"q{k}" for k in range(problems)], seed=3,
                      budget=budget)


def test_strict_runs_only_as_far_as_a_racing_setting_needs():
    race = new_race()
    plan = race.plan()
    assert plan.strict == {"N=3": race.state.order[:4], "N=2": race.state.order[:4]} and plan.cost == 20
    with pytest.raises(ValueError, match="strict"):
        race.record("bad", [outcome(pid) for pid in plan.settings["bad"]])  # strict has not run them
    for pair, ids in plan.strict.items():
        race.record_strict(pair, ids)
    with pytest.raises(ValueError, match="order"):
        race.record("bad", [outcome(pid) for pid in reversed(plan.settings["bad"])])
    accuracy = {"bad": -1.0, "slow": 0.0, "tie": 0.0}
    run_rounds(race, 40, accuracy)
    assert race.settings["bad"].decision == BREAKS and race.settings["slow"].decision == NO_PAY
    assert race.settings["tie"].decision in (HOLDS, EXHAUSTED)
    # N=3's strict stopped where its last setting did; N=2 ran as far as "tie"
    decided = max(race.settings["bad"].decided_after or 0, race.settings["slow"].decided_after or 0)
    assert race.state.strict_done["N=3"] == decided < 60
    assert race.state.spent == sum(len(s.problems) for s in race.state.settings) + sum(race.state.strict_done.values())
    with pytest.raises(ValueError, match="decided"):
        race.record("bad", [])


def test_a_budget_ends_the_race_with_the_rest_undecided():
    race = new_race(budget=50)
    run_rounds(race, 100, {"bad": 0.0, "slow": 0.0, "tie": 0.0})
    assert race.plan().empty and race.state.spent <= 50
    race.close()
    assert {s.decision for s in race.state.settings} <= {BUDGET_SPENT, NO_PAY}


def test_the_task_running_out_leaves_a_setting_exhausted_with_its_interval():
    race = new_race(problems=12)
    run_rounds(race, 10, {"bad": 0.0, "slow": 0.0, "tie": 0.0})
    tie = race.settings["tie"]
    assert tie.decision == EXHAUSTED and tie.decided_after == 12
    low, high = race.intervals("tie")["accuracy"].low, race.intervals("tie")["accuracy"].high
    assert low < -0.05 < high


def test_the_record_restores_the_same_race():
    """A run folder writes the state as JSON mid-race; the restored race makes the same plans and decisions, bit
    for bit, as the one that went on."""
    accuracy = {"bad": -0.5, "slow": 0.0, "tie": 0.25}
    going_on = new_race()
    run_rounds(going_on, 3, accuracy)
    restored = Race.from_json(json.loads(json.dumps(going_on.to_json())))
    assert restored.to_json() == going_on.to_json()
    for race in (going_on, restored):
        run_rounds(race, 30, accuracy)
    assert restored.to_json() == going_on.to_json()
    for name in going_on.settings:
        assert restored.intervals(name) == going_on.intervals(name)
    assert {s.decision for s in restored.state.settings} >= {BREAKS, NO_PAY}


def test_a_record_that_does_not_replay_to_its_decisions_is_refused():
    race = new_race()
    run_rounds(race, 30, {"bad": -1.0, "slow": 0.0, "tie": 0.0})
    record = race.to_json()
    bad = next(s for s in record["settings"] if s["spec"]["name"] == "bad")
    assert bad["decision"] == BREAKS
    bad["decision"] = HOLDS
    with pytest.raises(ValueError, match="replay"):
        Race.from_json(record)


def test_the_order_is_a_seeded_shuffle():
    ids = [f"q{k}" for k in range(30)]
    one = Race.start(RaceRules(), [SettingSpec("a", "N=3")], ids, seed=1).state.order
    assert one == Race.start(RaceRules(), [SettingSpec("a", "N=3")], list(reversed(ids)), seed=1).state.order
    assert one != Race.start(RaceRules(), [SettingSpec("a", "N=3")], ids, seed=2).state.order
    assert sorted(one) == sorted(ids) and list(one) != sorted(ids)
