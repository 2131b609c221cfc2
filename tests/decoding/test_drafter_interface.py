"""One drafter interface (docs/method.md#drafters, issue 22): nothing outside the drafter modules asks what a drafter
is; every kind the factory builds runs every rule through both loops; what a drafter declares is what the loops do with
it."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import relaxtui
from relaxtui.checks import BadValue
from relaxtui.decoding import round as steps
from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import DRAFT_KINDS, KINDS, DrafterOptions, Openers, make_drafter
from relaxtui.decoding.drafting import BaseDrafter, Draft, Drafter, DrafterTraits, DraftRequest, Extension
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, process, sample
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, make
from tests.support.markov import GREEDY, PLAIN, VOCAB

# -- (a) no module outside the drafter modules inspects a drafter ---------------------------------------------------
PACKAGE = Path(relaxtui.__file__).parent
FACTORY_MODULES = {"decoding/drafting.py", "decoding/drafters.py"}  # the interface and the factory
DRAFTER_NAME = re.compile(r"(^|_)drafter$", re.IGNORECASE)  # drafter, self.drafter, pair.drafter, timed_drafter
INSPECTORS = {"getattr", "hasattr", "setattr", "delattr", "vars", "type"}


def _classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [node for node in tree.body if isinstance(node, ast.ClassDef)]


def _is_drafter_class(node: ast.ClassDef) -> bool:
    """A class implementing the interface: it subclasses BaseDrafter (or is it), or declares ``traits``."""
    bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
    declares = any(isinstance(s, ast.AnnAssign | ast.Assign) and "traits" in ast.unparse(s).split("=")[0]
                   for s in node.body)
    return node.name == "BaseDrafter" or "BaseDrafter" in bases or (declares and "Protocol" not in bases)


def drafter_modules() -> dict[str, ast.Module]:
    """The factory modules and every per-kind module under decoding/ (one that defines a drafter class)."""
    found = {}
    for path in sorted((PACKAGE / "decoding").glob("*.py")):
        name = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if name in FACTORY_MODULES or any(_is_drafter_class(c) for c in _classes(tree)):
            found[name] = tree
    return found


def drafter_classes_everywhere() -> dict[str, list[str]]:
    """Every module of the package (any folder) that defines a class implementing the drafter interface: its
    classes."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if classes := [c.name for c in _classes(tree) if _is_drafter_class(c)]:
            found[str(path.relative_to(PACKAGE))] = classes
    return found


def interface() -> tuple[set[str], set[str], set[str]]:
    """(drafter classes, concrete ones, attribute names internal to them): internals are every name a drafter class
    defines or assigns on ``self`` that the ``Drafter`` protocol does not declare."""
    modules = drafter_modules()
    protocol = next(c for c in _classes(modules["decoding/drafting.py"]) if c.name == "Drafter")
    public = {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)}
    public |= {n.target.id for n in protocol.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    classes, internals = {"Drafter"}, set()
    for tree in modules.values():
        for cls in _classes(tree):
            if not _is_drafter_class(cls):
                continue
            classes.add(cls.name)
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef):
                    internals.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    internals.add(node.attr)
                elif isinstance(node, ast.Assign | ast.AnnAssign) and node in cls.body:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    internals |= {t.id for t in targets if isinstance(t, ast.Name)}
    internals -= public
    return classes, classes - {"Drafter"}, internals


def _drafter_named(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(DRAFTER_NAME.search(name))


def sniffing(source: str, classes: set[str], internals: set[str]) -> list[str]:
    """Every place in ``source`` that asks what a drafter is instead of what it declares: its class, or attributes
    the ``Drafter`` protocol does not declare."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id in {"isinstance", "issubclass"} and len(args) == 2:
                named = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(args[1])}
                if named & classes:
                    found.append(f"{where}: {ast.unparse(node)}")
            elif node.func.id in INSPECTORS and args and _drafter_named(args[0]):
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and _drafter_named(node.value) and (
                node.attr in internals or node.attr.startswith("_")):
            found.append(f"{where}: {ast.unparse(node)}")
    return found


def building(source: str, concrete: set[str]) -> list[str]:
    """Every place in ``source`` that names a drafter class (to build one outside the factory, or compare)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in concrete:
            found.append(f"line {node.lineno}: {node.id} (build drafters with make_drafter)")
        elif isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in concrete]
    return found


