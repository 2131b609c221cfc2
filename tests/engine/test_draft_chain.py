"""The draft chain (issue 45, item 7): a model drafter's whole draft in one call into ``engine/draft_chain.c``.

The Python draft step is the reference: the C step must pick the same token from the same kept distribution, bit for
bit, and a drafter must hand the loop the same drafts with the chain and without it, on the fake backend and through
llama.cpp. Where the chain does not apply (or a row's mass is not finite) the Python step runs and says what it says.
"""

from __future__ import annotations

import ctypes
import math
import os

import llama_cpp
import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import DraftRequest
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, candidates
from relaxtui.engine import chain, native
from relaxtui.engine.api import ChainSampling, DraftChain, RowSpec, TopLogits
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import NumericsError
from relaxtui.rules import make
from tests.support.markov import random_table

VOCAB = 300  # more ids than top-k keeps: the candidate rows are a row's top, as a real vocabulary's


@pytest.fixture(autouse=True)
def built():
    """scripts/bootstrap.py builds the chain (``python -m relaxtui.engine.native``), so the README's test command has
    it; a bare pytest without it skips here (CI fails: its set-up must have built it), as a missing model does."""
    if native.library() is None:
        message = ("the draft chain is not built (or RELAXTUI_NATIVE=0): run `.venv/bin/python -m "
                   "relaxtui.engine.native` (set-up does)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_the_build_is_kept_per_source():
    assert native.build() == native.library_path()  # (again: nothing to do)
    assert native.library_path(b"another source") != native.library_path()  # a changed source builds anew


def _row(rng: np.random.Generator, k: int) -> TopLogits:
    """A candidate row as the engine hands it: k distinct ids in no order, float32 logits with ties now and then."""
    ids = rng.choice(VOCAB, size=k, replace=False)
    logits = rng.normal(scale=rng.uniform(0.5, 4.0), size=k).astype(np.float32)
    if k > 3 and rng.random() < 0.3:
        logits[rng.integers(k)] = logits[rng.integers(k)]  # a tie (the sorts keep the Python order)
    if k > 3 and rng.random() < 0.1:
        logits[rng.integers(k)] = -np.inf  # (a fitted row's padding: never proposed)
    return TopLogits(ids.tolist(), logits.tolist(), VOCAB)


def test_the_c_pick_is_the_python_step_bit_for_bit():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        k = int(rng.choice([2, 5, 20, 40, 256]))
        row = _row(rng, k)
        sampling = SamplingParams(float(rng.choice([0.1, 0.6, 0.8, 1.0, 1.7])), int(rng.integers(1, k + 1)),
                                  float(rng.choice([1.0, 0.99, 0.95, 0.7, 0.2])))
        uniform = float(rng.choice([0.0, rng.random(), 1.0 - 2.0 ** -53]))
        found = chain.pick(row, ChainSampling(sampling.temperature, sampling.top_k, sampling.top_p, [uniform]), 0)
        reference = candidates(row, sampling)
        assert found is not None
        token, kept = found
        assert kept == (list(reference.ids), list(reference.probs)), (sampling, uniform)  # exact, not close
        assert token == reference.pick(uniform)


def test_greedy_takes_the_engines_argmax_and_refuses_what_python_refuses():
    greedy = ChainSampling(0.0, 0, 1.0)
    assert chain.pick(TopLogits([42], [1.5], VOCAB), greedy, 0) == (42, None)
    for bad in (math.nan, math.inf):
        row = TopLogits([42], [bad], VOCAB)
        assert chain.pick(row, greedy, 0) is None  # handed back: the Python step raises
        with pytest.raises(NumericsError, match="non-finite"):
            candidates(row, SamplingParams(0.0))


@pytest.mark.parametrize("logits", [[1.0, math.nan, 0.5], [1.0, math.inf, 0.5], [-math.inf] * 3])
def test_a_mass_that_is_not_finite_is_handed_back_to_the_python_step(logits):
    row, sampling = TopLogits([3, 9, 4], logits, VOCAB), SamplingParams(0.8, 3, 0.95)
    assert chain.pick(row, ChainSampling(0.8, 3, 0.95, [0.5]), 0) is None
    with pytest.raises(NumericsError):
        candidates(row, sampling).pick(0.5)


def test_the_chain_applies_only_where_its_step_is_exact():
    sampled = ChainSampling(0.8, 20, 0.95, [0.5] * 3)
    assert chain.chains(RowSpec(20), sampled, 3)
    assert not chain.chains(None, sampled, 3)  # whole rows
    assert not chain.chains(RowSpec(20, normaliser=True), sampled, 3)  # --draft-p-min reads the normaliser
    assert not chain.chains(RowSpec(10), sampled, 3)  # fewer candidates than top-k keeps
    assert not chain.chains(RowSpec(20), ChainSampling(0.8, 20, 0.95, [0.5] * 2), 3)  # a uniform short
    assert not chain.chains(RowSpec(20), sampled, 0)
    assert not chain.chains(RowSpec(native.MAX_CANDIDATES + 1), ChainSampling(0.8, 300, 1.0, [0.5]), 1)
    assert chain.chains(RowSpec(1), ChainSampling(0.0, 20, 0.95), 3)
    assert not chain.chains(RowSpec(3), ChainSampling(0.0, 20, 0.95), 3)  # greedy with alternatives shown


class Counting(FakeBackend):
    """The fake, counting the drafts its chain made."""

    chained = 0

    def decode_chain(self, seq, block, n, sampling):
        found = super().decode_chain(seq, block, n, sampling)
        self.chained += found is not None
        return found


def _generate(rule: str, knob: float | None, sampling: SamplingParams, seed: int, *, n_seq: int = 1):
    target, draft = random_table(1, VOCAB), random_table(1, VOCAB) + random_table(2, VOCAB, scale=1.0)
    verifier = FakeBackend(markov_logits(target), VOCAB, n_seq=n_seq)
    draft_model = Counting(markov_logits(draft), VOCAB, n_seq=n_seq)
    config = GenerationConfig(draft_max=4, max_tokens=40, sampling=sampling, seed=seed)
    events = list(generate(verifier, [1, 2, 3], config, rule=make(rule, knob, temperature=sampling.temperature or 1.0),
                           drafter=ModelDrafter(draft_model, VOCAB)))
    finished = events[-1]
    assert isinstance(finished, Finished)
    tokens = [(e.token_id, e.verdict.value, e.q_x) for e in events if isinstance(e, TokenEvent)]
    return tokens, finished.metrics.accepted, draft_model.chained


@pytest.mark.parametrize("sampling", [SamplingParams(0.8, 20, 0.95), SamplingParams(1.2, 7, 1.0),
                                      SamplingParams(0.0)])
@pytest.mark.parametrize("rule,knob", [("strict", None), ("cactus", 1.0)])
def test_the_fake_pair_drafts_the_same_with_the_chain_and_without(monkeypatch, sampling, rule, knob):
    if sampling.greedy and rule == "cactus":
        pytest.skip("cactus refuses greedy")
    for seed in range(6):
        with_chain = _generate(rule, knob, sampling, seed)
        with monkeypatch.context() as patch:
            patch.setattr(native, "library", lambda: None)
            without = _generate(rule, knob, sampling, seed)
        assert with_chain[2] > 0 and without[2] == 0  # the chain ran in one, the Python step in the other
        assert with_chain[:2] == without[:2]


def test_a_context_of_several_sequences_takes_the_python_step():
    assert _generate("strict", None, SamplingParams(0.8, 20, 0.95), 0, n_seq=2)[2] == 0


def test_a_row_the_chain_hands_back_raises_as_the_python_step_does(monkeypatch):
    table = random_table(1, VOCAB)
    table[:, 5] = np.nan  # every row: the first draft step's mass is NaN

    def drafted(use_chain: bool) -> str:
        model = Counting(markov_logits(table), VOCAB)
        model.chained = 0
        with monkeypatch.context() as patch:
            if not use_chain:
                patch.setattr(native, "library", lambda: None)
            drafter = ModelDrafter(model, VOCAB)
            sampling = SamplingParams(0.8, 20, 0.95)
            model.set_candidates(0, RowSpec(20))
            request = DraftRequest(0, [1, 2, 3], 3, sampling, np.random.default_rng(0))
            with pytest.raises(NumericsError) as raised:
                drafter.draft([request])
        assert model.chained == use_chain  # the chain handed the row back, then the Python step raised
        return str(raised.value)

    assert drafted(True) == drafted(False)


@pytest.mark.model
@pytest.mark.parametrize("sampling", [SamplingParams(0.8, 20, 0.95), SamplingParams(1.0, 40, 1.0),
                                      SamplingParams(0.0)])
def test_llama_cpps_chain_drafts_what_the_python_step_drafts(test_model_path, monkeypatch, sampling):
    """A real model through llama.cpp: each draft's tokens, q, raw candidates and the sequence it leaves, the same
    with the chain and without, round after round of a growing context."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=256, n_threads=1) as model:
        prompt = model.tokenize("The sea is calm tonight, and the tide is", add_special=False)
        runs, chained = [], []
        chain_of = model.decode_chain

        def counted(*args):
            found = chain_of(*args)
            chained.append(found is not None)
            return found

        model.decode_chain = counted  # type: ignore[method-assign]
        for use_chain in (True, False):
            with monkeypatch.context() as patch:
                if not use_chain:
                    patch.setattr(native, "library", lambda: None)
                model.clear(0)
                drafter, rng = ModelDrafter(model, model.n_vocab), np.random.default_rng(5)
                drafter.begin(0, prompt)
                context, seen, spent = list(prompt), [], model.decode_seconds
                for _ in range(6):
                    draft = drafter.draft([DraftRequest(0, context, 5, sampling, rng)])[0]
                    raw = [tuple(map(list, row.as_lists())) for row in draft.logits]
                    seen.append((draft.tokens, [q.as_lists() for q in draft.q], raw, list(model.tokens_of(0))))
                    context += draft.tokens[:2] or [13]  # two accepted, say: the next draft re-syncs from there
                assert model.decode_seconds > spent
                runs.append(seen)
        assert chained == [True] * 6 + [False] * 6  # the chain drafted every draft of the first run, none of the second
        assert runs[0] == runs[1]
        assert all(len(tokens) == 5 for tokens, *_ in runs[0])


class _Stub:
    """llama.cpp stood in for by Python callbacks behind the raw function pointers the chain calls: each decode
    logged with its batch, rows from a script (None: no candidates; a NaN logit: a mass that is not finite), a decode
    status to fail with at a given call. Drives ``decode_chain``'s every exit without a model."""

    def __init__(self, rows, fail_at=None):
        self.rows, self.fail_at, self.decodes, self.reads = rows, fail_at, [], 0
        self.ids, self.logits = (ctypes.c_int32 * 4)(), (ctypes.c_float * 4)()
        pointer = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
        self.callbacks = (ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, llama_cpp.llama_batch)(self._decode),
                          ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda ctx: None),
                          pointer(lambda ctx, output: self._pointer(self.ids, 0)),
                          pointer(lambda ctx, output: self._pointer(self.logits, 1)))
        self.functions = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self.callbacks)

    def _decode(self, ctx, batch):
        self.decodes.append([(batch.token[i], batch.pos[i], batch.logits[i]) for i in range(batch.n_tokens)])
        return 7 if len(self.decodes) == self.fail_at else 0

    def _pointer(self, buffer, part):
        """Where this decode's row puts its ids (part 0) or logits (1); None: no candidates."""
        row = self.rows[len(self.decodes) - 1]
        if row is None:
            return None
        buffer[:len(row[part])] = row[part]
        return ctypes.addressof(buffer)


