"""The command line under test: the check that a command failed with one clear line, every sub-command's parser
(``leaf_parsers``, ``find``), the bad values the option walks feed every flag, and the served defaults a request
checked next to its flag is parsed with."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from relaxtui.cli import build_parser, main
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.options import Speculative
from relaxtui.serve.protocol import DRAFT_KINDS as SERVED_KINDS
from relaxtui.serve.protocol import Defaults

NOT_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"]
NOT_UTF8 = "\udcff"  # what Python makes of argv byte 0xff (surrogateescape)
TOO_BIG = str(2**64)  # past every C int llama.cpp takes, and past int64

SERVE_DEFAULTS = Defaults(Speculative("strict", None, 3, "model"), SamplingParams(0.6, 20, 0.95), 0, None, None,
                          SERVED_KINDS)


def fails_with(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: "), err
    assert message in err, err
    assert "Traceback" not in err


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                               argparse.ArgumentParser]]:
    """Every sub-command that runs something, with the words that reach it (``models pair``)."""
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from leaf_parsers(child, (*path, name))


def find(path: tuple[str, ...], dest: str) -> tuple[argparse.ArgumentParser, argparse.Action]:
    parser = dict(leaf_parsers(build_parser()))[path]
    return parser, next(action for action in parser._actions if action.dest == dest)
