"""Terminal tables and the lines around them fit 120 columns (issue 45, item 9): eval report's and tune's evidence
table was 176 columns with one profile and 215 with two, bench's table grew a column per profile, and their
warnings and legends ran to 150 characters. A wide table wraps into blocks of columns, each led by the config
again; prose wraps under its first words."""

from __future__ import annotations

import shutil
from pathlib import Path

from relaxtui.cli import main
from relaxtui.evals.analysis.report import TABLE_WIDTH, grid

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_a_wide_grid_wraps_into_blocks_each_led_by_the_first_column():
    rows = [["config", *(f"column {i}" for i in range(20))], ["strict N=3", *(f"{i:.3f}x" for i in range(20))]]
    text = grid(rows, width=60)
    blocks = [block.splitlines() for block in text.split("\n\n")]
    assert len(blocks) > 2 and max(len(line) for line in text.splitlines()) <= 60
    assert all(block[0].startswith("config") and block[1].startswith("strict N=3") for block in blocks)
    headers = [cell for block in blocks for cell in block[0].split("  ") if cell.strip().startswith("column")]
    assert [h.strip() for h in headers] == [f"column {i}" for i in range(20)]  # every column once, in order
    narrow = [["config", "acc"], ["strict", "95.0"]]
    assert grid(narrow) == "config   acc\nstrict  95.0"  # a table that fits is one block, as before


def test_eval_reports_terminal_output_fits(tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(RESULTS / "math500", copy)
    assert main(["eval", "report", str(copy), "--profile", "paper-gb200", "paper-gb200-optimistic",
                 "this-machine"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("wrote ")]
    assert any("priced paper-gb200-optimistic" in line for line in lines)  # three profiles: six priced columns
    assert any(line.startswith("warning: ") for line in lines)  # (and its truncation warnings)
    assert max(map(len, lines)) <= TABLE_WIDTH, max(lines, key=len)


def test_benchs_table_and_legend_fit():
    from relaxtui.commands.bench import render
    from relaxtui.costmodel.bench import BenchResult, BenchRun

    profiles = {"paper-gb200": 1.4, "paper-gb200-optimistic": 1.7, "memory-bound:0.05": 1.2}
    runs = [BenchRun(n, 10.0 + n, 0.8, 0.82, 0.7, 2.4, 3.1, 0.02, 100, proxy_speedup=profiles, best=n == 2)
            for n in (1, 2, 3)]
    costs = {"verify_s": [0.024], "draft_s": [0.01], "resync_extra_s": 0.0, "emit_s": 0.0001, "stable": True,
             "spread": 0.04}
    text = render(BenchResult(0.024, 0.01, 0.4, [1.0], costs, 12.5, 0.02, runs, 100.0, "model"), "v.gguf", "d.gguf")
    assert "priced memory-bound:0.05" in text and "<- best" in text
    assert max(map(len, text.splitlines())) <= TABLE_WIDTH, max(text.splitlines(), key=len)
