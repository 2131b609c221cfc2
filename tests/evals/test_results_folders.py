"""The run folders shipped in docs/results are what today's report code writes from their records (issue 45, item 9).

Their summaries were written once and the report changed under them (Newcombe's paired interval and the verifier
alone priced 1.000x by construction, issue 31): rebuilt with the README's command they no longer matched what was
tracked. Each folder is rebuilt here, in a copy, with the profiles its tracked summary prices with, and compared."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from relaxtui.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
PROFILES = {"math500": ["--profile", "paper-gb200", "this-machine"]}  # (docs/README.md says so); the rest: default
FOLDERS = sorted(str(path.parent.relative_to(RESULTS)) for path in RESULTS.rglob("results.jsonl"))


def test_every_results_folder_is_walked():
    assert {"code_small", "json_extract", "open_ended", "math500", "light_drafters/edit-05B"} <= set(FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_tracked_summary_is_what_the_report_writes_today(tmp_path, capsys, folder):
    copy = tmp_path / "run"
    shutil.copytree(RESULTS / folder, copy)
    assert main(["eval", "report", str(copy), *PROFILES.get(folder, [])]) == 0
    capsys.readouterr()
    for name in ("summary.md", "summary.csv"):
        assert (copy / name).read_text() == (RESULTS / folder / name).read_text(), (
            f"docs/results/{folder}/{name} is not what `relaxtui eval report` writes today: rebuild it")
