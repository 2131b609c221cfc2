"""`relaxtui eval TASK` and `relaxtui eval report DIR`: capability and speed scored together, resumable."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from relaxtui.commands.common import (
    add_draft_options,
    add_parallel_option,
    add_rule_options,
    add_task_file_options,
    int_option,
    model_options,
    refuse_rules_without_logits,
    sampling,
    utf8_path,
    utf8_text,
)
from relaxtui.console import ProgressDisplay
from relaxtui.costmodel.profiles import CostProfile, load_profile
from relaxtui.decoding.thinking import check_scope_on
from relaxtui.display import one_line
from relaxtui.errors import UserError
from relaxtui.evals.analysis.race_view import decision_lines, race_json, race_rows, render_race_table
from relaxtui.evals.analysis.report import (
    SHARED_BATCHES_NOTE,
    json_lines,
    render_drift_table,
    render_table,
    summarise,
    unstable_profiles,
    warnings,
    write_reports,
)
from relaxtui.evals.analysis.tune_advice import wrapped
from relaxtui.evals.run.executors import Executor, local_executor
from relaxtui.evals.run.identity import RunIdentity, fingerprints, model_paths, run_environment
from relaxtui.evals.run.pair import THIS_MACHINE, plan_profile, sample_tokenizer
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.race_run import RACE_FILE, read_race
from relaxtui.evals.run.results import MEASURED_PROFILE, ResultsStore, load_records
from relaxtui.evals.run.runner import SampleDone, run_units
from relaxtui.evals.tasks import Sample, Task, get
from relaxtui.files import write_atomic
from relaxtui.options import DRAFT_MAX, MAX_TOKENS, SPECULATIVE_N

if TYPE_CHECKING:
    from relaxtui.session import ModelOptions, Pair

PROMPT_ROOM = 1024  # tokens kept for the prompt on top of --max-tokens
MEASURING = "measuring this machine's cost profile (once per run folder, again when N grows)…"
MAX_REPEATS = 1000  # avg@n: more seeds than any benchmark protocol asks for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", type=utf8_text,
                        help="aime, aime25, math500, gpqa, lcb, humaneval, a task file FILE.toml — or `report DIR`")
    parser.add_argument("directory", nargs="?", type=utf8_text, help="with `report`: the run folder to summarise")
    group = parser.add_argument_group("grid (each option takes a list; the run is their product)")
    add_rule_options(group, grid=True)
    DRAFT_MAX.add(group, check=SPECULATIVE_N, nargs="+", default=[3], help="draft lengths N")
    group.add_argument("--no-spec", action="store_true", help="also run the verifier alone (the speed baseline)")
    run = parser.add_argument_group("run")
    run.add_argument("--repeats", type=int_option("--repeats", 1, MAX_REPEATS), default=1,
                     help="n of avg@n; seeds are seed+i")
    run.add_argument("--limit", type=int_option("--limit", 1), default=None,
                     help="only the first K problems (default: all)")
    MAX_TOKENS.add(run, help="answer budget in tokens (default: the task's own, e.g. 4096)")
    run.add_argument("--thinking", choices=["on", "off"], default=None,
                     help="reasoning mode for templates that have one (default: the template's own)")
    run.add_argument("--out", type=utf8_path, default=None, help="results folder (default: results/TASK)")
    run.add_argument("--data", type=utf8_path, default=None, help="local data file instead of the shipped/hub data")
    add_parallel_option(run)
    add_task_file_options(run)
    cluster = parser.add_argument_group("cluster (optional extra: pip install 'relaxtui[cluster]')")
    cluster.add_argument("--ray", nargs="?", type=utf8_text, const="", default=None, metavar="ADDRESS",
                         help="run the units on Ray actors: HOST:PORT as `ray start --head` prints it, or no address "
                              "for the latest local `ray start` (else a new local Ray); this machine keeps the results")
    cluster.add_argument("--ray-actors", type=int_option("--ray-actors", 1), default=None, metavar="K",
                         help="actors, each holding the pair once (default: one per node)")
    add_draft_options(parser, with_length=False)
    add_report_options(parser.add_argument_group("report (also printed at the end of a run)"))


def add_report_options(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What `eval report DIR` takes (and `eval TASK`, for the report printed at the end of a run)."""
    add_profile_option(group, "price speed-ups with these cost profiles (default: this-machine, the profile "
                              "measured when the run started; `relaxtui profiles list`)")
    group.add_argument("--length-adjusted", action="store_true",
                       help="require the length-adjusted speed-up (needs a --no-spec config in the run)")
    group.add_argument("--json", action="store_true", help="with `report`: one JSON object per config and line")


