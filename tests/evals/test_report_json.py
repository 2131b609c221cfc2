"""`eval report --json` is the table's twin: every cell the tables show has its JSON key, null where the cell is
"-" or an n/a interval, every interval [low, high]; and a record whose numbers no run can write is refused when
the folder is read, so nothing prints as "-inf%"."""

from __future__ import annotations

import json
import math

import pytest

from relaxtui.cli import main
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.evals.analysis.drift import DRIFT_COLUMNS, drift_row
from relaxtui.evals.analysis.report import (
    MIN_INTERVAL_PROBLEMS,
    columns,
    profile_names,
    row,
    summarise,
    unstable_profiles,
)
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import ResultsStore
from tests.support.eval_runs import constructed_run, drift_run, record

PROFILE = CostProfile("unit", "", "", "", 10.0, 2.0, {1: 10.0, 2: 12.0, 4: 16.0})

# summary table column -> (JSON key of its value, JSON key of its interval or None); "priced P"/"len-adj P" below
SUMMARY_TWINS = {
    "config": ("config", None), "acc": ("accuracy", None), "±95%": (None, "accuracy_ci95"),
    "Δacc vs ref [paired 95%]": ("delta_accuracy", "delta_ci95"), "W/L/pairs": ("pairs", None),
    "len": ("mean_output_tokens", None), "trunc": ("truncation_rate", None), "degen": ("degeneracy_rate", None),
    "accept": ("acceptance_rate", None), "mean len": ("mean_accepted_length", None), "tok/s": ("tokens_per_s", None),
    "wall-clock": ("wall_clock_speedup", "wall_clock_speedup_ci95"),
}
# drift table column -> (signal, the part of it the cell shows)
DRIFT_TWINS = {
    "logp/tok": ("verifier_logprob", "value"), "Δlogp vs ref [95%]": ("verifier_logprob", "delta"),
    "Δlogp proc.": ("verifier_logprob_processed", "delta"), "off-support": ("out_of_support_rate", "value"),
    "Δoff-support": ("out_of_support_rate", "delta"), "repetition": ("repetition_rate", "value"),
    "Δrepetition": ("repetition_rate", "delta"), "len ratio vs ref [95%]": ("length_ratio", "delta"),
}


def _twins(column: str) -> tuple[str | None, str | None, str | None]:
    """(value key, interval key, profile) of a summary column."""
    for prefix, key in (("priced ", "priced_speedup"), ("len-adj ", "length_adjusted_speedup")):
        if column.startswith(prefix):
            return key, None, column.removeprefix(prefix)
    value, interval = SUMMARY_TWINS[column]
    return value, interval, None


def _check_summary_row(cells: list[str], names: list[str], data: dict) -> None:
    for column, cell in zip(columns(names), cells, strict=True):
        value_key, interval_key, profile = _twins(column)
        value = data[value_key] if value_key else None
        if profile is not None:
            value = data[value_key][profile]
        if value_key:
            assert (cell == "-") == (value is None), (column, cell, value)
        if interval_key:
            interval = data[interval_key]
            says_nothing = cell in ("-", "n/a") or "[n/a]" in cell
            assert says_nothing == (interval is None), (column, cell, interval)
            if interval is not None:
                assert isinstance(interval, list) and len(interval) == 2 and interval[0] <= interval[1]
        if column == "Δacc vs ref [paired 95%]" and "[" in cell and "n/a" not in cell:
            low, high = data["delta_ci95"]
            assert cell == f"{100 * data['delta_accuracy']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
            assert -1 <= low <= high <= 1
        if column == "acc" and value is not None:
            assert cell == f"{100 * value:.1f}"
        if column == "W/L/pairs" and cell != "-":
            assert cell == f"{data['wins']}/{data['losses']}/{data['pairs']}"


def _check_drift_row(cells: list[str], data: dict) -> None:
    for column, cell in zip(DRIFT_COLUMNS[1:], cells[1:], strict=True):
        signal, part = DRIFT_TWINS[column]
        found = data[signal]
        assert (cell == "-") == (found[part] is None), (column, cell, found)
        if part == "delta" and cell != "-":
            assert ("[n/a]" in cell) == (found["ci_low"] is None and found["ci_high"] is None), (column, cell)


@pytest.mark.parametrize("rows", [constructed_run(), drift_run(), drift_run(scored=False)],
                         ids=["4 problems", "6 problems", "open-ended"])
