"""Per-config summaries of an eval run: capability with paired evidence, speed on the wall clock and priced.

Everything here reads result records (and cost profiles) only, so `relaxtui eval report DIR` rebuilds it
without a model. Accuracy is avg@n with a 95% interval over problems. Each config is compared with its
*reference* — strict at the same N when the run has it, else the verifier alone — on the (problem, seed)
pairs both ran: Δaccuracy with a paired 95% interval (Newcombe's score interval for paired proportions, inside
±100 points by construction), wins and losses. Speed is reported two ways (see docs/metrics.md): the
*wall-clock* speed-up (geometric mean of per-pair tokens/s ratios against the verifier alone, this run on this
machine, with its interval), and for each cost profile the *priced* speed-up (the
run's own rounds priced by the profile; the profile a run measures at its start is named ``this-machine``)
and its length-adjusted value (divided by the output-length ratio against the verifier alone on shared pairs).
An interval over fewer than ``MIN_INTERVAL_PROBLEMS`` problems, or a t interval with no spread at all, is shown
as n/a — in the table, as null in the JSON, and as n/a in tune's advice (``stats.says_nothing`` decides for all).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaxtui.costmodel.pricing import Rounds, priced_speedup, rounds_of_records
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.display import WALL_CLOCK, one_line, priced_label
from relaxtui.evals.analysis.drift import DRIFT_COLUMNS, DRIFT_FOOTNOTE, SIGNALS, Signal, drift_row, signals
from relaxtui.evals.analysis.stats import (
    MIN_INTERVAL_PROBLEMS,
    MeanInterval,
    PairedDifference,
    geometric_mean_ratio,
    paired_proportion_difference,
    pairs_of,
    says_nothing,
)


@dataclass(frozen=True)
class ConfigSummary:
    label: str
    rule: str | None
    knob: float | None
    draft_max: int
    problems: int
    samples: int
    accuracy: float
    ci95: float  # unpaired, over problems
    mean_output_tokens: float
    truncation_rate: float
    degeneracy_rate: float
    acceptance_rate: float
    mean_accepted_length: float
    tokens_per_s: float
    measured_speedup: MeanInterval | None = None  # vs the verifier alone, per pair, geometric mean
    proxy: dict[str, float] = field(default_factory=dict)  # profile name -> proxy speed-up
    length_adjusted: dict[str, float | None] = field(default_factory=dict)
    reference: str | None = None  # label of the config Δaccuracy is measured against
    delta: PairedDifference | None = None
    drift: dict[str, Signal] = field(default_factory=dict)  # label-free signals against the reference (drift.py)
    scored: bool = True  # False for an open-ended task (answer kind "none"): accuracy means nothing
    failed: int = 0  # samples whose row failed at run time (scored wrong; the reason is each record's detail)
    rounds: Rounds | None = None  # the rounds its records ran, pooled (what a verdict on them prices: ``pricing``)

    @property
    def is_baseline(self) -> bool:
        return self.rule is None

    @property
    def is_strict(self) -> bool:
        return self.rule == "strict"

    @property
    def speedup(self) -> float | None:
        """The measured speed-up's point value (None without a verifier-alone config)."""
        return None if self.measured_speedup is None else self.measured_speedup.mean

    def as_dict(self) -> dict[str, Any]:
        """The `eval report --json` object of this config (the contract names come first): the table's twin —
        null where the table shows "-" (an open-ended task's accuracy, the verifier alone's acceptance) and for an
        interval it shows as n/a; every interval is [low, high]."""
        delta = self.delta if self.scored and self.delta is not None and self.delta.pairs else None
        measured = self.measured_speedup
        return {
            "config": self.label, "rule": self.rule, "knob": self.knob, "draft_max": self.draft_max,
            "samples": self.samples, "accuracy": _finite(self.accuracy) if self.scored else None,
            "priced_speedup": {name: _finite(value) for name, value in self.proxy.items()},
            "length_adjusted_speedup": {name: _finite(value) for name, value in self.length_adjusted.items()},
            "delta_accuracy": None if delta is None else _finite(delta.interval.mean),
            "delta_ci95": None if delta is None else _bounds(delta),
            "pairs": None if delta is None else delta.pairs,
            "wins": None if delta is None else delta.wins, "losses": None if delta is None else delta.losses,
            "reference": self.reference, "problems": self.problems,
            "accuracy_ci95": self.accuracy_bounds() if self.scored else None,
            "wall_clock_speedup": None if measured is None else _finite(measured.mean),
            "wall_clock_speedup_ci95": None if measured is None else (
                [1.0, 1.0] if self.is_baseline else _bounds(measured)),
            "mean_output_tokens": self.mean_output_tokens, "truncation_rate": self.truncation_rate,
            "degeneracy_rate": self.degeneracy_rate,
            "acceptance_rate": None if self.is_baseline else self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length, "tokens_per_s": self.tokens_per_s,
            "scored": self.scored, "failed": self.failed,
            # issue 19's label-free drift signals, each {value, delta, ci_low, ci_high, pairs} against the reference
            **{name: self.drift.get(name, Signal(None, None)).as_dict() for name in SIGNALS},
            # the names before issue 18's vocabulary, kept for scripts written against them
            "proxy_speedup": {name: _finite(value) for name, value in self.proxy.items()},
            "measured_speedup": None if measured is None else _finite(measured.mean),
        }

    def accuracy_bounds(self) -> list[float] | None:
        """The unpaired ±95% interval as [low, high], clipped to what an accuracy can be; None where the table
        shows n/a (fewer than MIN_INTERVAL_PROBLEMS problems, or no spread)."""
        if self.problems < MIN_INTERVAL_PROBLEMS or not self.ci95 > 0:
            return None
        return [max(0.0, self.accuracy - self.ci95), min(1.0, self.accuracy + self.ci95)]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _bounds(difference: PairedDifference | MeanInterval) -> list[float | None] | None:
    """An interval as the JSON gives it: [low, high], or None where the table shows it as n/a."""
    if says_nothing(difference):
        return None
    interval = difference.interval if isinstance(difference, PairedDifference) else difference
    return [_finite(interval.low), _finite(interval.high)]


