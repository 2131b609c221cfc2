"""`relaxtui tasks check FILE.toml`: see what a task file makes of its data before any model runs.

It renders the first prompts, runs the answer reader on each row's gold answer (a reply that states it must score
correct, or the reader is wrong for the data) and lists every row that fails validation. A file-level defect
(unknown answer kind, a template naming a field the data does not declare, a regex that does not compile) is one
line and exit 2, as in `eval`; failing rows are listed and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from relaxtui.commands.common import add_task_file_options, int_option, utf8_path, utf8_text
from relaxtui.errors import UserError

MAX_LISTED = 50  # failing rows shown; the count says how many more


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tasks_command", required=True, parser_class=type(parser))
    check = sub.add_parser("check", help="render prompts, score the gold answers, list rows that fail validation")
    check.add_argument("file", type=utf8_text, help="the task file (FILE.toml)")
    check.add_argument("--show", type=int_option("--show", 0), default=2, help="prompts to render")
    check.add_argument("--data", type=utf8_path, default=None, help="check this data file instead of the task's own")
    add_task_file_options(check)


def _shown(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def run(args: argparse.Namespace) -> int:
    from relaxtui.evals.taskfiles.taskfile import TaskFile
    from relaxtui.evals.tasks import get

    if not args.file.endswith(".toml"):
        raise UserError(f"tasks check takes a task file ending in .toml (got {args.file!r})")
    task = get(args.file, allow_outside_data=args.allow_outside_data)
    assert isinstance(task, TaskFile)
    samples, failures = task.check(args.data)
    hub = (f"hub {task.data.hub} (config {task.data.config or 'default'}, split {task.data.split}, "
           f"revision {task.data.revision or 'latest'})")
    source = args.data or task.data.path or hub
    print(f"task {task.name} version {task.version} ({Path(args.file)})")
    print(f"data: {source}: {len(samples) + len(failures)} rows, answer kind {task.reader.kind!r}, "
          f"{'chat' if task.prompt.chat else 'raw completion'} prompts, max_tokens {task.max_tokens}"
          + (f", stop {list(task.prompt.stop)!r}" if task.prompt.stop else ""))
    for sample in samples[: args.show]:
        print(f"\n--- prompt of row {sample.id!r} ---")
        for message in sample.messages:
            print(f"[{message.role}]\n{_shown(message.content)}")
        if sample.gold is not None:
            gold = sample.gold if isinstance(sample.gold, str) else json.dumps(sample.gold, ensure_ascii=False)
            print(f"[gold] {_shown(gold, 300)}")
    wrong, unchecked = [], 0
    for sample in samples:
        reply = task.example_reply(sample)
        if reply is None:
            unchecked += 1
            continue
        score = task.score(reply, sample)
        if not score.correct:
            wrong.append(task.gold_miss(sample, reply, score))
    print()
    if not task.scored:
        print("gold answers: none (answer kind 'none': open-ended, judged on drift alone)")
    else:
        checked = len(samples) - unchecked
        print(f"gold answers: {checked - len(wrong)}/{checked} score correct"
              + (f"; {unchecked} rows have no reference reply to check (code tasks: solution = FIELD)"
                 if unchecked else ""))
    problems = failures + wrong
    if not problems:
        print("rows failing validation: none")
        return 0
    print(f"rows failing validation: {len(problems)}")
    for line in problems[:MAX_LISTED]:
        print(f"  {line}")
    if len(problems) > MAX_LISTED:
        print(f"  … and {len(problems) - MAX_LISTED} more")
    return 1
