"""`relaxtui tune`: from eval summaries to a plain recommendation (pure; the command prints it).

Order of advice follows the paper: first the best *strict* draft length (lossless speed), then which relaxed
settings beat it — and the verifier alone: "faster" is always above 1.0x too — on speed while losing at most
``max_drop`` accuracy points. Every number is rendered by the table's own code (``report.delta_text``,
``ratio_text``), so n/a in the table is n/a here. Speed is the priced speed-up under
the primary cost profile (``this-machine``, the profile measured at the start, by default: stable on a noisy
machine, where the wall clock is not), else the wall-clock one. Capability is the paired interval against the
config's reference: a relaxed setting is recommended only when the interval's lower bound clears −max_drop; when
its estimate is inside but the interval is too wide, the advice says roughly how many problems would resolve it
(never more than the task has). Drift (``drift.py``) sits beside accuracy: with ``max_drift`` (nats per token of
the verifier's log-probability of the outputs) a setting must also be shown to drift at most that far, and for
an open-ended task (nothing scored) drift is the whole verdict.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from relaxtui.costmodel.pricing import BreakEven, break_even, rounds_break_even
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.display import WALL_CLOCK, priced_label
from relaxtui.evals.analysis.drift import logprob_delta_text
from relaxtui.evals.analysis.report import ConfigSummary, delta_text, pareto_front, ratio_text
from relaxtui.evals.analysis.stats import MIN_INTERVAL_PROBLEMS, PairedDifference, problems_to_resolve

FEW_PROBLEMS = 30  # below this, the advice carries a caveat about its intervals
DEFAULT_MAX_DRIFT = 0.1  # nats/token: the bound an open-ended task is judged by when --max-drift is not given


def drift_difference(s: ConfigSummary) -> PairedDifference | None:
    """The paired Δ verifier log-prob of a config against its reference, as the stats helpers take it."""
    signal = s.drift.get("verifier_logprob")
    if signal is None or signal.delta is None or signal.pairs == 0:
        return None
    return PairedDifference(signal.delta, signal.pairs, 0, 0)


def drift_needed(s: ConfigSummary, max_drift: float) -> int | None:
    """Problems in all that would show the log-prob drop stays within ``max_drift`` (None: it does not)."""
    difference = drift_difference(s)
    return None if difference is None else problems_to_resolve(difference, max_drift, floor=0.0)


def drift_text(s: ConfigSummary) -> str:
    """Δlogp as the drift table's cell shows it (n/a there is n/a here)."""
    if drift_difference(s) is None:
        return ""
    return f", Δlogp {logprob_delta_text(s.drift['verifier_logprob'])} nats/token"


@dataclass(frozen=True)
class Unresolved:
    summary: ConfigSummary
    problems_needed: int | None  # problems in all that would resolve --max-drop, if the estimate holds
    drift_needed: int | None = None  # the same for --max-drift (None: its estimate drifts further)
    drift_open: bool = False  # whether drift is what is unresolved
    accuracy_open: bool = True  # whether accuracy is


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
    max_drift: float | None = None  # nats/token of verifier log-prob a relaxed setting may lose (None: not judged)
    scored: bool = True  # False: an open-ended task, judged on drift alone
    not_paying: tuple[ConfigSummary, ...] = ()  # relaxed settings faster than strict yet at most 1.0x: not "faster"

    def _bounds_text(self) -> str:
        accuracy = f"lose at most {self.max_drop:g} accuracy points" if self.scored else ""
        drift = ("" if self.max_drift is None else
                 f"drift at most {self.max_drift:g} nats/token in the verifier's log-prob of their outputs")
        return " and ".join(part for part in (accuracy, drift) if part)

    def lines(self) -> list[str]:
        lines = [f"speed-up = {self.basis}"]
        if self.best_strict is None:
            lines.append("no strict configuration ran, so there is no lossless reference")
        elif self.slower is not None:
            lines.append(f"1. {self.slower}")
        else:
            lines.append(f"1. use strict speculation: {self.best_strict.label} ({_numbers(self.best_strict)})")
        if self.relaxed_winners:
            lines.append(f"2. relaxed settings faster than it that {self._bounds_text()} against their reference "
                         "(paired 95% interval):")
            lines += [f"   - {s.label} ({_numbers(s)})" for s in self.relaxed_winners]
        elif self.not_paying and not self.unresolved:
            lines.append("2. no relaxed setting pays either: " + ", ".join(
                f"{s.label} ({_speed_text(s)})" for s in self.not_paying)
                + " beat strict but not the verifier alone (1.0x)")
        else:
            lines.append(f"2. no relaxed setting is both faster and shown to {self._bounds_text()}")
        for item in self.unresolved:
            lines.append(f"   unresolved: {item.summary.label} is faster ({_numbers(item.summary)}); "
                         f"{self._more_data(item)}")
        if self.caveat:
            lines.append(f"caveat: {self.caveat}")
        return lines


    def strict_lines(self) -> list[str]:
        """What the advice says before any relaxed setting: the speed basis, then the best strict N (lossless) or
        that speculation does not pay here."""
        return self.lines()[:2]

    def _more_data(self, item: Unresolved) -> str:
        """How many problems would settle it (accuracy, then drift), bounded by what the task has."""
        parts = [self._more_for(item.problems_needed, item.summary.problems, self.max_drop, "--max-drop",
                                "its estimate is already below the allowed drop")] if item.accuracy_open else []
        if item.drift_open and self.max_drift is not None:
            parts.append("drift: " + self._more_for(item.drift_needed, item.summary.problems, self.max_drift,
                                                     "--max-drift", "its log-prob already falls further than that"))
        return "; ".join(parts)

    def _more_for(self, needed: int | None, ran: int, bound: float, option: str, beyond: str) -> str:
        if needed is None:
            return f"more data would not help: {beyond}"
        if self.task_size is not None and needed > self.task_size:
            return (f"the whole task ({self.task_size} problems) would not resolve {option} {bound:g} "
                    f"at this estimate; more seeds (--repeats) or a larger {option} might")
        more = max(needed - ran, 1)
        return (f"about {more} more problem{'s' * (more != 1)} ({needed} in all) would resolve {option} "
                f"{bound:g} if the estimate holds")