class _Candidates:
    def __init__(self, spec):
        self.specs, self.read_at = {0: spec}, []

    def read(self, first, count, vocab_size, spec):
        self.read_at.append(first)
        return [TopLogits([0], [math.nan], vocab_size)]


def _stubbed_model(request, monkeypatch, stub, spec):
    monkeypatch.setattr(chain, "_FUNCTIONS", stub.functions)

    class Model(chain.ChainDecoding):
        n_ctx, n_batch, n_seq, n_vocab, decode_seconds, _copied = 64, 16, 1, VOCAB, 0.0, 0
        hidden = _snapshots = None

    model = Model()
    model._ctx, model._batch = 0, llama_cpp.llama_batch_init(16, 0, 1)
    request.addfinalizer(lambda: llama_cpp.llama_batch_free(model._batch))
    model._batch_arrays = (model._batch.token, model._batch.pos, model._batch.logits, model._batch.seq_id)
    model._seqs, model._candidates = [[1, 2, 3]], _Candidates(spec)
    return model


ROW = ([7, 3, 9, 1], [1.0, 2.0, 0.5, -1.0])
SAMPLED = ChainSampling(0.8, 4, 1.0, [0.5, 0.5, 0.5])


def test_the_chain_decodes_the_block_then_each_pick_at_the_next_position(request, monkeypatch):
    stub = _Stub([ROW, ROW, ROW])
    model = _stubbed_model(request, monkeypatch, stub, RowSpec(4))
    drafted = model.decode_chain(0, [4, 5], 3, SAMPLED)
    reference = candidates(TopLogits(*ROW, VOCAB), SamplingParams(0.8, 4, 1.0))
    token = reference.pick(0.5)
    assert drafted.tokens == [token] * 3 and drafted.stopped is None
    assert drafted.kept == [(list(reference.ids), list(reference.probs))] * 3
    assert [row.as_lists() for row in drafted.rows] == [tuple(ROW)] * 3
    assert stub.decodes == [[(4, 3, 0), (5, 4, 1)], [(token, 5, 1)], [(token, 6, 1)]]  # the last pick: not decoded
    assert model._seqs[0] == [1, 2, 3, 4, 5, token, token]


