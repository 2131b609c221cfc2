"""Command-line values are outside input (issue 17): every option of every sub-command refuses NaN, infinities,
negative seeds, whole numbers past what llama.cpp's C ints hold, and text that is not UTF-8 — at parse time, as
one line on stderr and exit code 2, before any command (or model) runs.

The walks below find the options themselves in ``build_parser()``, so an option added later with a plain
``type=float`` (which takes "nan") or no type at all (which takes lone surrogates) fails here by name.
"""

from __future__ import annotations

import argparse
import types
from collections.abc import Iterator

import pytest

from relaxtui import cli
from relaxtui.cli import build_parser, main
from relaxtui.commands.common import (
    INT32_MAX,
    finite_float,
    float_option,
    int_option,
    non_negative_int,
    positive_int,
    seed,
    utf8_path,
    utf8_text,
)
from relaxtui.display import terminal_text

NOT_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"]
NOT_UTF8 = "\udcff"  # what Python makes of argv byte 0xff (surrogateescape)
TOO_BIG = str(2**64)  # past every C int llama.cpp takes, and past int64


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                               argparse.ArgumentParser]]:
    """Every sub-command that runs something, with the words that reach it (``models pair``)."""
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from leaf_parsers(child, (*path, name))


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))


def kind(action: argparse.Action) -> str | None:
    """'float', 'int' or 'text': what the option's type makes of a plain value (probed, so that closures such as
    ``float_option(...)`` and plain ``float`` alike are found); None for choices, flags and lists."""
    if not takes_value(action) or action.choices is not None:
        return None
    if action.type in (None, str, utf8_text, utf8_path) or getattr(action.type, "__name__", "") == "Path":
        return "text"
    for probe in ("0.5", "1.5", "0.05", "-0.5", "100.5"):
        try:
            value = action.type(probe)  # type: ignore[misc]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        if isinstance(value, float):
            return "float"
    for probe in ("3", "1", "0", "16", "-1"):
        try:
            value = action.type(probe)  # type: ignore[misc]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return "int"
    return None


def name_of(action: argparse.Action) -> str:
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def argv_for(path: tuple[str, ...], parser: argparse.ArgumentParser, action: argparse.Action, value: str) -> list[str]:
    """The sub-command's words, filler for what it requires, and ``value`` given to ``action``."""
    argv = list(path)
    for other in parser._actions:
        if other.option_strings or not takes_value(other):
            continue
        if other is action:
            argv.append(value)
        elif other.nargs in (None, "+", argparse.ONE_OR_MORE):
            argv.append("x")
    for other in parser._actions:
        if other.option_strings and other.required and other is not action:
            argv += [other.option_strings[0], "x"]
    if action.option_strings:
        argv.append(f"{name_of(action)}={value}")  # with "=": "-inf" is a value, not an option
    return argv


def options(wanted: str) -> list[tuple[list[str], str]]:
    found = []
    for path, parser in leaf_parsers(build_parser()):
        for action in parser._actions:
            if kind(action) == wanted:
                found.append((path, parser, action))
    return [pytest.param((path, action.dest), id=f"{' '.join(path)} {name_of(action)}") for path, _, action in found]


def find(path: tuple[str, ...], dest: str) -> tuple[argparse.ArgumentParser, argparse.Action]:
    parser = dict(leaf_parsers(build_parser()))[path]
    return parser, next(action for action in parser._actions if action.dest == dest)


@pytest.fixture
def parse_only(monkeypatch):
    """Nothing past parsing runs: a command module that would be imported is a test failure, not a model load."""
    def no_command(name: str) -> None:
        raise AssertionError(f"the arguments were accepted and {name} would run")

    monkeypatch.setattr(cli, "importlib", types.SimpleNamespace(import_module=no_command))