def _violations(check: str, part: str) -> dict[str, list[str]]:
    """``check`` ("inspect" or "build") over the modules of ``part``: "tui", "serve", or "rest" (every other module
    outside the drafter modules)."""
    classes, concrete, internals = interface()
    allowed = set(drafter_modules())
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        top = name.split("/")[0]
        if name in allowed or (top if top in {"tui", "serve"} else "rest") != part:
            continue
        source = path.read_text(encoding="utf-8")
        if hits := sniffing(source, classes, internals) if check == "inspect" else building(source, concrete):
            found[name] = hits
    return found


def test_the_checker_sees_the_interface_and_catches_sniffing():
    classes, concrete, internals = interface()
    assert {"ModelDrafter", "NgramDrafter"} <= concrete and "Drafter" in classes - concrete
    assert {"model", "p_min"} <= internals and not {"draft", "begin", "traits", "close"} & internals
    sniffer = """
if isinstance(pair.drafter, ModelDrafter): pass
model = getattr(self.drafter, "model", None)
slot.drafter.model.close(); drafter.p_min; drafter._resync([1]); type(drafter)
"""
    assert len(sniffing(sniffer, classes, internals)) == 6
    assert len(building("from relaxtui.decoding.drafters import ModelDrafter\nModelDrafter(m, 6)", concrete)) == 2
    clean = "drafter.draft([r]); pair.drafter.traits.kind; chat.drafter.name; args.drafter.lower(); x.model"
    assert sniffing(clean, classes, internals) == [] and building(clean, concrete) == []


def test_no_module_outside_the_drafter_modules_inspects_a_drafter():
    assert _violations("inspect", "rest") == {}
    assert _violations("inspect", "serve") == {}


def test_drafters_are_built_by_the_factory_alone():
    assert _violations("build", "rest") == {}


def test_no_package_outside_decoding_defines_a_drafter():
    """Every class that implements the drafter interface, in any folder, is a drafter module of decoding/ (a
    server's prompt scoring is a job of the batched loop, ``decoding.batched.ReadJob``, not a stand-in drafter)."""
    found = drafter_classes_everywhere()
    assert {"decoding/model_drafter.py", "decoding/priced.py"} <= set(found)  # the scan sees them
    assert {module: classes for module, classes in found.items() if module not in drafter_modules()} == {}


def test_the_server_builds_its_drafters_through_the_factory():
    assert _violations("build", "serve") == {}


def test_the_tui_does_not_inspect_or_build_a_drafter_either():
    assert _violations("inspect", "tui") == {} and _violations("build", "tui") == {}


# -- (b) every kind the factory builds, every rule, both loops --------------------------------------------------------
TARGET = np.random.default_rng(1).normal(scale=1.5, size=(VOCAB, VOCAB))
DRAFT = TARGET + np.random.default_rng(2).normal(scale=1.0, size=(VOCAB, VOCAB))
PROMPT = [0, 1, 2, 0, 1, 2, 0, 1]  # repeats, so the n-gram lookup has something to propose
# the kinds a fake verifier can carry; one that drafts from a GGUF verifier's own layers (mtp) runs on the tiny
# GGUFs instead (tests/decoding/test_mtp_drafter.py)
FAKE_KINDS = tuple(kind for kind in DRAFT_KINDS if not KINDS[kind].needs_hidden_states)


def fake_verifier(n_seq: int = 1, table: np.ndarray = TARGET) -> FakeBackend:
    return FakeBackend(markov_logits(table), VOCAB, n_seq=n_seq)


# sizes that fit PROMPT (8 tokens: llama.cpp's n-gram defaults need dozens), and no corpus shared across sequences
# (a suffix drafter learns from an output that finished beside it, so K = 3 would differ from K = 1 by design;
# tests/decoding/test_suffix_drafter.py covers the corpus). Each option reaches only the kinds that read it.
SMALL = {"ngram_size_n": 2, "ngram_size_m": 3, "ngram_mod_n_min": 1, "suffix_corpus_tokens": 0}


def build(kind: str, verifier: FakeBackend, **options) -> Drafter:
    """Through the factory, with a fake model file for the model kind."""
    def open_model(o: DrafterOptions) -> FakeBackend:
        return FakeBackend(markov_logits(DRAFT), VOCAB, n_seq=o.n_seq, n_ctx=o.n_ctx)
    return make_drafter(DrafterOptions(kind=kind, n_seq=verifier.n_seq, **{**SMALL, **options}), verifier,
                        Openers(model=open_model))


def one_and_many(kind: str, rule, config: GenerationConfig, k: int = 3) -> tuple[Finished, list[Finished]]:
    """The same job alone (K = 1) and k copies of it (seeds differ) side by side."""
    verifier = fake_verifier()
    *_, alone = generate(verifier, PROMPT, config, drafter=build(kind, verifier), rule=rule)
    many_verifier = fake_verifier(k)
    jobs = [Job(PROMPT, replace(config, seed=config.seed + i), rule, tag=i) for i in range(k)]
    results = dict((job.tag, f) for job, f in generate_many(many_verifier, jobs, drafter=build(kind, many_verifier)))
    return alone, [results[i] for i in range(k)]