def add_profile_option(group: argparse.ArgumentParser | argparse._ArgumentGroup, text: str) -> None:
    """``--profile A B`` or ``--profile A --profile B``: a list, like the grid options."""
    group.add_argument("--profile", nargs="+", action="extend", type=utf8_text, default=[], metavar="NAME|FILE",
                       help=text)


def run(args: argparse.Namespace) -> int:
    if args.task == "report":
        return report_run(args.directory, args.profile, as_json=args.json, length_adjusted=args.length_adjusted)
    if args.directory is not None:
        raise UserError(f"unexpected argument {args.directory!r} (only `eval report DIR` takes a folder)")
    task = get(args.task, allow_outside_data=args.allow_outside_data)
    max_tokens = args.max_tokens or task.max_tokens  # numbers are range-checked as they are parsed
    named = [spec for spec in args.profile if spec != THIS_MACHINE]  # this-machine is measured at the start
    for profile in profiles_for_report(named, None):  # bad or too short profiles fail before models load
        profile.round_cost_ms(max(args.draft_max))
    if args.ray_actors is not None and args.ray is None:
        raise UserError(f"--ray-actors goes with --ray (got --ray-actors {args.ray_actors} alone)")
    plan = EvalPlan(rules=tuple(args.rule), alphas=tuple(args.alpha), draft_max=tuple(args.draft_max),
                    no_spec=args.no_spec, repeats=args.repeats, seed=args.seed, max_tokens=max_tokens,
                    sampling=sampling(args), bonus=args.bonus, draft_min=args.draft_min, adaptive=args.draft_adapt,
                    relax_scope=args.relax_scope)
    if plan.has_spec:
        refuse_rules_without_logits(args.rule, args.draft_kind)  # a kind's traits, before any model loads
    samples = task.load(args.data)[: args.limit]
    if not samples:
        raise UserError(f"{args.task}: no problems to run")
    out = args.out or Path("results") / task.name  # a task file's name, not its path
    options = model_options(args, speculative=plan.has_spec)  # a verifier-alone run loads no drafter
    # the context must hold a prompt plus the whole answer budget, or every long answer ends "context"
    options = replace(options, ctx_size=max(options.ctx_size, max_tokens + PROMPT_ROOM))
    if plan.has_spec and options.drafter is None:
        raise UserError("speculative configs need a drafter; pass --drafter or only --no-spec")
    disconnect = connect_cluster(args.ray)  # a bad address or a missing Ray fails before the folder is touched
    try:
        run_in_folder(args, task, samples, plan, options, ResultsStore(out))
    finally:
        disconnect()
    return report_run(out, args.profile, length_adjusted=args.length_adjusted)


def connect_cluster(address: str | None) -> Callable[[], None]:
    """With --ray, join the cluster (``""``: a local one) and return the disconnect; without, nothing to do."""
    if address is None:
        return lambda: None
    from relaxtui.evals.run.ray_executor import connect

    return connect(address or None)