def test_a_decode_that_fails_raises_with_what_it_decoded_kept(request, monkeypatch):
    stub = _Stub([ROW, ROW, ROW], fail_at=2)
    model = _stubbed_model(request, monkeypatch, stub, RowSpec(4))
    with pytest.raises(RuntimeError, match="status 7"):
        model.decode_chain(0, [4, 5], 3, SAMPLED)
    assert model._seqs[0] == [1, 2, 3, 4, 5]  # the block decoded; the first pick's decode failed
    stub = _Stub([ROW], fail_at=1)
    model = _stubbed_model(request, monkeypatch, stub, RowSpec(4))
    with pytest.raises(RuntimeError, match="status 7"):
        model.decode_chain(0, [4, 5], 3, SAMPLED)
    assert model._seqs[0] == [1, 2, 3]


@pytest.mark.parametrize("bad_row", [None, ([7, 3, 9, 1], [1.0, math.nan, 0.5, -1.0])])
@pytest.mark.parametrize("at", [0, 1])
def test_a_row_the_chain_cannot_pick_from_is_handed_back_after_the_picks_before_it(request, monkeypatch, bad_row, at):
    stub = _Stub([ROW] * at + [bad_row])
    model = _stubbed_model(request, monkeypatch, stub, RowSpec(4))
    drafted = model.decode_chain(0, [4, 5], 3, SAMPLED)
    assert len(drafted.tokens) == at and drafted.stopped is not None
    assert model._candidates.read_at == [1 if at == 0 else 0]  # the block's last row, or a pick's one row
    assert model._seqs[0] == [1, 2, 3, 4, 5, *drafted.tokens]  # every pick before it was decoded


