"""`relaxtui tune TASK`: a small grid of N, drafters and rule/knob pairs, scored by the eval runner, then
the capability-vs-speed Pareto front and a plain recommendation; with ``--check OTHER…``, the recommended setting
is run on other tasks too, and the advice says where it holds and where it breaks (``evals/analysis/transfer.py``)."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relaxtui.commands.common import (
    add_parallel_option,
    add_task_file_options,
    drafts_without_file,
    finite_float,
    float_option,
    int_option,
    model_options,
    refuse_rules_without_logits,
    sampling,
    utf8_path,
    utf8_text,
)
from relaxtui.commands.eval import (
    MAX_REPEATS,
    ProgressBar,
    add_profile_option,
    profiles_for_report,
    save_measured_profile,
)
from relaxtui.costmodel.pricing import priced_speedup, rounds_of_records
from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile
from relaxtui.costmodel.verify_prices import pricer
from relaxtui.decoding.drafters import STANDALONE_KINDS, drafter_kind
from relaxtui.display import one_line
from relaxtui.errors import UserError
from relaxtui.evals.analysis.report import (
    SHARED_BATCHES_NOTE,
    ConfigSummary,
    render_drift_table,
    render_table,
    summarise,
    warnings,
    write_reports,
)
from relaxtui.evals.analysis.transfer import Carry, carry_lines, carry_over, chosen_setting
from relaxtui.evals.analysis.tune import DEFAULT_MAX_DRIFT, recommend
from relaxtui.evals.run.identity import RunIdentity, fingerprints, model_paths, run_environment
from relaxtui.evals.run.pair import sample_tokenizer
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import MEASURED_PROFILE, ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.tasks import Sample, Task, get
from relaxtui.models.registry import DEFAULT_DRAFTER
from relaxtui.options import DRAFT_KIND, DRAFT_MAX, MAX_TOKENS, SPECULATIVE_N
from relaxtui.session import DRAFT_KINDS, ModelOptions

TUNE_TOKENS = 512  # tune's answer budget unless --max-tokens or a smaller task budget says otherwise
Record = dict[str, Any]  # one eval record, as ResultsStore.records() yields it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", type=utf8_text, help="aime, aime25, math500, gpqa, lcb, humaneval or FILE.toml")
    parser.add_argument("--limit", type=int_option("--limit", 1), default=5, help="problems to score (K)")
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
    parser.add_argument("--max-drop", type=float_option("--max-drop", low=0, high=100), default=2.0,
                        help="accuracy points you accept to lose")
    parser.add_argument("--max-drift", type=float_option("--max-drift", low=0), default=None,
                        help="verifier log-prob of the outputs you accept to lose, nats/token (default: not judged "
                             f"for scored tasks; {DEFAULT_MAX_DRIFT:g} for an open-ended one)")
    parser.add_argument("--check", nargs="+", type=utf8_text, default=[], metavar="TASK",
                        help="run the recommended setting on these tasks too, and say where it holds or breaks")
    MAX_TOKENS.add(parser, help=f"answer budget per problem, in tokens (default: the task's own, at most "
                                f"{TUNE_TOKENS})")
    parser.add_argument("--repeats", type=int_option("--repeats", 1, MAX_REPEATS), default=1,
                        help="seeds per problem (avg@n)")
    parser.add_argument("--out", type=utf8_path, default=None, help="results folder (default: results/tune-TASK)")
    parser.add_argument("--data", type=utf8_path, default=None, help="local data file instead of the shipped/hub data")
    add_parallel_option(parser)
    add_task_file_options(parser)
    add_profile_option(parser, "price speed with these cost profiles (the first drives the advice; default: "
                               "this-machine, measured at the start)")


@dataclass(frozen=True)
class DrafterRun:
    """One drafter's part of a tune: its options, identity and folder, all checked before any model loads."""

    stem: str
    options: ModelOptions
    identity: RunIdentity
    store: ResultsStore


