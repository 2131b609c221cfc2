"""A GGUF header is parsed once per process and file (issue 45, item 8): the faces check the same two files several
times while starting, and each parse of a real vocabulary walks 152k strings. The cache is keyed by the file's
identity, so a rewritten or replaced file is parsed again, and a file changed within the kernel's clock tick (the
same times twice) is never trusted to the cache."""

from __future__ import annotations

import os

import pytest

from relaxtui.engine import gguf
from relaxtui.engine.gguf import read_header
from tests.support.gguf_files import gguf_bytes


@pytest.fixture
def parses(monkeypatch):
    """The files actually parsed, in order (the cache emptied first)."""
    parsed: list[str] = []
    parse = gguf._parse

    def counting(path, cur, keep_arrays):  # noqa: ANN001, ANN202
        parsed.append(path.name)
        return parse(path, cur, keep_arrays)

    monkeypatch.setattr(gguf, "_parse", counting)
    monkeypatch.setattr(gguf, "_HEADERS", {})
    return parsed


def test_an_unchanged_file_is_parsed_once_and_a_rewritten_one_again(tmp_path, monkeypatch, parses):
    monkeypatch.setattr(gguf, "SETTLED_NS", 0)  # trust the times at once (the files here were written just now)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes({"general.architecture": "llama", "general.name": "first"}))
    first = read_header(path)
    assert read_header(path) is first and read_header(str(path)) is first and parses == ["m.gguf"]
    assert read_header(path, keep_arrays=True).vocab_size == 3 and len(parses) == 2  # (arrays kept: its own entry)
    path.write_bytes(gguf_bytes({"general.architecture": "llama", "general.name": "second one"}))  # in place
    assert read_header(path).name == "second one" and len(parses) == 3
    replacement = tmp_path / "new.gguf"
    replacement.write_bytes(gguf_bytes({"general.architecture": "llama", "general.name": "third one"}))
    os.replace(replacement, path)  # another inode under the same name
    assert read_header(path).name == "third one" and len(parses) == 4
    assert read_header(path).name == "third one" and len(parses) == 4


def test_a_file_changed_just_now_is_parsed_every_time(tmp_path, parses):
    """Two writes inside one clock tick of the kernel's may leave the file the same size and times: a file whose
    times are that recent is read again each time (a same-size rewrite is seen at once)."""
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes({"general.architecture": "llama", "general.name": "aaaa"}))
    assert read_header(path).name == "aaaa"
    path.write_bytes(gguf_bytes({"general.architecture": "llama", "general.name": "bbbb"}))  # the same size
    assert read_header(path).name == "bbbb" and parses == ["m.gguf", "m.gguf"]
