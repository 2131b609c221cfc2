"""Does the knob carry over? `tune TASK --check OTHER…` runs the setting tune recommends on TASK on other tasks,
with the same paired evidence, and says where it holds and where it breaks (pure; the command runs the evals).

The seed paper's warning for practitioners: a relaxation that trades well on AIME can wreck GPQA, so a setting is
only known to be safe on the tasks it was measured on. On each other task the relaxed setting is paired against
strict at the same N: it *holds* when its paired interval clears ``--max-drop`` (and ``--max-drift``, or drift
alone on an open-ended task) and it is still faster than strict there; it *breaks* when its estimate already
loses more than allowed; otherwise it is *unresolved*, with about how many problems would settle it.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxtui.display import WALL_CLOCK, priced_label
from relaxtui.evals.analysis.report import ConfigSummary, delta_text
from relaxtui.evals.analysis.stats import problems_to_resolve
from relaxtui.evals.analysis.tune import (
    DEFAULT_MAX_DRIFT,
    Recommendation,
    drift_difference,
    drift_needed,
    drift_text,
    faster,
    speed_of,
)

ORDER = ("breaks", "unresolved", "slower", "holds")  # the worst finding decides a task's verdict


def chosen_setting(advice: Recommendation, profile: str | None) -> tuple[ConfigSummary | None, str]:
    """The relaxed setting to carry over — the fastest recommended one, else the fastest that is unresolved but
    not already measured to lose too much — and why it was chosen (or why there is none)."""
    if advice.relaxed_winners:
        return advice.relaxed_winners[0], "recommended"
    open_ones = [u.summary for u in advice.unresolved if not (u.accuracy_open and u.problems_needed is None)
                 and not (u.drift_open and u.drift_needed is None)]
    if open_ones:
        return max(open_ones, key=lambda s: speed_of(s, profile)), "not resolved, checked anyway as the fastest"
    return None, "no relaxed setting was faster than the best strict one without a measured loss"


@dataclass(frozen=True)
class Carry:
    """The finding on one other task."""

    task: str
    verdict: str  # one of ORDER
    reasons: tuple[str, ...]


def _settle(needed: int, task_size: int | None, option: str, bound: float) -> str:
    """How many problems would settle it, never more than the task has."""
    if task_size is not None and needed > task_size:
        return f"the whole task ({task_size} problems) would not settle {option} {bound:g} at this estimate"
    return f"about {needed} problems in all would settle {option} {bound:g}"


def _accuracy(s: ConfigSummary, max_drop: float, task_size: int | None = None) -> tuple[str, str]:
    delta = s.delta
    if delta is None or delta.pairs == 0:
        return "unresolved", "no shared pairs with strict"
    interval = delta.interval
    shown = f"Δacc {delta_text(s)} on {delta.pairs} pairs"
    needed = problems_to_resolve(delta, max_drop / 100)
    if needed is None and interval.mean < -max_drop / 100:
        return "breaks", f"{shown}: loses more than {max_drop:g} points"
    if needed is None:  # the mean sits on the bound: no sample size would settle it
        return "unresolved", f"{shown}: too close to -{max_drop:g} points for any sample to settle"
    if needed > interval.n:
        return "unresolved", f"{shown}: {_settle(needed, task_size, '--max-drop', max_drop)}"
    return "holds", f"{shown}, within -{max_drop:g} points"


def _drift(s: ConfigSummary, max_drift: float, task_size: int | None = None) -> tuple[str, str]:
    difference = drift_difference(s)
    if difference is None:
        return "unresolved", "no drift measured"
    shown = drift_text(s).removeprefix(", ")
    needed = drift_needed(s, max_drift)
    if needed is None and difference.interval.mean < -max_drift:
        return "breaks", f"{shown}: drifts more than {max_drift:g} nats/token"
    if needed is None:  # the mean sits on the bound: no sample size would settle it
        return "unresolved", f"{shown}: too close to -{max_drift:g} nats/token for any sample to settle"
    if needed > difference.interval.n:
        return "unresolved", f"{shown}: {_settle(needed, task_size, '--max-drift', max_drift)}"
    return "holds", f"{shown}, within -{max_drift:g}"


def carry_over(task: str, summaries: list[ConfigSummary], setting: ConfigSummary, *, max_drop: float,
               max_drift: float | None, profile: str | None, task_size: int | None = None) -> Carry:
    """The verdict on one task for ``setting`` (matched by rule, knob and N), from that task's summaries;
    ``task_size`` (that task's problems in all) bounds how many problems the verdict may ask for."""
    relaxed = next((s for s in summaries if (s.rule, s.knob, s.draft_max) ==
                    (setting.rule, setting.knob, setting.draft_max)), None)
    strict = next((s for s in summaries if s.is_strict and s.draft_max == setting.draft_max), None)
    if relaxed is None or strict is None:
        return Carry(task, "unresolved", ("the setting or its strict reference did not run",))
    findings = []
    if relaxed.scored:
        findings.append(_accuracy(relaxed, max_drop, task_size))
    bound = max_drift if max_drift is not None else (None if relaxed.scored else DEFAULT_MAX_DRIFT)
    if bound is not None:
        findings.append(_drift(relaxed, bound, task_size))
    elif (shown := drift_text(relaxed)):
        findings.append(("holds", shown.removeprefix(", ") + " (not judged: no --max-drift)"))
    mine, theirs = speed_of(relaxed, profile), speed_of(strict, profile)
    basis = priced_label(profile) if profile else WALL_CLOCK
    speed = f"{mine:.2f}x vs strict {theirs:.2f}x ({basis})"
    if faster(relaxed, strict, profile):
        findings.append(("holds", speed))
    else:
        slower_than = "strict" if mine <= theirs else "the verifier alone (1.0x)"
        findings.append(("slower", f"not faster than {slower_than} here: {speed}"))
    verdict = min((state for state, _ in findings), key=ORDER.index)
    return Carry(task, verdict, tuple(text for _, text in findings))


def carry_lines(setting: ConfigSummary, why: str, source: str, carries: list[Carry]) -> list[str]:
    """The advice: one line per task, then where the setting holds and where it breaks."""
    lines = [f"does {setting.label} carry over? ({why} on {source}; each task paired against strict "
             f"N={setting.draft_max} there)"]
    lines += [f"  - {carry.task}: {carry.verdict} — {'; '.join(carry.reasons)}" for carry in carries]
    by_verdict = {state: [c.task for c in carries if c.verdict == state] for state in ORDER}
    parts = []
    if by_verdict["holds"]:
        parts.append(f"it holds on {', '.join(by_verdict['holds'])}")
    if by_verdict["breaks"]:
        parts.append(f"it breaks on {', '.join(by_verdict['breaks'])}")
    if by_verdict["slower"]:
        parts.append(f"it keeps capability but gains no speed on {', '.join(by_verdict['slower'])}")
    if by_verdict["unresolved"]:
        parts.append(f"unresolved on {', '.join(by_verdict['unresolved'])}")
    lines.append(f"verdict: {'; '.join(parts)} — tune each task you deploy it on" if parts else "verdict: none")
    return lines
