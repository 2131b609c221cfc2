"""Drafter settings that no drafter could use are refused before anything loads, on every face (issue 47).

Two holes: ``generate --draft-kind ngram --ngram-max 2147483647`` built one n-gram index per size and died in a
30-line MemoryError (a size with no upper bound), and ``serve --draft-kind suffix --ngram-mod-n-min 100
--ngram-size-m 10`` started, then answered every request for ngram-mod with a 400 that blamed the client (a kind the
server offers, built lazily with settings it could never take). Every size now has a bound (llama.cpp's 1024 for its
n-gram kinds, 64 for prompt lookup's sizes, which each cost an index), and each kind's settings are checked together
by the factory (``drafters.check_options``): a face checks its own kind when it reads the options, and ``serve`` and
``chat``, which offer every standalone kind, check them all before the port opens or a screen shows.
"""

from __future__ import annotations

import pytest

from relaxtui import checks
from relaxtui.checks import BadValue
from relaxtui.cli import main
from relaxtui.decoding import drafters
from relaxtui.decoding.drafters import STANDALONE_KINDS, DrafterOptions
from relaxtui.errors import UserError
from relaxtui.session import ModelOptions
from tests.support.cli import fails_with

pytestmark = pytest.mark.timeout(60)
MISSING = ["--verifier", "/nonexistent/v.gguf"]  # reached only if the settings pass


# -- class 2: every size bounded ------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value,message", [
    ("--ngram-max", "2147483647", "--ngram-max must be in 1..64 (got 2147483647)"),
    ("--ngram-min", "65", "--ngram-min must be in 1..64"),
    ("--ngram-min-hits", "16381", "--ngram-min-hits must be in 1..16380"),
    ("--suffix-depth", "2147483647", "--suffix-depth must be in 1..1024"),
    ("--ngram-size-n", "1025", "--ngram-size-n must be in 1..1024"),
    ("--ngram-mod-n-min", "1025", "--ngram-mod-n-min must be in 0..1024"),
])
@pytest.mark.parametrize("face", [["generate", "hi", *MISSING], ["serve", "--fake"], ["chat", "--fake"],
                                  ["bench", *MISSING]])
def test_a_size_past_its_bound_is_one_line_before_anything_loads(capsys, face, flag, value, message):
    fails_with(capsys, [*face, "--draft-kind", "ngram", flag, value], message)


@pytest.mark.parametrize("field,value", [("ngram_max", 2**31 - 1), ("ngram_min", 65), ("suffix_depth", 2**31 - 1),
                                         ("ngram_min_hits", 16381), ("ngram_size_m", 1025)])
def test_options_built_in_code_hold_the_same_bounds(field, value):
    with pytest.raises(BadValue, match=f"^{field} must be in "):
        ModelOptions(draft_kind="suffix", **{field: value})
    with pytest.raises(BadValue, match=f"^{field} must be in "):
        DrafterOptions(kind="model", **{field: value})


@pytest.mark.parametrize("kind,field,value", [("ngram-mod", "ngram_mod_slots", 1 << 40),
                                              ("ngram-cache", "ngram_cache_entries", 1 << 40),
                                              ("suffix", "suffix_corpus_tokens", 1 << 40),
                                              ("suffix", "suffix_corpus_outputs", 1 << 40),
                                              ("ngram", "ngram_max", 2**31 - 1)])
def test_the_sizes_only_code_sets_are_bounded_too(kind, field, value):
    """The shared tables' sizes (no flag sets them): a slot count of 2**40 would allocate 4 TiB."""
    with pytest.raises(UserError):
        DrafterOptions(kind=kind, **{field: value})


def test_the_bounds_are_llama_cpps_where_it_has_them():
    from relaxtui.decoding.ngram_map import MAX_COUNT

    assert checks.NGRAM_SIZE.inner.high == 1024 and checks.NGRAM_MOD_MIN.inner.high == 1024  # common/arg.cpp
    assert checks.NGRAM_MIN_HITS.high == MAX_COUNT == 16380  # COMMON_NGRAM_MAX_VALUE_COUNT: counts saturate there


# -- class 3: contradictory settings refused at start -------------------------------------------------------------
CONTRADICTIONS = [
    (["--ngram-mod-n-min", "100", "--ngram-size-m", "10"], "ngram-mod"),
    (["--ngram-min", "5", "--ngram-max", "2"], "--ngram-min must be at most --ngram-max"),
]


@pytest.mark.parametrize("flags,message", CONTRADICTIONS)
def test_serve_refuses_settings_any_kind_it_offers_could_not_take_before_the_port_opens(capsys, monkeypatch, flags,
                                                                                        message):
    def opened(*args, **kwargs):
        raise AssertionError("the port was opened")

    monkeypatch.setattr("relaxtui.commands.serve.bind", opened)
    fails_with(capsys, ["serve", "--fake", "--port", "0", "--draft-kind", "suffix", *flags], message)


@pytest.mark.parametrize("flags,message", CONTRADICTIONS)
def test_chat_refuses_them_before_its_screen_opens(capsys, monkeypatch, flags, message):
    """The chat's drafter switch offers every standalone kind."""
    def shown(*args, **kwargs):
        raise AssertionError("the screen opened")

    monkeypatch.setattr("relaxtui.tui.app.RelaxApp.run", shown)
    fails_with(capsys, ["chat", "--fake", "--draft-kind", "suffix", *flags], message)


@pytest.mark.parametrize("face", [["generate", "hi"], ["eval", "math500"], ["tune", "math500"], ["bench"]])
@pytest.mark.parametrize("flags,kind,message", [
    (["--ngram-mod-n-min", "100", "--ngram-size-m", "10"], "ngram-mod", "ngram-mod"),
    (["--ngram-min", "5", "--ngram-max", "2"], "ngram", "--ngram-min must be at most --ngram-max"),
])
def test_a_face_refuses_them_for_its_own_kind_before_loading(capsys, face, flags, kind, message):
    fails_with(capsys, [*face, *MISSING, "--draft-kind", kind, *flags], message)


def test_a_server_with_no_drafter_offers_no_kind_and_checks_none(capsys, monkeypatch):
    monkeypatch.setattr("relaxtui.commands.serve.bind", lambda *a, **k: (_ for _ in ()).throw(SystemExit(7)))
    with pytest.raises(SystemExit, match="7"):  # got as far as the port: nothing refused
        main(["serve", "--fake", "-md", "none", "--ngram-min", "5", "--ngram-max", "2"])


@pytest.mark.parametrize("kind,fields", [
    ("ngram", {"ngram_min": 5, "ngram_max": 2}),
    ("ngram-mod", {"ngram_mod_n_min": 100, "ngram_size_m": 10}),
    ("ngram-mod", {"ngram_mod_n_min": 65}),  # above its default longest draft, 64
    ("suffix", {"suffix_corpus_outputs": -1}),
])
def test_check_options_refuses_what_the_kind_would_refuse_and_builds_nothing(monkeypatch, kind, fields):
    monkeypatch.setattr("relaxtui.decoding.ngram_mod.ModTable", lambda *a: pytest.fail("built a table"))
    options = DrafterOptions(kind="model", **fields)  # the model kind reads none of them
    with pytest.raises(UserError):
        drafters.check_options(options, [kind])
    with pytest.raises(UserError):
        DrafterOptions(kind=kind, **fields)  # its own kind: refused as it is made
    drafters.check_options(DrafterOptions(), STANDALONE_KINDS)  # the defaults suit every kind


def test_every_kind_has_a_check_that_reads_what_it_declares():
    for name, kind in drafters.KINDS.items():
        assert callable(kind.check), name
