"""What a race shows: its table (setting, problems spent, each interval now, status), the table's JSON twin and the
advice lines — pure; tune prints them, live on a terminal, and `eval report` reads them back from ``race.json``.

Units as a user reads them: Δaccuracy in points, drift in nats/token, speed as the speed-up over strict at the same
N (the race runs log speed-ups; shown exponentiated). A setting the screen stopped (``does not pay here``, never
generated) is a row with no problems and its replayed speed-up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relaxtui.display import one_line
from relaxtui.evals.analysis.race import (
    BREAKS,
    BUDGET_SPENT,
    EXHAUSTED,
    HOLDS,
    NO_PAY,
    RACING,
    SPEED,
    Interval,
    Race,
    problems_to_decide,
)

SCREENED = "does not pay here"  # the replay's verdict: never generated


@dataclass(frozen=True)
class Screened:
    """A relaxed setting as the screen judged it: its label, N, and the screen's line."""

    label: str
    pays: bool
    line: str
    replayed: float | None = None  # its replayed speed-up (None: not replayable)


@dataclass(frozen=True)
class RaceRow:
    setting: str
    problems: int
    intervals: dict[str, Interval]  # in display units (points, nats/token, × over strict)
    thresholds: dict[str, float]  # the same units
    status: str
    to_decide: float | None = None  # problems in all it would need if its estimates hold (undecided ones)
    screen: str = ""


def _display(criterion: str, value: float) -> float:
    return 100 * value if criterion == "accuracy" else math.exp(value) if criterion == SPEED else value


def race_rows(race: Race, screened: Sequence[Screened] = ()) -> list[RaceRow]:
    """One row per raced setting (in the race's order), then one per setting the screen stopped."""
    rows = []
    lines = {s.label: s.line for s in screened}
    for setting in race.state.settings:
        name = setting.spec.name
        raw, points = race.intervals(name), race.thresholds(name)
        shown = {c: Interval(*(_display(c, v) for v in (i.estimate, i.low, i.high))) for c, i in raw.items()}
        thresholds = {c: _display(c, v) for c, v in points.items()}
        open_ = setting.decision not in (HOLDS, BREAKS, NO_PAY)
        to_decide = problems_to_decide(len(setting.problems), raw, points) if open_ and setting.problems else None
        rows.append(RaceRow(name, len(setting.problems), shown, thresholds, setting.decision, to_decide,
                            lines.get(name, "")))
    rows += [RaceRow(s.label, 0, {}, {}, SCREENED, None, s.line) for s in screened if not s.pays]
    return rows


def _cell(criterion: str, interval: Interval | None) -> str:
    if interval is None:
        return "-"
    if math.isnan(interval.estimate):
        return "n/a"
    if criterion == "accuracy":
        return f"{interval.estimate:+.1f} [{interval.low:+.1f}, {interval.high:+.1f}]"
    if criterion == SPEED:
        return f"{interval.estimate:.2f}x [{interval.low:.2f}, {interval.high:.2f}]"
    return f"{interval.estimate:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"


HEADERS = {"accuracy": "Δacc pts", "drift": "Δlogp nats/tok", SPEED: "speed vs strict"}


def render_race_table(rows: Sequence[RaceRow], criteria: Sequence[str]) -> str:
    """A plain-text table that fits 120 columns: setting, problems, one interval column per criterion, status."""
    header = ["setting", "problems", *(HEADERS[c] for c in criteria), "status"]
    body = [[one_line(r.setting)[:28], str(r.problems), *(_cell(c, r.intervals.get(c)) for c in criteria),
             r.status] for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
           for line in [header, *body]]
    return "\n".join([out[0], "  ".join("-" * w for w in widths), *out[1:]])