def run_in_folder(args: argparse.Namespace, task: Task, samples: list[Sample], plan: EvalPlan,
                  options: ModelOptions, store: ResultsStore) -> None:
    """Check the run folder, load what runs the units, then open (or resume) the folder and run every unit
    not in it yet, with a progress bar on a terminal; Ctrl-C stops at the next unit and what finished is kept.
    Nothing is written before every check has passed and the models have loaded."""
    thinking = None if args.thinking is None else args.thinking == "on"
    paths = model_paths(options, pull=args.ray is None)
    identity = RunIdentity.of(task, options, plan, thinking=args.thinking, data=args.data,
                              models=fingerprints(paths))
    store.check(identity)  # refuse a folder of another run (or another model file) before loading any model
    opened = open_executor(args, options, plan, samples, thinking)
    stop_requested = threading.Event()
    try:
        profile = None if profile_covers(store.directory / MEASURED_PROFILE, plan) else opened.measure_profile()
        environment = run_environment(task)
        for line in (store.open_run(identity, environment), store.read().skipped_line(store.path)):
            if line:
                print(line, file=sys.stderr)
        if profile is not None:
            write_atomic(store.directory / MEASURED_PROFILE, profile)
        if environment and environment.get("sandbox_missing"):
            print(f"sandbox: {environment['sandbox_missing']}", file=sys.stderr)  # said once per run
        progress = ProgressBar(sys.stderr, enabled=not args.json)
        previous = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
        try:
            run_units(task, samples, plan, identity, store, opened.executor, on_sample=progress.update,
                      should_stop=stop_requested.is_set)
        finally:
            signal.signal(signal.SIGINT, previous)
            progress.close()
    finally:
        opened.close()
    if stop_requested.is_set():
        print(f"stopped; results so far are in {store.directory} (run the same command to resume)", file=sys.stderr)


@dataclass
class OpenedExecutor:
    """What runs the units of this run, how to measure the cost profile of a machine that runs them (the
    default pricing of `eval report`, measured once per run folder), and how to release it all."""

    executor: Executor
    measure_profile: Callable[[], str]
    close: Callable[[], None]


def open_executor(args: argparse.Namespace, options: ModelOptions, plan: EvalPlan, samples: list[Sample],
                  thinking: bool | None) -> OpenedExecutor:
    """One local pair, --parallel sequences at a time (loaded here, so a model that fails to load or a K that
    does not fit fails before the folder is touched); or Ray actors with --ray, started on first need."""
    if args.ray is not None:
        from relaxtui.evals.run.ray_executor import RayExecutor

        ray_executor = RayExecutor(options, thinking, actors=args.ray_actors)

        def measure_on_actor() -> str:
            ray_executor.start()
            print("measuring the first actor's cost profile (once per run folder)…", file=sys.stderr, flush=True)
            return ray_executor.measure_profile(plan, samples[0])

        return OpenedExecutor(ray_executor, measure_on_actor, ray_executor.close)
    from relaxtui.session import load_pair

    pair = load_pair(options)
    try:
        check_scope_on(pair.verifier, plan.relax_scope)  # a verifier that marks no thinking block: before the folder
        tokenize = sample_tokenizer(pair.verifier, thinking=thinking)
    except BaseException:
        pair.close()
        raise

    def measure_here() -> str:
        print(MEASURING, file=sys.stderr, flush=True)
        return plan_profile(pair, plan, tokenize(samples[0]))

    try:
        if plan.has_spec:  # every unit's drafts priced alike: the prices before the first one
            pair.price_drafts(log=lambda line: print(line, file=sys.stderr, flush=True))
    except BaseException:
        pair.close()
        raise
    return OpenedExecutor(local_executor(pair.verifier, pair.drafter, tokenize), measure_here, pair.close)


def profile_covers(path: Path, plan: EvalPlan) -> bool:
    """The run folder's measured profile exists and prices the longest block this run can verify."""
    return path.exists() and max(plan.draft_max) + 1 in load_profile(str(path)).verify_ms


def save_measured_profile(store: ResultsStore, pair: Pair, plan: EvalPlan, prompt: list[int]) -> None:
    """Calibrate this machine (a few seconds) unless the run folder already has its profile (tune's folders)."""
    path = store.directory / MEASURED_PROFILE
    if not profile_covers(path, plan):
        print(MEASURING, file=sys.stderr, flush=True)
        write_atomic(path, plan_profile(pair, plan, prompt))


