"""Progress events of long computations (bench, models pair; eval and tune report ``SampleDone`` instead).

The computing code only counts its steps and hands each to a callback; a face decides whether and how to show
them (``console.ProgressDisplay``: a progress bar on a terminal, nothing when piped or under ``--json``). So no
function both computes and prints, and a test can read the steps a computation took.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """How far a computation is: ``done`` of ``total`` steps finished, and what it is doing now."""

    done: int
    total: int
    what: str = ""


OnStep = Callable[[Step], None]


def no_steps(_: Step) -> None:
    """The default callback: nobody is watching."""


class StepCounter:
    """Counts the steps of one computation and reports each to ``report`` as it starts, so that the callback
    sees the step that is running (its text) and how many have finished before it."""

    def __init__(self, total: int, report: OnStep = no_steps) -> None:
        self.total, self.done, self.report = total, 0, report
        self._running = False

    def start(self, what: str) -> None:
        """Step ``what`` begins; the one before it, if any, has finished."""
        if self._running:
            self.done += 1
        self._running = True
        self.report(Step(self.done, self.total, what))

    def add(self, steps: int) -> None:
        """Work found on the way (a run timed again): the total grows."""
        self.total += steps

    def say(self, what: str) -> None:
        """New words for the running step (a callee's own progress line); nothing more has finished."""
        self.report(Step(self.done, self.total, what))

    def finish(self, what: str = "done") -> None:
        self.done, self._running = self.total, False
        self.report(Step(self.done, self.total, what))
