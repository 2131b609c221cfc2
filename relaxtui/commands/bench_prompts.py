"""The prompts `relaxtui bench` runs: the built-in ones, a shipped workload's task file, a --prompt-file, or --prompt
texts. Read by the command, not by the cost model: a workload is a task file (``evals/``), a floor above it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.errors import UserError
from relaxtui.files import read_regular_text
from relaxtui.text import Message

__all__ = ["BENCH_PROMPTS", "MAX_PROMPT_FILE_BYTES", "WORKLOADS", "BenchPrompts", "bench_prompts", "file_prompts",
           "workload_prompts"]

# The embedded pair are code models, so the built-in prompts are code tasks first; bring your own with
# `--prompt` (acceptance, and so speed-up, depends on the task: measure on yours).
BENCH_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and type hints.",
    "Write a Python class for a bank account with deposit, withdraw and balance methods.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in a short paragraph why the sky is blue.",
)
# `bench --workload NAME`: the shipped task file whose prompts it runs (a workload where output repeats input)
WORKLOADS = {"edit": Path("evals/examples/edit_code.toml")}
MAX_PROMPT_FILE_BYTES = 4 << 20  # a --prompt-file holds prompts, not corpora


@dataclass(frozen=True)
class BenchPrompts:
    """The conversations bench runs (each rendered by the verifier's chat template), and where they came from."""

    source: str  # "built-in", "--prompt", "workload edit", "--prompt-file FILE"
    conversations: tuple[tuple[Message, ...], ...]


def bench_prompts(*, texts: Sequence[str] = (), workload: str | None = None, prompt_file: Path | None = None,
                  count: int = 2) -> BenchPrompts:
    """From one source: every ``--prompt`` text, else the first ``count`` of a ``--workload``'s task file, of a
    ``--prompt-file`` or of the built-in prompts. Two sources, or more prompts than the source holds: one line."""
    given = [flag for flag, value in (("--prompt", texts), ("--workload", workload), ("--prompt-file", prompt_file))
             if value]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} are two sources of prompts: give one")
    if texts:
        return BenchPrompts("--prompt", tuple((Message("user", text),) for text in texts))
    if workload is not None:
        source, every = f"workload {workload}", workload_prompts(workload)
    elif prompt_file is not None:
        source, every = f"--prompt-file {prompt_file}", file_prompts(prompt_file)
    else:
        source, every = "built-in", [(Message("user", text),) for text in BENCH_PROMPTS]
    if not 1 <= count <= len(every):
        held = "" if source == "built-in" else f"; {source} holds {len(every)}"
        raise UserError(f"--prompts must be in 1..{len(every)} (got {count}){held}")
    return BenchPrompts(source, tuple(every[:count]))


def workload_prompts(name: str) -> list[tuple[Message, ...]]:
    """A shipped workload's prompts: its task file's rows rendered as eval renders them (system message included)."""
    from relaxtui.evals.taskfiles.taskfile import load_task
    from relaxtui.evals.tasks.base import REPO_ROOT

    if name not in WORKLOADS:
        raise UserError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    return [sample.messages for sample in load_task(REPO_ROOT / WORKLOADS[name]).load()]


def file_prompts(path: Path) -> list[tuple[Message, ...]]:
    """A ``--prompt-file``: a regular file of at most MAX_PROMPT_FILE_BYTES, UTF-8; ``.jsonl``: one object a line,
    ``{"prompt": TEXT}`` (and an optional ``"system"``), else one prompt a line. Blank lines are skipped; a bad line
    is one line naming it."""
    text = read_regular_text(path, MAX_PROMPT_FILE_BYTES, "--prompt-file")
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise UserError(f"--prompt-file {path} holds no prompt")
    if path.suffix.lower() != ".jsonl":
        return [(Message("user", line),) for _, line in lines]
    return [_jsonl_prompt(line, f"--prompt-file {path}:{number}") for number, line in lines]


def _jsonl_prompt(line: str, where: str) -> tuple[Message, ...]:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{where}: not JSON ({str(exc)[:80]})") from None
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        raise UserError(f'{where}: must be an object with a "prompt" string (and optionally "system")')
    system = row.get("system")
    if system is not None and not isinstance(system, str):
        raise UserError(f'{where}: "system" must be a string')
    return (*((Message("system", system),) if system else ()), Message("user", row["prompt"]))