RULES = [(name, knobs[0]) for name, knobs in PAPER_GRID.items()]


@pytest.mark.parametrize("kind", FAKE_KINDS)
@pytest.mark.parametrize("rule_name,knob", RULES)
def test_every_kind_runs_every_rule_through_both_loops(kind, rule_name, knob):
    rule = make(rule_name, knob)
    config = GenerationConfig(draft_max=3, max_tokens=16, sampling=PLAIN, seed=4, bonus="relaxed")
    if rule.needs_draft_logits and not build(kind, fake_verifier()).traits.has_distribution:
        with pytest.raises(UserError, match="needs the drafter's logits"):
            one_and_many(kind, rule, config)
        return
    alone, many = one_and_many(kind, rule, config)
    assert alone.metrics.output_tokens == 16 and alone.metrics.drafted > 0
    assert many[0].token_ids == alone.token_ids  # the fake has no batched numerics: K = 3 matches K = 1 exactly
    assert many[0].metrics.draft_lengths == alone.metrics.draft_lengths
    assert all(f.metrics.output_tokens == 16 for f in many)


@pytest.mark.parametrize("kind", FAKE_KINDS)
def test_strict_greedy_gives_the_verifier_alone_tokens_for_every_kind(kind):
    config = GenerationConfig(draft_max=3, max_tokens=20, sampling=GREEDY)
    *_, verifier_alone = generate(fake_verifier(), PROMPT, GenerationConfig(draft_max=0, max_tokens=20,
                                                                           sampling=GREEDY))
    alone, many = one_and_many(kind, make("strict"), config)
    assert alone.token_ids == verifier_alone.token_ids and alone.metrics.drafted > 0
    assert all(f.token_ids == verifier_alone.token_ids for f in many)


def test_factory_refuses_an_unknown_kind_in_one_line():
    with pytest.raises(BadValue, match=rf"^draft_kind must be one of {', '.join(DRAFT_KINDS)} \(got 'eagle3'\)$"):
        DrafterOptions(kind="eagle3")
    from relaxtui.session import ModelOptions

    with pytest.raises(BadValue, match="draft_kind must be one of .* \\(got 'eagle3'\\)"):
        ModelOptions(draft_kind="eagle3")


def test_factory_checks_the_vocabulary_and_closes_the_model_on_a_mismatch():
    closed = []
    other = FakeBackend(markov_logits(DRAFT), VOCAB, pieces=[f"[{t}]".encode() for t in range(VOCAB)])
    openers = Openers(model=lambda _: other, close=closed.append)
    with pytest.raises(UserError, match="vocabularies differ"):
        make_drafter(DrafterOptions(kind="model"), fake_verifier(), openers)
    assert closed == [other]  # through the openers' own close


def test_every_option_reaches_the_model_and_the_drafter(monkeypatch, tmp_path):
    """ModelOptions → load_pair → make_drafter → LlamaModel: GPU layers (-1 = all), threads, ctx, K, p-min."""
    import relaxtui.session as session
    from relaxtui.pair import StandInPrices

    loaded = []

    class Closable(FakeBackend):
        def close(self) -> None:
            pass

    def fake_llama(path, **kwargs):
        loaded.append({**kwargs, "path": path})
        return Closable(markov_logits(DRAFT), VOCAB, n_seq=kwargs["n_seq"], n_ctx=kwargs["n_ctx"])

    monkeypatch.setattr(session, "LlamaModel", fake_llama)
    monkeypatch.setattr(session, "resolve_model", lambda name: tmp_path / name)
    monkeypatch.setattr(session, "check_parallel", lambda *args, **kwargs: None)  # (reads GGUF headers)
    monkeypatch.setattr(session, "VerifyPrices", lambda *args, **kwargs: StandInPrices())  # (hashes the file)
    options = session.ModelOptions(verifier="v.gguf", drafter="d.gguf", ctx_size=64, threads=3, gpu_layers=-1,
                                   draft_p_min=0.25, parallel=2)
    drafter = session.load_pair(options).drafter
    assert loaded[1] == {"path": tmp_path / "d.gguf", "n_ctx": 64, "n_threads": 3, "n_gpu_layers": 10_000, "n_seq": 2,
                         "rollback_depth": 0}  # a drafter's snapshots are never rolled back to: none allocated
    assert drafter.traits.kind == "model" and drafter.traits.n_seq == 2 and drafter.p_min == 0.25
    ngram = session.load_pair(session.ModelOptions(draft_kind="ngram", ngram_min=2, ngram_max=4,
                                                   draft_cut="none")).drafter  # (uncut: its own attributes to read)
    assert ngram.traits.kind == "ngram" and (ngram.n_min, ngram.n_max) == (2, 4)
    assert session.load_pair(session.ModelOptions(drafter=None)).drafter is None


