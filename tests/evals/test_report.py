"""Eval reports from constructed records: paired evidence, priced speed-ups per profile, the JSON contract, plots."""

from __future__ import annotations

import json
import math

import pytest

from relaxtui.cli import main
from relaxtui.costmodel.profiles import SHIPPED, CostProfile
from relaxtui.evals.analysis.report import summarise
from relaxtui.evals.analysis.stats import paired_difference, problems_to_resolve, t_quantile_975
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import ResultsStore
from tests.support.cli import fails_with
from tests.support.eval_runs import constructed_run, record


def test_paired_interval_with_a_known_answer():
    config = {("p1", 0): 1.0, ("p2", 0): 1.0, ("p3", 0): 0.0, ("p4", 0): 1.0}
    reference = {("p1", 0): 1.0, ("p2", 0): 0.0, ("p3", 0): 0.0, ("p4", 0): 0.0, ("p5", 0): 1.0}
    diff = paired_difference(config, reference)
    # differences 0, 1, 0, 1: mean 0.5, sd sqrt(1/3), t(3) = 3.182; p5 has no partner
    half = 3.182 * math.sqrt(1 / 3) / 2
    assert (diff.pairs, diff.wins, diff.losses) == (4, 2, 0)
    assert diff.interval.mean == pytest.approx(0.5)
    assert (diff.interval.low, diff.interval.high) == pytest.approx((0.5 - half, 0.5 + half))


def test_paired_interval_averages_seeds_within_a_problem_first():
    config = {("a", 0): 1.0, ("a", 1): 0.0, ("b", 0): 1.0, ("b", 1): 1.0, ("c", 0): 0.0, ("c", 1): 0.0}
    reference = {key: 0.0 for key in config}
    diff = paired_difference(config, reference)
    # per-problem means 0.5, 1, 0 (three units, not six pairs): t with 2 degrees of freedom
    assert diff.interval.n == 3 and diff.pairs == 6
    assert diff.interval.half_width == pytest.approx(4.303 * 0.5 / math.sqrt(3))


def test_t_quantiles_and_the_problems_needed_to_resolve_a_drop():
    assert t_quantile_975(1) == 12.706 and t_quantile_975(1000) == pytest.approx(1.962, abs=1e-3)
    diff = paired_difference({(f"p{i}", 0): float(i % 4 == 0) for i in range(8)},
                             {(f"p{i}", 0): float(i % 4 == 1) for i in range(8)})
    assert diff.interval.mean == pytest.approx(0.0)
    needed = problems_to_resolve(diff, 0.05)
    half = t_quantile_975(needed - 1) * diff.interval.sd / math.sqrt(needed)
    assert needed > 8 and half <= 0.05 and t_quantile_975(needed - 2) * diff.interval.sd / math.sqrt(needed - 1) > 0.05
    worse = paired_difference({("p", 0): 0.0, ("q", 0): 0.0}, {("p", 0): 1.0, ("q", 0): 1.0})
    assert problems_to_resolve(worse, 0.05) is None  # the estimate itself is past the drop: more data won't help


def test_summary_references_speed_ups_and_proxy_by_hand():
    profile = CostProfile("unit", "", "", "", 10.0, 2.0, {1: 10.0, 2: 12.0, 4: 16.0})
    summaries = {s.label: s for s in summarise(constructed_run(), [profile])}
    base, strict, cactus = summaries["no-spec"], summaries["strict N=3"], summaries["cactus(1) N=3"]
    assert strict.reference == "no-spec" and cactus.reference == "strict N=3" and base.reference is None
    assert strict.delta.interval.mean == 0 and (cactus.delta.wins, cactus.delta.losses) == (1, 0)
    assert strict.measured_speedup.mean == pytest.approx(0.9)  # every pair 9 vs 10 tokens/s
    # proxy: 4 x 100 tokens x 10 ms over 4 x 25 rounds of (t_V(4) + 3 t_D) = 16 + 6 ms
    assert strict.proxy["unit"] == pytest.approx(4000 / (100 * 22))
    cactus_cost = 4 * (24 * 22 + (12 + 2))
    assert cactus.proxy["unit"] == pytest.approx(4800 / cactus_cost)
    assert cactus.length_adjusted["unit"] == pytest.approx(cactus.proxy["unit"] / 1.2)  # 120 vs 100 tokens


