#!/usr/bin/env python3
"""A real tune's race against the fixed grid that would reach the same decisions (issue 44, "the saving").

Reads one drafter's tune folder (``race.json``, ``results.jsonl``, ``measured-profile.json``) and prints, per raced
setting, the problems it ran, its decision and intervals; then the generations and the time (at this run's own
seconds per generation) of the race's relaxed stage against two fixed grids at the same confidence (the race's
split: each side of each criterion at α/k):

* **whole task**: every raced setting and strict on every problem of the task — what a grid must run when its K is
  chosen before the data;
* **hindsight K**: the smallest common K at which fixed-n intervals (Newcombe's for accuracy, normal for speed and
  drift, on the race's own paired outcomes) decide every setting the race decided, the same way. Reading it off the
  data is peeking, so no grid can choose it: it is the most any fixed grid could save. Where a fixed-n interval had
  not decided by the problem the race stopped at, K is only known to be larger (shown as ">").

The strict stage (the verifier alone and strict at each N on the screening problems) is the same in both and
counted apart.

    .venv/bin/python scripts/race_vs_grid.py results/tune-math500/qwen2.5-coder-0.5b-instruct-q4_0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relaxtui.costmodel.profiles import load_profile  # noqa: E402
from relaxtui.evals.analysis import race_sim  # noqa: E402
from relaxtui.evals.analysis.race import DECISIONS, PairedOutcome  # noqa: E402
from relaxtui.evals.run.race_run import RACE_FILE, paired_outcome, read_race  # noqa: E402
from relaxtui.evals.run.results import MEASURED_PROFILE, ResultsStore  # noqa: E402


def cell(mine: float, strict: float) -> int:
    """Newcombe's paired cell (both right, setting only, strict only, both wrong), as race_sim draws."""
    return {(1, 1): race_sim.BOTH_RIGHT, (1, 0): race_sim.SETTING_ONLY, (0, 1): race_sim.STRICT_ONLY,
            (0, 0): race_sim.BOTH_WRONG}[(round(mine), round(strict))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    race = read_race(args.folder / RACE_FILE)
    records = list(ResultsStore(args.folder).records())
    profile = load_profile(str(args.folder / MEASURED_PROFILE))
    by_label: dict[str, dict[str, list[dict]]] = {}
    for record in records:
        by_label.setdefault(record["config"]["label"], {}).setdefault(record["problem_id"], []).append(record)
    seconds = [r["decode_s"] + r.get("prefill_s", 0.0) for r in records if r["config"]["rule"] is not None]
    pace = sum(seconds) / len(seconds)
    rules = race.rules
    settings = race.state.settings
    task = len(race.state.order)
    print(f"{args.folder}: {task} problems, {len(settings)} raced settings, {pace:.1f} s a generation here\n")
    print("| setting | problems | decision | hindsight K |")
    print("|---|---:|---|---:|")
    ks: list[tuple[int, bool]] = []
    for setting in settings:
        name, pair = setting.spec.name, setting.spec.pair
        outcomes: list[PairedOutcome] = []
        cells = []
        for pid in setting.problems:
            mine, strict = by_label[name][pid], by_label[pair][pid]
            outcomes.append(paired_outcome(pid, mine, strict, profile, "accuracy" in rules.criteria))
            cells.append(cell(float(np.mean([r["correct"] for r in mine])),
                              float(np.mean([r["correct"] for r in strict]))))
        n = len(outcomes)
        draws = race_sim.Draws(np.array([[cells]], dtype=np.int8),
                               np.array([[[o.speedup or 1.0 for o in outcomes]]]),
                               np.array([[[o.drift or 0.0 for o in outcomes]]]))
        fixed = race_sim.fixed_n_codes(rules, draws, setting.spec.needed_speedup)[0, 0]  # [n]
        decided = setting.decision in DECISIONS[1:]
        if decided:
            code = DECISIONS.index(setting.decision)
            hits = np.nonzero(fixed == code)[0]
            k, known = (int(hits[0]) + 1, True) if len(hits) else (n, False)
            ks.append((k, known))
            shown = f"{k}" if known else f">{n}"
        else:
            shown = "-"
        print(f"| {name} | {n} | {setting.decision} | {shown} |")
    race_gen = race.state.spent
    whole = (len(settings) + len({s.spec.pair for s in settings})) * task * rules.repeats
    def hours(generations: int) -> str:
        return f"({generations * pace / 3600:.1f} h)"

    lines = [f"\nrelaxed stage, generations (and time at {pace:.1f} s each):",
             f"  race                {race_gen:6d}  {hours(race_gen)}",
             f"  grid, whole task    {whole:6d}  {hours(whole)}   {whole / max(race_gen, 1):.1f}x the race"]
    if ks:
        k = max(k for k, _ in ks)
        hindsight = (len(settings) + 1) * k * rules.repeats
        bound = "" if all(known for _, known in ks) else " (at least: a fixed-n interval had not decided yet)"
        lines.append(f"  grid, hindsight K={k}{'+' if bound else ''} {hindsight:6d}  {hours(hindsight)}   "
                     f"{hindsight / max(race_gen, 1):.1f}x the race{bound}")
    print("\n".join(lines))
    print(json.dumps({"race": race_gen, "whole_task": whole, "pace_s": pace}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
