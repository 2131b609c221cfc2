"""`relaxtui tune`: from eval summaries to a plain recommendation (pure; the command prints it).

Order of advice follows the paper: first the best *strict* draft length (lossless speed), then which relaxed
settings beat it on speed while losing at most ``max_drop`` accuracy points. Speed is the priced speed-up under
the primary cost profile (``this-machine``, the profile measured at the start, by default: stable on a noisy
machine, where the wall clock is not), else the wall-clock one. Capability is the paired interval against the
config's reference: a relaxed setting is recommended only when the interval's lower bound clears −max_drop; when
its estimate is inside but the interval is too wide, the advice says roughly how many problems would resolve it
(never more than the task has).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaxtui.costmodel.profiles import CostProfile
from relaxtui.evals.report import ConfigSummary, pareto_front
from relaxtui.evals.stats import problems_to_resolve

FEW_PROBLEMS = 30  # below this, the advice carries a caveat about its intervals


@dataclass(frozen=True)
class Unresolved:
    summary: ConfigSummary
    problems_needed: int | None  # problems in all that would resolve --max-drop, if the estimate holds


@dataclass(frozen=True)
class Recommendation:
    basis: str  # what "speed-up" means in this advice
    best_strict: ConfigSummary | None
    relaxed_winners: list[ConfigSummary]
    unresolved: list[Unresolved]
    front: list[ConfigSummary]
    caveat: str | None
    slower: str | None  # one line when speculation does not pay here, with the break-even length
    max_drop: float
    task_size: int | None = None  # problems the task has in all: advice never asks for more

    def lines(self) -> list[str]:
        lines = [f"speed-up = {self.basis}"]
        if self.best_strict is None:
            lines.append("no strict configuration ran, so there is no lossless reference")
        elif self.slower is not None:
            lines.append(f"1. {self.slower}")
        else:
            lines.append(f"1. use strict speculation: {self.best_strict.label} ({_numbers(self.best_strict)})")
        if self.relaxed_winners:
            lines.append("2. relaxed settings faster than it that lose at most "
                         f"{self.max_drop:g} accuracy points against their reference (paired 95% interval):")
            lines += [f"   - {s.label} ({_numbers(s)})" for s in self.relaxed_winners]
        else:
            lines.append("2. no relaxed setting is both faster and shown to lose at most "
                         f"{self.max_drop:g} accuracy points")
        for item in self.unresolved:
            lines.append(f"   unresolved: {item.summary.label} is faster ({_numbers(item.summary)}); "
                         f"{self._more_data(item)}")
        if self.caveat:
            lines.append(f"caveat: {self.caveat}")
        return lines


    def _more_data(self, item: Unresolved) -> str:
        """How many problems would settle it, bounded by what the task has."""
        needed, ran = item.problems_needed, item.summary.problems
        if needed is None:
            return "more data would not help: its estimate is already below the allowed drop"
        if self.task_size is not None and needed > self.task_size:
            return (f"the whole task ({self.task_size} problems) would not resolve --max-drop {self.max_drop:g} "
                    "at this estimate; more seeds (--repeats) or a larger --max-drop might")
        return (f"about {max(needed - ran, 1)} more problems ({needed} in all) would resolve --max-drop "
                f"{self.max_drop:g} if the estimate holds")


def _numbers(s: ConfigSummary) -> str:
    text = f"accuracy {100 * s.accuracy:.1f}%"
    if s.delta is not None and s.delta.pairs:
        interval = s.delta.interval
        bounds = "" if math.isnan(interval.low) else f" [{100 * interval.low:+.1f}, {100 * interval.high:+.1f}]"
        text += f", Δ vs {s.reference} {100 * interval.mean:+.1f}{bounds} on {s.delta.pairs} pairs"
    return text + f", speed-up {_speed_text(s)}"


def _speed_text(s: ConfigSummary) -> str:
    parts = [f"{value:.2f}x priced {name}" for name, value in s.proxy.items()]
    if s.speedup is not None:
        parts.append(f"{s.speedup:.2f}x wall-clock")
    return ", ".join(parts) or "-"


def speed_of(s: ConfigSummary, profile: str | None) -> float:
    if profile is not None:
        return s.proxy.get(profile, 0.0)
    return s.speedup or 0.0


def recommend(summaries: list[ConfigSummary], *, max_drop: float, profile: CostProfile | None = None,
              task_size: int | None = None) -> Recommendation:
    """``max_drop`` is in accuracy points; ``profile`` (if any) prices speed and the break-even line;
    ``task_size`` (the task's problems in all) bounds how many problems the advice may ask for."""
    primary = profile.name if profile is not None and summaries and profile.name in summaries[0].proxy else None
    basis = (f"priced speed-up under cost profile {primary!r}" if primary is not None
             else "wall-clock speed-up vs the verifier alone (this run, on this machine)")
    placed = [s for s in summaries if primary is not None or s.speedup is not None]
    strict = [s for s in placed if s.is_strict]
    best_strict = max(strict, key=lambda s: (speed_of(s, primary), s.accuracy), default=None)
    winners: list[ConfigSummary] = []
    unresolved: list[Unresolved] = []
    if best_strict is not None:
        for s in placed:
            if s.rule in (None, "strict") or speed_of(s, primary) <= speed_of(best_strict, primary) or s.delta is None:
                continue
            # resolved = the interval (its spread floored, so that a few tied pairs prove nothing) clears it
            needed = problems_to_resolve(s.delta, max_drop / 100)
            if needed is not None and needed <= s.delta.interval.n:
                winners.append(s)
            else:
                unresolved.append(Unresolved(s, needed))
    winners.sort(key=lambda s: -speed_of(s, primary))
    points = {(speed_of(s, primary), 100 * s.accuracy): s for s in placed}
    front = [points[p] for p in pareto_front(list(points))]
    problems = max((s.problems for s in placed), default=0)
    caveats = []
    if problems < 2:
        caveats.append(f"only {problems} problem(s): no paired interval can be formed; rerun with a larger --limit")
    elif problems < FEW_PROBLEMS:
        caveats.append(f"only {problems} problems: intervals over so few are rough, and pairs that all tie prove "
                       "nothing (advice treats them as if one pair disagreed); rerun with a larger --limit")
    if profile is not None and primary is not None and profile.timing_stable is False:
        caveats.append(f"the timings behind profile {profile.name!r} stayed unstable when measured: these speed-ups "
                       "are rough, not a recommendation; measure again on an idle machine")
    caveat = "; ".join(caveats) or None
    slower = None
    if best_strict is not None and speed_of(best_strict, primary) <= 1.0:
        slower = (f"speculation does not pay here: the best strict config, {best_strict.label}, reaches "
                  f"{speed_of(best_strict, primary):.2f}x")
        if profile is not None:
            slower += (f"; at N={best_strict.draft_max} it would need a mean accepted length of "
                       f"{profile.break_even_length(best_strict.draft_max):.2f} to break even (it reached "
                       f"{best_strict.mean_accepted_length:.2f}); keep the verifier alone or a cheaper drafter")
    return Recommendation(basis, best_strict, winners, unresolved, front, caveat, slower, max_drop, task_size)
