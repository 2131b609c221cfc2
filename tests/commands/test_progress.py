"""Progress of the long commands (issue 31): the computing code emits steps, a rich bar shows them with a total
and an ETA on a terminal's stderr, and nothing at all is printed when stderr is not a terminal (piped, CI logs,
these tests) or under --json. The terminal is faked (``isatty`` forced on); nothing here depends on how fast the
machine is."""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path

import pytest

from relaxtui import console
from relaxtui.cli import main
from relaxtui.commands.eval import ProgressBar
from relaxtui.console import ProgressDisplay
from relaxtui.evals.run.runner import SampleDone
from relaxtui.models import pairing
from relaxtui.progress import Step, StepCounter
from tests.support.fake_clock import FakeModel
from tests.support.markov import fake, random_table

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal, and keeps what was drawn on it."""

    def isatty(self) -> bool:
        return True

    def text(self) -> str:
        return ANSI.sub("", self.getvalue())


def frames(text: str) -> list[str]:
    """Each redraw of the bar (rich returns the cursor with \\r before drawing again)."""
    return [frame for frame in re.split(r"[\r\n]", text) if frame.strip()]


def test_steps_count_what_finished_before_each_step_and_grow_with_found_work():
    seen: list[Step] = []
    steps = StepCounter(3, seen.append)
    steps.start("a")
    steps.start("b")
    steps.say("b, in other words")
    steps.add(1)
    steps.start("c")
    steps.start("d")
    steps.finish()
    assert [(s.done, s.total, s.what) for s in seen] == [
        (0, 3, "a"), (1, 3, "b"), (1, 3, "b, in other words"), (2, 4, "c"), (3, 4, "d"), (4, 4, "done")]


def test_on_a_terminal_the_bar_shows_the_total_and_advances():
    terminal = FakeTerminal()
    with ProgressDisplay("bench", stream=terminal) as bar:
        steps = StepCounter(5, bar.step)
        for what in ("timing v(k)", "warm-up", "calibrating", "N=1 [x]", "N=2"):
            steps.start(what)
        steps.finish()
    drawn = frames(terminal.text())
    counts = [re.search(r" (\d+)/5 ", frame).group(1) for frame in drawn]
    assert counts[0] == "0" and counts[-1] == "5" and {"1", "2", "3", "4"} <= set(counts)
    assert counts == sorted(counts, key=int)  # it only moves forward
    assert all(frame.startswith("bench ") and "ETA " in frame for frame in drawn)
    assert "ETA -:--:--" in drawn[0] and "N=1 [x]" in terminal.text()  # no ETA before a step finished; no markup
    assert re.search(r"ETA \d+:\d\d:\d\d", drawn[-1])


def test_off_a_terminal_or_when_disabled_nothing_is_printed():
    piped = io.StringIO()
    for display in (ProgressDisplay("bench", stream=piped), ProgressDisplay("bench", stream=FakeTerminal(),
                                                                            enabled=False)):
        with display:
            display.step(Step(0, 3, "warm-up"))
            display.show(2, 3, "N=1")
        assert not display.active and display.stream.getvalue() == ""
    assert piped.getvalue() == ""


def sample_done(done: int, total: int, skipped: int = 0, correct: bool = True) -> SampleDone:
    record = {"correct": correct, "output_tokens": 10, "decode_s": 0.5, "config": {"label": "cactus(delta=1) [ngram]"}}
    return SampleDone(record, done, total, skipped)


def test_eval_progress_counts_units_with_accuracy_and_restarts_for_each_run(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # room for the whole status (a narrow terminal cuts it with an ellipsis)
    terminal = FakeTerminal()
    bar = ProgressBar(terminal, title="tune")
    bar.update(sample_done(1, 4))
    bar.update(sample_done(2, 4, correct=False))
    bar.update(sample_done(3, 6, skipped=2))  # tune's next run: 2 of its 6 units were in the folder already
    bar.close()
    drawn = frames(terminal.text())
    assert any(" 2/4 " in f and "acc 50.0% · 20.0 tok/s · cactus(delta=1) [ngram]" in f for f in drawn)
    assert " 3/6 " in drawn[-1] and all(f.startswith("tune ") for f in drawn)
    piped = io.StringIO()
    quiet = ProgressBar(piped)
    quiet.update(sample_done(1, 4))
    quiet.close()
    assert piped.getvalue() == ""


def test_bench_computation_reports_every_step_it_takes():
    """run_bench on fake models: a step per timing, calibration and run, ending with done = total (re-runs, which
    a noisy machine may cause, add to the total as they are found)."""
    from relaxtui.costmodel.bench import run_bench
    from relaxtui.decoding.drafters import ModelDrafter

    verifier, drafter = fake(random_table(1, vocab=64)), ModelDrafter(fake(random_table(2, vocab=64)), 6)
    verifier.path = Path("verifier.gguf")
    seen: list[Step] = []
    run_bench(verifier, drafter, [[0, 1, 2, 3], [4, 5]], n_max=2, max_tokens=4, repeats=2, passes=1,
              progress=seen.append)
    planned = 2 + 1 * 2 * (1 + 3)  # the curve, the warm-up, then per prompt a calibration and N = 0, 1, 2
    assert seen[0] == Step(0, planned, "timing the raw verify-cost curve v(k)")
    assert seen[-1].done == seen[-1].total >= planned and seen[-1].what == "done"
    assert [s.done for s in seen] == sorted(s.done for s in seen)
    whats = [s.what for s in seen]
    assert "pass 1/1, prompt 2/2: calibrating" in whats and "pass 1/1, prompt 2/2: N=2" in whats


@pytest.mark.parametrize("terminal", [True, False])
def test_models_pair_shows_a_bar_only_on_a_terminal(fake_pair, capsys, monkeypatch, terminal):
    verifier, a, cheap = fake_pair
    steps = {"verifier.gguf": 0.024, "a.gguf": 0.010, "cheap.gguf": 0.012}
    FakeModel.cost = staticmethod(lambda name, index: steps[name])
    monkeypatch.setattr(pairing, "pair", functools.partial(pairing.pair, clock=FakeModel.clock,
                                                           open_model=FakeModel))
    monkeypatch.setattr(console, "is_terminal", lambda stream: terminal)
    assert main(["models", "pair", str(verifier), str(cheap), str(a)]) == 0
    captured = capsys.readouterr()
    assert "Use one: --drafter a.gguf" in captured.out and "models pair" not in captured.out
    drawn = frames(ANSI.sub("", captured.err))
    if terminal:
        assert drawn[0].startswith("models pair") and " 0/2 " in drawn[0] and " 2/2 " in drawn[-1]
        assert any("cheap.gguf" in frame for frame in drawn)
    else:
        assert captured.err == ""


def test_console_is_terminal_reads_the_stream():
    assert console.is_terminal(FakeTerminal()) and not console.is_terminal(io.StringIO())
    assert not console.is_terminal(None)