def _numbers(s: ConfigSummary) -> str:
    """The config's numbers as its table row shows them (the same cells, so n/a there is n/a here)."""
    if not s.scored:
        return f"{drift_text(s).removeprefix(', ') or 'no drift measured'}, speed-up {_speed_text(s)}"
    text = f"accuracy {100 * s.accuracy:.1f}%"
    if s.delta is not None and s.delta.pairs:
        text += f", Δ vs {s.reference} {delta_text(s)} on {s.delta.pairs} pairs"
    return text + drift_text(s) + f", speed-up {_speed_text(s)}"


def _speed_text(s: ConfigSummary) -> str:
    parts = [f"{ratio_text(value)} {priced_label(name)}" for name, value in s.proxy.items()]
    if s.speedup is not None:
        parts.append(f"{ratio_text(s.speedup)} {WALL_CLOCK}")
    return ", ".join(parts) or "-"


def faster(s: ConfigSummary, reference: ConfigSummary | None, profile: str | None) -> bool:
    """"Faster" means faster than the verifier alone (above 1.0x) and than ``reference`` (strict), both."""
    speed = speed_of(s, profile)
    return speed > 1.0 and (reference is None or speed > speed_of(reference, profile))


def speed_of(s: ConfigSummary, profile: str | None) -> float:
    if profile is not None:
        return s.proxy.get(profile, 0.0)
    return s.speedup or 0.0


def _quality(s: ConfigSummary, scored: bool) -> float:
    """What the Pareto front trades against speed: accuracy, or for an open-ended task the (negative) drift."""
    if scored:
        return 100 * s.accuracy
    difference = drift_difference(s)
    return 0.0 if s.rule is None else (-math.inf if difference is None else difference.interval.mean)


def judge(s: ConfigSummary, *, max_drop: float, max_drift: float | None, scored: bool) -> Unresolved | None:
    """None when ``s`` is shown to stay within both bounds (accuracy if scored, drift if bounded); else what is
    open and how many problems would settle it."""
    accuracy_needed = problems_to_resolve(s.delta, max_drop / 100) if scored and s.delta is not None else None
    # why the type: ignore below: s.delta is set for every scored config (summaries build it with the accuracy)
    accuracy_open = scored and (accuracy_needed is None or accuracy_needed > s.delta.interval.n)  # type: ignore[union-attr]
    drift_open, needed_drift = False, None
    if max_drift is not None:
        needed_drift = drift_needed(s, max_drift)
        signal = drift_difference(s)
        drift_open = needed_drift is None or signal is None or needed_drift > signal.interval.n
    if not accuracy_open and not drift_open:
        return None
    return Unresolved(s, accuracy_needed, needed_drift, drift_open, accuracy_open)


