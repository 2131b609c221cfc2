"""The docs cannot go stale silently: every drafter kind, rule and answer kind the CLI and the task-file reader accept
is named in README.md or docs/, every `relaxtui ...` example there parses with the real parser, the task-file
examples load with the real reader, and the README's cached set-up runs no pip.

Every list compared here is read from the code (the parser, the registries), never copied into this file, so a new
``--draft-kind``, rule or answer kind fails here until the docs name it, and a renamed flag fails every example
that still uses the old name.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the reader's own fallback
    tomllib = pytest.importorskip("tomli")

from relaxtui.cli import build_parser, parse
from relaxtui.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```", re.M | re.S)
NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen").split()
PLACEHOLDERS = {"K": "4", "N": "3"}  # `--parallel K` in prose: a number the example leaves to the reader


def text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def prose(document: str) -> str:
    """The document without its fenced code blocks."""
    return FENCE.sub("", document)


def section(document: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line, e.g. ``## The rules``) up to the next heading of its level
    or above; a ``# comment`` inside a code block is no heading."""
    depth = len(heading.split(" ")[0])
    found, fenced, lines = False, False, []
    for line in document.splitlines(keepends=True):
        fenced = fenced != line.startswith("```")
        if not fenced and re.match(r"#+ ", line):
            if found and len(line.split(" ")[0]) <= depth:
                break
            if line.rstrip("\n") == heading:
                found = True
                continue
        if found:
            lines.append(line)
    assert found, f"no section {heading!r}"
    return "".join(lines)


def subheadings(body: str, level: str = "###") -> set[str]:
    return {match.group(1).strip() for match in re.finditer(rf"^{level} (.+)$", prose(body), re.M)}


def first_column(body: str) -> set[str]:
    """The backticked names in the first column of the Markdown tables in ``body``."""
    return {match.group(1) for match in re.finditer(r"^\| `([^`]+)` \|", body, re.M)}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- every choice is named -------------------------------------------------------------------------------------------
def draft_kinds() -> set[str]:
    """``--draft-kind``'s choices as the real parser takes them: its argparse choices where it declares them, else the
    drafter registry its value is checked against (``relaxtui.session.ModelOptions``)."""
    from relaxtui.session import DRAFT_KINDS

    actions = [action for command in subparsers(build_parser()).values() for action in command._actions
               if "--draft-kind" in action.option_strings]
    assert actions, "no command takes --draft-kind any more: update this test"
    return {kind for action in actions for kind in (action.choices or DRAFT_KINDS)}


def test_every_draft_kind_the_cli_accepts_is_named_wherever_the_docs_list_them():
    from relaxtui.decoding.drafters import drafter_kind
    from relaxtui.serve.protocol import DRAFT_KINDS as SERVED_KINDS

    kinds = draft_kinds()
    assert {"model", "ngram"} <= kinds
    for kind in kinds:  # each one really is accepted: by the parser and by the registry that builds the drafter
        assert parse(["generate", "hi", "--draft-kind", kind]).draft_kind == kind
        drafter_kind(kind)
    listings = [(path.name, match.group(1)) for path in DOCS
                for match in re.finditer(r"--draft-kind ((?:[\w-]+\|)+[\w-]+)", path.read_text(encoding="utf-8"))]
    assert "README.md" in {name for name, _ in listings}, "README's options must list --draft-kind's choices"
    for name, listing in listings:
        assert set(listing.split("|")) == kinds, f"{name}: --draft-kind {listing} (the CLI takes {sorted(kinds)})"
    drafters = section(text("docs/method.md"), "## Drafters")
    assert subheadings(drafters) == kinds, "docs/method.md ## Drafters: one ### section per kind"
    assert "planned" not in drafters and "not available" not in drafters
    serve = text("docs/serve.md")
    missing = [kind for kind in SERVED_KINDS if f"`{kind}`" not in serve]
    assert not missing, f"docs/serve.md does not name speculative.draft_kind {missing}"


def test_every_rule_is_in_the_readme_table_and_has_its_section_in_the_method():
    from relaxtui.rules import RULES

    assert first_column(section(text("README.md"), "## Acceptance rules")) == set(RULES)
    assert subheadings(section(text("docs/method.md"), "## The rules")) == set(RULES)


def test_every_answer_kind_the_task_file_reader_accepts_is_in_the_answer_kinds_table(tmp_path, monkeypatch):
    from relaxtui.evals.taskfiles.answers import kinds
    from relaxtui.evals.taskfiles.taskfile import load_task

    known = set(kinds())
    taskfiles = text("docs/taskfiles.md")
    assert first_column(section(taskfiles, "## Answer kinds")) == known
    (comment,) = re.findall(r'^kind = "\w+" +# (.+)$', taskfiles, re.M)  # the complete example lists them too
    assert set(comment.split(" | ")) == known
    # the documented error for an unknown kind is the reader's own line, word for word
    monkeypatch.chdir(tmp_path)
    Path("rows.jsonl").write_text('{"q": "x"}\n')
    Path("task.toml").write_text('name = "t"\nversion = 1\n[data]\npath = "rows.jsonl"\n[prompt]\ntemplate = "{q}"\n'
                                 '[answer]\nkind = "fuzzy"\n')
    with pytest.raises(UserError) as refused:
        load_task(Path("task.toml"))
    assert f"relaxtui: error: {refused.value}" in taskfiles.splitlines()