def plan_drafters(args: argparse.Namespace, task: Task, out: Path, max_tokens: int | None = None) -> list[DrafterRun]:
    """Every drafter's options and run folder, each folder checked (read-only) against its identity."""
    runs = []
    for drafter in args.drafters:
        # a kind's name drafts with that kind (no file: 'ngram'; the verifier's own head: 'mtp'); else a model file
        args.drafter, args.draft_kind = drafter, drafter if drafter in DRAFT_KINDS else DRAFT_KIND.default
        refuse_rules_without_logits(args.rule, args.draft_kind, "--drafters")  # before any model loads
        options = model_options(args)
        stem = Path(drafter).name.removesuffix(".gguf")
        plan = EvalPlan(rules=(), no_spec=True, seed=args.seed, max_tokens=max_tokens or args.max_tokens,
                        sampling=sampling(args))
        identity = RunIdentity.of(task, options, plan, thinking=None, data=args.data,
                                  models=fingerprints(model_paths(options)))
        store = ResultsStore(out / stem)
        store.check(identity)
        check_models(options)  # a drafter llama.cpp would refuse, or a K that does not fit, fails before any run
        runs.append(DrafterRun(stem, options, identity, store))
    return runs


def check_models(options: ModelOptions) -> None:
    """What can be known of the pair without loading it: headers llama.cpp would abort on, a vocabulary the
    verifier does not share (from the headers), and the --parallel capacity."""
    from relaxtui.engine.capacity import check_parallel
    from relaxtui.engine.gguf import read_header
    from relaxtui.engine.gguf_check import check_loadable
    from relaxtui.models.pairing import header_mismatch

    paths = [path for path in model_paths(options).values() if path is not None]
    for path in paths:
        check_loadable(path)
    if len(paths) == 2:
        names = (paths[0].name, paths[1].name)
        mismatch = header_mismatch(read_header(paths[0]), read_header(paths[1]), names)
        if mismatch is not None:
            raise UserError(mismatch)
    check_parallel(options.parallel, paths, options.ctx_size, rollback_depth=options.draft_max)


