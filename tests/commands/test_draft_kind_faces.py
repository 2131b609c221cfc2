"""Every drafter kind the factory lists, through every face (issue 33, item 2): the parsers take each one, a kind
that opens no file needs no ``--drafter``, the chat's settings panel offers every model-free kind, a server keeps
one instance per kind for all its requests, and nothing outside the factory asks which kind it got (the traits do).
Real-model checks (marked ``model``) run the smallest installed model with one thread and a few tokens."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from relaxtui.cli import main, parse
from relaxtui.decoding.drafters import DRAFT_KINDS, KINDS, STANDALONE_KINDS, drafter_kind
from relaxtui.models.registry import DEFAULT_DRAFTER

FACES = {  # each face's command line, before --draft-kind
    "generate": ["generate", "hi"], "chat": ["chat", "--fake"], "eval": ["eval", "math500"],
    "tune": ["tune", "math500"], "bench": ["bench"], "serve": ["serve", "--fake"],
}


def fails_with(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: ") and message in err, err


# -- the command line ------------------------------------------------------------------------------------------------
def test_the_standalone_kinds_are_the_factorys_kinds_without_a_file_or_hidden_rows():
    assert set(STANDALONE_KINDS) == {k for k, kind in KINDS.items() if not kind.model_file
                                     and not kind.needs_hidden_states}
    assert {"ngram", "ngram-simple", "ngram-map", "ngram-mod", "ngram-cache", "suffix"} <= set(STANDALONE_KINDS)
    assert not {"model", "mtp"} & set(STANDALONE_KINDS)
    assert {k for k, kind in KINDS.items() if kind.has_distribution} == {"model", "mtp"}


def test_what_a_kind_declares_before_loading_is_what_its_drafter_says_once_built():
    """A run's identity and --draft-cut auto read the kind; the loop reads the built drafter's traits."""
    from relaxtui.decoding.drafters import DrafterOptions, Openers, make_drafter
    from relaxtui.engine.fake import FakeBackend

    verifier = FakeBackend(lambda context: [0.0] * 8, 8)
    for name, kind in KINDS.items():
        if kind.needs_hidden_states:  # mtp: built only on a verifier with hidden rows and an MTP head
            assert kind.holds_model and kind.has_distribution
            continue
        traits = make_drafter(DrafterOptions(kind=name), verifier, Openers(model=lambda _: verifier)).traits
        assert (traits.holds_model, traits.has_distribution) == (kind.holds_model, kind.has_distribution), name


@pytest.mark.parametrize("face", FACES)
def test_every_face_takes_every_kind_and_refuses_an_unknown_one_at_parse_time(face, capsys):
    for kind in DRAFT_KINDS:
        assert parse([*FACES[face], "--draft-kind", kind]).draft_kind == kind
    fails_with(capsys, [*FACES[face], "--draft-kind", "eagle"], f"--draft-kind must be one of "
                                                                f"{', '.join(DRAFT_KINDS)} (got 'eagle')")


@pytest.mark.parametrize("kind", STANDALONE_KINDS)
def test_a_kind_without_a_file_opens_no_drafter_file(kind):
    from relaxtui.commands.common import drafts_without_file, model_options

    options = model_options(parse(["generate", "hi", "--draft-kind", kind]))
    assert options.draft_kind == kind and options.drafter_file is None and drafts_without_file(kind)
    assert model_options(parse(["generate", "hi", "--draft-kind", "model"])).drafter_file == DEFAULT_DRAFTER


def test_eval_and_tune_refuse_a_rule_that_needs_logits_on_a_kind_without_them_before_any_model_loads(capsys):
    task = str(Path(__file__).resolve().parents[2] / "evals/examples/edit_code.toml")
    absent = ["-m", "absent-verifier.gguf"]  # never reached: the refusal comes first
    fails_with(capsys, ["eval", task, "--rule", "scd:0.5", "--draft-kind", "suffix", *absent],
               "--rule scd:0.5: rule 'scd' needs the drafter's logits, which --draft-kind suffix drafts without")
    fails_with(capsys, ["tune", task, "--rule", "scd", "--alpha", "0.5", "--drafters", "ngram-simple", *absent],
               "rule 'scd' needs the drafter's logits, which --drafters ngram-simple drafts without")


def test_the_runs_identity_records_the_ngram_sizes_only_for_the_kind_built_from_them():
    from relaxtui.evals.run.identity import RunIdentity
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.evals.tasks import get
    from relaxtui.session import ModelOptions

    task = get(str(Path(__file__).resolve().parents[2] / "evals/examples/edit_code.toml"))
    ids = {kind: RunIdentity.of(task, ModelOptions(draft_kind=kind), EvalPlan(), thinking=None, data=None).settings
           for kind in STANDALONE_KINDS}
    assert ids["ngram"]["ngram"] == [1, 3] and drafter_kind("ngram").reads == ("ngram_min", "ngram_max")
    others = [kind for kind in STANDALONE_KINDS if kind != "ngram"]
    assert others and all(ids[kind]["ngram"] is None and ids[kind]["drafter"] == kind == ids[kind]["draft_kind"]
                          for kind in others)


SIZES = {"--ngram-size-n": 5, "--ngram-size-m": 9, "--ngram-min-hits": 2, "--ngram-mod-n-min": 4,
         "--suffix-depth": 7, "--suffix-factor": 2.5, "--suffix-min-prob": 0.2}


@pytest.mark.parametrize("face", FACES)
def test_every_face_hands_the_ngram_and_suffix_settings_to_the_drafter_it_builds(face):
    from relaxtui.commands.common import model_options
    from relaxtui.decoding.drafters import Openers, make_drafter
    from relaxtui.engine.fake import FakeBackend
    from relaxtui.session import drafter_options

    given = [word for flag, value in SIZES.items() for word in (flag, str(value))]
    options = drafter_options(model_options(parse([*FACES[face], "--draft-kind", "ngram-mod", *given])))
    assert {flag: getattr(options, flag[2:].replace("-", "_")) for flag in SIZES} == SIZES
    verifier = FakeBackend(lambda context: [0.0] * 8, 8)
    built = {kind: make_drafter(replace(options, kind=kind), verifier, Openers(model=lambda _: verifier))
             for kind in ("ngram-simple", "ngram-map-k4v", "ngram-mod", "ngram-cache", "suffix")}
    assert (built["ngram-simple"].size_n, built["ngram-simple"].size_m, built["ngram-map-k4v"].min_hits) == (5, 9, 2)
    assert (built["ngram-mod"].size_n, built["ngram-mod"].size_m, built["ngram-mod"].n_min) == (5, 9, 4)
    assert built["ngram-cache"].n_draft == 9
    assert (built["suffix"].settings.depth, built["suffix"].settings.factor,
            built["suffix"].settings.min_prob) == (7, 2.5, 0.2)


def test_unset_sizes_are_each_kinds_own_and_a_shorter_ngram_mod_draft_lowers_its_minimum():
    from relaxtui.commands.common import model_options
    from relaxtui.decoding.ngram_mod import NgramModDrafter
    from relaxtui.session import drafter_options

    options = drafter_options(model_options(parse(["generate", "hi", "--draft-kind", "ngram-mod"])))
    assert (options.ngram_size_n, options.ngram_size_m, options.ngram_mod_n_min) == (None, None, None)
    assert (NgramModDrafter().n_min, NgramModDrafter(size_m=8).n_min) == (48, 8)


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--ngram-size-n", "0", "--ngram-size-n must be in 1..1024 (got 0)"),
    ("--ngram-size-m", "x", "--ngram-size-m must be a whole number (got 'x')"),
    ("--suffix-factor", "0", "--suffix-factor must be"),
    ("--suffix-min-prob", "nan", "--suffix-min-prob must be"),
])
def test_a_bad_drafter_setting_is_one_line_at_parse_time(capsys, flag, value, message):
    fails_with(capsys, ["generate", "hi", "--draft-kind", "ngram-simple", flag, value], message)


def test_the_runs_identity_names_every_setting_the_kind_reads_and_only_for_it():
    from relaxtui.evals.run.identity import RunIdentity
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.evals.tasks import get
    from relaxtui.session import ModelOptions

    task = get(str(Path(__file__).resolve().parents[2] / "evals/examples/edit_code.toml"))

    def settings(**options):
        return RunIdentity.of(task, ModelOptions(**options), EvalPlan(), thinking=None, data=None).settings

    assert "drafter_settings" not in settings() and "drafter_settings" not in settings(draft_kind="ngram")
    assert settings(draft_kind="ngram-simple", ngram_size_n=5)["drafter_settings"] == {
        "ngram_size_n": 5, "ngram_size_m": None}
    assert settings(draft_kind="suffix", suffix_depth=7, ngram_size_n=5)["drafter_settings"] == {
        "suffix_depth": 7, "suffix_factor": 1.0, "suffix_min_prob": 0.1, "suffix_corpus_tokens": 65_536,
        "suffix_corpus_outputs": 256}
    # another size is another run (another config id, refused on resume)
    assert settings(draft_kind="ngram-mod", ngram_size_m=8) != settings(draft_kind="ngram-mod", ngram_size_m=16)


# -- chat ------------------------------------------------------------------------------------------------------------
def test_the_chat_offers_every_standalone_kind_and_keeps_one_instance_of_each():
    from relaxtui.tui.engine import FAKE_DRAFTER, NO_DRAFTER, FakeChatEngine, drafter_choice, offered

    engine = FakeChatEngine()
    assert engine.drafter_choices() == [NO_DRAFTER, *STANDALONE_KINDS, FAKE_DRAFTER]
    for kind in STANDALONE_KINDS:
        engine.set_drafter(kind, lambda text: None)
        first = engine.drafter
        assert first.traits.kind == kind and engine.drafter_name == kind
        engine.set_drafter(FAKE_DRAFTER, lambda text: None)
        assert engine.drafter.traits.kind == "model"
        engine.set_drafter(kind, lambda text: None)
        assert engine.drafter is first  # a chat's corpus of earlier turns survives a switch away and back
    engine.set_drafter(NO_DRAFTER, lambda text: None)
    assert engine.drafter is None
    # the command line's drafter, named as the panel names it: a kind without a file by its name
    assert [drafter_choice(kind, DEFAULT_DRAFTER) for kind in ("model", "suffix", "mtp")] == [
        DEFAULT_DRAFTER, "suffix", DEFAULT_DRAFTER]
    assert drafter_choice("suffix", None) == NO_DRAFTER
    assert offered("mtp", ["a.gguf"]) == [NO_DRAFTER, *STANDALONE_KINDS, "mtp", "a.gguf"]
    assert offered("suffix", ["a.gguf"]) == [NO_DRAFTER, *STANDALONE_KINDS, "a.gguf"]


def test_the_llama_chat_engine_offers_the_kinds_beside_the_models_that_fit(monkeypatch):
    from relaxtui.models import store
    from relaxtui.session import ModelOptions
    from relaxtui.tui.engine import NO_DRAFTER, LlamaChatEngine

    fits = argparse.Namespace(path=Path("/m/fits.gguf"), vocab_size=10)
    other = argparse.Namespace(path=Path("/m/other.gguf"), vocab_size=99)
    monkeypatch.setattr(store, "list_models", lambda: [fits, other])
    engine = LlamaChatEngine(ModelOptions("v.gguf", DEFAULT_DRAFTER, draft_kind="ngram-mod"))
    engine.verifier = argparse.Namespace(n_vocab=10)
    assert engine.drafter_name == "ngram-mod"  # not the unopened --drafter default
    assert engine.drafter_choices() == [NO_DRAFTER, *STANDALONE_KINDS, "fits.gguf"]


@pytest.mark.parametrize("kind", ["suffix", "ngram-cache"])
def test_chat_fake_starts_with_the_kind_the_command_line_names(kind, monkeypatch):
    from relaxtui.tui.app import RelaxApp

    seen = {}

    def no_screen(self):  # noqa: ANN001
        seen["engine"], seen["settings"] = self.engine, self.settings

    monkeypatch.setattr(RelaxApp, "run", no_screen)
    assert main(["chat", "--fake", "--draft-kind", kind]) == 0
    assert seen["engine"].drafter.traits.kind == kind and seen["settings"].drafter == kind
    assert main(["chat", "--fake"]) == 0 and seen["engine"].drafter.traits.kind == "model"


async def test_the_settings_panel_offers_every_kind_and_applies_one():
    from textual.widgets import Select

    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import ChatSettings, FakeChatEngine
    from relaxtui.tui.widgets.settings import DRAFTER_TIP, SettingsPanel

    app = RelaxApp(FakeChatEngine(), ChatSettings(drafter="fake-drafter", max_tokens=8))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            if app.ready:
                break
            await pilot.pause(0.05)
        await pilot.press("f2")
        await pilot.pause()
        panel = app.query_one(SettingsPanel)
        assert panel.drafters == ["none", *STANDALONE_KINDS, "fake-drafter"]
        select = app.query_one("#set-drafter", Select)
        for kind in STANDALONE_KINDS:
            select.value = kind  # a value the Select does not offer raises
        select.value = "suffix"
        panel.apply()
        for _ in range(200):
            if app.engine.drafter_name == "suffix" and not app.generating:
                break
            await pilot.pause(0.05)
        assert app.engine.drafter.traits.kind == "suffix" and app.settings.drafter == "suffix"
    assert all(kind in DRAFTER_TIP for kind in STANDALONE_KINDS)


# -- serve -----------------------------------------------------------------------------------------------------------
def test_a_server_offers_its_own_kind_then_every_standalone_kind_then_none():
    from relaxtui.commands.serve import draft_kinds

    assert draft_kinds(parse(["serve", "--fake"])) == ("model", *STANDALONE_KINDS, "none")
    assert draft_kinds(parse(["serve", "--fake", "--draft-kind", "suffix"]))[:2] == ("suffix", "model")
    assert draft_kinds(parse(["serve", "--draft-kind", "ngram-mod"])) == (
        "ngram-mod", *(k for k in STANDALONE_KINDS if k != "ngram-mod"), "none")
    assert draft_kinds(parse(["serve", "--draft-kind", "mtp"]))[0] == "mtp"
    assert draft_kinds(parse(["serve", "-md", "none"])) == ("none",)


@pytest.mark.parametrize("kind", STANDALONE_KINDS)
def test_a_request_picks_the_servers_one_instance_of_its_kind(kind):
    """Two requests for a kind run on the same drafter, built once (its corpus learns across requests); its stats
    name the kind, and greedy strict text is the verifier's own."""
    from relaxtui.serve.pair import FakeServedPair
    from tests.support.servers import client, running

    pair = FakeServedPair(2)
    built = []
    build = pair.kinds.build
    pair.kinds.build = lambda name: built.append(name) or build(name)
    with running(pair) as (url, scheduler):
        api = client(url)
        plain = api.completions.create(model="x", prompt=[0, 1, 2, 0, 1], max_tokens=12,
                                       extra_body={"speculative": {"draft_max": 0}}).choices[0].text
        for _ in range(2):
            reply = api.completions.create(model="x", prompt=[0, 1, 2, 0, 1], max_tokens=12,
                                           extra_body={"speculative": {"draft_kind": kind}})
            assert reply.choices[0].model_extra["relaxtui"]["stats"]["draft_kind"] == kind
            assert reply.choices[0].text == plain
        shared = pair.drafter_for(kind)
        assert built == [kind] and shared.traits.kind == kind and pair.drafter_for(kind) is shared
    assert pair.drafter_for("model") is pair.drafter  # the pair's own drafter answers for its own kind


