"""Benchmark tasks, one file each. ``get(name)`` returns a task (a name, or a task file ending in .toml);
``TASKS`` lists the built-in ones."""

from __future__ import annotations

from relaxtui.errors import UserError
from relaxtui.evals.tasks.aime import Aime, Aime25
from relaxtui.evals.tasks.base import Sample, Score, Task, strip_think
from relaxtui.evals.tasks.gpqa import Gpqa
from relaxtui.evals.tasks.humaneval import HumanEval
from relaxtui.evals.tasks.lcb import LiveCodeBench
from relaxtui.evals.tasks.math500 import Math500

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (Aime, Aime25, Math500, Gpqa, LiveCodeBench, HumanEval)}


def get(name: str, *, allow_outside_data: bool = False) -> Task:
    """A built-in task by name, or a task file (``allow_outside_data``: its data may lie outside its folder)."""
    if name.endswith(".toml"):
        from pathlib import Path

        from relaxtui.evals.taskfiles.taskfile import load_task

        return load_task(Path(name), allow_outside_data=allow_outside_data)
    try:
        return TASKS[name]()
    except KeyError:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)} (or a task file, FILE.toml)") from None


__all__ = ["TASKS", "Sample", "Score", "Task", "get", "strip_think"]