def run(args: argparse.Namespace) -> int:
    from relaxtui.rules import PAPER_GRID
    from relaxtui.session import load_pair

    task = get(args.task, allow_outside_data=args.allow_outside_data)
    if args.drafters == [DEFAULT_DRAFTER] and drafts_without_file(args.draft_kind):
        args.drafters = [args.draft_kind]  # --draft-kind without --drafters: that kind (plan_drafters sets it after)
    if "strict" in args.rule:
        raise UserError("--rule lists relaxed rules; strict always runs over --draft-max")
    params = sampling(args)
    given_tokens = args.max_tokens
    args.max_tokens = given_tokens or min(TUNE_TOKENS, task.max_tokens)
    longest = max(*args.draft_max, args.relaxed_n or 0, 3)  # 3: the relaxed N when no strict N ran yet
    strict = EvalPlan(rules=("strict",), draft_max=tuple(args.draft_max), repeats=args.repeats, seed=args.seed,
                      max_tokens=args.max_tokens, sampling=params)
    # every relaxed rule and knob is checked as eval checks them, before anything loads (N does not matter)
    knobs = {rule: tuple(args.alpha) or PAPER_GRID.get(rule, (None,))[:2] for rule in args.rule}
    for rule, rule_knobs in knobs.items():
        EvalPlan(rules=(rule,), alphas=rule_knobs, draft_max=(longest,), no_spec=False, sampling=params)
    named = [spec for spec in args.profile if spec != THIS_MACHINE]  # this-machine is measured at the start
    for profile in profiles_for_report(named, None):  # bad or too short profiles fail before any model loads
        profile.round_cost_ms(longest)
    every_sample = task.load(args.data)
    samples = every_sample[: args.limit]
    if not samples:
        raise UserError(f"{args.task}: no problems to run")
    out = args.out or Path("results") / f"tune-{task.name}"
    checks = plan_checks(args, task, out, given_tokens)  # each task loads, each folder is checked, before any model
    stop_requested = threading.Event()
    groups: list[tuple[list[Record], list[CostProfile]]] = []  # per drafter: its records and the profiles pricing them
    drafter_runs = plan_drafters(args, task, out)
    for position, drafter_run in enumerate(drafter_runs):
        store = drafter_run.store
        pair = load_pair(drafter_run.options)
        progress = ProgressBar(sys.stderr, title="tune" if len(drafter_runs) == 1 else f"tune {drafter_run.stem}")
        previous = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())  # stop at the next round
        try:
            tokenize = sample_tokenizer(pair.verifier)
            price = pricer(pair, drafter_run.options, log=lambda line: print(line, file=sys.stderr, flush=True))
            for line in (store.open_run(drafter_run.identity, run_environment(task)),
                         store.read().skipped_line(store.path)):
                if line:
                    print(line, file=sys.stderr)
            save_measured_profile(store, pair, replace(strict, draft_max=(longest,)), tokenize(samples[0]))
            # each drafter is priced by its own measured costs (an n-gram drafter costs nothing a model does)
            drafter_profiles = profiles_for_report(args.profile, store.directory)
            run_eval(task, samples, replace(strict, no_spec=position == 0), drafter_run.identity, store,
                     pair.verifier, pair.drafter, tokenize, on_sample=progress.update,
                     should_stop=stop_requested.is_set, price=price)
            relaxed_n = args.relaxed_n or _best_strict_n(list(store.records()),
                                                         drafter_profiles[0] if drafter_profiles else None)
            for rule, rule_knobs in knobs.items():
                plan = EvalPlan(rules=(rule,), alphas=rule_knobs, draft_max=(relaxed_n,), no_spec=False,
                                repeats=args.repeats, seed=args.seed, max_tokens=args.max_tokens, sampling=params)
                run_eval(task, samples, plan, drafter_run.identity, store, pair.verifier, pair.drafter, tokenize,
                         on_sample=progress.update, should_stop=stop_requested.is_set, price=price)
        finally:
            signal.signal(signal.SIGINT, previous)
            progress.close()
            pair.close()
        if stop_requested.is_set():
            print(f"stopped; results so far are in {out} (run the same command to resume)", file=sys.stderr)
            return 130
        records = list(store.records())
        for record in records:
            if len(args.drafters) > 1 and record["config"]["rule"] is not None:
                record["config"]["label"] += f" [{drafter_run.stem}]"
        groups.append((records, drafter_profiles))
    summaries = summarise_drafters(groups, wall_clock=args.parallel == 1)
    profiles = groups[0][1]
    title = one_line(f"tune {task.name} (K={len(samples)}) — {Path(args.verifier).name}")
    show(title, summaries, args.parallel, out, profiles)
    advice = recommend(summaries, max_drop=args.max_drop, profile=profiles[0] if profiles else None,
                       task_size=len(every_sample), max_drift=args.max_drift,
                       model_free=model_free_labels(summaries, drafter_runs))
    print("\n" + advice.front_line())
    print("\n".join(advice.lines()))
    print(f"\nresults, summary.md and pareto.png in {out}")
    if not checks:
        return 0
    primary = profiles[0].name if profiles else None
    setting, why = chosen_setting(advice, primary)
    if setting is None:
        print(f"\n--check: {why} on {task.name}")
        return 0
    position = next((i for i, run in enumerate(drafter_runs) if len(drafter_runs) == 1
                     or setting.label.endswith(f" [{run.stem}]")), 0)
    carries = run_checks(args, checks, setting, drafter_runs[position], stop_requested)
    if carries is None:
        return 130
    print()
    print("\n".join(carry_lines(setting, why, task.name, carries)))
    return 0


def show(title: str, summaries: list[ConfigSummary], parallel: int, out: Path, profiles: list[CostProfile]) -> None:
    """Print the tables (summary, then drift) and warnings, and write the folder's reports."""
    note = SHARED_BATCHES_NOTE.format(k=parallel) if parallel > 1 else None
    print(title)
    print(render_table(summaries))
    print("\n" + render_drift_table(summaries))
    if note:
        print(note)
    for line in warnings(summaries):
        print(line)
    write_reports(out, summaries, title, profiles, note)


@dataclass(frozen=True)
class CheckTask:
    """One --check task: its samples, budget and, per drafter, its run folder (checked before any model loads)."""

    task: Task
    samples: list[Sample]
    max_tokens: int
    runs: dict[str, DrafterRun]
    task_size: int  # the task's problems in all: the verdict never asks for more