def test_the_readme_names_every_flag_that_overrides_a_resumed_chat():
    from relaxtui.commands.chat import OVERRIDES

    chat = subparsers(build_parser())["chat"]
    flags = {next(name for name in action.option_strings if name.startswith("--"))
             for action in chat._actions if action.dest in OVERRIDES}
    assert len(flags) == len(OVERRIDES)
    (listed,) = re.findall(r"typed with `--resume` \(([^)]+)\)", " ".join(text("README.md").split()))
    assert set(re.findall(r"`(--[\w-]+)`", listed)) == flags


def test_counted_things_in_the_docs_match_the_registries():
    """`nine acceptance rules`, `the nine answer kinds`: a count in words is a list too."""
    from relaxtui.evals.taskfiles.answers import kinds
    from relaxtui.rules import RULES

    counts = {"acceptance rules": len(RULES), "answer kinds": len(kinds()), "drafter kinds": len(draft_kinds())}
    seen = 0
    for path in DOCS:
        for match in re.finditer(rf"\b({'|'.join(NUMBER_WORDS)}) ({'|'.join(counts)})\b", path.read_text(), re.I):
            seen += 1
            assert NUMBER_WORDS.index(match.group(1).lower()) == counts[match.group(2)], f"{path.name}: {match[0]}"
    assert seen >= 2


# -- every command example parses --------------------------------------------------------------------------------------
def _word(word: str, variables: dict[str, str]) -> str:
    """``$VAR`` from the document's own ``VAR=...`` lines; a placeholder like ``K`` given a value."""
    word = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m[1], m[0]), word)
    return PLACEHOLDERS.get(word, word)