@pytest.mark.parametrize("kind", FAKE_KINDS)
def test_each_kind_declares_what_its_registry_entry_says(kind):
    drafter = build(kind, fake_verifier())
    assert drafter.traits.kind == kind
    assert drafter.traits.needs_hidden_states == KINDS[kind].needs_hidden_states
    assert drafter.traits.label == kind  # no model file here: a drafter is named by its kind


# -- (c) the traits are what the loops get ----------------------------------------------------------------------------
class TableDrafter(BaseDrafter):
    """A test drafter from a Markov table, keyed by sequence: what it declares is set per instance; it records the
    calls the loops make."""

    def __init__(self, traits: DrafterTraits, verifier: FakeBackend | None = None) -> None:
        self.traits, self.verifier = traits, verifier
        self.extended: list[int] = []
        self.accepted: list[tuple[int, int, int]] = []  # (seq, n_accepted, hidden rows seen)
        self.last: dict[int, int] = {}

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        return True

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = []
        for r in requests:
            tokens, probs, token = [], [], r.context[-1]
            for _ in range(r.n_max):
                q = process(DRAFT[token], r.sampling)
                token = sample(q, r.rng)
                tokens.append(token)
                probs.append(q)
            self.last[r.seq] = token
            has = self.traits.has_distribution
            drafts.append(Draft(tokens, np.stack(probs) if has else None, DRAFT[[r.context[-1], *tokens[:-1]]]
                                if has else None))
        return drafts

    def extend(self, seq: int, sampling: SamplingParams) -> Extension:
        if self.traits.bonus_steps is None:
            raise AssertionError("asked for q at N+1 although it declared it cannot give it")
        self.extended.append(seq)
        return Extension(process(DRAFT[self.last[seq]], sampling), DRAFT[self.last[seq]], self.traits.bonus_steps)

    def accept(self, seq: int, n_accepted: int, emitted: Sequence[object]) -> None:
        rows = self.verifier.hidden_of(seq).shape[0] if self.traits.needs_hidden_states else -1
        self.accepted.append((seq, n_accepted, rows))


def both_loops(drafter_for, config: GenerationConfig, rule=None, k: int = 2) -> list[tuple[object, list[Finished]]]:
    """Run one sequence, then k, each with a fresh drafter from ``drafter_for(verifier)``."""
    runs = []
    verifier = fake_verifier()
    drafter = drafter_for(verifier)
    *_, alone = generate(verifier, PROMPT, config, drafter=drafter, rule=rule)
    runs.append((drafter, [alone]))
    verifier = fake_verifier(k)
    drafter = drafter_for(verifier)
    jobs = [Job(PROMPT, config, rule, tag=i) for i in range(k)]
    runs.append((drafter, [f for _, f in generate_many(verifier, jobs, drafter=drafter)]))
    return runs


@pytest.fixture
def seen(monkeypatch):
    """What the round hands the acceptance step: (draft tokens, q rows, drafter logits) of every round (q as whole
    rows: built from q on its support where only that came, as a one-hot draft's does)."""
    calls = []
    real = steps.accept_draft

    def spy(draft, *args, **kwargs):
        if draft is not None:
            calls.append((list(draft.tokens), draft.dense_probs(VOCAB), draft.logits))
        return real(draft, *args, **kwargs)

    monkeypatch.setattr(steps, "accept_draft", spy)
    return calls


@pytest.mark.parametrize("kind", ["declared", "ngram"])
def test_a_drafter_without_a_distribution_gets_one_hot_q_and_no_logits(seen, kind):
    traits = DrafterTraits("lookup", has_distribution=False)
    make_one = (lambda v: TableDrafter(traits)) if kind == "declared" else (lambda v: build("ngram", v))
    both_loops(make_one, GenerationConfig(draft_max=3, max_tokens=12, sampling=PLAIN))
    drafted = [(tokens, probs, logits) for tokens, probs, logits in seen if tokens]
    assert drafted and len({len(t) for t, _, _ in drafted}) >= 1
    for tokens, probs, logits in drafted:
        assert logits is None and np.array_equal(probs, np.eye(VOCAB)[tokens])