def test_every_cell_has_its_json_twin_and_null_where_the_table_says_nothing(rows):
    summaries = summarise(rows, [PROFILE])
    names = profile_names(summaries)
    assert set(columns(names)) == {*SUMMARY_TWINS, *(f"{p} {n}" for n in names for p in ("priced", "len-adj"))}
    for s in summaries:
        data = json.loads(json.dumps(s.as_dict()))  # what --json prints
        assert data["config"] == s.label
        _check_summary_row(row(s, names), names, data)
        _check_drift_row(drift_row(s.label, s.drift, few=MIN_INTERVAL_PROBLEMS), data)
        intervals = [data[key] for key in ("accuracy_ci95", "delta_ci95", "wall_clock_speedup_ci95")]
        assert all(value is None or (isinstance(value, list) and len(value) == 2) for value in intervals)


def test_an_open_ended_task_gives_null_accuracy_not_zero():
    for s in summarise(drift_run(scored=False), [PROFILE]):
        data = s.as_dict()
        assert data["accuracy"] is None and data["accuracy_ci95"] is None
        assert data["delta_accuracy"] is None and data["delta_ci95"] is None
        assert (data["wins"], data["losses"], data["pairs"]) == (None, None, None)
        assert data["scored"] is False


def test_the_accuracy_interval_is_low_high_inside_0_1():
    rows = [record("c0", None, 0, f"p{i}", 0, i != 0) for i in range(6)]  # 5 of 6 right: acc ± 1.96·sd/√6
    (s,) = summarise(rows)
    low, high = s.as_dict()["accuracy_ci95"]
    assert low == pytest.approx(s.accuracy - s.ci95) and high == 1.0  # clipped: an accuracy cannot exceed 100%
    assert row(s, [])[2] == f"{100 * s.ci95:.1f}"  # the table keeps its ± half-width


def _folder(tmp_path, rows):
    store = ResultsStore(tmp_path / "run")
    store.open_run(RunIdentity({"task": "x", "verifier": "v.gguf", "drafter": "d.gguf", "temperature": 0.6}))
    for r in rows:
        store.append(r)
    return tmp_path / "run"


@pytest.mark.parametrize("field,value", [("out_of_support_rate", -1e308), ("repetition_rate", 1.5),
                                         ("verifier_logprob", -1e308), ("verifier_logprob", math.inf),
                                         ("verifier_logprob_processed", 0.5), ("verifier_logprob", math.nan)])
def test_a_drift_value_no_run_writes_is_refused_when_the_folder_is_read(capsys, tmp_path, field, value):
    rows = drift_run()
    rows[-1] = {**rows[-1], field: value}  # json.dumps writes inf/nan as Infinity/NaN, which json.loads reads
    folder = _folder(tmp_path, rows)
    assert main(["eval", "report", str(folder), "--profile", "paper-gb200", "--json"]) == 0
    captured = capsys.readouterr()
    assert f"skipped 1 line (1 field {field!r} has the wrong type or value)" in captured.err
    lines = [json.loads(line) for line in captured.out.splitlines()]  # strict JSON: no Infinity, no NaN
    assert "inf" not in captured.out.lower() and "nan" not in captured.out.lower()
    assert sum(line["samples"] for line in lines) == len(rows) - 1
    assert main(["eval", "report", str(folder)]) == 0
    assert "inf%" not in capsys.readouterr().out


def test_null_drift_values_and_big_counts_are_read_as_they_should_be(capsys, tmp_path):
    rows = drift_run()
    rows[0] = {**rows[0], "verifier_logprob": None, "repetition_rate": None}  # not measured: allowed
    rows[1] = {**rows[1], "output_tokens": 10**400}  # no float holds it: not a count a run writes
    folder = _folder(tmp_path, rows)
    assert main(["eval", "report", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 line (1 field 'output_tokens' has the wrong type or value)" in captured.err
    assert "Traceback" not in captured.err


def test_the_unstable_profile_warning_rounds_its_spread():
    profile = CostProfile("this-machine", "", "", "", 10.0, 2.0, {1: 10.0}, timing_spread=0.5820537383503485,
                          timing_stable=False)
    (line,) = unstable_profiles([profile])
    assert "widest spread of a part ±29%" in line and "0.582" not in line
