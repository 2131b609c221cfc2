"""One check per setting, for its flag and for every file that carries it (issue 34, item 3).

A saved chat's ``settings.seed`` of -1 or 2**64 used to open the TUI while ``chat --seed -1`` was refused. Here
every saved-chat setting and every manifest field that a flag sets is walked with the bad values the flag walks
use (tests/support/cli.py), and both the table of checks and the walk are compared with the fields the file
really has, so a setting added later cannot skip either.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from relaxtui import checks
from relaxtui.cli import main
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.results import MANIFEST, MANIFEST_CHECKS, read_manifest
from relaxtui.evals.tasks import get
from relaxtui.options import SETTINGS, SPECULATIVE, TOP_K, Setting, Speculative
from relaxtui.serve.body import ApiError
from relaxtui.serve.protocol import TOP_K_OFF, parse_request
from relaxtui.session import ModelOptions
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import SETTING_CHECKS, ChatSettings, ModelInfo
from relaxtui.tui.save import SavedChat, Turn, chat_document
from tests.support.cli import NOT_FINITE, NOT_UTF8, SERVE_DEFAULTS, TOO_BIG, find

pytestmark = pytest.mark.timeout(120)

# the chat flag (its dest) that sets each saved-chat setting
CHAT_FLAGS = {"rule": "rule", "knob": "alpha", "draft_max": "draft_max", "temperature": "temperature",
              "top_k": "top_k", "top_p": "top_p", "thinking": "thinking", "drafter": "drafter",
              "max_tokens": "max_tokens", "seed": "seed", "relax_scope": "relax_scope"}
# identity settings that no check in MANIFEST_CHECKS covers, and why: each is compared whole on resume
UNCHECKED_MANIFEST = {"task_version": "derived, not a flag", "ngram": "a pair of --ngram-min/max or null",
                      "bonus": "a choice", "thinking": "a choice (on/off) or null", "system": "always null"}


def json_number(text: str) -> str:
    """A flag's bad number as JSON text: as is where JSON reads it (``1e999``), else the literal Python's json
    writes (``NaN``, ``Infinity``)."""
    try:
        json.loads(text)
        return text
    except ValueError:
        return json.dumps(float(text))


def bad_values(check: checks.Check) -> list[str]:
    """JSON texts ``check`` must refuse, from the flag walks' own bad values."""
    inner = check.inner if isinstance(check, checks.Maybe) else check
    if isinstance(inner, checks.Whole):
        return [TOO_BIG, str(inner.low - 1)]
    if isinstance(inner, checks.Number):
        values = [json_number(v) for v in NOT_FINITE]
        return [v for v in values if not (inner.minus_inf and json.loads(v) == -math.inf)]
    if isinstance(inner, checks.Text):
        return [json.dumps(f"a{NOT_UTF8}b"), "3"]
    return ["1", '"yes"']  # a Flag


def walk(table: dict[str, checks.Check]) -> list[pytest.param]:
    return [pytest.param(name, value, id=f"{name}={value[:12]}") for name, check in table.items()
            for value in bad_values(check)]


def saved_chat_text(setting: str, value: str) -> str:
    """A valid saved chat whose ``settings.<setting>`` is the raw JSON ``value``."""
    settings = ChatSettings(drafter="fake-drafter")
    chat = SavedChat(settings, ModelInfo("v"), ModelInfo("d"),
                     (Turn("user", "hi"), Turn("assistant", "yo", settings=settings)))
    document = chat_document(chat)
    marker = "\u2603MARK\u2603"
    document["settings"][setting] = marker  # type: ignore[index]
    return json.dumps(document).replace(json.dumps(marker), value)


@pytest.fixture
def no_screen(monkeypatch):
    def refuse(self):  # noqa: ANN001
        raise AssertionError("the UI opened")

    monkeypatch.setattr(RelaxApp, "run", refuse)


