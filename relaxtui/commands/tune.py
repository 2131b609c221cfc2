"""`relaxtui tune TASK`: the best strict N, then which relaxed settings hold on this task and pay on this machine,
each decided on as few problems as it takes (docs/method.md#racing).

Per drafter, three stages (``tune_stages.py``): strict at each N and the verifier alone on a few screening problems
with every round's rows recorded; a replay of each relaxed setting on those rounds, which screens out the settings
that cannot pay here before any of them is generated; a race of the rest against strict at their N, problem by
problem in small batches, each stopping once its confidence sequences decide it (holds, breaks, does not pay) or
the budget is spent. Then the evidence table, each race's table and the advice; with ``--check OTHER…`` the chosen
setting races on other tasks too (``tune_check.py``)."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from relaxtui.commands.common import (
    add_parallel_option,
    add_task_file_options,
    drafts_without_file,
    finite_float,
    float_option,
    int_option,
    sampling,
    utf8_path,
    utf8_text,
)
from relaxtui.commands.eval import MAX_REPEATS, add_profile_option, connect_cluster, profiles_for_report
from relaxtui.commands.tune_check import plan_checks, run_checks
from relaxtui.commands.tune_stages import TUNE_TOKENS, Budget, DrafterRun, DrafterTune, plan_drafters, tune_drafter
from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile
from relaxtui.decoding.drafters import STANDALONE_KINDS, drafter_kind
from relaxtui.display import one_line
from relaxtui.errors import UserError
from relaxtui.evals.analysis.race import RaceRules
from relaxtui.evals.analysis.report import (
    SHARED_BATCHES_NOTE,
    ConfigSummary,
    render_drift_table,
    render_table,
    summarise,
    warnings,
    write_reports,
)
from relaxtui.evals.analysis.tune import DEFAULT_MAX_DRIFT, recommend
from relaxtui.evals.analysis.tune_advice import DrafterRace, TuneAdvice, advise, race_tables, wrapped
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.race_run import race_order
from relaxtui.evals.tasks import Task, get
from relaxtui.models.registry import DEFAULT_DRAFTER
from relaxtui.options import DRAFT_MAX, MAX_TOKENS, RELAX_SCOPE, SPECULATIVE_N

Record = dict[str, Any]  # one eval record, as ResultsStore.records() yields it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", type=utf8_text, help="aime, aime25, math500, gpqa, lcb, humaneval or FILE.toml")
    DRAFT_MAX.add(parser, check=SPECULATIVE_N, nargs="+", default=[2, 3, 4], help="strict draft lengths to try")
    parser.add_argument("--drafters", nargs="+", type=utf8_text, default=[DEFAULT_DRAFTER],
                        help="drafters to compare, each in its own folder: GGUF files, 'mtp' (the verifier's own MTP "
                             f"head) or model-free kinds ({', '.join(STANDALONE_KINDS)}: no file, c_rel ~ 0); "
                             "--draft-kind KIND alone: that kind")
    parser.add_argument("--rule", nargs="+", type=utf8_text, default=["cactus", "mentored"],
                        help="relaxed rules to try")
    parser.add_argument("--alpha", nargs="+", type=finite_float, default=[],
                        help="knobs (default: the first 2 of each rule's paper grid)")
    parser.add_argument("--relaxed-n", type=SPECULATIVE_N.option("--relaxed-n"), default=None,
                        help="N for relaxed rules (default: the best strict N)")
    RELAX_SCOPE.add(parser, help="where every relaxed setting relaxes: all, thinking (only inside <think>...</think>) "
                                 "or answer (only outside it); raced unscreened when not all (its own results folder)")
    race = parser.add_argument_group("the race (docs/method.md#racing)")
    race.add_argument("--budget", type=budget_option, default=Budget(seconds=DEFAULT_BUDGET_S), metavar="N|DURATION",
                      help="what the race may spend: N generations (one setting, or strict, on one problem and seed; "
                           "e.g. 200) or a duration (90m, 2h, 45s); settings still open then are undecided, with "
                           f"their intervals and what would settle them (default {DEFAULT_BUDGET_S // 60:.0f}m)")
    race.add_argument("--confidence", type=float_option("--confidence", low=0.5, high=1, low_open=True, high_open=True),
                      default=0.95, help="each decision is wrong at most 1 - this often, however long it races")
    race.add_argument("--max-drop", type=float_option("--max-drop", low=0, high=100), default=2.0,
                      help="accuracy points you accept to lose")
    race.add_argument("--max-drift", type=float_option("--max-drift", low=0), default=None,
                      help="verifier log-prob of the outputs you accept to lose, nats/token (default: not judged "
                           f"for scored tasks; {DEFAULT_MAX_DRIFT:g} for an open-ended one)")
    race.add_argument("--min-gain", type=float_option("--min-gain", low=0, high=100), default=2.0,
                      help="percent a relaxed setting must be faster than the best strict N and the verifier alone "
                           "to pay, in the screen and the race")
    race.add_argument("--no-screen", action="store_true",
                      help="race the settings whose replayed speed-up cannot pay too (default: they are reported as "
                           "'does not pay here' and never generated)")
    race.add_argument("--screen-problems", type=int_option("--screen-problems", 1), default=5, metavar="K",
                      help="problems the strict stage runs (the verifier alone and each strict N, their rounds "
                           "recorded for the replay)")
    parser.add_argument("--limit", type=int_option("--limit", 1), default=None,
                        help="the task's size: only its first K problems (default: all)")
    parser.add_argument("--check", nargs="+", type=utf8_text, default=[], metavar="TASK",
                        help="race the chosen setting on these tasks too, and say where it holds or breaks")
    MAX_TOKENS.add(parser, help=f"answer budget per problem, in tokens (default: the task's own, at most "
                                f"{TUNE_TOKENS})")
    parser.add_argument("--repeats", type=int_option("--repeats", 1, MAX_REPEATS), default=1,
                        help="seeds per problem (avg@n)")
    parser.add_argument("--out", type=utf8_path, default=None, help="results folder (default: results/tune-TASK)")
    parser.add_argument("--data", type=utf8_path, default=None, help="local data file instead of the shipped/hub data")
    parser.add_argument("--json", action="store_true", help="the advice and the race's table as one JSON object")
    add_parallel_option(parser)
    add_task_file_options(parser)
    cluster = parser.add_argument_group("cluster (optional extra: pip install 'relaxtui[cluster]')")
    cluster.add_argument("--ray", nargs="?", type=utf8_text, const="", default=None, metavar="ADDRESS",
                         help="run the race's problems on Ray actors (as eval's --ray)")
    cluster.add_argument("--ray-actors", type=int_option("--ray-actors", 1), default=None, metavar="K",
                         help="actors, each holding the pair once (default: one per node)")
    add_profile_option(parser, "price speed with these cost profiles (the first drives the advice and the race; "
                               "default: this-machine, measured at the start)")


DEFAULT_BUDGET_S = 3600
_DURATION = {"s": 1, "m": 60, "h": 3600}


def budget_option(text: str) -> Budget:
    """``--budget``: a whole number of generations, or a duration (``90m``, ``2h``, ``45s``)."""
    value = text.strip().lower()
    if value and value[-1] in _DURATION:
        try:
            amount = float(value[:-1])
        except ValueError:
            amount = math.nan
        if not (math.isfinite(amount) and amount > 0):
            raise argparse.ArgumentTypeError(f"--budget must be N generations or a duration like 90m (got "
                                             f"{text[:40]!r})")
        return Budget(seconds=amount * _DURATION[value[-1]])
    if not value.isdigit() or int(value) < 1 or len(value) > 9:
        raise argparse.ArgumentTypeError(f"--budget must be N generations (1..999999999) or a duration like 90m "
                                         f"(got {text[:40]!r})")
    return Budget(generations=int(value))


def race_rules(args: argparse.Namespace, scored: bool) -> RaceRules:
    """The race's rules from the flags: a scored task is judged on accuracy (and drift with --max-drift), an
    open-ended one on drift alone (at DEFAULT_MAX_DRIFT unless given)."""
    max_drift = args.max_drift if scored or args.max_drift is not None else DEFAULT_MAX_DRIFT
    return RaceRules(confidence=args.confidence, max_drop=args.max_drop / 100 if scored else None,
                     max_drift=max_drift, repeats=args.repeats)


def resume_command(args: argparse.Namespace) -> str:
    """What to type to go on: the same command (its folder keeps the race) with a larger --budget."""
    return f"run the same tune with a larger --budget (results in {args.out or 'results/tune-TASK'})"


def run(args: argparse.Namespace) -> int:
    from relaxtui.rules import PAPER_GRID, split_spec

    task = get(args.task, allow_outside_data=args.allow_outside_data)
    if args.drafters == [DEFAULT_DRAFTER] and drafts_without_file(args.draft_kind):
        args.drafters = [args.draft_kind]  # --draft-kind without --drafters: that kind (plan_drafters sets it after)
    if "strict" in args.rule:
        raise UserError("--rule lists relaxed rules; strict always runs over --draft-max")
    if args.ray_actors is not None and args.ray is None:
        raise UserError(f"--ray-actors goes with --ray (got --ray-actors {args.ray_actors} alone)")
    params = sampling(args)
    given_tokens = args.max_tokens
    args.max_tokens = given_tokens or min(TUNE_TOKENS, task.max_tokens)
    longest = max(*args.draft_max, args.relaxed_n or 0, 3)
    strict = EvalPlan(rules=("strict",), draft_max=tuple(args.draft_max), repeats=args.repeats, seed=args.seed,
                      max_tokens=args.max_tokens, sampling=params, record_rows=True, relax_scope=args.relax_scope)
    # every relaxed rule and knob is checked as eval checks them, before anything loads (N does not matter)
    relaxed = [point for rule in args.rule for point in EvalPlan(
        rules=(rule,), alphas=tuple(args.alpha) or PAPER_GRID.get(split_spec(rule)[0], (None,))[:2],
        draft_max=(longest,), no_spec=False, sampling=params).points()]
    named = [spec for spec in args.profile if spec != THIS_MACHINE]  # this-machine is measured at the start
    for profile in profiles_for_report(named, None):  # bad or too short profiles fail before any model loads
        profile.round_cost_ms(longest)
    every_sample = task.load(args.data)
    samples = every_sample[: args.limit]
    if not samples:
        raise UserError(f"{args.task}: no problems to run")
    by_id = {sample.id: sample for sample in samples}
    order = race_order(list(by_id), args.seed)
    scored = getattr(task, "scored", True)
    rules = race_rules(args, scored)
    budget = args.budget
    out = args.out or Path("results") / f"tune-{task.name}"
    checks = plan_checks(args, task, out, given_tokens)  # each task loads, each folder is checked, before any model
    drafter_runs = plan_drafters(args, task, out)
    disconnect = connect_cluster(args.ray)
    stop_requested = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())  # stop at the next round
    tuned: list[tuple[DrafterRun, DrafterTune]] = []
    try:
        for position, drafter_run in enumerate(drafter_runs):
            title = "tune" if len(drafter_runs) == 1 else f"tune {drafter_run.stem}"
            result = tune_drafter(
                args, task, by_id, order, options=drafter_run.options, identity=drafter_run.identity,
                store=drafter_run.store, strict=replace(strict, no_spec=position == 0),
                points=lambda n: list(dict.fromkeys(replace(point, draft_max=n) for point in relaxed)),
                rules=rules, budget=budget, title=title,
                profiles_of=lambda folder: profiles_for_report(args.profile, folder),
                should_stop=stop_requested.is_set, resume=resume_command(args))
            if result is None:
                print(f"stopped; results so far are in {out} (run the same command to resume)", file=sys.stderr)
                return 130
            tuned.append((drafter_run, result))
    finally:
        signal.signal(signal.SIGINT, previous)
        disconnect()
    advice = tune_report(args, task, tuned, len(samples), out)
    if args.json:
        print(json.dumps(advice.json, indent=1))
    else:
        print("\n".join(advice.lines))
    if not checks:
        return 0
    label, why = advice.chosen
    found = [(run, result, entrant) for run, result in tuned for entrant in result.entrants if entrant.name == label]
    if not found:
        print(f"\n--check: {why} on {task.name}")
        return 0
    drafter_run, _, entrant = found[0]
    previous = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
    try:
        carries = run_checks(args, checks, entrant, why, task.name, drafter_run,
                             lambda scored: race_rules(args, scored), budget, strict, stop_requested)
    finally:
        signal.signal(signal.SIGINT, previous)
    if carries is None:
        return 130
    print("\n" + "\n".join(wrapped(carries)))
    return 0


def tune_report(args: argparse.Namespace, task: Task, tuned: list[tuple[DrafterRun, DrafterTune]], problems: int,
                out: Path) -> TuneAdvice:
    """The evidence (each config's table row, written to the folder's reports too), each race's table and the
    advice. Wall-clock speed-ups are kept only for the configs the strict stage ran side by side with the verifier
    alone: the race's settings ran later, in other batches, so their speed is the priced one (and the race's)."""
    groups = [(list(run.store.records()), result.profiles) for run, result in tuned]
    for (run, _), (records, _) in zip(tuned, groups, strict=True):
        if len(tuned) > 1:
            for record in records:
                if record["config"]["rule"] is not None:
                    record["config"]["label"] += f" [{run.stem}]"
    summaries = summarise_drafters(groups, wall_clock=args.parallel == 1)
    summaries = [s if s.rule in (None, "strict") else replace(s, measured_speedup=None) for s in summaries]
    profiles = tuned[0][1].profiles
    title = one_line(f"tune {task.name} ({problems} problems) — {Path(args.verifier).name}")
    lines = [title, render_table(summaries), "", render_drift_table(summaries)]
    if args.parallel > 1:
        lines.append(SHARED_BATCHES_NOTE.format(k=args.parallel))
    lines += wrapped([*warnings(summaries), "wall-clock speed-ups are shown for the strict stage's configs, run side "
                      "by side with the verifier alone; a raced setting's speed is priced (its race pairs it with "
                      "strict on the same problems)"])
    write_reports(out, summaries, title, profiles, SHARED_BATCHES_NOTE.format(k=args.parallel)
                  if args.parallel > 1 else None)
    strict_only = [s for s in summaries if s.rule in (None, "strict")]
    strict_advice = recommend(strict_only, max_drop=args.max_drop, profile=profiles[0] if profiles else None,
                              task_size=problems, max_drift=args.max_drift,
                              model_free=model_free_labels(strict_only, [run for run, _ in tuned]))
    drafters = [DrafterRace(run.stem if len(tuned) > 1 else "", result.screened, result.race, result.relaxed_n,
                            result.seconds_per_generation) for run, result in tuned]
    lines += ["", *race_tables(drafters), ""]
    rules = race_rules(args, getattr(task, "scored", True))
    advice = advise(strict_advice.strict_lines(), drafters, task_size=problems, resume=resume_command(args),
                    max_drop=None if rules.max_drop is None else args.max_drop, max_drift=rules.max_drift,
                    confidence=args.confidence, min_gain=args.min_gain)
    advice.lines = [*lines, *advice.lines, f"\nresults, summary.md, pareto.png and race.json in {out}"]
    return advice


def summarise_drafters(groups: list[tuple[list[Record], list[CostProfile]]],
                       wall_clock: bool = True) -> list[ConfigSummary]:
    """Each drafter's configs against its own strict runs, priced by its own profiles; the verifier-alone
    baseline (run with the first drafter) is shared by all. No measured speed-up for a --parallel run."""
    baseline = [r for r in groups[0][0] if r["config"]["rule"] is None]
    summaries: list[ConfigSummary] = []
    for position, (records, profiles) in enumerate(groups):
        rows = records if position == 0 else [*baseline, *records]
        summaries += [s for s in summarise(rows, profiles, wall_clock=wall_clock)
                      if position == 0 or s.rule is not None]
    return summaries


def model_free_labels(summaries: list[ConfigSummary], drafter_runs: list[DrafterRun]) -> set[str]:
    """The settings whose drafter runs no model (suffix, the n-gram kinds): the advice offers them no cheaper
    drafter. With several drafters each setting's label ends with its drafter's folder (``summarise_drafters``)."""
    free = [run.stem for run in drafter_runs if drafter_kind(run.options.draft_kind).standalone]
    if len(drafter_runs) == 1:
        return {s.label for s in summaries} if free else set()
    return {s.label for s in summaries if any(s.label.endswith(f" [{stem}]") for stem in free)}