def test_a_drafter_with_a_distribution_gets_its_own_q(seen):
    drafter_for = lambda v: TableDrafter(DrafterTraits("table", has_distribution=True))  # noqa: E731
    both_loops(drafter_for, GenerationConfig(draft_max=2, max_tokens=10, sampling=PLAIN))
    for tokens, probs, logits in (call for call in seen if call[0]):
        assert not np.array_equal(probs, np.eye(VOCAB)[tokens]) and logits is not None


@pytest.mark.parametrize("bonus_steps", [None, 1, 2])
def test_a_relaxed_bonus_asks_for_q_at_n_plus_1_only_from_a_drafter_that_declares_it(bonus_steps):
    traits = DrafterTraits("table", has_distribution=True, bonus_steps=bonus_steps)
    config = GenerationConfig(draft_max=2, max_tokens=30, sampling=PLAIN, bonus="relaxed")
    for drafter, finished in both_loops(lambda v: TableDrafter(traits), config, make("cactus", 1.0)):
        full_rounds = sum(f.metrics.full_accept_rounds for f in finished)
        assert full_rounds > 0
        assert len(drafter.extended) == (full_rounds if bonus_steps else 0)  # one extension per fully accepted round
        assert sum(f.metrics.extra_draft_steps for f in finished) == len(drafter.extended) * (bonus_steps or 0)


@pytest.mark.parametrize("needs", [False, True])
def test_accept_follows_every_verify_batch_so_a_hidden_state_drafter_reads_that_batch(needs):
    """After each verify batch, before the verifier decodes again, the drafter hears how many drafts were kept;
    one that declares it drafts from the verifier's hidden rows finds that batch's rows ([last, drafts]) there."""
    traits = DrafterTraits("heads", has_distribution=True, needs_hidden_states=needs)
    config = GenerationConfig(draft_max=3, max_tokens=14, sampling=PLAIN)
    for drafter, finished in both_loops(lambda v: TableDrafter(traits, v), config):
        lengths = [n for f in finished for n in f.metrics.draft_lengths]
        assert len(drafter.accepted) == len(lengths) == sum(f.metrics.rounds for f in finished)
        assert sum(n for _, n, _ in drafter.accepted) == sum(f.metrics.accepted for f in finished)
        if needs:  # batched rounds interleave sequences; per sequence, rows are always N + 1
            per_seq = {}
            for seq, _, rows in drafter.accepted:
                per_seq.setdefault(seq, []).append(rows)
            assert sorted(r for rows in per_seq.values() for r in rows) == sorted(n + 1 for n in lengths)
        else:
            assert {rows for *_, rows in drafter.accepted} == {-1}


def test_the_batched_loop_reads_how_many_sequences_a_drafter_holds_from_its_traits():
    narrow = TableDrafter(DrafterTraits("table", has_distribution=True, n_seq=2))
    with pytest.raises(UserError, match="^parallel must be the same for both models"):
        list(generate_many(fake_verifier(4), [], drafter=narrow))


def test_rules_that_need_drafter_logits_read_the_declaration():
    no_q = TableDrafter(DrafterTraits("lookup", has_distribution=False))
    with pytest.raises(UserError, match="needs the drafter's logits; use a model drafter, not 'lookup'"):
        list(generate(fake_verifier(), PROMPT, GenerationConfig(), drafter=no_q, rule=make("scd", 0.5)))


def test_calibration_times_drafting_only_for_a_drafter_that_declares_a_model():
    from relaxtui.costmodel.calibrate import calibrate

    sampling = SamplingParams(1.0, 0, 1.0)
    verifier = fake_verifier()
    for drafter in (build("ngram", verifier), TableDrafter(DrafterTraits("table", has_distribution=True))):
        costs = calibrate(verifier, drafter, max_block=3, sampling=sampling, repeats=3, context=PROMPT)
        assert costs.draft_s == (0.0, 0.0) and costs.drafter_decode_s == 0.0
    model_drafter = build("model", verifier)
    costs = calibrate(verifier, model_drafter, max_block=3, sampling=sampling, repeats=3, context=PROMPT)
    assert all(t > 0 for t in costs.draft_s) and costs.drafter_decode_s > 0


def test_traits_label_names_the_model_file_else_the_kind():
    assert DrafterTraits("model", True, model_path=Path("/m/qwen.gguf")).label == "qwen.gguf"
    assert DrafterTraits("ngram", False).label == "ngram"
    assert not DrafterTraits("ngram", False).can_extend and DrafterTraits("model", True, bonus_steps=1).can_extend
