"""A path from outside names a regular file, checked before it is read (issue 34, item 2): a FIFO, a folder or a
device where a file is expected is one line on stderr and exit code 2, never a hang (a FIFO with no writer) or a
read without end (``/dev/zero``). Each reader of a user-named path is walked here under a short timeout, so a
reader that opens before it checks fails this file instead of blocking it."""

from __future__ import annotations

import os
from argparse import Namespace
from pathlib import Path

import pytest

from relaxtui.cli import main
from relaxtui.errors import UserError
from relaxtui.files import FileMissing, FileTooBig, NotRegularFile, open_regular, read_regular_bytes, read_regular_text

pytestmark = pytest.mark.timeout(60)  # a reader that blocks on a FIFO or reads /dev/zero forever fails, not hangs

KINDS = {"fifo": "(a FIFO)", "folder": "(a directory)", "device": "(a character device)"}
TASK = """name = "t"
version = 1
[data]
path = "{path}"
[prompt]
template = "{{q}}"
max_tokens = 8
[answer]
kind = "none"
"""


def special(folder: Path, name: str, kind: str) -> Path:
    """``folder/name`` as a FIFO nobody writes to, a folder, or a link to /dev/zero."""
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    return path


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *parts: str) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: ") and "Traceback" not in err, err
    for part in parts:
        assert part in err, (part, err)
    return err


def good_task(folder: Path) -> Path:
    (folder / "rows.jsonl").write_text('{"q": "hi"}\n')
    path = folder / "good.toml"
    path.write_text(TASK.format(path="rows.jsonl"))
    return path


# -- the helper ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_helper_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = special(tmp_path, "x", kind)
    for read in (lambda: open_regular(path, "thing"), lambda: read_regular_bytes(path, 10, "thing"),
                 lambda: read_regular_text(path, 10, "thing")):
        with pytest.raises(NotRegularFile, match=rf"^thing {path} is not a regular file \{KINDS[kind][:-1]}\)$"):
            read()


def test_the_helper_reads_a_regular_file_bounded(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbfhello")
    assert read_regular_text(path, 100, "thing") == "hello"
    with pytest.raises(FileTooBig, match="is larger than 4 bytes"):
        read_regular_bytes(path, 4, "thing")
    with pytest.raises(FileMissing, match=f"thing not found: {tmp_path / 'absent'}"):
        read_regular_bytes(tmp_path / "absent", 4, "thing")
    path.write_bytes(b"a\xffb")
    with pytest.raises(UserError, match=r"is not UTF-8 text \(byte 0xff at offset 1\)"):
        read_regular_text(path, 100, "thing")
    with open_regular(path, "thing") as stream:  # blocking again once checked: reads behave as a plain open's
        assert os.get_blocking(stream.fileno()) and stream.read() == b"a\xffb"


# -- every reader ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("command", [["tasks", "check"], ["eval"], ["tune"]])
def test_a_task_file_that_is_not_a_file(capsys, tmp_path, kind, command):
    path = special(tmp_path, "task.toml", kind)
    refused(capsys, [*command, str(path)], f"task file {path} is not a regular file {KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".jsonl.gz", ".parquet"])
@pytest.mark.parametrize("command", [["tasks", "check"], ["eval"], ["tune"]])
def test_task_data_that_is_not_a_file(capsys, tmp_path, kind, suffix, command):
    """What used to block `tasks check` forever (the content hash opened the FIFO) or spin on /dev/zero."""
    data = special(tmp_path, f"data{suffix}", kind)
    task = tmp_path / "task.toml"
    task.write_text(TASK.format(path=data.name))
    outside = ["--allow-outside-data"] if kind == "device" else []  # /dev/zero lies outside the folder
    refused(capsys, [*command, str(task), *outside], f"data file {data} is not a regular file {KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_data_given_on_the_command_line_that_is_not_a_file(capsys, tmp_path, kind):
    data = special(tmp_path, "data.jsonl", kind)
    message = f"data file {data} is not a regular file {KINDS[kind]}"
    refused(capsys, ["tasks", "check", str(good_task(tmp_path)), "--data", str(data)], message)
    refused(capsys, ["eval", "math500", "--data", str(data)], message)
    refused(capsys, ["eval", "gpqa", "--data", str(data)], message)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_saved_chat_that_is_not_a_file(capsys, tmp_path, kind):
    path = special(tmp_path, "chat.json", kind)
    refused(capsys, ["chat", "--fake", "--resume", str(path)], f"cannot resume {path}: is not a regular file "
            f"{KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_profile_that_is_not_a_file(capsys, tmp_path, kind):
    path = special(tmp_path, "profile.json", kind)
    refused(capsys, ["profiles", "show", str(path)], f"cost profile {path} is not a regular file {KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_run_folders_manifest_that_is_not_a_file(capsys, tmp_path, kind):
    path = special(tmp_path, "manifest.json", kind)
    refused(capsys, ["eval", "report", str(tmp_path)], f"run folder file {path} is not a regular file {KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_model_file_that_is_not_a_file(capsys, tmp_path, kind):
    path = special(tmp_path, "model.gguf", kind)
    refused(capsys, ["generate", "hi", "--drafter", "none", "--verifier", str(path)],
            f"model file {path} is not a regular file {KINDS[kind]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_api_key_file_that_is_not_a_file(tmp_path, kind):
    from relaxtui.commands.serve import api_keys

    path = special(tmp_path, "keys.txt", kind)
    with pytest.raises(NotRegularFile, match=f"--api-key-file {path} is not a regular file"):
        api_keys(Namespace(api_key=[], api_key_file=path))


def test_nothing_is_written_when_a_reader_refuses(capsys, tmp_path):
    special(tmp_path, "manifest.json", "fifo")
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(capsys, ["eval", "report", str(tmp_path)], "not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    data = special(tmp_path, "rows.jsonl", "fifo")
    task = tmp_path / "task.toml"
    task.write_text(TASK.format(path=data.name))
    refused(capsys, ["eval", str(task), "--out", str(tmp_path / "out")], "not a regular file")
    assert not (tmp_path / "out").exists()
