"""The capability-vs-speed plot: one panel per cost profile (or the wall-clock speed-up when no profile is given),
and a drift panel (the verifier's log-probability of the outputs against the reference) beside them.

x is the speed-up, y the accuracy (or the drift); each config's error bar is its paired 95% interval against its
reference (strict at the same N, else the verifier alone), drawn around its own value. Labels are placed by a small
greedy search over offsets so that no two labels, and no label and point, overlap, and no label leaves the
axes (where it would run into tick labels) — a plot where two configs land on the same spot still reads. The
legend sits below the panels, outside the data, and the y range fits the points and their intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaxtui.evals.analysis.report import ConfigSummary, pareto_front, profile_names

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.text import Annotation

# candidate label offsets in points, nearest first: right, above, left, below, then diagonals, then further out
_OFFSETS = [(dx * r, dy * r) for r in (1, 2, 3, 4, 6)
            for dx, dy in ((6, 4), (6, -10), (-6, 4), (-6, -10), (0, 10), (0, -16), (10, 0), (-10, 0))]


def panels(summaries: Sequence[ConfigSummary]) -> list[tuple[str, dict[str, float]]]:
    """(title, {label: x}) per panel: the length-adjusted priced speed-up per profile when available, else
    the priced one; with no profile, the wall-clock speed-up."""
    result: list[tuple[str, dict[str, float]]] = []
    for name in profile_names(summaries):
        adjusted = all(s.length_adjusted.get(name) is not None for s in summaries)
        values = ({s.label: x for s in summaries if (x := s.length_adjusted.get(name)) is not None} if adjusted
                  else {s.label: s.proxy[name] for s in summaries})
        kind = "length-adjusted priced speed-up" if adjusted else "priced speed-up"
        result.append((f"{kind}, profile {name}", values))
    if not result:
        measured = {s.label: s.speedup for s in summaries if s.speedup is not None}
        if measured:
            result.append(("wall-clock speed-up vs verifier alone (tokens/s, geometric mean of pairs)", measured))
    return result


def place_labels(axes: Axes, points: list[tuple[float, float, str]], renderer: RendererBase) -> list[Annotation]:
    """Annotate each point with its label at the first offset whose box overlaps no earlier label and no point
    and stays inside the axes; returns the annotations (their boxes are pairwise disjoint when some free offset
    existed)."""
    frame = axes.get_window_extent(renderer)
    inside = (frame.x0, frame.y0, frame.x1, frame.y1)
    taken: list[tuple[float, float, float, float]] = []
    point_boxes: list[tuple[float, float, float, float]] = []
    for x, y, _ in points:
        px, py = axes.transData.transform((x, y))
        point_boxes.append((px - 4, py - 4, px + 4, py + 4))
    annotations = []
    for x, y, label in sorted(points, key=lambda p: (-p[1], p[0])):
        chosen = None
        for dx, dy in _OFFSETS:
            note = axes.annotate(label, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7,
                                 ha="left" if dx >= 0 else "right")
            box = note.get_window_extent(renderer)
            bounds = (box.x0, box.y0, box.x1, box.y1)
            clash = not _within(bounds, inside) or any(_overlap(bounds, other) for other in taken + point_boxes)
            if not clash:
                chosen = note
                taken.append(bounds)
                break
            note.remove()
        if chosen is None:  # crowded: fall back to the farthest offset (still drawn, flagged by the test)
            chosen = axes.annotate(label, (x, y), textcoords="offset points", xytext=_OFFSETS[-1], fontsize=7)
            box = chosen.get_window_extent(renderer)
            taken.append((box.x0, box.y0, box.x1, box.y1))
        annotations.append(chosen)
    return annotations


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _within(a: tuple[float, float, float, float], frame: tuple[float, float, float, float]) -> bool:
    return a[0] >= frame[0] and a[1] >= frame[1] and a[2] <= frame[2] and a[3] <= frame[3]


def y_range(summaries: Sequence[ConfigSummary]) -> tuple[float, float]:
    """Accuracy limits (%) that hold every point and its interval with a margin, within 0..100, at least 10 high."""
    lows, highs = [], []
    for s in summaries:
        half = 0.0 if s.delta is None or math.isnan(s.delta.interval.half_width) else s.delta.interval.half_width
        lows.append(100 * (s.accuracy - half))
        highs.append(100 * (s.accuracy + half))
    low, high = min(lows, default=0.0), max(highs, default=100.0)
    pad = max(2.0, 0.08 * (high - low))
    low, high = max(-1.0, low - pad), min(101.0, high + pad)
    if high - low < 10:
        middle = (high + low) / 2
        low, high = max(-1.0, middle - 5), min(101.0, middle + 5)
    return low, high


def _style(s: ConfigSummary) -> dict[str, Any]:  # scatter's keyword arguments
    if s.is_baseline:
        return dict(marker="s", color="black", s=70)
    return dict(marker="*", color="tab:green", s=160) if s.is_strict else dict(marker="o", color="tab:blue", s=45)


def drift_of(s: ConfigSummary) -> tuple[float, float] | None:
    """(Δ verifier log-prob vs the reference, half-width of its paired interval) — 0 for the verifier alone."""
    signal = s.drift.get("verifier_logprob")
    if s.is_baseline:
        return 0.0, 0.0
    if signal is None or signal.delta is None or math.isnan(signal.delta.mean):
        return None
    half = signal.delta.half_width
    return signal.delta.mean, 0.0 if math.isnan(half) else half


def _panel(axes: Axes, summaries: Sequence[ConfigSummary], xs: dict[str, float], title: str,
           ys: dict[str, tuple[float, float]], ylabel: str,
           limits: tuple[float, float]) -> list[tuple[float, float, str]]:
    """One scatter panel: each config at (x, y) with its paired interval as an error bar; returns label points."""
    placed = [s for s in summaries if xs.get(s.label) is not None and s.label in ys]
    for s in placed:
        x, (y, half) = xs[s.label], ys[s.label]
        axes.scatter(x, y, zorder=3, **_style(s))
        if half > 0:
            axes.errorbar(x, y, yerr=half, color="grey", alpha=0.5, zorder=2, capsize=3)
    front = pareto_front([(xs[s.label], ys[s.label][0]) for s in placed])
    axes.plot([p[0] for p in front], [p[1] for p in front], "--", color="tab:red", label="Pareto front", zorder=1)
    axes.axvline(1.0, color="black", linewidth=0.6, alpha=0.5)
    axes.set_xlabel(title, fontsize=8)
    axes.set_ylabel(ylabel, fontsize=8)
    axes.set_ylim(*limits)
    if placed:
        low, high = min(xs[s.label] for s in placed), max(xs[s.label] for s in placed)
        axes.set_xlim(min(low, 1.0) - 0.15 * max(high - low, 0.2), max(high, 1.0) + 0.45 * max(high - low, 0.2))
    axes.grid(alpha=0.3)
    return [(xs[s.label], ys[s.label][0], s.label) for s in placed]


def drift_range(values: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Limits that hold every Δlog-prob and its interval, with a margin, at least 0.1 nats high."""
    low = min((y - h for y, h in values), default=-0.05)
    high = max((y + h for y, h in values), default=0.05)
    pad = max(0.01, 0.1 * (high - low))
    low, high = low - pad, high + pad
    if high - low < 0.1:
        middle = (high + low) / 2
        low, high = middle - 0.05, middle + 0.05
    return low, high