def _label(config: dict[str, Any]) -> str:
    """A config's label as every view shows it: one printable line (records are outside input)."""
    return one_line(config["label"])


TRUNCATION_WARNING = 0.5  # a config whose answers hit the token budget this often gets a warning line

SHARED_BATCHES_NOTE = (
    "wall-clock: left out — this run decoded {k} sequences per batch, so a sequence's tokens/s (the tok/s column "
    "too) depends on its batch-mates (a verifier-alone sequence waits for the others' drafts), not on its own "
    "config; compare speed by the priced columns (each config's own rounds, priced), or rerun with --parallel 1 "
    "for wall-clock ratios.")


def summarise(records: Iterable[dict[str, Any]], profiles: Sequence[CostProfile] = (), *,
              wall_clock: bool = True) -> list[ConfigSummary]:
    """Per-config summaries. ``wall_clock=False`` (a --parallel run) leaves out the measured speed-up: sequences
    that shared batches did not each run at their own config's speed."""
    by_config: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_config[record["config_id"]].append(record)
    groups = list(by_config.values())
    baseline = next((rows for rows in groups if rows[0]["config"]["rule"] is None), None)
    strict_at = {rows[0]["config"]["draft_max"]: rows for rows in groups if rows[0]["config"]["rule"] == "strict"}
    summaries = []
    for rows in groups:
        config = rows[0]["config"]
        reference = None if config["rule"] is None else (
            baseline if config["rule"] == "strict" else strict_at.get(config["draft_max"], baseline))
        summaries.append(_summary(rows, baseline if wall_clock else None, reference, profiles,
                                  length_baseline=baseline))
    summaries.sort(key=lambda s: (s.rule is not None, s.rule != "strict", s.rule or "",
                                  s.knob if s.knob is not None else -1e9, s.draft_max))
    return summaries