def refused(capsys, argv: list[str]) -> str:
    """main(argv) is exit code 2 with one line on stderr, no traceback; the line."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: "), (argv, err)
    assert "Traceback" not in err
    return err


# -- the walks ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", options("float"))
@pytest.mark.parametrize("value", NOT_FINITE)
def test_every_float_option_refuses_nan_and_infinities(capsys, parse_only, where, value):
    path, dest = where
    parser, action = find(path, dest)
    err = refused(capsys, argv_for(path, parser, action, value))
    assert "finite" in err, err


@pytest.mark.parametrize("where", options("int"))
def test_every_whole_number_option_refuses_what_no_c_int_holds(capsys, parse_only, where):
    path, dest = where
    parser, action = find(path, dest)
    refused(capsys, argv_for(path, parser, action, TOO_BIG))
    refused(capsys, argv_for(path, parser, action, "1" * 5000))  # past Python's int-string limit
    refused(capsys, argv_for(path, parser, action, "nan"))


@pytest.mark.parametrize("where", options("text"))
def test_every_text_argument_refuses_what_is_not_utf8(capsys, parse_only, where):
    path, dest = where
    parser, action = find(path, dest)
    err = refused(capsys, argv_for(path, parser, action, f"a{NOT_UTF8}b"))
    assert "not valid UTF-8" in err and "byte 0xff" in err, err


def test_the_walks_find_the_options_they_are_about():
    floats = {(" ".join(p.values[0][0]), p.values[0][1]) for p in options("float")}
    assert {("generate", "temperature"), ("generate", "top_p"), ("generate", "alpha"), ("generate", "draft_p_min"),
            ("chat", "alpha"), ("bench", "temperature"), ("eval", "alpha"), ("tune", "max_drop")} <= floats
    ints = {(" ".join(p.values[0][0]), p.values[0][1]) for p in options("int")}
    assert {("generate", "seed"), ("generate", "ctx_size"), ("bench", "n_max"), ("rules bench", "vocab"),
            ("models pair", "repeats"), ("chat", "draft_max")} <= ints
    texts = {(" ".join(p.values[0][0]), p.values[0][1]) for p in options("text")}
    assert {("generate", "prompt"), ("generate", "system"), ("bench", "prompt"), ("profiles show", "name"),
            ("models pull", "ref")} <= texts


@pytest.mark.parametrize("path", sorted({p.values[0][0] for p in options("int") if p.values[0][1] == "seed"}))
@pytest.mark.parametrize("value", ["-1", "-9223372036854775808", str(2**63)])
def test_every_seed_is_between_0_and_2_to_the_63(capsys, parse_only, path, value):
    parser, action = find(path, "seed")
    assert "--seed must be" in refused(capsys, argv_for(path, parser, action, value))


# -- the cases that used to be tracebacks ------------------------------------------------------------------------------
def test_negative_seed_is_refused_before_numpy_sees_it(capsys, parse_only):
    err = refused(capsys, ["generate", "hi", "--drafter", "none", "--seed", "-1"])
    assert "--seed must be >= 0 (got -1)" in err, err


@pytest.mark.parametrize("argv", [
    ["generate", "\udcff\udcfe"],
    ["generate", "hi", "--system", "caf\udce9"],
    ["bench", "--prompt", "\udcff"],
    ["models", "suggest", "\udcff"],
])
def test_text_that_is_not_utf8_is_one_line_naming_the_argument(capsys, parse_only, argv):
    err = refused(capsys, argv)
    assert "is not valid UTF-8 text" in err, err
    assert "\\udc" not in err and "\udcff" not in err  # the byte is named, not echoed


@pytest.mark.parametrize("argv,message", [
    (["generate", "hi", "--top-p=-inf"], "--top-p must be a finite number (got '-inf')"),
    (["generate", "hi", "--top-p", "0"], "--top-p must be in (0, 1] (got 0)"),
    (["generate", "hi", "--temperature", "-0.5"], "--temperature must be >= 0 (got -0.5)"),
    (["generate", "hi", "--top-k", "-1"], "--top-k must be >= 0 (got -1)"),
    (["generate", "hi", "--draft-p-min", "1"], "--draft-p-min must be in [0, 1) (got 1)"),
    (["generate", "hi", "--ctx-size", "0"], "--ctx-size must be >= 1 (got 0)"),
    (["generate", "hi", "--threads", "0"], "--threads must be >= 1 (got 0)"),
    (["generate", "hi", "--gpu-layers", "-2"], "--gpu-layers must be >= -1 (got -2)"),
    (["generate", "hi", "--ctx-size", TOO_BIG], f"--ctx-size must be <= {INT32_MAX}"),
    (["generate", "hi", "--alpha", "x"], "argument --alpha: must be a number (got 'x')"),
    (["bench", "--parallel", "1,0"], "invalid --parallel list: '1,0'"),
    (["rules", "bench", "--vocab", "1"], "--vocab must be in 2..2097152 (got 1)"),
    (["chat", "--draft-max", "65"], "--draft-max must be in 0..64 (got 65)"),
])
def test_obvious_ranges_are_checked_at_parse_time(capsys, parse_only, argv, message):
    err = refused(capsys, argv)
    assert message in err, err
    assert "argument --top-p: --top-p" not in err  # the option is named once


# -- the types themselves ---------------------------------------------------------------------------------------------
def test_the_types_semantics():
    assert finite_float(" 1e3 ") == 1000.0 and finite_float("-0.5") == -0.5
    for bad in ["nan", "-inf", "1e999", "x", ""]:
        with pytest.raises(argparse.ArgumentTypeError):
            finite_float(bad)
    top_p = float_option("--top-p", low=0.0, high=1.0, low_open=True)
    assert top_p("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match=r"--top-p must be in \(0, 1\] \(got 0\)"):
        top_p("0")
    assert non_negative_int("0") == 0 and positive_int(str(INT32_MAX)) == INT32_MAX
    for parse, bad in [(non_negative_int, "-1"), (positive_int, "0"), (positive_int, str(INT32_MAX + 1)),
                       (positive_int, "1.5"), (positive_int, "9" * 5000)]:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    assert int_option("--draft-max", 1, 16)("16") == 16
    with pytest.raises(argparse.ArgumentTypeError, match=r"--draft-max must be in 1\.\.16 \(got 17\)"):
        int_option("--draft-max", 1, 16)("17")
    assert seed("0") == 0 and seed(str(2**63 - 1)) == 2**63 - 1
    for bad in ["-1", str(2**63), "x"]:
        with pytest.raises(argparse.ArgumentTypeError, match="--seed must be"):
            seed(bad)
    assert utf8_text("héllo ✓") == "héllo ✓" and str(utf8_path("a/b")) == "a/b"
    with pytest.raises(argparse.ArgumentTypeError, match=r"not valid UTF-8 text \(byte 0xfe at character 1\)"):
        utf8_text("a\udcfe")


# -- outside text on its way to the terminal -------------------------------------------------------------------------
def test_terminal_text_escapes_undecodable_bytes_and_control_characters():
    assert terminal_text("caf\u00e9 \u2713\nnext\tcol") == "caf\u00e9 \u2713\nnext\tcol"
    assert terminal_text("\udcff\x1b[31mred\x07") == "\\xff\\x1b[31mred\\x07"


def test_models_list_shows_hostile_file_names_and_metadata_escaped(capsys, monkeypatch, tmp_path):
    """A GGUF whose file name is not UTF-8 and whose header holds a terminal escape: listed, escaped, no
    UnicodeEncodeError on a UTF-8 stdout (capsys's is strict)."""
    from tests.test_models_store import gguf_bytes

    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    (tmp_path / "\udcff\x1b[2J.gguf").write_bytes(gguf_bytes({"general.architecture": "\x1b[31mevil"}))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\xff\\x1b[2J.gguf" in out and "\\x1b[31mevil" in out, out


def test_an_error_quoting_outside_text_stays_one_plain_line(capsys):
    err = refused(capsys, ["generate", "hi", "--verifier", "absent\x1b[2J\nname.gguf"])
    assert "model file not found" in err and "\x1b" not in err, err
