"""Benchmark tasks, one file each. ``get(name)`` returns a task; ``TASKS`` lists them."""

from __future__ import annotations

from relaxtui.errors import UserError
from relaxtui.evals.tasks.aime import Aime, Aime25
from relaxtui.evals.tasks.base import Sample, Score, Task, strip_think
from relaxtui.evals.tasks.gpqa import Gpqa
from relaxtui.evals.tasks.humaneval import HumanEval
from relaxtui.evals.tasks.lcb import LiveCodeBench
from relaxtui.evals.tasks.math500 import Math500

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (Aime, Aime25, Math500, Gpqa, LiveCodeBench, HumanEval)}


def get(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


__all__ = ["TASKS", "Sample", "Score", "Task", "get", "strip_think"]