def plot(summaries: Sequence[ConfigSummary], path: Path, title: str) -> bool:
    """Write the PNG; False when there is nothing to place on an x axis (no baseline and no profile).

    Accuracy panels (one per profile) for a scored task, then one drift panel: the verifier's mean log-probability
    of the emitted tokens against the reference (Δ nats/token, paired interval) over the first panel's speed-up.
    An open-ended task has only the drift panel."""
    layout = panels(summaries)
    if not layout:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scored = any(s.scored for s in summaries)
    drifts = {s.label: d for s in summaries if (d := drift_of(s)) is not None}
    with_drift = any(not s.is_baseline for s in summaries if s.label in drifts)
    accuracy_layout = layout if scored else []
    count = len(accuracy_layout) + (1 if with_drift or not accuracy_layout else 0)
    figure, axes_list = plt.subplots(1, count, figsize=(max(7.5 * count, 9.5), 5.8), dpi=120, squeeze=False)
    labelled = []
    for axes, (panel_title, xs) in zip(axes_list[0], accuracy_layout, strict=False):
        ys = {}
        for s in summaries:
            half = 0.0 if s.delta is None or math.isnan(s.delta.interval.half_width) else s.delta.interval.half_width
            ys[s.label] = (100 * s.accuracy, 100 * half)
        placed = [s for s in summaries if xs.get(s.label) is not None]
        labelled.append((axes, _panel(axes, summaries, xs, panel_title, ys,
                                      "accuracy (%) ± paired 95% interval vs reference", y_range(placed))))
    if count > len(accuracy_layout):
        axes, (panel_title, xs) = axes_list[0][-1], layout[0]
        labelled.append((axes, _panel(axes, summaries, xs, panel_title, drifts,
                                      "Δ verifier log-prob vs reference (nats/token) ± paired 95%",
                                      drift_range(list(drifts.values())))))
        axes.axhline(0.0, color="black", linewidth=0.6, alpha=0.5)
    legend = [plt.Line2D([], [], linestyle="--", color="tab:red", label="Pareto front"),
              plt.Line2D([], [], marker="s", color="black", linestyle="", label="verifier alone"),
              plt.Line2D([], [], marker="*", color="tab:green", linestyle="", markersize=11, label="strict"),
              plt.Line2D([], [], marker="o", color="tab:blue", linestyle="", label="relaxed")]
    figure.legend(handles=legend, loc="lower center", ncol=len(legend), fontsize=8, frameon=False)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.canvas.draw()  # labels last: data-to-pixel transforms are final only after layout and a draw
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas has it; typed as the base
    for axes, points in labelled:
        place_labels(axes, points, renderer)
    import io

    from relaxtui.files import write_atomic

    image = io.BytesIO()
    figure.savefig(image, format="png")
    plt.close(figure)
    write_atomic(path, image.getvalue())  # a link planted as pareto.png is replaced, never written through
    return True