def _summary(rows: list[dict[str, Any]], baseline: list[dict[str, Any]] | None,
             reference: list[dict[str, Any]] | None, profiles: Sequence[CostProfile], *,
             length_baseline: list[dict[str, Any]] | None) -> ConfigSummary:
    config = rows[0]["config"]
    per_problem: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        per_problem[row["problem_id"]].append(bool(row["correct"]))
    problem_means = [sum(v) / len(v) for v in per_problem.values()]
    accuracy = sum(problem_means) / len(problem_means)
    if len(problem_means) > 1:
        variance = sum((m - accuracy) ** 2 for m in problem_means) / (len(problem_means) - 1)
        ci95 = 1.96 * math.sqrt(variance / len(problem_means))
    else:
        ci95 = float("nan")
    tokens = sum(r["output_tokens"] for r in rows)
    decode = sum(r["decode_s"] for r in rows)
    drafted, accepted, rounds = (sum(r[k] for r in rows) for k in ("drafted", "accepted", "rounds"))
    measured = delta = None
    if baseline is not None and baseline is not rows:
        measured = geometric_mean_ratio(pairs_of(rows, "tokens_per_s"), pairs_of(baseline, "tokens_per_s"))
    elif baseline is rows:
        measured = MeanInterval(1.0, 1.0, 1.0, len(per_problem), 0.0)
    if reference is not None:
        delta = paired_proportion_difference(pairs_of(rows, "correct"), pairs_of(reference, "correct"))
    proxy = {p.name: _proxy(p, rows) for p in profiles}
    length_ratio = _length_ratio(rows, length_baseline) if length_baseline is not None else None
    adjusted = {name: (value / length_ratio if length_ratio else None) for name, value in proxy.items()}
    return ConfigSummary(
        drift=signals(rows, reference), scored=any(r.get("scored", True) for r in rows),
        failed=sum(r.get("failed") is True for r in rows),
        label=_label(config), rule=config["rule"], knob=config["knob"], draft_max=config["draft_max"],
        problems=len(per_problem), samples=len(rows), accuracy=accuracy, ci95=ci95,
        mean_output_tokens=tokens / len(rows), truncation_rate=sum(r["truncated"] for r in rows) / len(rows),
        degeneracy_rate=sum(r["degenerate"] for r in rows) / len(rows),
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted_length=1 + accepted / rounds if rounds and drafted else 1.0,
        tokens_per_s=tokens / decode if decode > 0 else 0.0, measured_speedup=measured, proxy=proxy,
        length_adjusted=adjusted, reference=None if reference is None else _label(reference[0]["config"]),
        delta=delta, rounds=rounds_of_records(rows),
    )


def _proxy(profile: CostProfile, rows: list[dict[str, Any]]) -> float:
    """The paper's aggregate, pooled: the verifier alone writing all these tokens over all the rounds, both priced
    by the profile (`pricing`, as every face prices: the verifier alone itself comes to exactly 1)."""
    return priced_speedup(profile, rounds_of_records(rows))


