"""`tune --check OTHER…`: does the chosen setting carry over? The same race on each other task, the setting against
strict at its N there (the seed paper's warning: a knob tuned on one task can break another), each task's verdict in
one line. Every --check folder is planned and checked before any model loads (``plan_checks``)."""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from relaxtui.commands.eval import ProgressBar, open_executor, profiles_for_report
from relaxtui.commands.tune_stages import TUNE_TOKENS, Budget, DrafterRun, plan_drafters
from relaxtui.errors import UserError
from relaxtui.evals.analysis.race import RaceRules
from relaxtui.evals.analysis.race_view import decision_lines, race_rows
from relaxtui.evals.run.identity import run_environment
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.race_run import RACE_FILE, Entrant, open_race, race_order, run_race
from relaxtui.evals.run.results import MEASURED_PROFILE
from relaxtui.evals.run.runner import Known
from relaxtui.evals.tasks import Sample, Task, get


@dataclass(frozen=True)
class CheckTask:
    """One --check task: its samples, budget and, per drafter, its run folder (checked before any model loads)."""

    task: Task
    samples: list[Sample]
    max_tokens: int
    runs: dict[str, DrafterRun]


def plan_checks(args: argparse.Namespace, task: Task, out: Path, given_tokens: int | None) -> list[CheckTask]:
    """Load every --check task (its own budget unless --max-tokens was given) and check each of its folders
    against its identity (read-only): a bad task or a folder of another run fails before any model loads."""
    checks = []
    for name in args.check:
        other = get(name, allow_outside_data=args.allow_outside_data)
        if other.name == task.name:
            raise UserError(f"--check {name}: that is the tuned task itself; name other tasks")
        samples = other.load()[: args.limit]
        if not samples:
            raise UserError(f"--check {name}: no problems to run")
        max_tokens = given_tokens or min(TUNE_TOKENS, other.max_tokens)
        runs = {run.stem: run for run in plan_drafters(args, other, out / f"check-{other.name}", max_tokens)}
        checks.append(CheckTask(other, samples, max_tokens, runs))
    return checks


def run_checks(args: argparse.Namespace, checks: list[CheckTask], chosen: Entrant, why: str, source: str,
               drafter_run: DrafterRun, rules_for: Callable[[bool], RaceRules], budget: Budget, plan: EvalPlan,
               stop_requested: threading.Event) -> list[str] | None:
    """Race ``chosen`` against strict at its N on each --check task, priced by the tuned task's own profile (one
    price list), judged as that task is (``rules_for(scored)``: accuracy where it has gold, drift where it has none);
    the verdict lines, or None when stopped (the folders keep the races: run again to go on)."""
    lines = [f"does {chosen.name} carry over? ({why} on {source}; each task raced against strict "
             f"N={chosen.point.draft_max} there, needing {chosen.needed_speedup:.3f}x over it)"]
    measured = drafter_run.store.directory / MEASURED_PROFILE
    for check in checks:
        run = check.runs[drafter_run.stem]
        rules = rules_for(getattr(check.task, "scored", True))
        store, folder = run.store, run.store.directory
        by_id = {sample.id: sample for sample in check.samples}
        task_plan = replace(plan, max_tokens=check.max_tokens, record_rows=False, no_spec=False)
        opened = open_executor(args, run.options, task_plan, check.samples[:1], None)
        progress = ProgressBar(sys.stderr, title=f"tune --check {check.task.name}", enabled=not args.json)
        try:
            store.open_run(run.identity, run_environment(check.task))
            if measured.exists() and not (folder / MEASURED_PROFILE).exists():
                shutil.copyfile(measured, folder / MEASURED_PROFILE)
            profiles = profiles_for_report(args.profile, folder)
            race = open_race(folder / RACE_FILE, rules, [chosen], race_order(list(by_id), args.seed),
                             budget.generations)
            finished = run_race(race, [chosen], task=check.task, samples=by_id, plan=task_plan, identity=run.identity,
                                store=store, known=Known.of(store), executor=opened.executor,
                                profile=profiles[0] if profiles else None, path=folder / RACE_FILE,
                                on_sample=progress.update, should_stop=stop_requested.is_set,
                                deadline=None if budget.seconds is None else time.monotonic() + budget.seconds)
        finally:
            progress.close()
            opened.close()
        if not finished:
            print(f"stopped; results so far are in {folder} (run the same command to resume)", file=sys.stderr)
            return None
        rows = race_rows(race)
        lines += [f"  - {check.task.name}:" + line.removeprefix("   -").removeprefix(f" {chosen.name}:")
                  for line in decision_lines(rows, task_size=len(check.samples), seconds_per_generation=None,
                                             resume="run the same tune with a larger --budget",
                                             max_drop=rules.max_drop)]
    lines.append("tune each task you deploy it on: a knob that holds on one task need not hold on another")
    return lines
