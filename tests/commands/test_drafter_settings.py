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
from relaxtui.decoding.drafters import DrafterOptions
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
