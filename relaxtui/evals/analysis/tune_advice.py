"""tune's advice from its three stages (pure; the command prints it and writes the folder's reports).

First the best strict N (lossless, from the strict stage: ``tune.Recommendation.strict_lines``), then every relaxed
setting's decision — the screen's "does not pay here" (never generated), or the race's holds / breaks / does not pay
/ undecided with its intervals and what would settle it — then the setting ``--check`` carries to other tasks.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relaxtui.evals.analysis.race import HOLDS, NO_PAY, SPEED, Race
from relaxtui.evals.analysis.race_view import (
    BREAKS,
    RaceRow,
    Screened,
    decision_lines,
    race_json,
    race_rows,
    render_race_table,
)


@dataclass(frozen=True)
class DrafterRace:
    """One drafter's screen and race, as the advice reads them."""

    name: str  # the drafter's folder name ("" with one drafter)
    screened: Sequence[Screened]
    race: Race | None
    relaxed_n: int
    seconds_per_generation: float | None


@dataclass
class TuneAdvice:
    lines: list[str] = field(default_factory=list)
    json: dict[str, Any] = field(default_factory=dict)
    chosen: tuple[str | None, str] = (None, "")  # the setting --check carries, and why (or why none)


def rows_of(drafter: DrafterRace) -> list[RaceRow]:
    if drafter.race is None:
        return [RaceRow(s.label, 0, {}, {}, "does not pay here", None, s.line) for s in drafter.screened
                if not s.pays]
    return race_rows(drafter.race, drafter.screened)


def advise(strict_lines: Sequence[str], drafters: Sequence[DrafterRace], *, task_size: int, resume: str,
           max_drop: float | None, max_drift: float | None, confidence: float, min_gain: float) -> TuneAdvice:
    """The advice lines, their JSON twin and the setting to carry over."""
    bounds = [f"lose at most {max_drop:g} accuracy points" if max_drop is not None else "",
              f"drift at most {max_drift:g} nats/token" if max_drift is not None else ""]
    bound_text = " and ".join(b for b in bounds if b)
    lines = list(strict_lines)
    lines.append(f"2. relaxed settings, each raced against strict at its N until decided ({confidence:.0%} "
                 f"confidence sequences: {bound_text}, and at least {min_gain:g}% faster than the best strict N "
                 "and the verifier alone):")
    rows_json = []
    holding: list[tuple[float, str]] = []
    open_ones: list[tuple[float, str]] = []
    for drafter in drafters:
        rows = rows_of(drafter)
        if not rows:
            continue
        if drafter.name:
            lines.append(f"   [{drafter.name}]")
        lines += decision_lines(rows, task_size=task_size, seconds_per_generation=drafter.seconds_per_generation,
                                resume=resume, max_drop=max_drop)
        for row in rows:
            speed = row.intervals.get(SPEED)
            estimate = speed.estimate if speed is not None and math.isfinite(speed.estimate) else 0.0
            if row.status == HOLDS:
                holding.append((estimate, row.setting))
            elif row.status not in (BREAKS, NO_PAY, "does not pay here"):
                open_ones.append((estimate, row.setting))
        if drafter.race is not None:
            rows_json.append({"drafter": drafter.name or None, "relaxed_n": drafter.relaxed_n,
                              **race_json(drafter.race, rows)})
        else:
            rows_json.append({"drafter": drafter.name or None, "relaxed_n": drafter.relaxed_n,
                              "settings": [{"setting": r.setting, "status": r.status, "screen": r.screen}
                                           for r in rows]})
    if not any(rows_of(d) for d in drafters):
        lines.append("   (no relaxed setting was tried)")
    chosen: tuple[str | None, str]
    if holding:
        chosen = (max(holding)[1], "it holds and is the fastest that does")
    elif open_ones:
        chosen = (max(open_ones)[1], "undecided here, checked anyway as the fastest not shown to break")
    else:
        chosen = (None, "no relaxed setting holds or is still open")
    return TuneAdvice(wrapped(lines), {"advice": list(lines), "races": rows_json, "chosen": chosen[0]}, chosen)


WIDTH = 120  # a terminal the advice fits without wrapping itself (the table's width too)


def wrapped(lines: Sequence[str], width: int = WIDTH) -> list[str]:
    """Each line wrapped at ``width``, its continuations indented under its text (a "   - " item under its words)."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" -0123456789."))
        out += textwrap.wrap(line, width, subsequent_indent=" " * max(lead, 3), break_long_words=False,
                             break_on_hyphens=False)
    return out


def race_tables(drafters: Sequence[DrafterRace]) -> list[str]:
    """Each drafter's race table (the live table's last state), titled."""
    out = []
    for drafter in drafters:
        rows = rows_of(drafter)
        if not rows:
            continue
        criteria = drafter.race.rules.criteria if drafter.race is not None else ()
        title = f"race{f' [{drafter.name}]' if drafter.name else ''} at N={drafter.relaxed_n}"
        spent = f", {drafter.race.state.spent} generations" if drafter.race is not None else ""
        out.append(f"{title}{spent}:\n{render_race_table(rows, criteria)}")
    return out
