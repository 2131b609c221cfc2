"""The race's driver (evals/run/race_run.py) on a fake executor: batches run problem-major through the runner's own
writing, strict only as far as some racing setting needs, decisions at the confidence sequences' first word, the
budget honoured, and a race stopped mid-way resumed from its folder to the same decisions without running a unit
twice. The statistics are tested apart (tests/evals/test_race_guarantee.py); this is the bookkeeping."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

import pytest

from relaxtui.costmodel.profiles import CostProfile
from relaxtui.evals.analysis.race import BREAKS, HOLDS, NO_PAY, RaceRules
from relaxtui.evals.analysis.race_view import race_json, race_rows, render_race_table
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.race_run import RACE_FILE, Entrant, open_race, race_order, read_race, run_race
from relaxtui.evals.run.results import GridPoint, ResultsStore
from relaxtui.evals.run.runner import Known
from relaxtui.evals.run.tuning import StrictStage, screen_settings
from relaxtui.evals.run.units import failed_record
from relaxtui.evals.tasks.base import Sample

PROFILE = CostProfile("unit", "", "", "", 10.0, 1.0, {k: 10.0 + k for k in range(1, 10)})  # t_V(k) = 10 + k ms
PROBLEMS = [f"p{i:03d}" for i in range(120)]
STRICT = GridPoint("strict", None, 3)
BAD = GridPoint("ensemble", 0.0, 3)  # loses a third of the problems strict solves
GOOD = GridPoint("cactus", 1.0, 3)  # as accurate as strict, and accepts more
SLOW = GridPoint("mentored", 0.3, 3)  # as accurate, accepts less than strict: does not pay


@dataclass(frozen=True)
class FakeTask:
    name: str = "fake"
    version: int = 1
    scored: bool = True


class Identity:
    def config_id(self, point: GridPoint) -> str:
        return hashlib.sha1(point.label.encode()).hexdigest()[:12]


def truth(point: GridPoint, problem: str, seed: int) -> tuple[bool, int]:
    """(correct, drafts accepted per round) of a unit: strict solves 60% of problems; BAD loses a third of those;
    a round keeps 1 draft under strict and SLOW, 3 under GOOD and BAD."""
    rng = random.Random(f"{problem}-{seed}")
    solved = rng.random() < 0.6
    if point == BAD and rng.random() < 1 / 3:
        solved = False
    accepted = {STRICT.label: 1, SLOW.label: 0, GOOD.label: 3, BAD.label: 3}[point.label]
    return solved, accepted


class FakeExecutor:
    """Records made from ``truth``; remembers every unit it ran, in order."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def start(self) -> None: ...
    def close(self) -> None: ...

    def run(self, task, plan, units, should_stop):
        for unit in units:
            if should_stop():
                return
            self.ran.append((unit.point.label, unit.sample.id))
            correct, accepted = truth(unit.point, unit.sample.id, unit.seed)
            record = failed_record(task, unit, "x")
            rounds = 30 // (accepted + 1)
            record.update(correct=correct, failed=False, detail="", output_tokens=30, rounds=rounds,
                          draft_lengths=[3] * rounds, drafted=3 * rounds, accepted=accepted * rounds,
                          finish_reason="max_tokens", verifier_logprob=-0.5, decode_s=0.1)
            yield record


RULES = RaceRules(max_drop=0.10, batch=5)