def test_the_scheduler_hands_a_requests_jobs_the_shared_drafter_of_its_kind():
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.options import Speculative
    from relaxtui.serve.pair import FakeServedPair
    from relaxtui.serve.protocol import DRAFT_KINDS as SERVED
    from relaxtui.serve.protocol import Defaults, parse_request
    from relaxtui.serve.scheduler import Scheduler, Ticket

    pair = FakeServedPair(1)
    loop = asyncio.new_event_loop()
    scheduler = Scheduler(lambda: pair, max_queue=4)
    scheduler.pair = pair
    defaults = Defaults(Speculative("strict", None, 3, "model"), SamplingParams(0.0, 0, 1.0), 0, None, None, SERVED)

    def jobs(kind: str):  # noqa: ANN202
        request = parse_request({"prompt": [0, 1], "speculative": {"draft_kind": kind}}, chat=False,
                                defaults=defaults, n_vocab=pair.n_vocab)
        return scheduler.jobs(request, [[0, 1]], Ticket(loop, 1, float("inf")), "prompt")

    assert jobs("suffix")[0].drafter is jobs("suffix")[0].drafter is pair.drafter_for("suffix")
    assert jobs("model")[0].drafter is pair.drafter and jobs("none")[0].drafter is None
    loop.close()


def test_a_request_for_a_rule_that_needs_logits_on_a_kind_without_them_is_a_400():
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.options import Speculative
    from relaxtui.serve.body import ApiError
    from relaxtui.serve.protocol import DRAFT_KINDS as SERVED
    from relaxtui.serve.protocol import Defaults, parse_request

    defaults = Defaults(Speculative("strict", None, 3, "model"), SamplingParams(1.0, 0, 1.0), 0, None, None, SERVED)
    body = {"prompt": "x", "speculative": {"rule": "scd:0.5", "draft_kind": "suffix"}}
    with pytest.raises(ApiError, match="speculative.draft_kind: rule 'scd' needs the drafter's logits"):
        parse_request(body, chat=False, defaults=defaults, n_vocab=16)
    body["speculative"]["draft_kind"] = "model"
    assert parse_request(body, chat=False, defaults=defaults, n_vocab=16).rule.name == "scd"