@pytest.fixture
def run_folder(tmp_path):
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "aime", "verifier": "v.gguf", "drafter": "d.gguf", "temperature": 0.6}))
    for row in constructed_run():
        store.append(row)
    return tmp_path / "run"


def test_report_json_contract(capsys, run_folder):
    assert main(["eval", "report", str(run_folder), "--profile", "paper-gb200", "--profile",
                 "paper-gb200-optimistic", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["config"] for line in lines] == ["no-spec", "strict N=3", "cactus(1) N=3"]
    for line in lines:
        for key in ("config", "rule", "knob", "draft_max", "samples", "accuracy", "priced_speedup",
                    "length_adjusted_speedup", "delta_accuracy", "delta_ci95", "pairs", "wall_clock_speedup",
                    "wall_clock_speedup_ci95"):
            assert key in line, key
        assert set(line["priced_speedup"]) == {"paper-gb200", "paper-gb200-optimistic"}
        # the names before the one vocabulary, kept for old scripts
        assert line["proxy_speedup"] == line["priced_speedup"]
        assert line["measured_speedup"] == line["wall_clock_speedup"]
    cactus = lines[2]
    # 4 problems: the table shows the interval as n/a, so the JSON gives null
    assert cactus["pairs"] == 4 and cactus["delta_accuracy"] == pytest.approx(0.25) and cactus["delta_ci95"] is None
    optimistic = SHIPPED["paper-gb200-optimistic"]
    assert cactus["priced_speedup"]["paper-gb200-optimistic"] == pytest.approx(
        480 * 12.448 / (4 * (24 * (12.448 + 3 * 3.929) + 12.448 + 3.929)))
    assert optimistic.round_cost_ms(1) == pytest.approx(12.448 + 3.929)
    for name in ("summary.csv", "summary.md", "pareto.png"):
        assert (run_folder / name).exists()


def test_a_parallel_run_reports_no_wall_clock_speed_up_but_keeps_the_proxy(capsys, tmp_path):
    """With --parallel K a verifier-alone sequence waits for its batch-mates' drafts, so per-pair tokens/s
    ratios say nothing about the configs (a K=16 math500 run showed strict at "2.6x" the verifier alone): the
    report leaves the wall-clock column out and says why; the proxy, from each config's own rounds, stays."""
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"parallel": 16, "task": "aime", "verifier": "v.gguf", "drafter": "d.gguf",
                                "temperature": 0.6}))
    for row in constructed_run():
        store.append(row)
    assert main(["eval", "report", str(tmp_path / "run"), "--profile", "paper-gb200"]) == 0
    out = capsys.readouterr().out
    assert "wall-clock: left out — this run decoded 16 sequences per batch" in out
    summaries = {s.label: s for s in summarise(constructed_run(), [SHIPPED["paper-gb200"]], wall_clock=False)}
    assert all(s.measured_speedup is None for s in summaries.values())
    with_clock = {s.label: s for s in summarise(constructed_run(), [SHIPPED["paper-gb200"]])}
    for label, summary in summaries.items():
        assert summary.proxy == with_clock[label].proxy and summary.length_adjusted == with_clock[label].length_adjusted
    assert "left out" in (tmp_path / "run" / "summary.md").read_text()


@pytest.mark.parametrize("argv,message", [
    (["--profile", "gb300"], "unknown cost profile 'gb300'"),
    (["--profile", "{folder}/broken.json"], "not a valid JSON cost profile"),
    (["--profile", "{folder}/short.json"], "has no verify cost for a block of k=4 tokens (3 drafts)"),
])
def test_report_bad_profiles_are_one_line(capsys, run_folder, argv, message):
    (run_folder / "broken.json").write_text("{oops")
    (run_folder / "short.json").write_text(CostProfile("short", "", "", "", 10.0, 1.0, {1: 10.0, 2: 11.0}).to_json())
    argv = [a.format(folder=run_folder) for a in argv]
    assert main(["eval", "report", str(run_folder), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_length_adjustment_without_a_verifier_alone_config_is_refused(capsys, tmp_path):
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "aime", "verifier": "v", "drafter": "d", "temperature": 0.6}))
    store.append(record("strict3", "strict", 3, "p1", 0, True))
    assert main(["eval", "report", str(tmp_path / "run"), "--length-adjusted"]) == 2
    assert "needs a verifier-alone config" in capsys.readouterr().err