def setup(tmp_path, entrants, *, budget=None, rules=RULES):
    store = ResultsStore(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    order = race_order(PROBLEMS, seed=0)
    race = open_race(tmp_path / RACE_FILE, rules, entrants, order, budget)
    samples = {pid: Sample(pid, (), None) for pid in PROBLEMS}
    return store, race, samples


def race(tmp_path, entrants, executor, *, budget=None, stop_after=None, rules=RULES):
    store, started, samples = setup(tmp_path, entrants, budget=budget, rules=rules)
    batches = []
    finished = run_race(started, entrants, task=FakeTask(), samples=samples, plan=EvalPlan(), identity=Identity(),
                        store=store, known=Known.of(store), executor=executor, profile=PROFILE,
                        path=tmp_path / RACE_FILE, on_batch=lambda r, b: batches.append(b),
                        should_stop=lambda: stop_after is not None and len(batches) >= stop_after)
    return started, finished, batches


ENTRANTS = [Entrant(BAD, 1.02), Entrant(GOOD, 1.02), Entrant(SLOW, 1.02)]


def test_each_setting_stops_the_moment_it_is_decided_and_strict_runs_only_as_far_as_needed(tmp_path):
    executor = FakeExecutor()
    done, finished, _ = race(tmp_path, ENTRANTS, executor)
    decisions = {s.spec.name: (s.decision, len(s.problems)) for s in done.state.settings}
    assert finished and decisions[BAD.label][0] == BREAKS and decisions[SLOW.label][0] == NO_PAY
    assert decisions[GOOD.label][0] == HOLDS
    assert decisions[SLOW.label][1] < decisions[BAD.label][1] < len(PROBLEMS)  # speed decides before accuracy
    ran: dict[str, list[str]] = {}
    for label, pid in executor.ran:
        ran.setdefault(label, []).append(pid)
    for entrant in ENTRANTS:  # a decided setting runs nothing more
        assert len(ran[entrant.name]) == decisions[entrant.name][1]
    assert len(ran[STRICT.label]) == max(n for _, n in decisions.values())  # strict: as far as the furthest one
    assert done.state.spent == len(executor.ran)


class FailingExecutor(FakeExecutor):
    """Every thirtieth problem's relaxed unit fails (its prompt does not fit, say): a record with no round to price."""

    def run(self, task, plan, units, should_stop):
        for record, unit in zip(super().run(task, plan, units, should_stop), units, strict=False):
            if unit.point != STRICT and int(unit.sample.id[1:]) % 30 == 0:
                record = failed_record(task, unit, "the prompt does not fit")
            yield record


def test_a_generation_that_failed_counts_as_no_speed_difference_and_the_race_goes_on(tmp_path):
    # a failed record prices to 0: its speed-up over strict was None, and Race.record raised ValueError mid-race
    done, finished, _ = race(tmp_path, [Entrant(GOOD, 1.02)], FailingExecutor())
    setting = done.state.settings[0]
    assert finished and setting.decision == HOLDS
    assert any(int(pid[1:]) % 30 == 0 for pid in setting.problems)  # a failed problem was raced through


def test_a_batch_runs_problem_major_each_problems_strict_run_first(tmp_path):
    executor = FakeExecutor()
    race(tmp_path, ENTRANTS, executor)
    seen: set[str] = set()
    for label, pid in executor.ran:
        if label == STRICT.label:
            seen.add(pid)
        else:
            assert pid in seen, f"{label} ran {pid} before strict did"
    first = [pid for _, pid in executor.ran[:4]]
    assert first == [first[0]] * 4  # strict and the three settings on one problem, back to back


def test_a_race_stopped_mid_way_resumes_from_its_folder_to_the_same_decisions(tmp_path):
    whole = FakeExecutor()
    reference, _, _ = race(tmp_path / "whole", ENTRANTS, whole)
    first, second = FakeExecutor(), FakeExecutor()
    _, finished, _ = race(tmp_path / "cut", ENTRANTS, first, stop_after=2)
    assert not finished and json.loads((tmp_path / "cut" / RACE_FILE).read_text())["spent"] > 0
    resumed, finished, _ = race(tmp_path / "cut", ENTRANTS, second)
    assert finished and resumed.to_json() == reference.to_json()
    assert not set(first.ran) & set(second.ran)  # nothing ran twice
    assert sorted(first.ran + second.ran) == sorted(whole.ran)


def test_a_race_with_other_settings_or_rules_reuses_every_finished_unit(tmp_path):
    """A rerun that adds a setting keeps the others' books; one with other rules starts a new race, which finds
    every unit it needs in the results file: no generation is spent twice."""
    first = FakeExecutor()
    alone, _, _ = race(tmp_path, ENTRANTS[:1], first)
    more = FakeExecutor()
    both, _, _ = race(tmp_path, ENTRANTS[:2], more)
    assert both.state.settings[0].to_json() == alone.state.settings[0].to_json()
    assert all(label in (GOOD.label, STRICT.label) for label, _ in more.ran)
    stricter = FakeExecutor()
    again, _, _ = race(tmp_path, ENTRANTS[:1], stricter, rules=RaceRules(max_drop=0.10, batch=5, confidence=0.9))
    assert again.rules.confidence == 0.9 and not set(stricter.ran) & set(first.ran)


@pytest.mark.parametrize("budget", [12, 40])
def test_the_budget_in_generations_is_never_overspent_and_leaves_the_rest_undecided(tmp_path, budget):
    executor = FakeExecutor()
    done, finished, _ = race(tmp_path, ENTRANTS, executor, budget=budget)
    assert finished and len(executor.ran) <= budget and done.state.spent == len(executor.ran)
    open_ones = [s for s in done.state.settings if s.decision == "budget spent"]
    assert open_ones  # too small a budget for every decision: said, not hidden
    rows = race_rows(done)
    assert {r.status for r in rows} >= {"budget spent"} and race_json(done, rows)["generations"] == done.state.spent


def test_the_table_and_its_json_twin_show_the_same_intervals_and_fit_120_columns(tmp_path):
    done, _, _ = race(tmp_path, ENTRANTS, FakeExecutor())
    rows = race_rows(done)
    table = render_race_table(rows, done.rules.criteria)
    assert max(len(line) for line in table.splitlines()) <= 120
    twin = race_json(read_race(tmp_path / RACE_FILE), rows)
    for row, entry in zip(rows, twin["settings"], strict=True):
        assert entry["status"] == row.status and entry["problems"] == row.problems
        low = entry["accuracy"]["low"]
        assert f"{low:+.1f}" in table  # the same number in both


def test_a_rule_that_cannot_run_at_the_relaxed_n_is_left_out_saying_why():
    # FLy at N = 1 (tune --draft-max 1 2 with N = 1 best) raised at its first round, after the strict stage had run
    points = [GridPoint("fly", 0.3, 1), GridPoint("cactus", 1.0, 1)]
    lines, entrants = screen_settings(points, {}, StrictStage({1: 0.9}, 1), None, temperature=0.6)
    assert [line.label for line in lines] == [p.label for p in points]
    assert not lines[0].pays and lines[0].line.startswith("cannot run at N=1: N must be at least 2 for rule 'fly'")
    assert [entrant.name for entrant in entrants] == [points[1].label]
