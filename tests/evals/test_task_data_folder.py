"""A task file's data stays in the task file's folder (issue 34, item 7): its ``[data] path``, resolved with links
followed, must lie under the folder, or be a hub dataset, unless the user passes ``--allow-outside-data``. A task
file is often someone else's; without this one could read ``~/.ssh/id_rsa`` as its rows and send them to the
models and into a results folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxtui.cli import build_parser, main
from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.taskfile import load_task
from relaxtui.evals.tasks import get

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
FLAG = "--allow-outside-data"
TASK = """name = "t"
version = 1
[data]
path = {path}
[prompt]
template = "{{q}}"
max_tokens = 8
[answer]
kind = "none"
"""


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(the task's folder, a folder beside it), each holding rows.jsonl."""
    task, elsewhere = tmp_path / "task", tmp_path / "elsewhere"
    for folder in (task, elsewhere):
        folder.mkdir()
        (folder / "rows.jsonl").write_text(json.dumps({"q": folder.name}) + "\n")
    return task, elsewhere


def task_file(folder: Path, path: str) -> Path:
    file = folder / "task.toml"
    file.write_text(TASK.format(path=json.dumps(path)))
    return file


def outside_cases(task: Path, elsewhere: Path) -> dict[str, str]:
    (task / "link.jsonl").symlink_to(elsewhere / "rows.jsonl")
    return {"absolute": str(elsewhere / "rows.jsonl"), "link": "link.jsonl", "dotdot": "../elsewhere/rows.jsonl"}


def test_a_data_path_leaving_the_folder_is_refused_naming_the_path_and_the_flag(capsys, folders):
    task, elsewhere = folders
    for name, path in outside_cases(task, elsewhere).items():
        file = task_file(task, path)
        assert main(["tasks", "check", str(file)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"path {path!r} resolves to {(elsewhere / 'rows.jsonl').resolve()}" in err, (name, err)
        assert FLAG in err and "outside the task file's folder" in err, (name, err)
        with pytest.raises(UserError, match=FLAG):
            load_task(file)


def test_with_the_flag_data_outside_the_folder_is_read(capsys, folders):
    task, elsewhere = folders
    for name, path in outside_cases(task, elsewhere).items():
        file = task_file(task, path)
        assert main(["tasks", "check", str(file), FLAG]) == 0, name
        assert "rows" in capsys.readouterr().out
        assert [s.messages[0].content for s in get(str(file), allow_outside_data=True).load()] == ["elsewhere"]


def test_paths_that_stay_inside_are_read_without_the_flag(capsys, folders):
    task, _ = folders
    (task / "sub").mkdir()
    (task / "sub" / "rows.jsonl").write_text(json.dumps({"q": "sub"}) + "\n")
    (task / "inner.jsonl").symlink_to(task / "sub" / "rows.jsonl")  # a link that stays inside
    for path, q in [("rows.jsonl", "task"), ("../task/rows.jsonl", "task"), ("sub/../rows.jsonl", "task"),
                    ("inner.jsonl", "sub"), (str(task / "sub" / "rows.jsonl"), "sub")]:
        file = task_file(task, path)
        assert main(["tasks", "check", str(file)]) == 0, path
        capsys.readouterr()
        assert [s.messages[0].content for s in load_task(file).load()] == [q], path


def test_every_command_that_loads_task_files_takes_the_flag(capsys, folders):
    task, elsewhere = folders
    file = task_file(task, "../elsewhere/rows.jsonl")
    for argv in (["eval", str(file)], ["tune", str(file)], ["tasks", "check", str(file)],
                 ["tune", "math500", "--check", str(file)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert FLAG in err and "../elsewhere/rows.jsonl" in err, (argv, err)
    for path in (("eval",), ("tune",), ("tasks", "check")):
        parser = build_parser()
        for word in path:
            parser = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)
                          and word in a.choices).choices[word]
        assert any(FLAG in action.option_strings for action in parser._actions), path


def test_shipped_task_files_keep_their_data_beside_them():
    for file in [REPO / "evals" / "math500.toml", *sorted((REPO / "evals" / "examples").glob("*.toml"))]:
        task = load_task(file)  # no flag: their data lives in their folder
        assert task.data.path is not None and task.load(), file


# -- a hard link is no link to follow, but it may name a file from anywhere (issue 47) ------------------------------
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_hard_linked_data_file_is_refused_naming_it_and_the_flag(capsys, folders, suffix):
    """``resolve`` sees nothing to follow in a hard link, so ``rows.jsonl`` could be ``~/.ssh/id_rsa`` under another
    name (same file system); a data file with more than one name is refused unless the user lets data come from
    outside the folder."""
    task, elsewhere = folders
    secret = elsewhere / f"secret{suffix}"
    secret.write_text(json.dumps({"q": "a secret"}) + "\n")
    (task / f"data{suffix}").hardlink_to(secret)
    file = task_file(task, f"data{suffix}")
    assert main(["tasks", "check", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(task / f"data{suffix}") in err and "hard link" in err and FLAG in err, err
    with pytest.raises(UserError, match="hard link"):
        load_task(file).load()
    if suffix == ".jsonl":  # the flag reads it as any other data from outside
        assert [s.messages[0].content for s in get(str(file), allow_outside_data=True).load()] == ["a secret"]


def test_a_data_file_given_by_the_user_may_be_hard_linked(capsys, folders):
    task, elsewhere = folders
    (task / "mine.jsonl").hardlink_to(elsewhere / "rows.jsonl")
    file = task_file(task, "rows.jsonl")
    assert [s.messages[0].content for s in load_task(file).load(task / "mine.jsonl")] == ["elsewhere"]  # --data
