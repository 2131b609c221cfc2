"""tune's stages on one drafter's run folder, as computations (``commands/tune.py`` runs and prints them):

1. **strict**: the verifier alone and strict at each N on the first screening problems of the race's order, every
   round's rows recorded; the best strict N by the primary profile's priced speed-up.
2. **screen**: each relaxed setting replayed on strict's recorded rounds at its N (``costmodel/replay.py``); one
   that cannot beat the best strict N (and the verifier alone) by ``min_gain`` does not pay here and is never
   generated (``--no-screen`` races it anyway); a setting that cannot be replayed races unscreened.
3. **race**: the rest race against strict at their N (``evals/run/race_run.py``), each needing the speed-up over
   strict that makes it ``min_gain`` faster than the best strict N and than the verifier alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxtui.checks import BadValue
from relaxtui.costmodel.pricing import priced_speedup, rounds_of_records
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.costmodel.replay import MIN_GAIN, RecordedRun, replay_settings
from relaxtui.costmodel.replay_rows import read_rows
from relaxtui.evals.analysis.race_view import Screened
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.race_run import Entrant
from relaxtui.evals.run.results import GridPoint
from relaxtui.rules import make

Record = dict[str, Any]


@dataclass(frozen=True)
class StrictStage:
    """What the strict stage shows: each strict N's priced speed-up over the verifier alone on the screening
    problems, and the best of them (the lossless choice)."""

    speedups: Mapping[int, float]
    best_n: int

    @property
    def best(self) -> float:
        return self.speedups.get(self.best_n, 0.0)


def strict_stage(records: Iterable[Record], problems: set[str], profile: CostProfile | None) -> StrictStage:
    """The strict Ns' speed-ups on ``problems``: priced by ``profile`` (stable on a busy machine), else tokens per
    second; with nothing run, N = 3 at 0."""
    by_n: dict[int, list[Record]] = {}
    for record in records:
        if record["config"]["rule"] == "strict" and record["problem_id"] in problems:
            by_n.setdefault(record["config"]["draft_max"], []).append(record)
    speedups = {n: _speed(rows, profile) for n, rows in sorted(by_n.items())}
    best = max(speedups, key=lambda n: (speedups[n], -n), default=3)
    return StrictStage(speedups, best)


def _speed(records: list[Record], profile: CostProfile | None) -> float:
    if profile is not None:
        return priced_speedup(profile, rounds_of_records(records))
    seconds = sum(r["decode_s"] for r in records)
    return sum(r["output_tokens"] for r in records) / seconds if seconds else 0.0


def recorded_strict(directory: Path, identity: RunIdentity, ns: Sequence[int],
                    problems: set[str]) -> dict[int, list[RecordedRun]]:
    """Strict's recorded rounds per N on the screening problems (units run before rows were recorded have none)."""
    ids = {identity.config_id(GridPoint("strict", None, n)): n for n in ns}
    found = read_rows(directory, ids)
    return {n: [run for run in found.runs.get(cid, []) if run.problem_id in problems] for cid, n in ids.items()}


def screen_settings(points: Sequence[GridPoint], recorded: Mapping[int, Sequence[RecordedRun]], stage: StrictStage,
                    profile: CostProfile | None, *, temperature: float, min_gain: float = MIN_GAIN,
                    screen: bool = True, relax_scope: str = "all") -> tuple[list[Screened], list[Entrant]]:
    """Each relaxed point's screen line, and the entrants that race: those that pass (every one with ``screen``
    off), each needing the speed-up over strict at its N that puts it ``min_gain`` above the best strict N and the
    verifier alone. Without a profile nothing is replayed (no prices): every setting races. A rule that cannot run
    at its N (FLy at N = 1, the best strict N) is left out, saying so."""
    bar = min_gain * max(stage.best, 1.0)
    refused: dict[GridPoint, Screened] = {}
    for point in points:
        try:
            if point.rule:
                make(point.rule, point.knob, temperature=temperature).check_draft_max(point.draft_max)
        except BadValue as exc:
            refused[point] = Screened(point.label, False, f"cannot run at N={point.draft_max}: N {exc.problem}")
    runnable = [p for p in points if p not in refused]
    lines: list[Screened] = []
    if profile is not None:
        rules = [(make(p.rule, p.knob, temperature=temperature), p.draft_max) for p in runnable if p.rule]
        _, replays = replay_settings(recorded, rules, profile, min_gain=min_gain, scope=relax_scope)
        lines = [Screened(p.label, r.verdict.pays or not screen, r.verdict.reason, r.speedup)
                 for p, r in zip(runnable, replays, strict=True)]
    else:
        lines = [Screened(p.label, True, "no cost profile to replay with: races unscreened") for p in runnable]
    by_point = {**dict(zip(runnable, lines, strict=True)), **refused}
    lines = [by_point[p] for p in points]
    entrants = []
    for point, line in zip(points, lines, strict=True):
        if line.pays:
            strict_here = stage.speedups.get(point.draft_max) or stage.best or 1.0
            entrants.append(Entrant(point, max(bar / strict_here, 1e-6)))
    return lines, entrants