def race_json(race: Race, rows: Sequence[RaceRow]) -> dict[str, Any]:
    """The table's JSON twin (``tune --json``), with the race's rules and what it spent."""
    rules = race.rules
    return {
        "confidence": rules.confidence, "max_drop_points": None if rules.max_drop is None else 100 * rules.max_drop,
        "max_drift": rules.max_drift, "criteria": list(rules.criteria), "generations": race.state.spent,
        "budget": race.state.budget, "problems_in_task": len(race.state.order),
        "settings": [{"setting": r.setting, "problems": r.problems, "status": r.status, "screen": r.screen or None,
                      "problems_to_decide": None if r.to_decide is None or math.isinf(r.to_decide)
                      else math.ceil(r.to_decide),
                      **{c: {"estimate": _finite(i.estimate), "low": _finite(i.low), "high": _finite(i.high),
                             "threshold": r.thresholds.get(c)} for c, i in r.intervals.items()}}
                     for r in rows],
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _why(row: RaceRow) -> str:
    """The numbers behind a row's status, in its units."""
    parts = [f"{HEADERS[c]} {_cell(c, i)}" for c, i in row.intervals.items()]
    return "; ".join(parts)


def decision_lines(rows: Sequence[RaceRow], *, task_size: int, seconds_per_generation: float | None,
                   resume: str, max_drop: float | None) -> list[str]:
    """One line per setting: what was decided and on what, or exactly why not (with what would settle it)."""
    lines = []
    for row in rows:
        if row.status == SCREENED:
            lines.append(f"   - {row.setting}: {row.screen} (never generated)")
            continue
        after = f"after {row.problems} problem{'s' * (row.problems != 1)}"
        if row.status == HOLDS:
            lines.append(f"   - {row.setting}: holds {after} ({_why(row)})")
        elif row.status == BREAKS:
            lines.append(f"   - {row.setting}: breaks {after}: it is shown to lose more than allowed ({_why(row)})")
        elif row.status == NO_PAY:
            lines.append(f"   - {row.setting}: does not pay {after}: it is shown not to reach the speed-up it needs "
                         f"({_why(row)})")
        else:
            lines.append(f"   - {row.setting}: undecided {after} ({_why(row)}); "
                         + _settle(row, task_size, seconds_per_generation, resume, max_drop))
    return lines


def _settle(row: RaceRow, task_size: int, seconds: float | None, resume: str, max_drop: float | None) -> str:
    needed = row.to_decide
    shows = ""
    accuracy = row.intervals.get("accuracy")
    if accuracy is not None and max_drop is not None and math.isfinite(accuracy.low):
        shows = f"; so far it is shown to lose at most {max(-accuracy.low, 0):.1f} points"
    if row.status == EXHAUSTED or (needed is not None and needed > task_size):
        why = ("the whole task was run" if row.status == EXHAUSTED else
               f"at this estimate it needs about {_count(needed)} problems and the task has {task_size}")
        return f"{why}: this task cannot decide it{shows} (a larger --max-drop, or more seeds with --repeats, might)"
    if needed is None or math.isinf(needed):
        return f"its estimate sits on the bound: no number of problems is sure to decide it{shows}"
    more = max(math.ceil(needed) - row.problems, 1)
    cost = "" if seconds is None else f", about {_duration(more * seconds)} here"
    return f"about {more} more problems{cost} would decide it if the estimate holds: {resume}{shows}"


def _count(value: float | None) -> str:
    return "?" if value is None or math.isinf(value) else str(math.ceil(value))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_counts(rows: Sequence[RaceRow]) -> str:
    """"2 hold, 1 breaks, 3 racing": the progress line's summary."""
    names = {HOLDS: "hold", BREAKS: "break", NO_PAY: "do not pay", SCREENED: "screened out", RACING: "racing",
             EXHAUSTED: "task exhausted", BUDGET_SPENT: "budget spent"}
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return ", ".join(f"{n} {names.get(status, status)}" for status, n in counts.items())


__all__ = ["SCREENED", "RaceRow", "Screened", "decision_lines", "race_json", "race_rows", "render_race_table",
           "status_counts"]
