"""tune's stages for one drafter (``evals/run/tuning.py`` computes them): load what runs the units, the strict
stage, the screen, the race — each unit through the eval runner's executors (one pair, ``--parallel`` sequences, or
Ray actors), each record written by this process — with a live table on a terminal. Nothing here decides; it runs,
shows progress and hands back what ran."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from relaxtui.commands.common import model_options, refuse_rules_without_logits, sampling
from relaxtui.commands.eval import OpenedExecutor, ProgressBar, open_executor, profile_covers
from relaxtui.console import RaceBoard
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.errors import UserError
from relaxtui.evals.analysis.race import Race, RaceRules
from relaxtui.evals.analysis.race_view import Screened, race_rows, render_race_table, status_counts
from relaxtui.evals.run.identity import RunIdentity, fingerprints, model_paths, run_environment
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.race_run import RACE_FILE, Batch, Entrant, open_race, run_race, strict_stage_done
from relaxtui.evals.run.results import MEASURED_PROFILE, GridPoint, ResultsStore
from relaxtui.evals.run.runner import Known, SampleDone, plan_units, run_work
from relaxtui.evals.run.tuning import StrictStage, recorded_strict, screen_settings, strict_stage
from relaxtui.evals.tasks import Sample, Task
from relaxtui.files import write_atomic
from relaxtui.options import DRAFT_KIND
from relaxtui.session import DRAFT_KINDS, ModelOptions

TUNE_TOKENS = 512  # tune's answer budget unless --max-tokens or a smaller task budget says otherwise


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
                        sampling=sampling(args), relax_scope=args.relax_scope)
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
    check_parallel(options.parallel, paths, options.ctx_size, rollback_depth=options.rollback_depth)


@dataclass(frozen=True)
class Budget:
    """``--budget``: generations (a setting, or strict, on one problem and seed), or seconds of the race."""

    generations: int | None = None
    seconds: float | None = None

    def text(self) -> str:
        if self.generations is not None:
            return f"{self.generations} generations"
        return f"{self.seconds:g} s" if self.seconds is not None else "none"


@dataclass
class DrafterTune:
    """What one drafter's stages gave: the strict stage, the screen, the race (None: nothing raced), its
    profiles, and the pace of a generation here (seconds; the time estimates read it)."""

    stage: StrictStage
    relaxed_n: int
    screened: list[Screened]
    entrants: list[Entrant]
    race: Race | None
    profiles: list[CostProfile]
    seconds_per_generation: float | None


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def tune_drafter(args: argparse.Namespace, task: Task, samples: dict[str, Sample], order: Sequence[str], *,
                 options: ModelOptions, identity: RunIdentity, store: ResultsStore, strict: EvalPlan,
                 points: Callable[[int], list[GridPoint]], rules: RaceRules, budget: Budget, title: str,
                 profiles_of: Callable[[Path], list[CostProfile]], should_stop: Callable[[], bool],
                 resume: str) -> DrafterTune | None:
    """The three stages on one drafter's folder; None when stopped (what finished is kept: run again to go on)."""
    screen_ids = list(order[: args.screen_problems])
    measure_plan = replace(strict, draft_max=(max(*strict.draft_max, args.relaxed_n or 0),))
    opened = open_executor(args, options, measure_plan, [samples[screen_ids[0]]], None)
    board = RaceBoard(title, enabled=not args.json)
    try:
        for line in (store.open_run(identity, run_environment(task)), store.read().skipped_line(store.path)):
            if line:
                log(line)
        _measured_profile(store, opened, measure_plan)
        profiles = profiles_of(store.directory)
        primary = profiles[0] if profiles else None
        known = Known.of(store)
        progress = _Progress(board)
        # 1. strict (and the verifier alone) on the screening problems, every round's rows recorded
        run_work(task, strict, plan_units([samples[i] for i in screen_ids], strict, identity), store,
                 opened.executor, known, progress.update, should_stop)
        stage = strict_stage(known.records.values(), set(screen_ids), primary)
        relaxed_n = args.relaxed_n or stage.best_n
        if relaxed_n not in strict.draft_max and not should_stop():  # --relaxed-n off the strict grid: its strict
            extra = replace(strict, draft_max=(relaxed_n,), no_spec=False)
            run_work(task, extra, plan_units([samples[i] for i in screen_ids], extra, identity), store,
                     opened.executor, known, progress.update, should_stop)
            stage = strict_stage(known.records.values(), set(screen_ids), primary)
        if should_stop():
            return None
        # 2. the screen: each relaxed setting replayed on strict's rounds at its N
        recorded = recorded_strict(store.directory, identity, [relaxed_n], set(screen_ids))
        screened, entrants = screen_settings(points(relaxed_n), recorded, stage, primary,
                                             temperature=strict.sampling.temperature,
                                             min_gain=1 + args.min_gain / 100, screen=not args.no_screen,
                                             relax_scope=strict.relax_scope)
        pace = _pace(known, identity, relaxed_n, set(screen_ids))
        result = DrafterTune(stage, relaxed_n, screened, entrants, None, profiles, pace)
        if not entrants:
            return result
        # 3. the race
        path = store.directory / RACE_FILE
        race = open_race(path, rules, entrants, order, budget.generations)
        strict_stage_done(race, entrants, screen_ids)
        result.race = race
        log(estimate_line(race, entrants, budget, pace))
        deadline = None if budget.seconds is None else time.monotonic() + budget.seconds
        board.table(_table(race, screened))

        def batch_done(race: Race, batch: Batch) -> None:
            board.table(_table(race, screened))
            progress.status = status_counts(race_rows(race))

        finished = run_race(race, entrants, task=task, samples=samples, plan=replace(strict, record_rows=False),
                            identity=identity, store=store, known=known, executor=opened.executor, profile=primary,
                            path=path, on_sample=progress.update, on_batch=batch_done, should_stop=should_stop,
                            deadline=deadline, seconds_per_generation=pace)
        return result if finished else None
    finally:
        board.close()
        opened.close()