def test_greedy_chains_the_engines_argmax(request, monkeypatch):
    stub = _Stub([([9], [2.5]), ([4], [1.0]), ([6], [0.5])])
    model = _stubbed_model(request, monkeypatch, stub, RowSpec(1))
    drafted = model.decode_chain(0, [4, 5], 3, ChainSampling(0.0, 20, 0.95))
    assert drafted.tokens == [9, 4, 6] and drafted.kept == [None] * 3
    assert [row.as_lists() for row in drafted.rows] == [([9], [2.5]), ([4], [1.0]), ([6], [0.5])]
    assert [decode[-1] for decode in stub.decodes] == [(5, 4, 1), (9, 5, 1), (4, 6, 1)]


class Cautious(FakeBackend):
    """A chain that hands back the block's own row, one the Python step can pick from (as where its top-k cut drops a
    NaN the chain refused on): the drafter's steps must take the draft on from that pick."""

    def decode_chain(self, seq, block, n, sampling):
        if not chain.chains(self.candidates.get(seq), sampling, n):
            return None
        return DraftChain([], [], [], self.decode_rows([seq], [block], last=True)[0][0])


def test_a_pick_from_a_row_the_chain_handed_back_drafts_on_as_the_steps_do(monkeypatch):
    table = random_table(3, VOCAB)
    sampling = SamplingParams(0.8, 20, 0.95)

    def drafted(model):
        model.set_candidates(0, RowSpec(20))
        request = DraftRequest(0, [1, 2, 3], 4, sampling, np.random.default_rng(0))
        draft = ModelDrafter(model, VOCAB).draft([request])[0]
        return draft.tokens, [q.as_lists() for q in draft.q], list(model.tokens_of(0))

    found = drafted(Cautious(markov_logits(table), VOCAB))
    with monkeypatch.context() as patch:
        patch.setattr(native, "library", lambda: None)
        reference = drafted(FakeBackend(markov_logits(table), VOCAB))
    assert found == reference and len(found[0]) == 4