def test_plot_labels_never_overlap():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from relaxtui.evals.analysis.plot import place_labels

    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    points = [(1.0 + 0.001 * i, 50.0 + 0.1 * (i % 3), f"config number {i}") for i in range(8)]  # nearly one spot
    axes.scatter([p[0] for p in points], [p[1] for p in points])
    axes.set_xlim(0.9, 1.2)
    axes.set_ylim(0, 100)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    boxes = [note.get_window_extent(renderer) for note in place_labels(axes, points, renderer)]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1), "labels overlap"
    frame = axes.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes), \
        "a label left the axes (it would run into the tick labels)"
    plt.close(figure)


def test_plot_y_range_fits_the_points_and_their_intervals():
    from relaxtui.evals.analysis.plot import y_range

    rows = [record("c1", "strict", 3, f"p{i}", 0, i % 4 != 0) for i in range(8)]
    rows += [record("c0", None, 0, f"p{i}", 0, i % 2 == 0) for i in range(8)]
    summaries = summarise(rows)
    low, high = y_range(summaries)
    for s in summaries:
        half = 0 if s.delta is None else s.delta.interval.half_width
        assert low <= max(-1, 100 * (s.accuracy - half)) and min(101, 100 * (s.accuracy + half)) <= high
    assert high - low < 103  # not the fixed 0..100 of before
    narrow = summarise([record("c0", None, 0, f"p{i}", 0, i < 7) for i in range(8)])
    assert y_range(narrow)[1] - y_range(narrow)[0] == pytest.approx(10)


def test_degenerate_intervals_render_n_a_and_small_or_truncated_samples_warn():
    from relaxtui.evals.analysis.report import render_table, warnings

    few = [record("c0", None, 0, f"p{i}", 0, i == 0) for i in range(3)]
    few += [record("c1", "strict", 3, f"p{i}", 0, i < 2) for i in range(3)]
    for row in few:
        row["truncated"] = True
    table = render_table(summarise(few))
    strict = next(line for line in table.splitlines() if line.startswith("strict N=3"))
    assert " n/a " in strict and "[n/a]" in strict and "±0.0" not in table
    said = warnings(summarise(few))
    assert said[0].startswith("warning: only 3 problems") and any("100% of answers hit the token budget" in line
                                                                   for line in said)
    # enough problems, every pair tied: a t interval would have no width (n/a, and tune used to floor it); Newcombe's
    # interval for 8 tied pairs, both always right, is 1 − 8/(8 + z²) = 32.4 points either way
    tied = [record("c0", None, 0, f"p{i}", 0, True) for i in range(8)]
    tied += [record("c1", "strict", 3, f"p{i}", 0, True) for i in range(8)]
    strict = next(line for line in render_table(summarise(tied)).splitlines() if line.startswith("strict N=3"))
    assert "+0.0 [-32.4, +32.4]" in strict and "1.000x [n/a]" in strict and warnings(summarise(tied)) == []
    spread = [record("c0", None, 0, f"p{i}", 0, i % 2 == 0) for i in range(8)]
    spread += [record("c1", "strict", 3, f"p{i}", 0, i % 3 == 0, tps=9.0 + i) for i in range(8)]
    assert "n/a" not in render_table(summarise(spread))


def test_this_machine_names_the_run_folders_own_profile(capsys, run_folder):
    profile = CostProfile("measured", "cpu", "v.gguf", "d.gguf", 10.0, 3.0, {1: 10.0, 4: 14.0})
    (run_folder / "measured-profile.json").write_text(profile.to_json())
    assert main(["eval", "report", str(run_folder), "--profile", "this-machine", "paper-gb200", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[1])
    assert set(line["priced_speedup"]) == {"this-machine", "paper-gb200"}
    assert main(["profiles", "show", "this-machine"]) == 2  # no folder to take it from: say where it lives
    assert "measured-profile.json" in capsys.readouterr().err


@pytest.mark.parametrize("manifest", [{"verifier": "v.gguf"}, {"task": "", "verifier": "v.gguf"}, {"task": "  "}])
def test_a_manifest_naming_no_task_is_one_line_and_nothing_is_written(capsys, run_folder, manifest):
    """It was reported as "— ? / ? (T=?)", with summary files written beside it, as if it were a run."""
    (run_folder / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(path.name for path in run_folder.iterdir())
    fails_with(capsys, ["eval", "report", str(run_folder)], "manifest.json names no task")
    assert sorted(path.name for path in run_folder.iterdir()) == before
