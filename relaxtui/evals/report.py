"""Per-config summaries of an eval run, as a table, CSV, Markdown and a capability-vs-speed-up plot.

Everything here reads result records only, so `relaxtui eval report DIR` rebuilds it without a model.
Accuracy is avg@n: the mean over problems of each problem's mean correctness over its n seeds, with a 95%
normal interval over problems. Speed-up is tokens/s against the run's own verifier-alone baseline;
S_relax = speed-up × (baseline mean length / this config's mean length) (SPEC §3).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ConfigSummary:
    label: str
    rule: str | None
    knob: float | None
    draft_max: int
    problems: int
    samples: int
    accuracy: float
    ci95: float
    mean_output_tokens: float
    truncation_rate: float
    degeneracy_rate: float
    acceptance_rate: float
    mean_accepted_length: float
    tokens_per_s: float
    speedup: float | None
    s_relax: float | None

    @property
    def is_baseline(self) -> bool:
        return self.rule is None

    @property
    def is_strict(self) -> bool:
        return self.rule == "strict"


def summarise(records: Iterable[dict[str, Any]]) -> list[ConfigSummary]:
    by_config: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_config[record["config_id"]].append(record)
    partial = [_summary(rows) for rows in by_config.values()]
    baseline = next((s for s in partial if s.is_baseline), None)
    summaries = []
    for summary in partial:
        speedup = s_relax = None
        if baseline is not None and baseline.tokens_per_s > 0:
            speedup = summary.tokens_per_s / baseline.tokens_per_s
            if summary.mean_output_tokens > 0:
                s_relax = speedup * baseline.mean_output_tokens / summary.mean_output_tokens
        summaries.append(ConfigSummary(**{**asdict(summary), "speedup": speedup, "s_relax": s_relax}))
    summaries.sort(key=lambda s: (s.rule is not None, s.rule != "strict", s.rule or "",
                                  s.knob if s.knob is not None else -1e9, s.draft_max))
    return summaries


def _summary(rows: list[dict[str, Any]]) -> ConfigSummary:
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
    return ConfigSummary(
        label=config["label"], rule=config["rule"], knob=config["knob"], draft_max=config["draft_max"],
        problems=len(per_problem), samples=len(rows), accuracy=accuracy, ci95=ci95,
        mean_output_tokens=tokens / len(rows), truncation_rate=sum(r["truncated"] for r in rows) / len(rows),
        degeneracy_rate=sum(r["degenerate"] for r in rows) / len(rows),
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted_length=1 + accepted / rounds if rounds and drafted else 1.0,
        tokens_per_s=tokens / decode if decode > 0 else 0.0, speedup=None, s_relax=None,
    )


COLUMNS = ("config", "acc", "±95%", "n", "len", "trunc", "degen", "accept", "mean len", "tok/s", "speedup",
           "S_relax")


def _row(s: ConfigSummary) -> list[str]:
    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}x"

    ci = "-" if math.isnan(s.ci95) else f"{100 * s.ci95:.1f}"
    accept = "-" if s.is_baseline else f"{s.acceptance_rate:.3f}"
    return [s.label, f"{100 * s.accuracy:.1f}", ci, str(s.samples), f"{s.mean_output_tokens:.0f}",
            f"{100 * s.truncation_rate:.0f}%", f"{100 * s.degeneracy_rate:.0f}%", accept,
            f"{s.mean_accepted_length:.2f}", f"{s.tokens_per_s:.2f}", ratio(s.speedup), ratio(s.s_relax)]


def render_table(summaries: list[ConfigSummary]) -> str:
    rows = [list(COLUMNS)] + [_row(s) for s in summaries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                               enumerate(zip(row, widths, strict=True))) for row in rows)


def render_markdown(summaries: list[ConfigSummary], title: str) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(s)) + " |" for s in summaries]
    lines += ["", "acc = avg@n accuracy (%) with a 95% normal interval over problems; len = mean output tokens; "
              "speedup = tokens/s over the run's verifier-alone baseline; S_relax = speedup x (baseline length / "
              "config length)."]
    return "\n".join(lines) + "\n"


def write_csv(summaries: list[ConfigSummary], path: Path) -> None:
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(asdict(summaries[0])) if summaries else ["label"])
        writer.writeheader()
        for summary in summaries:
            writer.writerow(asdict(summary))


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not beaten on both speed-up (x) and accuracy (y), sorted by x."""
    front = [p for p in points if not any(o[0] >= p[0] and o[1] >= p[1] and o != p for o in points)]
    return sorted(set(front))


def plot(summaries: list[ConfigSummary], path: Path, title: str) -> bool:
    """Capability vs measured speed-up, one point per config; False when there is no baseline to divide by."""
    placed = [s for s in summaries if s.speedup is not None]
    if not placed:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=120)
    for s in placed:
        style = dict(marker="s", color="black", s=70) if s.is_baseline else (
            dict(marker="*", color="tab:green", s=160) if s.is_strict else dict(marker="o", color="tab:blue", s=45))
        axes.scatter(s.speedup, 100 * s.accuracy, zorder=3, **style)
        if not math.isnan(s.ci95):
            axes.errorbar(s.speedup, 100 * s.accuracy, yerr=100 * s.ci95, color="grey", alpha=0.4, zorder=2)
        axes.annotate(s.label, (s.speedup, 100 * s.accuracy), textcoords="offset points", xytext=(5, 4),
                      fontsize=7)
    front = pareto_front([(s.speedup, 100 * s.accuracy) for s in placed])
    axes.plot([p[0] for p in front], [p[1] for p in front], "--", color="tab:red", label="Pareto front", zorder=1)
    axes.scatter([], [], marker="s", color="black", label="verifier alone")
    axes.scatter([], [], marker="*", color="tab:green", s=120, label="strict")
    axes.scatter([], [], marker="o", color="tab:blue", label="relaxed")
    axes.axvline(1.0, color="black", linewidth=0.6, alpha=0.5)
    axes.set_xlabel("measured speed-up vs verifier alone (tokens/s ratio)")
    axes.set_ylabel("accuracy (%)")
    axes.set_ylim(-3, 103)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def write_reports(directory: Path, summaries: list[ConfigSummary], title: str) -> list[Path]:
    written = [directory / "summary.csv", directory / "summary.md"]
    write_csv(summaries, written[0])
    written[1].write_text(render_markdown(summaries, title))
    if plot(summaries, directory / "pareto.png", title):
        written.append(directory / "pareto.png")
    return written