# -- models pair -----------------------------------------------------------------------------------------------------
def test_models_pair_lists_the_model_free_kinds_with_no_model_cost():
    from relaxtui.models.pairing import model_free_candidates

    found = model_free_candidates()
    assert [c.kind for c in found] == list(STANDALONE_KINDS) and all(c.c_rel == 0.0 for c in found)
    assert next(c for c in found if c.kind == "ngram").about == "prompt lookup"


# -- real models -----------------------------------------------------------------------------------------------------
ONE_THREAD = ["--threads", "1", "--ctx-size", "512"]


@pytest.mark.model
@pytest.mark.parametrize("kind", STANDALONE_KINDS)
def test_generate_drafts_with_every_model_free_kind_and_no_drafter_file(kind, capsys, test_model_path):
    argv = ["generate", "Repeat exactly: the cat sat on the mat, the cat sat on the mat.", "-m", str(test_model_path),
            "--drafter", "absent-drafter.gguf", "--draft-kind", kind, "--max-tokens", "12", "--temperature", "0",
            "--json", *ONE_THREAD]  # a --drafter the kind never opens: absent, and still no error
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finished = next(line for line in lines if line.get("type") == "finished")
    assert finished["metrics"]["output_tokens"] > 0


@pytest.mark.model
def test_models_pair_prints_the_model_free_kinds_beside_the_files(capsys, tmp_path, test_model_path):
    from tests.support.gguf_files import gguf_bytes

    other = tmp_path / "other-vocab.gguf"  # refused from its header: nothing else is loaded but the verifier
    other.write_bytes(gguf_bytes({"general.architecture": "llama"}, vocab=3))
    assert main(["models", "pair", str(test_model_path), str(other), "--repeats", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    listed = out.partition("model-free drafters")[2]
    assert all(f"  {kind} " in listed for kind in STANDALONE_KINDS) and "c_rel ~ 0.00" in listed


@pytest.mark.model
def test_tune_lists_kinds_beside_model_files_each_in_its_own_folder(tmp_path, test_model_path):
    from relaxtui.commands.tune import plan_drafters
    from relaxtui.evals.tasks import get

    task_file = str(Path(__file__).resolve().parents[2] / "evals/examples/edit_code.toml")
    args = parse(["tune", task_file, "-m", str(test_model_path), "--drafters", "ngram-simple", "suffix",
                  str(test_model_path), *ONE_THREAD])
    runs = plan_drafters(args, get(task_file), tmp_path)
    assert [(run.stem, run.options.draft_kind, run.options.drafter_file) for run in runs] == [
        ("ngram-simple", "ngram-simple", None), ("suffix", "suffix", None),
        (test_model_path.stem, "model", str(test_model_path))]
    assert [run.identity.settings["drafter"] for run in runs] == ["ngram-simple", "suffix", test_model_path.name]


def test_the_fake_pairs_of_chat_and_serve_build_every_kind_with_the_command_lines_settings():
    from relaxtui.decoding.drafters import DrafterOptions
    from relaxtui.serve.pair import FakeServedPair
    from relaxtui.tui.engine import FakeChatEngine

    drafting = DrafterOptions(ngram_size_n=5, ngram_size_m=9, ngram_mod_n_min=4, suffix_depth=7)
    chat = FakeChatEngine(drafter="ngram-mod", drafting=drafting)
    served = FakeServedPair(2, drafting=drafting)
    for drafter in (chat.drafter, served.drafter_for("ngram-mod")):
        assert (drafter.traits.kind, drafter.size_n, drafter.size_m, drafter.n_min) == ("ngram-mod", 5, 9, 4)
    chat.set_drafter("suffix", lambda text: None)
    assert chat.drafter.settings.depth == served.drafter_for("suffix").settings.depth == 7


@pytest.mark.model
def test_the_llama_chat_engine_measures_verify_prices_in_the_background_and_never_in_a_turn(tiny, tmp_path,
                                                                                          monkeypatch):
    """chat runs --draft-cut auto: the load returns at once, the prices are measured by background slices between
    turns (said once), a lookup drafter is cut by them, and a turn only reads them."""
    from relaxtui.costmodel import verify_prices as vp
    from relaxtui.session import ModelOptions
    from relaxtui.tui.engine import LlamaChatEngine

    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path))
    monkeypatch.delenv("RELAXTUI_WARMUP", raising=False)
    engine = LlamaChatEngine(ModelOptions(str(tiny.dense), DEFAULT_DRAFTER, draft_kind="ngram-cache", ctx_size=256,
                                          threads=1))  # a kind that opens no file: --drafter is not read
    said: list[str] = []
    engine.load(said.append)
    assert engine.drafter is None and engine.verifier.warmed_rows == 0  # what takes a message, no more
    assert engine.load_drafter(said.append) is None  # the round costs come later too
    assert engine.verifier.warmed_rows > 0
    assert sum("verify costs" in line for line in said) == 1 and engine.pair.prices() is None, said
    assert engine.drafter.traits.cut == "priced" and not engine.priced
    while engine.background_step():
        pass
    assert engine.priced and engine.pair.prices()[0] == 1.0 and engine.costs is not None
    monkeypatch.setattr(vp, "measure_prices", lambda *args: pytest.fail("measured in a turn"))
    from relaxtui.text import Message
    from relaxtui.tui.engine import ChatSettings

    events = list(engine.stream([Message("user", "a b a b a b")], ChatSettings(drafter="ngram-cache", max_tokens=6,
                                                                              draft_max=8), lambda: False))
    assert events[-1].metrics.output_tokens > 0
    engine.close()


@pytest.mark.model
def test_generate_prices_a_lookup_drafters_drafts_measuring_once_per_machine(tiny, tmp_path, monkeypatch, capsys):
    """--draft-cut auto on generate: measured on the first run (one stderr line), read from the cache after; none
    verifies every draft whole and measures nothing."""
    from relaxtui.costmodel import verify_prices as vp

    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path))
    real = vp.measure_prices
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: (real(verifier, blocks)[0], True))  # kept,
    # however busy the machine (an unstable measurement is used but not kept)
    argv = ["generate", "a b a b a b a b", "--raw", "-m", str(tiny.dense), "--draft-kind", "ngram-cache",
            "--draft-max", "8", "--threads", "1", "--ctx-size", "256", "--max-tokens", "12", "--temperature", "0",
            "--json", "--quiet"]
    said = []
    for extra in ([], [], ["--draft-cut", "none"]):  # each run a new pair: the prices from the cache
        assert main([*argv, *extra]) == 0
        said.append(capsys.readouterr().err.count("measuring this machine's verify costs"))
    assert said == [1, 0, 0]
    assert len(list((tmp_path / "profiles").glob("*.json"))) == 1