def test_a_chat_turn_and_a_request_share_one_dataclass_of_speculative_settings():
    """The rule, its knob, the draft length and who drafts are one dataclass (options.Speculative) for a request and a
    chat turn, each field checked by its entry in the option table."""
    from relaxtui.options import ALPHA, DRAFT_MAX, RULE

    assert issubclass(ChatSettings, Speculative)
    shared = [field.name for field in dataclasses.fields(Speculative)]
    assert shared == [field.name for field in dataclasses.fields(ChatSettings)][:len(shared)]
    assert (SETTING_CHECKS["rule"], SETTING_CHECKS["knob"], SETTING_CHECKS["draft_max"]) == (
        RULE.check, ALPHA.check, DRAFT_MAX.check)
    request = parse_request({"messages": [{"role": "user", "content": "x"}], "speculative": {"rule": "cactus:1"}},
                            chat=True, defaults=SERVE_DEFAULTS, n_vocab=16)
    assert type(request.speculative) is Speculative and request.speculative.drafts
    assert not ChatSettings().drafts and ChatSettings(drafter="ngram").drafts  # the chat's default: no drafter
    with pytest.raises(checks.BadValue, match=r"^settings.rule must name a known rule \(got 'nope'"):
        ChatSettings(rule="nope").checked("settings.")


def test_the_checks_cover_every_setting_a_saved_chat_has():
    fields = {field.name for field in dataclasses.fields(ChatSettings)}
    document = json.loads(saved_chat_text("seed", "0"))
    assert set(SETTING_CHECKS) == fields == set(document["settings"]) == set(CHAT_FLAGS)
    assert {name for name, _ in (p.values for p in walk(SETTING_CHECKS))} == fields


