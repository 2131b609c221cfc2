"""`tune TASK --check OTHER…`: the setting recommended on one task, run on others with the same paired evidence.

On a fake pair whose verifier walks +1 through ten digits and whose drafter walks +2, a relaxed rule that accepts
the drafter's steps (ensemble w = 0.2) changes nothing a lenient task can see, and wrecks a task whose gold is
the verifier's own walk: the advice must say that it holds on the first and breaks on the second.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from relaxtui.cli import main
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.engine.fake import FakeBackend
from relaxtui.evals.analysis.report import ConfigSummary
from relaxtui.evals.analysis.stats import paired_difference
from relaxtui.evals.analysis.transfer import carry_lines, carry_over

DIGITS = [f"{d}".encode() for d in range(10)]
PROBLEMS = 40
TOKENS = 4


def walker(step: int, peak: float = 6.0) -> FakeBackend:
    """A 10-token model that after digit t almost always writes digit t + step."""
    table = np.zeros((10, 10))
    for token in range(10):
        table[token, (token + step) % 10] = peak
    return FakeBackend(lambda ctx: table[ctx[-1]], 10, pieces=DIGITS)


class FakePair:
    def __init__(self) -> None:
        self.verifier, self.drafter = walker(1), ModelDrafter(walker(2), 10)
        self.verifier_path, self.drafter_path = Path("verifier.gguf"), Path("drafter.gguf")

    def close(self) -> None:
        pass


def lenient(folder: Path, name: str) -> Path:
    """A task every digit string passes: a number within 100000 of 0."""
    (folder / f"{name}.jsonl").write_text("".join(json.dumps({"id": f"{name}-{i}", "start": i % 10, "zero": 0}) + "\n"
                                                  for i in range(PROBLEMS)))
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nversion = 1\n[data]\npath = "{name}.jsonl"\nid = "id"\n[prompt]\n'
                    f'template = "{{start}}"\nmax_tokens = {TOKENS}\n[answer]\nkind = "number"\ngold = "zero"\n'
                    "tolerance = 100000\n")
    return path


def walk(folder: Path) -> Path:
    """A task whose gold is the verifier's own walk from the prompt's digit: only its outputs pass."""
    rows = [{"id": f"walk-{i}", "start": i % 10, "walk": "".join(str((i + k) % 10) for k in range(1, TOKENS + 1))}
            for i in range(PROBLEMS)]
    (folder / "walk.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    path = folder / "walk.toml"
    path.write_text(f'name = "walk"\nversion = 1\n[data]\npath = "walk.jsonl"\nid = "id"\n[prompt]\n'
                    f'template = "{{start}}"\nmax_tokens = {TOKENS}\n[answer]\nkind = "exact"\ngold = "walk"\n')
    return path


@pytest.fixture
def fake_models(monkeypatch):
    """tune on the fake pair: no GGUF is resolved, fingerprinted, loaded or calibrated."""
    monkeypatch.setattr("relaxtui.session.load_pair", lambda options: FakePair())
    monkeypatch.setattr("relaxtui.commands.tune.model_paths", lambda options: {})
    monkeypatch.setattr("relaxtui.commands.tune.save_measured_profile", lambda *args: None)
    monkeypatch.setattr("relaxtui.commands.tune.sample_tokenizer",
                        lambda model, thinking=None: lambda sample: [int(sample.messages[-1].content)])


def test_tune_check_says_where_the_knob_holds_and_where_it_breaks(capsys, tmp_path, fake_models):
    argv = ["tune", str(lenient(tmp_path, "lenient-a")), "--check", str(lenient(tmp_path, "lenient-b")),
            str(walk(tmp_path)), "--limit", str(PROBLEMS), "--draft-max", "2", "--rule", "ensemble", "--alpha", "0.2",
            "--max-drop", "10", "--temperature", "1", "--top-k", "0", "--top-p", "1", "--profile", "memory-bound",
            "--out", str(tmp_path / "tune")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    assert "   - ensemble(0.2) N=2 (accuracy 100.0%" in out  # recommended on the tuned task
    assert "does ensemble(0.2) N=2 carry over? (recommended on lenient-a; each task paired against strict N=2" in out
    holds = next(line for line in out.splitlines() if line.startswith("  - lenient-b: "))
    breaks = next(line for line in out.splitlines() if line.startswith("  - walk: "))
    assert holds.startswith("  - lenient-b: holds — Δacc +0.0") and "within -10 points" in holds
    assert breaks.startswith("  - walk: breaks — Δacc -") and "loses more than 10 points" in breaks
    assert "verdict: it holds on lenient-b; it breaks on walk — tune each task you deploy it on" in out
    for name in ("lenient-b", "walk"):  # each check has its own run folder and reports
        assert len(list((tmp_path / "tune" / f"check-{name}").glob("*/summary.md"))) == 1
    assert main(argv) == 0  # resumed: everything is in the folders, nothing runs again
    assert "verdict: it holds on lenient-b; it breaks on walk" in capsys.readouterr().out


def test_check_tasks_are_validated_before_any_model_loads(capsys, tmp_path, monkeypatch):
    def no_models(options):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr("relaxtui.session.load_pair", no_models)
    monkeypatch.setattr("relaxtui.commands.tune.model_paths", lambda options: {})
    argv = ["tune", str(lenient(tmp_path, "lenient-a")), "--check", str(tmp_path / "missing.toml")]
    assert main(argv) == 2
    assert "task file not found" in capsys.readouterr().err
    assert main(["tune", str(lenient(tmp_path, "lenient-a")), "--check", str(tmp_path / "lenient-a.toml")]) == 2
    assert "that is the tuned task itself" in capsys.readouterr().err


def summary(label: str, rule: str | None, losses: int, speed: float, problems: int = 50) -> ConfigSummary:
    base = {(f"p{i}", 0): 1.0 for i in range(problems)}
    mine = {key: (0.0 if i < losses else 1.0) for i, key in enumerate(base)}
    return ConfigSummary(label, rule, 0.2 if rule == "ensemble" else None, 2, problems, problems, 1.0, 0.0, 4.0, 0, 0,
                         0.5, 2.0, 10.0, proxy={"unit": speed}, delta=paired_difference(mine, base))


def test_carry_over_verdicts_on_hand_made_summaries():
    setting = summary("ensemble(0.2) N=2", "ensemble", 0, 1.5)
    strict = summary("strict N=2", "strict", 0, 1.1)
    held = carry_over("a", [strict, summary("ensemble(0.2) N=2", "ensemble", 0, 1.4)], setting, max_drop=5,
                      max_drift=None, profile="unit")
    broken = carry_over("b", [strict, summary("ensemble(0.2) N=2", "ensemble", 25, 1.4)], setting, max_drop=5,
                        max_drift=None, profile="unit")
    slower = carry_over("c", [strict, summary("ensemble(0.2) N=2", "ensemble", 0, 1.0)], setting, max_drop=5,
                        max_drift=None, profile="unit")
    wide = carry_over("d", [strict, summary("ensemble(0.2) N=2", "ensemble", 1, 1.4)], setting,
                      max_drop=5, max_drift=None, profile="unit")
    assert [c.verdict for c in (held, broken, slower, wide)] == ["holds", "breaks", "slower", "unresolved"]
    # a mean exactly on the bound (1 loss in 50 = -2 points, --max-drop 2): no sample settles it; it does not break
    edge = carry_over("e", [strict, summary("ensemble(0.2) N=2", "ensemble", 1, 1.4)], setting, max_drop=2,
                      max_drift=None, profile="unit")
    assert edge.verdict == "unresolved" and "too close to -2 points" in edge.reasons[0], edge
    assert "not faster than strict here: 1.00x vs strict 1.10x (priced unit)" in slower.reasons
    assert "problems in all would settle --max-drop 5" in wide.reasons[0]
    lines = carry_lines(setting, "recommended", "src", [held, broken, slower, wide])
    assert lines[-1] == ("verdict: it holds on a; it breaks on b; it keeps capability but gains no speed on c; "
                         "unresolved on d — tune each task you deploy it on")
