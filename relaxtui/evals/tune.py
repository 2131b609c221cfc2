"""`relaxtui tune`: from eval summaries to a plain recommendation (pure; the command prints it).

Order of advice follows the paper: first the best *strict* draft length (lossless speed), then which relaxed
settings, if any, beat it on speed while losing at most ``max_drop`` accuracy points — with the caveat that
on a handful of problems the 95% interval is usually wider than the drop you are willing to accept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaxtui.evals.report import ConfigSummary, pareto_front


@dataclass(frozen=True)
class Recommendation:
    best_strict: ConfigSummary | None
    relaxed_winners: list[ConfigSummary]
    front: list[ConfigSummary]
    caveat: str | None

    def lines(self, drafter_of: dict[str, str] | None = None) -> list[str]:
        def name(s: ConfigSummary) -> str:
            drafter = (drafter_of or {}).get(s.label)
            return f"{s.label}{f' [{drafter}]' if drafter else ''}"

        def numbers(s: ConfigSummary) -> str:
            return f"accuracy {100 * s.accuracy:.1f}%, speed-up {s.speedup or 0:.2f}x"

        lines = []
        if self.best_strict is None:
            lines.append("no strict configuration ran, so there is no lossless reference")
        elif (self.best_strict.speedup or 0) <= 1.0:
            lines.append(f"strict speculation does not pay on this machine: best {name(self.best_strict)} "
                         f"reaches {self.best_strict.speedup or 0:.2f}x; keep the verifier alone or a cheaper drafter")
        else:
            lines.append(f"1. use strict speculation: {name(self.best_strict)} ({numbers(self.best_strict)})")
        if self.relaxed_winners:
            lines.append("2. relaxed settings that beat it within the allowed accuracy drop:")
            lines += [f"   - {name(s)} ({numbers(s)})" for s in self.relaxed_winners]
        else:
            lines.append("2. no relaxed setting beats the best strict one within the allowed accuracy drop")
        if self.caveat:
            lines.append(f"caveat: {self.caveat}")
        return lines


def wilson_half_width(accuracy: float, n: int, z: float = 1.96) -> float:
    """Half-width of the 95% Wilson score interval: honest even at 0% or 100% on few problems."""
    if n <= 0:
        return 1.0
    denominator = 1 + z * z / n
    return z * math.sqrt(accuracy * (1 - accuracy) / n + z * z / (4 * n * n)) / denominator


def recommend(summaries: list[ConfigSummary], *, max_drop: float) -> Recommendation:
    """``max_drop`` is in accuracy points (percent)."""
    placed = [s for s in summaries if s.speedup is not None]
    strict = [s for s in placed if s.is_strict]
    best_strict = max(strict, key=lambda s: (s.speedup or 0, s.accuracy), default=None)
    winners: list[ConfigSummary] = []
    if best_strict is not None:
        floor = best_strict.accuracy - max_drop / 100
        winners = sorted((s for s in placed if s.rule not in (None, "strict") and
                          (s.speedup or 0) > (best_strict.speedup or 0) and s.accuracy >= floor),
                         key=lambda s: -(s.speedup or 0))
    points = {(s.speedup or 0, 100 * s.accuracy): s for s in placed}
    front = [points[p] for p in pareto_front(list(points))]
    problems = max((s.problems for s in placed), default=0)
    widths = [s.ci95 for s in placed if not math.isnan(s.ci95)]
    reference = best_strict.accuracy if best_strict is not None else 0.5
    # the observed interval can be 0 (every answer wrong); the Wilson interval of K problems cannot
    resolution = max([*widths, wilson_half_width(reference, problems)])
    caveat = None
    if problems < 2:
        caveat = f"only {problems} problem(s): accuracy differences cannot be told apart; rerun with a larger --limit"
    elif 100 * resolution > max_drop:
        caveat = (f"with {problems} problems the 95% interval is up to ±{100 * resolution:.1f} points, wider than "
                  f"--max-drop {max_drop:g}: these accuracy differences are not resolved; rerun with a larger "
                  "--limit before trusting a relaxed setting")
    return Recommendation(best_strict, winners, front, caveat)