def profiles_for_report(specs: list[str], directory: Path | None) -> list[CostProfile]:
    """The profiles named (``this-machine``: the run folder's own), else the folder's own if it has one. The
    folder's profile is named this-machine whatever its file says (folders from before called it "measured")."""
    measured = directory / MEASURED_PROFILE if directory is not None else None
    own = [replace(load_profile(str(measured)), name=THIS_MACHINE)] if measured and measured.exists() else []
    if not specs:
        return own
    if THIS_MACHINE in specs and not own and directory is not None:
        raise UserError(f"{directory} has no {MEASURED_PROFILE}: {THIS_MACHINE} is the profile a run measures when "
                        "it starts; name another profile")
    return [own[0] if spec == THIS_MACHINE and own else load_profile(spec) for spec in specs]


def report_run(directory: str | Path | None, profile_specs: list[str], *, as_json: bool = False,
               length_adjusted: bool = False) -> int:
    """Summarise a run folder from its records: printed table (or JSON lines), CSV, Markdown and PNG."""
    if directory is None:
        raise UserError("usage: relaxtui eval report DIR")
    directory = Path(directory)
    folder = load_records(directory)
    run_info, records = folder.settings, folder.records
    if folder.skipped_line:
        print(folder.skipped_line, file=sys.stderr)
    if not records:
        raise UserError(f"{directory} has no results yet")
    if length_adjusted and not any(r["config"]["rule"] is None for r in records):
        raise UserError(f"{directory}: the length-adjusted speed-up needs a verifier-alone config; rerun the same "
                        "command with --no-spec to add it (finished configs are kept)")
    profiles = profiles_for_report(profile_specs, directory)
    batched = int(run_info.get("parallel", 1))
    summaries = summarise(records, profiles, wall_clock=batched == 1)
    note = SHARED_BATCHES_NOTE.format(k=batched) if batched > 1 else None
    title = one_line(f"{run_info.get('task', '?')} — {run_info.get('verifier', '?')} / "
                     f"{run_info.get('drafter', '?')} (T={run_info.get('temperature', '?')})")
    if as_json:
        print(json_lines(summaries))
    else:
        print(title)
        print(render_table(summaries))
        print("\n" + render_drift_table(summaries))
        for line in wrapped([note] if note else []):
            print(line)
    for line in wrapped([*warnings(summaries), *unstable_profiles(profiles)]):  # (each at 120 columns)
        print(line, file=sys.stderr if as_json else sys.stdout)
    for path in write_reports(directory, summaries, title, profiles, note):
        if not as_json:
            print(f"wrote {path}")
    race_path = directory / RACE_FILE
    if race_path.exists():  # a tune folder: each relaxed setting's decision, and where it stopped
        race = read_race(race_path)
        rows = race_rows(race)
        if as_json:
            print(json.dumps({"race": race_json(race, rows)}))
        else:
            print(f"\nrace ({race.state.spent} generations):\n{render_race_table(rows, race.rules.criteria)}")
            print("\n".join(wrapped(decision_lines(rows, task_size=len(race.state.order), seconds_per_generation=None,
                                                   resume="run the same tune with a larger --budget",
                                                   max_drop=race.rules.max_drop))))
    return 0


class ProgressBar:
    """Eval's progress, fed the runner's ``SampleDone`` events: units done of the run's, elapsed, ETA, running
    accuracy, tokens/s and the config that just finished — a rich bar on a terminal's stderr, nothing otherwise
    (piped, CI logs, tests). tune feeds it several runs: each one's first record starts its phase anew."""

    def __init__(self, stream: TextIO | None = None, *, title: str = "eval", enabled: bool = True) -> None:
        self.display = ProgressDisplay(title, enabled=enabled, stream=stream)
        self.correct = self.ran = self.tokens = 0
        self.decode = 0.0

    def update(self, done: SampleDone) -> None:
        record = done.record
        self.ran += 1
        self.correct += record["correct"]
        self.tokens += record["output_tokens"]
        self.decode += record["decode_s"]
        accuracy = f"{100 * self.correct / self.ran:.1f}%" if record.get("scored", True) else "-"  # open-ended
        status = (f"acc {accuracy} · {self.tokens / self.decode if self.decode else 0:.1f} tok/s · "
                  f"{record['config']['label']}")
        first = done.done == done.skipped + 1  # this run's first record: a new phase (tune), or a resumed run
        self.display.show(done.done, done.total, status, restart_at=done.skipped if first else None)

    def close(self) -> None:
        self.display.close()