def _length_ratio(rows: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> float | None:
    """Output-length ratio config / verifier alone over the (problem, seed) pairs both ran."""
    mine, theirs = pairs_of(rows, "output_tokens"), pairs_of(baseline, "output_tokens")
    shared = set(mine) & set(theirs)
    base = sum(theirs[key] for key in shared)
    return sum(mine[key] for key in shared) / base if shared and base > 0 else None


# -- rendering ------------------------------------------------------------------------------------------------------
def _ratio(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}x"


ratio_text = _ratio  # a speed-up as the table's cells show it (tune's advice prints the same text)


def delta_text(s: ConfigSummary) -> str:
    """Δaccuracy in points with its paired interval, exactly as the table's cell (tune's advice prints this)."""
    if not s.scored or s.delta is None or s.delta.pairs == 0:
        return "-"
    interval = s.delta.interval
    bounds = " [n/a]" if says_nothing(s.delta) else f" [{100 * interval.low:+.1f}, {100 * interval.high:+.1f}]"
    return f"{100 * interval.mean:+.1f}{bounds}"


def _delta(s: ConfigSummary) -> tuple[str, str]:
    if s.delta is None or s.delta.pairs == 0:
        return "-", "-"
    return delta_text(s), f"{s.delta.wins}/{s.delta.losses}/{s.delta.pairs}"


def columns(profiles: Sequence[str]) -> list[str]:
    names = ["config", "acc", "±95%", "Δacc vs ref [paired 95%]", "W/L/pairs", "len", "trunc", "degen", "accept",
             "mean len", "tok/s", WALL_CLOCK]
    for name in profiles:
        names += [priced_label(name), f"len-adj {name}"]
    return names


def row(s: ConfigSummary, profiles: Sequence[str]) -> list[str]:
    ci = "n/a" if s.problems < MIN_INTERVAL_PROBLEMS or not s.ci95 > 0 else f"{100 * s.ci95:.1f}"
    accept = "-" if s.is_baseline else f"{s.acceptance_rate:.3f}"
    delta, record = _delta(s)
    measured = s.measured_speedup
    speed = "-" if measured is None else (
        _ratio(measured.mean) + ("" if s.is_baseline else " [n/a]" if says_nothing(measured) else
                                 f" [{measured.low:.2f}, {measured.high:.2f}]"))
    accuracy = f"{100 * s.accuracy:.1f}"
    if not s.scored:  # an open-ended task: nothing was judged, so there is no accuracy to show
        accuracy, ci, delta, record = "-", "-", "-", "-"
    cells = [s.label, accuracy, ci, delta, record, f"{s.mean_output_tokens:.0f}",
             f"{100 * s.truncation_rate:.0f}%", f"{100 * s.degeneracy_rate:.0f}%", accept,
             f"{s.mean_accepted_length:.2f}", f"{s.tokens_per_s:.2f}", speed]
    for name in profiles:
        cells += [_ratio(s.proxy.get(name)), _ratio(s.length_adjusted.get(name))]
    return cells


def profile_names(summaries: Sequence[ConfigSummary]) -> list[str]:
    return list(summaries[0].proxy) if summaries else []


TABLE_WIDTH = 120  # a terminal table's widest line: wider, its columns wrap into blocks that each repeat the first


def grid(rows: list[list[str]], width: int = TABLE_WIDTH, gap: int = 2) -> str:
    """Rows as aligned columns ``gap`` spaces apart (the first left, the rest right); a table wider than ``width`` is
    cut into as few blocks of consecutive columns as fit, as even as they can be, each led by the first column again,
    one under the other with a blank line between."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n\n".join("\n".join((" " * gap).join([r[0].ljust(widths[0]), *(r[i].rjust(widths[i]) for i in block)])
                                   .rstrip() for r in rows) for block in _blocks(widths, width, gap))


def _blocks(widths: Sequence[int], width: int, gap: int) -> list[range]:
    """The columns after the first in the fewest consecutive blocks whose lines fit ``width`` (a column wider than
    that alone gets a block of its own), the widest block as narrow as it can be."""
    cost = [gap + w for w in widths[1:]]
    lead, n = widths[0], len(cost)
    for count in range(1, n + 1):
        # best[j][i]: (the widest block, the split) of the first i columns in j blocks
        best: list[list[tuple[float, list[int]]]] = [[(math.inf, [])] * (n + 1) for _ in range(count + 1)]
        best[0][0] = (0, [])
        for j in range(1, count + 1):
            for i in range(j, n + 1):
                for start in range(j - 1, i):
                    line = lead + sum(cost[start:i])
                    if line > width and i - start > 1:
                        continue
                    widest = max(best[j - 1][start][0], line)
                    if widest < best[j][i][0]:
                        best[j][i] = (widest, [*best[j - 1][start][1], start])
        widest, starts = best[count][n]
        if widest <= width or count == n:
            edges = [*starts, n]
            return [range(1 + edges[k], 1 + edges[k + 1]) for k in range(count)]
    return [range(1, n + 1)]


def drift_rows(summaries: Sequence[ConfigSummary]) -> list[list[str]]:
    return [drift_row(s.label, s.drift, few=MIN_INTERVAL_PROBLEMS) for s in summaries]


def render_table(summaries: list[ConfigSummary]) -> str:
    names = profile_names(summaries)
    return grid([columns(names)] + [row(s, names) for s in summaries])


def render_drift_table(summaries: list[ConfigSummary]) -> str:
    """The drift table: label-free signals of each config against its reference, printed below the summary."""
    return "drift vs reference\n" + grid([DRIFT_COLUMNS, *drift_rows(summaries)])


FOOTNOTE = (
    "acc = avg@n accuracy (%) with a 95% interval over problems; Δacc vs ref = accuracy minus the reference's "
    "(strict at the same N, else the verifier alone) on the (problem, seed) pairs both ran, paired 95% interval in "
    "points (Newcombe's score interval for paired proportions); W/L/pairs = pairs the config got right and the "
    "reference wrong / the reverse / pairs compared; len = mean output tokens; wall-clock = geometric mean of "
    "per-pair tokens/s ratios against the verifier alone, this run on this machine [95%]; priced P = output "
    "tokens priced as verifier steps over the run's rounds priced by "
    "cost profile P (this-machine = the profile the run measured at its start); len-adj P = priced / (output "
    f"length ratio against the verifier alone on shared pairs); n/a = an interval over fewer than "
    f"{MIN_INTERVAL_PROBLEMS} problems (or, for a t interval, with no spread), which says nothing.")


def unstable_profiles(profiles: Sequence[CostProfile]) -> list[str]:
    """One warning per profile whose timings stayed implausible when it was measured: its prices are rough."""
    return [f"warning: profile {one_line(p.name)}: its timings stayed unstable when measured (widest spread of a "
            f"part {'?' if p.timing_spread is None else f'±{p.timing_spread / 2:.0%}'}); its priced speed-ups are "
            "rough — measure again on an idle machine (delete the run folder's measured-profile.json)"
            for p in profiles if p.timing_stable is False]


def warnings(summaries: Sequence[ConfigSummary]) -> list[str]:
    """Lines that keep a small or truncated sample from reading as confident."""
    lines = []
    if summaries and not any(s.scored for s in summaries):
        lines.append("open-ended task (answer kind 'none'): nothing is scored, so the drift signals are the verdict")
    problems = max((s.problems for s in summaries), default=0)
    if 0 < problems < MIN_INTERVAL_PROBLEMS:
        lines.append(f"warning: only {problems} problem{'s' * (problems != 1)}: intervals need at least "
                     f"{MIN_INTERVAL_PROBLEMS} and are shown as n/a; rerun with a larger --limit")
    for s in summaries:
        if s.failed:
            lines.append(f"warning: {s.label}: {s.failed} of {s.samples} samples failed at run time and count as "
                         "wrong; each record's detail in results.jsonl says why")
        if s.truncation_rate >= TRUNCATION_WARNING:
            scores = "its accuracy scores" if s.scored else "its drift signals read"
            lines.append(f"warning: {s.label}: {100 * s.truncation_rate:.0f}% of answers hit the token budget, so "
                         f"{scores} cut-off answers; raise --max-tokens")
    return lines


def render_markdown(summaries: list[ConfigSummary], title: str, profiles: Sequence[CostProfile] = (),
                    note: str | None = None) -> str:
    names = profile_names(summaries)
    header = columns(names)
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row(s, names)) + " |" for s in summaries]
    lines += ["", "## Drift vs reference", "", "| " + " | ".join(DRIFT_COLUMNS) + " |",
              "|" + "---|" * len(DRIFT_COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in drift_rows(summaries)]
    lines += ["", *(f"- {line}" for line in warnings(summaries)), "", FOOTNOTE, "", DRIFT_FOOTNOTE,
              *([f"\n{note}"] if note else [])]
    for profile in profiles:
        lines.append(f"\nProfile `{profile.name}`: {profile.hardware}; verifier {profile.verifier}, drafter "
                     f"{profile.drafter}; t_AR {profile.verifier_ar_ms:.3f} ms, t_D {profile.drafter_ms:.3f} ms, "
                     f"{profile.pricing} pricing. {profile.source}")
    return "\n".join(lines) + "\n"


def csv_text(summaries: list[ConfigSummary]) -> str:
    flat = [_flatten(s.as_dict()) for s in summaries]
    fields = list(dict.fromkeys(key for item in flat for key in item)) or ["config"]
    stream = io.StringIO(newline="")
    writer = csv.DictWriter(stream, fieldnames=fields)
    writer.writeheader()
    writer.writerows(flat)
    return stream.getvalue()


def _flatten(data: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update({f"{key}[{name}]": item for name, item in value.items()})
        elif isinstance(value, list):
            flat.update({f"{key}_low": value[0], f"{key}_high": value[1]})
        else:
            flat[key] = value
    return flat


def json_lines(summaries: list[ConfigSummary]) -> str:
    return "\n".join(json.dumps(s.as_dict()) for s in summaries)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not beaten on both speed-up (x) and accuracy (y), sorted by x."""
    front = [p for p in points if not any(o[0] >= p[0] and o[1] >= p[1] and o != p for o in points)]
    return sorted(set(front))


def write_reports(directory: Path, summaries: list[ConfigSummary], title: str,
                  profiles: Sequence[CostProfile] = (), note: str | None = None) -> list[Path]:
    from relaxtui.evals.analysis.plot import plot
    from relaxtui.files import write_atomic

    title = one_line(title)
    written = [directory / "summary.csv", directory / "summary.md"]
    write_atomic(written[0], csv_text(summaries))
    write_atomic(written[1], render_markdown(summaries, title, profiles, note))
    if plot(summaries, directory / "pareto.png", title):
        written.append(directory / "pareto.png")
    return written