def recommend(summaries: list[ConfigSummary], *, max_drop: float, profile: CostProfile | None = None,
              task_size: int | None = None, max_drift: float | None = None,
              model_free: Collection[str] = ()) -> Recommendation:
    """``max_drop`` is in accuracy points; ``profile`` (if any) prices speed and the break-even line;
    ``task_size`` (the task's problems in all) bounds how many problems the advice may ask for; ``max_drift``
    (nats/token) also bounds drift — an open-ended task without one is judged at ``DEFAULT_MAX_DRIFT``;
    ``model_free``: the labels of the settings whose drafter runs no model (suffix, the n-gram kinds), for which a
    cheaper drafter is no advice."""
    scored = any(s.scored for s in summaries) if summaries else True
    if not scored and max_drift is None:
        max_drift = DEFAULT_MAX_DRIFT
    primary = profile.name if profile is not None and summaries and profile.name in summaries[0].proxy else None
    basis = (f"priced speed-up under cost profile {primary!r}" if primary is not None
             else "wall-clock speed-up vs the verifier alone (this run, on this machine)")
    placed = [s for s in summaries if primary is not None or s.speedup is not None]
    strict = [s for s in placed if s.is_strict]
    best_strict = max(strict, key=lambda s: (speed_of(s, primary), s.accuracy), default=None)
    winners: list[ConfigSummary] = []
    unresolved: list[Unresolved] = []
    not_paying: list[ConfigSummary] = []
    if best_strict is not None:
        for s in placed:
            if s.rule in (None, "strict") or speed_of(s, primary) <= speed_of(best_strict, primary) or s.delta is None:
                continue
            if not faster(s, best_strict, primary):
                not_paying.append(s)
                continue
            # resolved = the table's own interval (Newcombe's for accuracy: tied pairs keep a width) clears it
            verdict = judge(s, max_drop=max_drop, max_drift=max_drift, scored=scored)
            if verdict is None:
                winners.append(s)
            else:
                unresolved.append(verdict)
    winners.sort(key=lambda s: -speed_of(s, primary))
    front = _front(placed, primary, scored)
    problems = max((s.problems for s in placed), default=0)
    caveats = []
    if problems < MIN_INTERVAL_PROBLEMS:
        caveats.append(f"only {problems} problem{'s' * (problems != 1)}: intervals need at least "
                       f"{MIN_INTERVAL_PROBLEMS} and show n/a, so no relaxed setting can be shown to hold; rerun with "
                       "a larger --limit")
    elif problems < FEW_PROBLEMS:
        caveats.append(f"only {problems} problems: intervals over so few are wide, and pairs that all tie still leave "
                       "a wide interval (it is Newcombe's, which does not shrink to zero); rerun with a larger --limit")
    if profile is not None and primary is not None and profile.timing_stable is False:
        caveats.append(f"the timings behind profile {profile.name!r} stayed unstable when measured: these speed-ups "
                       "are rough, not a recommendation; measure again on an idle machine")
    caveat = "; ".join(caveats) or None
    slower = None
    if best_strict is not None and speed_of(best_strict, primary) <= 1.0:
        slower = (f"speculation does not pay here: the best strict config, {best_strict.label}, reaches "
                  f"{speed_of(best_strict, primary):.2f}x")
        if profile is not None:
            slower += (f"; {_break_even(profile, best_strict).need()} (it reached "
                       f"{best_strict.mean_accepted_length:.2f}); {_keep_advice(profile, best_strict, model_free)}")
    return Recommendation(basis, best_strict, winners, unresolved, front, caveat, slower, max_drop, task_size,
                          max_drift, scored, tuple(sorted(not_paying, key=lambda s: -speed_of(s, primary))))


def _front(placed: Sequence[ConfigSummary], primary: str | None, scored: bool) -> list[ConfigSummary]:
    """The settings on the speed-quality Pareto front, by speed (settings at the same point all appear)."""
    def point(s: ConfigSummary) -> tuple[float, float]:
        return speed_of(s, primary), _quality(s, scored)

    front = set(pareto_front([point(s) for s in placed]))
    return sorted((s for s in placed if point(s) in front), key=point)


def _break_even(profile: CostProfile, strict: ConfigSummary) -> BreakEven:
    """Strict's break-even: of the rounds its records ran (a priced cut verifies fewer drafts than N), else of
    rounds of N drafts."""
    if strict.rounds is None:
        return break_even(profile, strict.draft_max)
    return rounds_break_even(profile, strict.rounds, strict.draft_max)


def _keep_advice(profile: CostProfile, strict: ConfigSummary, model_free: Collection[str]) -> str:
    """What to do when strict does not pay: a cheaper drafter only where the drafter costs something — not for
    one that runs no model (its kind says so) or that the profile prices at nothing (c_rel 0)."""
    if profile.drafter_ms == 0 or strict.label in model_free:
        return ("keep the verifier alone; the drafter already costs nothing here, so a cheaper one cannot help "
                "(only drafts the verifier accepts more often could)")
    return "keep the verifier alone or a cheaper drafter"