def plan_checks(args: argparse.Namespace, task: Task, out: Path, given_tokens: int | None) -> list[CheckTask]:
    """Load every --check task (its own budget unless --max-tokens was given) and check each of its folders
    against its identity (read-only): a bad task or a folder of another run fails before any model loads."""
    checks = []
    for name in args.check:
        other = get(name, allow_outside_data=args.allow_outside_data)
        if other.name == task.name:
            raise UserError(f"--check {name}: that is the tuned task itself; name other tasks")
        every_sample = other.load()
        samples = every_sample[: args.limit]
        if not samples:
            raise UserError(f"--check {name}: no problems to run")
        max_tokens = given_tokens or min(TUNE_TOKENS, other.max_tokens)
        runs = {run.stem: run for run in plan_drafters(args, other, out / f"check-{other.name}", max_tokens)}
        checks.append(CheckTask(other, samples, max_tokens, runs, len(every_sample)))
    return checks


def run_checks(args: argparse.Namespace, checks: list[CheckTask], setting: ConfigSummary, drafter_run: DrafterRun,
               stop_requested: threading.Event) -> list[Carry] | None:
    """Run the verifier alone, strict at the setting's N and the setting itself on each --check task, with one
    pair, priced by the tuned task's own profile; None when stopped."""
    from relaxtui.session import load_pair

    assert setting.rule is not None  # a relaxed setting (transfer.chosen_setting), never the verifier alone
    spec = setting.rule if setting.knob is None else f"{setting.rule}:{setting.knob!r}"
    measured = drafter_run.store.directory / MEASURED_PROFILE
    carries = []
    pair = load_pair(drafter_run.options)
    progress = ProgressBar(sys.stderr, title="tune --check")
    previous = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
    try:
        tokenize = sample_tokenizer(pair.verifier)
        price = pricer(pair, drafter_run.options, log=lambda line: print(line, file=sys.stderr, flush=True))
        for check in checks:
            plan = EvalPlan(rules=("strict", spec), draft_max=(setting.draft_max,), no_spec=True,
                            repeats=args.repeats, seed=args.seed, max_tokens=check.max_tokens, sampling=sampling(args))
            run = check.runs[drafter_run.stem]
            store, identity, folder = run.store, run.identity, run.store.directory
            store.open_run(identity, run_environment(check.task))
            if measured.exists() and not (folder / MEASURED_PROFILE).exists():
                shutil.copyfile(measured, folder / MEASURED_PROFILE)  # one price list for every task checked
            save_measured_profile(store, pair, plan, tokenize(check.samples[0]))
            run_eval(check.task, check.samples, plan, identity, store, pair.verifier, pair.drafter, tokenize,
                     on_sample=progress.update, should_stop=stop_requested.is_set, price=price)
            if stop_requested.is_set():
                print(f"stopped; results so far are in {folder} (run the same command to resume)", file=sys.stderr)
                return None
            profiles = profiles_for_report(args.profile, folder)
            summaries = summarise(list(store.records()), profiles, wall_clock=args.parallel == 1)
            progress.close()
            print()
            show(f"--check {check.task.name} (K={len(check.samples)}): {setting.label} against strict", summaries,
                 args.parallel, folder, profiles)
            carries.append(carry_over(check.task.name, summaries, setting, max_drop=args.max_drop,
                                      max_drift=args.max_drift, profile=profiles[0].name if profiles else None,
                                      task_size=check.task_size))
    finally:
        signal.signal(signal.SIGINT, previous)
        progress.close()
        pair.close()
    return carries


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


def _best_strict_n(records: list[Record], profile: CostProfile | None) -> int:
    """The strict N that is fastest so far: by the profile's priced speed-up (stable), else by tokens/s; 3 when
    nothing ran."""
    by_n: dict[int, list[Record]] = {}
    for record in records:
        if record["config"]["rule"] == "strict":
            by_n.setdefault(record["config"]["draft_max"], []).append(record)
    if not by_n:
        return 3

    def speed(rows: list[Record]) -> float:
        if profile is not None:
            return priced_speedup(profile, rounds_of_records(rows))  # as the report prices them (`pricing`)
        seconds = sum(r["decode_s"] for r in rows)
        return sum(r["output_tokens"] for r in rows) / seconds if seconds else 0.0

    return max(by_n, key=lambda n: speed(by_n[n]))