def _measured_profile(store: ResultsStore, opened: OpenedExecutor, plan: EvalPlan) -> None:
    """This machine's cost profile, measured once per run folder (again when a longer N needs pricing)."""
    path = store.directory / MEASURED_PROFILE
    if not profile_covers(path, plan):
        write_atomic(path, opened.measure_profile())


def _pace(known: Known, identity: RunIdentity, n: int, problems: set[str]) -> float | None:
    """Seconds one generation of strict at N took on the screening problems: what the race's estimates use."""
    cid = identity.config_id(GridPoint("strict", None, n))
    seconds = [r["decode_s"] + r.get("prefill_s", 0.0) for (c, pid, _), r in known.records.items()
               if c == cid and pid in problems]
    return sum(seconds) / len(seconds) if seconds else None


def estimate_line(race: Race, entrants: Sequence[Entrant], budget: Budget, pace: float | None) -> str:
    """What the race may spend, before it starts: its settings, the bound, and the time at this machine's pace."""
    settings = len(race.racing())
    task = len(race.state.order)
    worst = (settings + len({e.strict.label for e in entrants})) * task * race.rules.repeats
    limit = worst if budget.generations is None else min(worst, budget.generations)
    if budget.seconds is not None:
        limit_text = f"at most {budget.seconds / 60:.0f} min (--budget)"
    else:
        cost = "" if pace is None else f", about {_hours(limit * pace)} here at {pace:.1f} s a generation"
        limit_text = f"at most {limit} generations{cost}"
    return (f"race: {settings} setting{'s' * (settings != 1)} against strict on up to {task} problems, each stopping "
            f"once decided at {race.rules.confidence:.0%} confidence; {limit_text}")


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 2 * 3600 else f"{seconds / 3600:.1f} h"


def _table(race: Race, screened: Sequence[Screened]) -> str:
    return render_race_table(race_rows(race, screened), race.rules.criteria)


class _Progress:
    """The progress bar's feed: every finished unit, with the race's counts as its status once it runs."""

    def __init__(self, board: RaceBoard) -> None:
        self.board, self.bar, self.status = board, ProgressBar(None, enabled=False), ""

    def update(self, done: SampleDone) -> None:
        self.bar.update(done)
        label = done.record["config"]["label"]
        first = done.done == done.skipped + 1
        self.board.show(done.done, done.total, f"{self.status} · {label}" if self.status else label,
                        restart_at=done.skipped if first else None)
