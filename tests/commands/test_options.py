"""Command-line values are outside input (issue 17): every option of every sub-command refuses NaN, infinities,
negative seeds, whole numbers past what llama.cpp's C ints hold, and text that is not UTF-8 — at parse time, as
one line on stderr and exit code 2, before any command (or model) runs.

The walks below find the options themselves in ``build_parser()``, so an option added later with a plain
``type=float`` (which takes "nan") or no type at all (which takes lone surrogates) fails here by name.
"""

from __future__ import annotations

import argparse
import pickle
import re
import types

import pytest

from relaxtui import checks, cli
from relaxtui.checks import MAX_DRAFT, BadValue
from relaxtui.cli import build_parser, main
from relaxtui.commands.common import (
    INT32_MAX,
    drafts_without_file,
    finite_float,
    float_option,
    int_option,
    non_negative_int,
    positive_int,
    seed,
    utf8_path,
    utf8_text,
)
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.display import terminal_text
from relaxtui.errors import UserError
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.options import DRAFT_MAX, SETTINGS, SPECULATIVE, SPECULATIVE_N, Setting, as_flag
from relaxtui.rules import make
from relaxtui.serve.body import ApiError
from relaxtui.serve.protocol import CompletionRequest, parse_request
from relaxtui.session import DRAFT_KINDS, ModelOptions
from relaxtui.tui.engine import ChatSettings
from tests.support.cli import NOT_FINITE, NOT_UTF8, SERVE_DEFAULTS, TOO_BIG, find, leaf_parsers


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
    assert {("generate", "seed"), ("generate", "ctx_size"), ("bench", "draft_max"), ("rules bench", "vocab"),
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
    (["generate", "hi", "--ctx-size", "8"], "--ctx-size must be >= 16 (got 8)"),
    (["generate", "hi", "--threads", "0"], "--threads must be >= 1 (got 0)"),
    (["generate", "hi", "--gpu-layers", "-2"], "--gpu-layers must be >= -1 (got -2)"),
    (["generate", "hi", "--ctx-size", TOO_BIG], f"--ctx-size must be <= {INT32_MAX}"),
    (["generate", "hi", "--alpha", "x"], "--alpha must be a number (got 'x')"),
    (["generate", "hi", "--alpha=-inf"], "--alpha must be a finite number (got '-inf')"),
    (["generate", "hi", "--rule", "nope"], "--rule must name a known rule (got 'nope'; known: strict, "),
    (["chat", "--rule", "mentored:2"], "--rule 'mentored:2': the knob 2 is out of range for 'mentored'"),
    (["serve", "--rule", "cactus:x"], "--rule 'cactus:x': the knob after ':' must be a number"),
    (["eval", "aime", "--rule", "strict", "topk-delta:0.5:0"], "--rule 'topk-delta': 0 is out of range for k"),
    (["generate", "hi", "--draft-kind", "eagle"], "--draft-kind must be one of model, ngram, "),
    (["generate", "hi", "--draft-cut", "always"], "--draft-cut must be one of auto, priced, none (got 'always')"),
    (["serve", "--bonus", "p"], "--bonus must be one of auto, target, relaxed (got 'p')"),
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
    from tests.support.gguf_files import gguf_bytes

    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    (tmp_path / "\udcff\x1b[2J.gguf").write_bytes(gguf_bytes({"general.architecture": "\x1b[31mevil"}))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\xff\\x1b[2J.gguf" in out and "\\x1b[31mevil" in out, out


def test_an_error_quoting_outside_text_stays_one_plain_line(capsys):
    err = refused(capsys, ["generate", "hi", "--verifier", "absent\x1b[2J\nname.gguf"])
    assert "model file not found" in err and "\x1b" not in err, err


# -- the option table (issue 32): one definition per setting, each face adding only its spelling ----------------------
def table_flags() -> list[tuple[str, argparse.Action, Setting]]:
    """Every flag of every command that sets a number of the option table (found by its dest in the real parsers)."""
    return [(" ".join(path), action, SETTINGS[action.dest]) for path, parser in leaf_parsers(build_parser())
            for action in parser._actions
            if action.option_strings and action.dest in SETTINGS and kind(action) in ("int", "float")]


def test_every_draft_max_reads_the_table_and_shares_its_top():
    """Six parsers had five ranges for --draft-max (one a literal 64, one 1..16 under dest n_max); now each flag
    is the table's, and a command that starts at N = 1 states that from the table's bounds."""
    found = {" ".join(path): action for path, parser in leaf_parsers(build_parser()) for action in parser._actions
             if "--draft-max" in action.option_strings}
    assert set(found) == {"generate", "chat", "serve", "eval", "tune", "bench"}
    top = DRAFT_MAX.check.cap
    assert top == MAX_DRAFT
    lows = {}
    for command, action in found.items():
        check = action.type.check  # type: ignore[union-attr]
        assert action.dest == "draft_max" and "--spec-draft-n-max" in action.option_strings, command
        assert check is DRAFT_MAX.check or check.wider is DRAFT_MAX.check, command
        assert check.cap == top and action.type(str(top)) == top, command
        with pytest.raises(argparse.ArgumentTypeError) as refused_top:
            action.type(str(top + 1))  # type: ignore[misc]
        assert str(refused_top.value) == f"--draft-max must be in {check.low}..{top} (got {top + 1})", command
        lows[command] = check.low
    # N = 0 is the verifier alone: eval and tune run it as --no-spec, bench as the baseline it always times
    assert lows == {"generate": 0, "chat": 0, "serve": 0, "eval": 1, "tune": 1, "bench": 1}
    assert SPECULATIVE_N.wider is DRAFT_MAX.check and found["generate"].type("auto") == "auto"


HAND_WRITTEN = {("tune", "alpha")}  # tune's own --rule/--alpha lists (commands/tune.py), not yet the table's


def test_every_flag_of_a_table_setting_takes_the_tables_check():
    flags = table_flags()
    assert {("generate", "temperature"), ("serve", "max_tokens"), ("models pair", "ctx_size"), ("eval", "parallel"),
            ("chat", "seed"), ("bench", "draft_max")} <= {(command, action.dest) for command, action, _ in flags}
    for command, action, setting in flags:
        if (command, setting.name) in HAND_WRITTEN:
            continue
        table = setting.check.inner if isinstance(setting.check, checks.Maybe) else setting.check
        check = action.type.check  # type: ignore[union-attr]
        assert setting.flag in action.option_strings, (command, action.option_strings)
        assert check is table or getattr(check, "wider", None) is table, (command, setting.name)


def test_a_lower_layer_names_the_setting_and_the_command_line_spells_its_flag(capsys):
    with pytest.raises(BadValue) as raised:
        ModelOptions(ctx_size=8)
    assert str(raised.value) == "ctx_size must be >= 16 (got 8)"
    assert str(as_flag(raised.value)) == "--ctx-size must be >= 16 (got 8)"
    with pytest.raises(BadValue) as raised:
        make("mentored", 2.0)
    assert raised.value.name == "alpha" and raised.value.problem.startswith("2 is out of range for 'mentored': ")
    assert f"relaxtui: error: --alpha {raised.value.problem}\n" == refused(capsys, ["generate", "hi", "--rule",
                                                                                    "mentored", "--alpha", "2"])
    assert str(as_flag(UserError("not a setting"))) == "not a setting"
    copy = pickle.loads(pickle.dumps(raised.value))  # Ray carries refusals between processes
    assert (copy.name, copy.problem) == (raised.value.name, raised.value.problem)


GREEDY_REFUSAL = "'rfuzzy' cannot run greedy (temperature 0); give a temperature above 0"


def test_cannot_run_greedy_is_the_factorys_one_sentence_on_every_face(capsys):
    with pytest.raises(BadValue, match="^rule " + re.escape(GREEDY_REFUSAL) + "$"):
        make("rfuzzy", 0.1, temperature=0.0)
    make("rfuzzy", 0.1, temperature=0.7)  # sampling: fine
    with pytest.raises(BadValue) as eval_plan:
        EvalPlan(rules=("rfuzzy:0.1",), sampling=SamplingParams(0.0, 0, 1.0))
    with pytest.raises(BadValue) as chat:
        ChatSettings(rule="rfuzzy", knob=0.1, temperature=0.0).validated()
    assert eval_plan.value.problem == chat.value.problem == GREEDY_REFUSAL
    err = refused(capsys, ["generate", "hi", "--rule", "rfuzzy:0.1", "--temperature", "0"])
    assert err == f"relaxtui: error: --rule {GREEDY_REFUSAL}\n"
    with pytest.raises(ApiError) as served:
        request({"temperature": 0, "speculative": {"rule": "rfuzzy:0.1"}})
    assert served.value.message == f"speculative.rule: {GREEDY_REFUSAL}"
    assert request({"temperature": 0, "speculative": {"rule": "rfuzzy:0.1", "draft_max": 0}}).rule is None  # no draft


def request(fields: dict[str, object]) -> CompletionRequest:
    return parse_request({"messages": [{"role": "user", "content": "x"}], **fields}, chat=True, defaults=SERVE_DEFAULTS,
                         n_vocab=16)


@pytest.mark.parametrize("fields,param,problem", [
    ({"speculative": {"draft_max": 99}}, "speculative.draft_max", "must be in 0..64 (got 99)"),
    ({"speculative": {"draft_max": 2.5}}, "speculative.draft_max", "must be a whole number (got 2.5)"),
    ({"speculative": {"rule": "mentored", "alpha": 2}}, "speculative.alpha", "2 is out of range for 'mentored'"),
    ({"speculative": {"rule": "strict", "alpha": 1}}, "speculative.alpha", "must not be given: rule 'strict' takes no"),
    ({"speculative": {"rule": "mentored"}}, "speculative.alpha", "is missing: rule 'mentored' needs a knob"),
    ({"speculative": {"rule": "cactus:1", "alpha": 2}}, "speculative.alpha", "2 and the knob pinned in rule"),
    ({"speculative": {"rule": "cactus:x"}}, "speculative.rule", "'cactus:x': the knob after ':' must be a number"),
    ({"speculative": {"rule": "nope"}}, "speculative.rule", "must name a known rule (got 'nope'; known: strict"),
    ({"speculative": {"rule": "cactus:-1"}}, "speculative.rule", "'cactus:-1': the knob -1 is out of range"),
    ({"speculative": {"draft_kind": "eagle"}}, "speculative.draft_kind", "must be one of model, ngram, "),
    ({"speculative": {"rule": "scd:0.5", "draft_kind": "ngram"}}, "speculative.draft_kind", "rule 'scd' needs the"),
    ({"temperature": -1}, "temperature", "must be >= 0 (got -1)"),
    ({"temperature": 1e-9}, "temperature", "must be 0 (greedy) or at least 1e-05"),
    ({"top_p": 0}, "top_p", "must be in (0, 1] (got 0)"),
    ({"top_k": -2}, "top_k", "must be >= 0 (got -2)"),
    ({"seed": -1}, "seed", "must be >= 0 (got -1): runs are reproducible"),
    ({"max_tokens": 0}, "max_tokens", "must be >= 1 (got 0)"),
    ({"max_completion_tokens": 2**40}, "max_completion_tokens", f"must be <= {INT32_MAX}"),
])
def test_the_request_reader_names_the_field_never_the_flag(fields, param, problem):
    with pytest.raises(ApiError) as raised:
        request(fields)
    error = raised.value
    assert error.param == param and error.message.startswith(f"{param}: {problem}"), error.message
    assert "--" not in error.message


def test_the_request_reader_builds_the_rule_once_with_the_tables_values():
    taken = request({"speculative": {"rule": "cactus", "alpha": 1, "draft_max": 5.0}, "top_k": -1,
                     "max_completion_tokens": 7})
    assert taken.rule is not None and (taken.rule.name, taken.rule.knob) == ("cactus", taken.speculative.knob) \
        == ("cactus", 1.0)
    typical = request({"speculative": {"rule": "typical"}})  # a rule's default knob is resolved once, by the rule
    assert typical.rule is not None and typical.speculative.knob == typical.rule.knob is not None
    assert taken.speculative.draft_max == 5 and taken.sampling.top_k == 0 and taken.max_tokens == 7
    assert request({"speculative": {"draft_kind": "none"}}).rule is None  # the verifier alone: no rule runs
    known = ", ".join(setting.key for setting in SPECULATIVE)
    with pytest.raises(ApiError, match=re.escape(f"unknown field (known: {known})")):
        request({"speculative": {"n": 3}})
    assert known == "rule, alpha, draft_max, draft_kind, relax_scope"


def test_which_drafter_kinds_need_no_file_is_read_from_their_traits():
    from relaxtui.decoding.drafters import STANDALONE_KINDS

    # a GGUF drafter needs --drafter; the verifier's own MTP head and every model-free kind need none
    assert {kind: drafts_without_file(kind) for kind in DRAFT_KINDS} == {
        "model": False, "mtp": True, **dict.fromkeys(STANDALONE_KINDS, True)}
    assert set(DRAFT_KINDS) == {"model", "mtp", *STANDALONE_KINDS}


def test_text_settings_are_the_tables_too():
    """The rule, the drafter kind, the cut, the bonus and --draft-adapt are entries of the table (issue 45): each flag
    is added from its entry, and the factory checks the drafter settings with the table's own checks."""
    from relaxtui.decoding.drafters import DRAFT_KINDS as kinds
    from relaxtui.options import BONUS, DRAFT_ADAPT, DRAFT_CUT, DRAFT_KIND, DRAFTER_SETTINGS, RULE

    assert {s.name: s.check for s in DRAFTER_SETTINGS} == checks.DRAFTER
    assert DRAFT_KIND.check.values == kinds and DRAFT_CUT.check is checks.DRAFT_CUT and BONUS.check is checks.BONUS
    for command in ("generate", "chat", "serve", "eval"):
        parser, action = find((command,), "rule")
        assert action.type.check is RULE.check, command  # type: ignore[union-attr]
    for setting in (DRAFT_KIND, DRAFT_CUT, BONUS):
        parser, action = find(("generate",), setting.name)
        assert action.type.check is setting.check and action.default == setting.default  # type: ignore[union-attr]
    parser, action = find(("generate",), "draft_adapt")
    assert isinstance(action, argparse._StoreTrueAction) and DRAFT_ADAPT.flag in action.option_strings


def test_a_choice_setting_reads_one_definition_on_every_face():
    """What a new choice setting gets from its entry alone (a relax scope, say): the flag, the request field, the
    text a settings panel reads, each refusing the same words with its own spelling."""
    from relaxtui.serve.body import get_setting

    scope = Setting("scope", checks.Choice(("all", "thinking", "answer")), "all", "where", "--scope",
                    field="speculative.scope")
    parser = argparse.ArgumentParser()
    scope.add(parser)
    assert parser.parse_args([]).scope == "all" and parser.parse_args(["--scope", "answer"]).scope == "answer"
    with pytest.raises(argparse.ArgumentTypeError, match=r"^--scope must be one of all, thinking, answer \(got 'x'\)$"):
        parser._actions[-1].type("x")  # type: ignore[misc]
    assert get_setting({"scope": "thinking"}, scope) == "thinking"
    with pytest.raises(ApiError, match=r"^speculative.scope: must be one of all, thinking, answer \(got 3\)$"):
        get_setting({"scope": 3}, scope)
    assert scope.read(" answer ") == "answer" and scope.read("") is None
    with pytest.raises(BadValue, match=r"^the scope must be one of all, thinking, answer \(got 'x'\)$"):
        scope.read("x", "the scope")


def test_a_rule_without_a_knob_runs_with_its_own_or_is_a_400_naming_it():
    """docs/serve.md's sentence, rule by rule: a rule with a default knob runs with it; any other relaxed rule given
    without a knob is a 400 naming the rule and its knob; the doc lists exactly the rules that have one."""
    from pathlib import Path

    from relaxtui.rules import RULES

    own = {}
    for name, cls in RULES.items():
        if cls.knob_name is None:
            continue
        if cls.knob_default is not None:
            taken = request({"speculative": {"rule": name}})
            assert taken.rule is not None and taken.rule.knob == cls.knob_default, name
            own[name] = cls.knob_default
            continue
        with pytest.raises(ApiError) as refused:
            request({"speculative": {"rule": name}})
        assert refused.value.param == "speculative.alpha", name
        assert f"is missing: rule {name!r} needs a knob, {cls.knob_name} (" in refused.value.message, name
    listed = ", ".join(f"`{name}` {knob:g}" for name, knob in own.items())
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text().split())
    assert own and f"own default knob where it has one ({listed}:" in doc