@pytest.mark.parametrize("setting,value", walk(SETTING_CHECKS))
def test_every_saved_chat_setting_is_refused_as_its_flag_refuses_it(capsys, tmp_path, no_screen, setting, value):
    path = tmp_path / "chat.json"
    path.write_text(saved_chat_text(setting, value))
    assert main(["chat", "--fake", "--resume", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"relaxtui: error: cannot resume {path}: "), err
    assert f"settings.{setting} " in err and "Traceback" not in err, err


@pytest.mark.parametrize("value,message", [("-1", "settings.seed must be >= 0 (got -1)"),
                                           (str(2**64), "settings.seed must be < 2**63")])
def test_the_seed_of_the_issue(capsys, tmp_path, no_screen, value, message):
    path = tmp_path / "chat.json"
    path.write_text(saved_chat_text("seed", value))
    assert main(["chat", "--fake", "--resume", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_turns_own_settings_go_through_the_same_checks(capsys, tmp_path, no_screen):
    document = json.loads(saved_chat_text("seed", "0"))
    document["messages"][1]["settings"]["top_p"] = 2
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(document))
    assert main(["chat", "--fake", "--resume", str(path)]) == 2
    assert "messages[1].settings.top_p must be in (0, 1] (got 2.0)" in capsys.readouterr().err


def test_a_message_text_that_is_not_utf8_is_refused_not_taken_and_broken_at_the_next_save(capsys, tmp_path,
                                                                                         no_screen):
    document = json.loads(saved_chat_text("seed", "0"))
    document["messages"][0]["content"] = "a\ud800b"
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(document))  # ASCII JSON: the surrogate travels as the escape \ud800
    assert main(["chat", "--fake", "--resume", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "messages[0].content is not valid UTF-8 text (U+D800 at character 1)" in err, err


def test_a_saved_chat_with_good_settings_still_resumes(tmp_path):
    from relaxtui.tui.save import load_chat

    path = tmp_path / "chat.json"
    path.write_text(saved_chat_text("knob", "null"))
    assert load_chat(path).settings.seed == 0
    path.write_text(saved_chat_text("rule", '"casc-opt"').replace('"knob": null', '"knob": -Infinity'))
    assert load_chat(path).settings.knob == -math.inf  # the cascades' strict knob: a file may hold it


@pytest.mark.parametrize("setting", [name for name, dest in CHAT_FLAGS.items()])
def test_the_chat_flag_uses_the_same_check(setting):
    _, action = find(("chat",), CHAT_FLAGS[setting])
    check = SETTING_CHECKS[setting]
    if setting not in ("drafter", "thinking"):  # (the chat's own: a model file or a kind; on/off)
        table = check.inner if isinstance(check, checks.Maybe) else check
        assert action.type.check is table, setting  # type: ignore[union-attr]
    for value in bad_values(check):  # and a flag's text of each bad value is refused too
        text = json.loads(value) if isinstance(json.loads(value), str) else value
        if action.choices is not None:
            assert text not in action.choices
            continue
        if isinstance(check, checks.Text) and text == "3":
            continue  # "3" is text on a command line
        with pytest.raises(argparse.ArgumentTypeError):
            action.type(text)  # type: ignore[misc]


# -- the manifest -----------------------------------------------------------------------------------------------------
def a_manifest() -> dict[str, object]:
    options = ModelOptions(verifier="v.gguf", drafter="d.gguf", parallel=2, threads=4,
                           draft_cut="priced")  # (named in the manifest where it cuts)
    plan = EvalPlan(rules=("strict",), draft_max=(2,))
    return RunIdentity.of(get("aime"), options, plan, thinking=None, data=Path("x.jsonl")).manifest()


def test_the_manifest_checks_cover_every_field_a_flag_sets(tmp_path):
    settings = {k for k in a_manifest() if k != "models"}
    assert set(MANIFEST_CHECKS) | set(UNCHECKED_MANIFEST) == settings
    assert not set(MANIFEST_CHECKS) & set(UNCHECKED_MANIFEST)
    (tmp_path / MANIFEST).write_text(json.dumps(a_manifest()))
    assert read_manifest(tmp_path) == a_manifest()  # a manifest relaxtui wrote passes its own checks


@pytest.mark.parametrize("field,value", walk(MANIFEST_CHECKS))
def test_every_manifest_field_a_flag_sets_is_refused_as_the_flag_refuses_it(capsys, tmp_path, field, value):
    marker = "\u2603MARK\u2603"
    text = json.dumps({**a_manifest(), field: marker}).replace(json.dumps(marker), value)
    (tmp_path / MANIFEST).write_text(text)
    assert main(["eval", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / MANIFEST}: field {field!r} " in err and "Traceback" not in err, err


# -- the request fields (issue 32) -------------------------------------------------------------------------------------
REQUEST_SETTINGS = {setting.name: setting.check for setting in SETTINGS.values() if setting.field}


def request_text(setting: Setting, value: str) -> str:
    """A valid chat request whose field for ``setting`` is the raw JSON ``value``."""
    marker = "\u2603MARK\u2603"
    body: dict[str, object] = {"messages": [{"role": "user", "content": "x"}]}
    inner = body.setdefault("speculative", {}) if setting.field.startswith("speculative.") else body  # type: ignore[union-attr]
    inner[setting.key] = marker  # type: ignore[index]
    return json.dumps(body).replace(json.dumps(marker), value)


def test_the_request_fields_are_the_tables_and_cover_what_the_server_reads():
    assert {s.field for s in SETTINGS.values() if s.field} == {
        "temperature", "top_k", "top_p", "seed", "max_tokens", "speculative.rule", "speculative.alpha",
        "speculative.draft_max", "speculative.draft_kind", "speculative.relax_scope"}
    assert {s.key for s in SPECULATIVE} == set(dataclasses.asdict(Speculative()).keys()) - {"knob", "drafter"} | {
        "alpha", "draft_kind"}


@pytest.mark.parametrize("setting,value", walk(REQUEST_SETTINGS))
def test_every_request_field_is_refused_as_its_flag_refuses_it(setting, value):
    """The flag walks' bad values, sent as the setting's request field: a 400 naming the field (``TOP_K_OFF``, -1,
    is how the server spells top-k off, so it is not a bad value there)."""
    entry = SETTINGS[setting]
    if entry is TOP_K and json.loads(value) == TOP_K_OFF:
        return
    body = json.loads(request_text(entry, value))  # Python's json reads NaN/Infinity; the server's reader does not
    with pytest.raises(ApiError) as raised:
        parse_request(body, chat=True, defaults=SERVE_DEFAULTS, n_vocab=16)
    assert raised.value.param == entry.field and raised.value.message.startswith(f"{entry.field}: "), raised.value
