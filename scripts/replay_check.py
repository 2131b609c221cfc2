"""Replayed against measured (issue 44, item 1): strict at one N with its rounds recorded, four or more relaxed settings
replayed on those rounds (costmodel/replay.py), then the same settings run for real on the same problems and seeds —
mean accepted length and priced speed-up side by side.

Why a script: the replay assumes the strict run's contexts and drafts (docs/metrics.md#replayed-speed-up); how far a
relaxed run's own contexts, drafts and lengths move it from that is what this measures, on any pair and task.

Usage, from the project root after set-up:
    .venv/bin/python scripts/replay_check.py [--task math500] [--limit 4] [--draft-max 3] [--max-tokens 256]
        [--verifier FILE] [--drafter FILE | --draft-kind KIND] [--settings mentored:0.7 cactus:1 ...]
        [--profile this-machine|NAME|FILE] [--out DIR]
The run folder (default results/replay-check-TASK) is an ordinary eval folder (`relaxtui eval report DIR` reads it),
resumable: a finished unit is not run again. Prints the table; --json prints one object per setting instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from relaxtui.commands.eval import profiles_for_report, save_measured_profile
from relaxtui.costmodel.pricing import priced_speedup, rounds_of_records
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.costmodel.replay import MIN_GAIN, RecordedRun, Replay, replay, screen
from relaxtui.costmodel.replay_rows import read_rows
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.display import PRICED, REPLAYED
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.pair import sample_tokenizer
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import GridPoint, ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.tasks import get
from relaxtui.rules import make, split_spec
from relaxtui.rules.strict import Strict
from relaxtui.session import ModelOptions, load_pair

SETTINGS = ("mentored:0.7", "cactus:1", "typical:0.09", "ensemble:0.8", "mentored:0.95")


@dataclass(frozen=True)
class Line:
    """One setting: what the replay of strict's rounds says, and what its own run measured."""

    label: str
    replayed_length: float | None
    measured_length: float | None
    replayed_speedup: float | None
    measured_speedup: float | None
    verdict: str


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="math500")
    parser.add_argument("--limit", type=int, default=4, help="problems (default 4)")
    parser.add_argument("--draft-max", type=int, default=3, help="N for strict and every setting (default 3)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), help="relaxed settings, RULE:KNOB")
    parser.add_argument("--verifier", default=ModelOptions.verifier)
    parser.add_argument("--drafter", default=ModelOptions.drafter)
    parser.add_argument("--draft-kind", default="model")
    parser.add_argument("--draft-cut", default="auto", choices=("auto", "priced", "none"))
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--profile", default="this-machine", help="the cost profile pricing both columns")
    parser.add_argument("--min-gain", type=float, default=MIN_GAIN)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def run(args: argparse.Namespace) -> tuple[list[Line], CostProfile, float]:
    """Strict with recorded rounds, then every setting for real, in one run folder; the table's lines."""
    task = get(args.task)
    samples = task.load()[: args.limit]
    options = ModelOptions(verifier=args.verifier, drafter=args.drafter, draft_kind=args.draft_kind,
                           threads=args.threads, ctx_size=args.ctx_size, rollback_depth=args.draft_max,
                           draft_cut=args.draft_cut)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    common = dict(draft_max=(args.draft_max,), max_tokens=args.max_tokens, sampling=sampling)
    strict_plan = EvalPlan(rules=("strict",), no_spec=True, record_rows=True, **common)
    relaxed_plan = EvalPlan(rules=tuple(args.settings), no_spec=False, **common)
    identity = RunIdentity.of(task, options, strict_plan, thinking=None, data=None)
    store = ResultsStore(args.out or Path("results") / f"replay-check-{task.name}")
    store.check(identity)
    pair = load_pair(options)
    try:
        tokenize = sample_tokenizer(pair.verifier)
        pair.price_drafts(log=lambda line: print(line, file=sys.stderr, flush=True))
        store.open_run(identity)
        save_measured_profile(store, pair, strict_plan, tokenize(samples[0]))
        for plan in (strict_plan, relaxed_plan):
            run_eval(task, samples, plan, identity, store, pair.verifier, pair.drafter, tokenize)
    finally:
        pair.close()
    profile = profiles_for_report([args.profile], store.directory)[0]
    records = list(store.records())
    strict_id = identity.config_id(GridPoint("strict", None, args.draft_max))
    runs = read_rows(store.directory, [strict_id]).runs.get(strict_id, [])
    return compare(records, runs, args.settings, args.draft_max, sampling, profile, args.min_gain)


def compare(records: list[dict], runs: list[RecordedRun], settings: list[str], n: int, sampling: SamplingParams,
            profile: CostProfile, min_gain: float) -> tuple[list[Line], CostProfile, float]:
    """Replayed and measured, per setting; strict's own two lines first (its replay: its expectation on its drafts)."""
    strict_replay = replay(runs, Strict())
    best = strict_replay.speedup(profile) or 0.0
    lines = [_line("strict", strict_replay, _measured(records, "strict", None, n), profile,
                   "the reference: strict replayed on its own drafts")]
    for spec in settings:
        name, knob = split_spec(spec)
        found = replay(runs, make(name, knob, temperature=sampling.temperature))
        verdict = screen(found.speedup(profile), best, min_gain=min_gain, why_not=found.why_not)
        lines.append(_line(repr(make(name, knob, temperature=sampling.temperature)), found,
                           _measured(records, name, knob, n), profile, verdict.reason))
    return lines, profile, best


def _measured(records: list[dict], rule: str, knob: float | None, n: int) -> list[dict]:
    return [r for r in records if r["config"]["rule"] == rule and r["config"]["knob"] == knob
            and r["config"]["draft_max"] == n]


def _line(label: str, found: Replay, records: list[dict], profile: CostProfile, verdict: str) -> Line:
    rounds = sum(r["rounds"] for r in records)
    measured_length = 1 + sum(r["accepted"] for r in records) / rounds if rounds else None
    measured = priced_speedup(profile, rounds_of_records(records)) if records else None
    return Line(label, found.mean_accepted_length if found.replayable else None, measured_length,
                found.speedup(profile), measured, verdict if found.replayable else f"not replayable: {found.why_not}")


def show(lines: list[Line], profile: CostProfile, best: float, problems: str) -> list[str]:
    def cell(value: float | None, spec: str, unit: str = "") -> str:
        return "-" if value is None else format(value, spec) + unit

    head = (f"{'setting':<26} {'mean len ' + REPLAYED:>18} {'measured':>9} {REPLAYED + ' ' + profile.name:>24} "
            f"{PRICED + ' (measured)':>18}  screen")
    out = [problems, head, "-" * len(head)]
    for line in lines:
        out.append(f"{line.label:<26} {cell(line.replayed_length, '.3f'):>18} {cell(line.measured_length, '.3f'):>9} "
                   f"{cell(line.replayed_speedup, '.3f', 'x'):>24} {cell(line.measured_speedup, '.3f', 'x'):>18}  "
                   f"{line.verdict}")
    out.append(f"best strict N (replayed): {best:.3f}x under {profile.name}")
    return out


def main() -> int:
    args = parse()
    lines, profile, best = run(args)
    if args.json:
        for line in lines:
            print(json.dumps({**line.__dict__, "profile": profile.name}))
        return 0
    print("\n".join(show(lines, profile, best, f"{args.task}, {args.limit} problems, N={args.draft_max}, "
                                                f"T={args.temperature} top-k {args.top_k} top-p {args.top_p}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
