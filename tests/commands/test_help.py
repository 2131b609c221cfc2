"""Help that a newcomer can read: every option shows its default, each command has its own help, --version,
and a rule is named the same way (NAME or NAME:KNOB) wherever one is taken."""

from __future__ import annotations

import argparse
import re

import pytest

from relaxtui.cli import build_parser, build_report_parser, main
from relaxtui.errors import UserError
from relaxtui.rules import split_spec


def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    """Every (command path, parser) under ``parser``, sub-commands included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*path, name))


ALL = [*parsers(build_parser()), (("eval", "report"), build_report_parser())]


def shown_default(action: argparse.Action) -> bool:
    return not (action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction)))


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) or "relaxtui" for p, _ in ALL])
def test_every_option_with_a_default_shows_it(path, parser):
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if not shown_default(action):
            continue
        default = action.default
        value = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        helped = " ".join((action.help or "").split())
        assert "default" in helped or f"(default: {value})" in text, (path, action.option_strings)


def test_the_defaults_a_newcomer_asked_for_are_shown():
    def help_of(*path: str) -> str:
        return " ".join(dict(ALL)[path].format_help().split())
    generate = help_of("generate")
    for shown in ("(default: 20)", "(default: 0.95)", "(default: 3)", "(default: 256)"):
        assert shown in generate, shown
    tune = help_of("tune")
    assert "recorded for the replay) (default: 5)" in tune and "(default: 2.0)" in tune and "(default: 2 3 4)" in tune
    assert "(default 60m)" in tune and "(default: 0.95)" in tune
    bench = help_of("bench")
    assert re.search(r"--passes PASSES [^-]*default", bench) and re.search(r"--draft-max N_MAX, [^(]*\(N[^-]*default",
                                                                           bench)


def test_version_and_a_bare_command(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("relaxtui ")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a command is needed: generate, bench, chat, eval, tune" in err
    assert "relaxtui: relaxtui" not in err  # the prefix once


def test_eval_report_has_its_own_help(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "report", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: relaxtui eval report") and "--profile" in out and "--rule" not in out


def test_a_rule_is_named_the_same_way_everywhere():
    assert split_spec("cactus:1") == ("cactus", 1.0) and split_spec("cactus", 0.5) == ("cactus", 0.5)
    assert split_spec("casc-opt:-inf") == ("casc-opt", float("-inf"))
    with pytest.raises(UserError, match="disagree"):
        split_spec("cactus:1", 2.0)
    with pytest.raises(UserError, match="must be a number"):
        split_spec("cactus:nan")


def test_generate_takes_name_colon_knob(capsys):
    # an unknown rule fails in one line before any model loads, whatever the spelling
    assert main(["generate", "hi", "--rule", "nope:1"]) == 2
    assert "--rule must name a known rule (got 'nope'; known: strict," in capsys.readouterr().err
    assert main(["generate", "hi", "--rule", "mentored:2"]) == 2  # the knob is validated like --alpha
    assert "out of range for 'mentored'" in capsys.readouterr().err


WITH_ALPHA = [path for path, parser in ALL if any("--alpha" in a.option_strings for a in parser._actions)]


@pytest.mark.parametrize("path", WITH_ALPHA, ids=lambda path: " ".join(path))
def test_alpha_says_what_it_is_when_not_given(path):
    """--alpha has no single default (each rule has its own knob): every command that takes it says so in --help."""
    parser = dict(ALL)[path]
    action = next(a for a in parser._actions if "--alpha" in a.option_strings)
    text = " ".join(parser.format_help().split())
    assert "default" in (action.help or "") or "(default: " in text, path
    if action.nargs is None:  # generate, chat, serve: one knob, the rule's own when not given
        assert "the rule's knob (default: the rule's own where it has one: typical 0.09, fly 0.3, mars 0.9; every " \
               "other relaxed rule needs one; ranges: `relaxtui rules list`)" in text