def _argv(line: str, variables: dict[str, str]) -> list[str] | None:
    """The arguments after ``relaxtui`` when ``line`` is a relaxtui command (comments dropped), else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words[:1] == ["$"]:
        words = words[1:]
    if words[-1:] == ["&"]:  # started in the background (a server, then a client in the next line)
        words = words[:-1]
    if not words or not (words[0] == "relaxtui" or words[0].endswith("/relaxtui")):
        return None
    return [_word(word, variables) for word in words[1:]]


def _not_an_example(span: str) -> bool:
    """``relaxtui eval report DIR [--profile P ...]`` is a usage line and ``relaxtui eval`` a command's name in a
    sentence: neither is an example to run."""
    return any(mark in span for mark in ("[", "...", "…", "|")) or re.fullmatch(r"\S*relaxtui [\w-]+", span) is not None


def command_examples() -> list[tuple[str, list[str]]]:
    """(where, argv) of every `relaxtui ...` example: lines of fenced shell blocks, and inline code in the prose."""
    examples = []
    for path in DOCS:
        document = path.read_text(encoding="utf-8")
        variables: dict[str, str] = {}
        for block in FENCE.finditer(document):
            if block["lang"] not in ("", "bash", "sh", "shell", "console"):
                continue
            start = document[: block.start("body")].count("\n") + 1
            lines = block["body"].replace("\\\n", " ").split("\n")  # a continued command is one line
            for offset, line in enumerate(lines):
                if assignment := re.fullmatch(r"\s*([A-Z_][A-Z0-9_]*)=(\S+).*", line):
                    variables[assignment[1]] = assignment[2]
                if (argv := _argv(line, variables)) is not None:
                    examples.append((f"{path.name}:{start + offset}", argv))
        for span in re.finditer(r"`([^`]+)`", prose(document)):
            command = " ".join(span[1].split())
            if re.match(r"(\.venv/bin/)?relaxtui ", command) and not _not_an_example(command):
                argv = _argv(command, variables)
                assert argv is not None, command
                examples.append((f"{path.name}: `{command}`", argv))
    return examples


def test_every_relaxtui_command_in_the_docs_parses_with_the_real_parser():
    examples = command_examples()
    assert len(examples) > 40 and {where.split(":")[0] for where, _ in examples} >= {"README.md", "serve.md"}
    refused = []
    for where, argv in examples:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                parse(argv)  # parse only: nothing runs
        except SystemExit as done:  # --help, --version
            if done.code not in (0, None):
                refused.append(f"{where}: exit {done.code}")
        except UserError as exc:
            refused.append(f"{where}: {exc}")
    assert not refused, "\n".join(refused)


def test_a_stale_command_example_would_be_caught():
    """The extraction sees what a user copies: a block line with a comment, a continued line, an inline span."""
    examples = dict((" ".join(argv), where) for where, argv in command_examples())
    assert "chat --rule cactus --alpha 1" in examples
    assert any(command.startswith("eval math500 --limit 20 -m hf:") and "--draft-kind mtp" in command
               for command in examples)  # `$V`, and two lines joined by `\`
    stale = _argv(".venv/bin/relaxtui eval math500 --spec-n 3 --rule $R   # an old flag", {"R": "cactus"})
    assert stale == ["eval", "math500", "--spec-n", "3", "--rule", "cactus"]
    with pytest.raises(UserError, match="--spec-n"):
        parse(stale)


# -- the task-file examples load ---------------------------------------------------------------------------------------
def _toml_snippet(span: str) -> dict | None:
    """An inline ``key = value`` (optionally ``[table] key = value``) as TOML, else None."""
    match = re.fullmatch(r"(\[[\w.]+\] )?([\w-]+ = .+)", span)
    if match is None:
        return None
    return tomllib.loads((match[1] or "").strip() + "\n" + match[2])


def _contains(whole: object, part: object) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contains(whole[k], v) for k, v in part.items())
    return whole == part


def test_every_inline_toml_snippet_of_the_task_file_guide_is_toml():
    spans = [" ".join(m[1].split()) for m in re.finditer(r"`([^`]+)`", prose(text("docs/taskfiles.md")))]
    snippets = [span for span in spans if re.fullmatch(r"(\[[\w.]+\] )?[\w-]+ = .+", span)]
    assert len(snippets) >= 3
    for span in snippets:
        assert _toml_snippet(span) is not None, span


def test_the_complete_task_file_example_loads_and_its_gold_scores(tmp_path):
    from relaxtui.evals.taskfiles.taskfile import load_task

    (example,) = [block["body"] for block in FENCE.finditer(section(text("docs/taskfiles.md"), "## A complete example"))
                  if block["lang"] == "toml"]
    document = tomllib.loads(example)
    rows = [{field: f"{field} {i}" for field in document["data"]["fields"]} for i in range(2)]
    gold = document["answer"]["gold"]
    for row, letter in zip(rows, "AB", strict=True):
        row[gold] = letter
    (tmp_path / document["data"]["path"]).write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "task.toml").write_text(example)
    task = load_task(tmp_path / "task.toml")
    samples, failures = task.check(None)
    assert (task.name, task.reader.kind, len(samples), failures) == (document["name"], "choice", 2, [])
    for sample in samples:
        assert task.score(task.example_reply(sample), sample).correct


def test_the_shipped_task_files_table_loads_and_its_snippets_are_what_the_files_say():
    from relaxtui.evals.taskfiles.taskfile import load_task

    table = section(text("docs/taskfiles.md"), "## Shipped task files")
    rows = re.findall(r"^\| `([^`]+\.toml)` \| (.+) \|$", table, re.M)
    assert len(rows) >= 4
    for name, description in rows:
        task = load_task(ROOT / name)
        samples, failures = task.check(None)
        assert samples and not failures, name
        document = tomllib.loads((ROOT / name).read_text())
        for span in re.findall(r"`([^`]+)`", description):
            snippet = _toml_snippet(span)
            assert snippet is None or _contains(document, snippet), f"{name}: `{span}` is not what the file says"


# -- the README's set-up claim: the cached path runs no pip -----------------------------------------------------------
def _bootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[list[str]]]:
    """scripts/bootstrap.py on a virtualenv folder of its own, every pip call recorded instead of run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bootstrap_under_test", ROOT / "scripts" / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    (tmp_path / "venv").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / "venv")
    monkeypatch.setattr(bootstrap, "ROOT", tmp_path)
    calls: list[list[str]] = []
    monkeypatch.setattr(bootstrap, "pip_quietly", calls.append)
    monkeypatch.setattr(bootstrap, "log", lambda message: None)
    return bootstrap, calls


def test_the_cached_set_up_runs_no_pip_whichever_extras_came_first(tmp_path, monkeypatch):
    bootstrap, pip = _bootstrap(tmp_path, monkeypatch)
    bootstrap.ensure_package("test,cluster")  # scripts/dev test
    assert [call[-1] for call in pip] == [f"{tmp_path}[cluster,test]"]
    for extras in ("", "cluster", "test,cluster", "cluster,test"):  # scripts/dev demo, then test again
        bootstrap.ensure_package(extras)
    assert len(pip) == 1
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    bootstrap.ensure_package("")  # a changed pyproject.toml: one reinstall, keeping the extras it had
    bootstrap.ensure_package("test,cluster")
    assert [call[-1] for call in pip] == [f"{tmp_path}[cluster,test]"] * 2


def test_a_stamp_of_the_older_set_up_counts_for_its_extras(tmp_path, monkeypatch):
    """A virtualenv the older script set up (one stamp per extras string) is not reinstalled once."""
    import hashlib

    bootstrap, pip = _bootstrap(tmp_path, monkeypatch)
    pyproject = (tmp_path / "pyproject.toml").read_bytes()
    (tmp_path / "venv" / f".relaxtui-{hashlib.sha256(pyproject + b'test,cluster').hexdigest()[:16]}").touch()
    bootstrap.ensure_package("test,cluster")
    bootstrap.ensure_package("")
    assert pip == []
    bootstrap.ensure_package("hub")  # an extra it never had
    assert [call[-1] for call in pip] == [f"{tmp_path}[cluster,hub,test]"]
