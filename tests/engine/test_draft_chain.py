"""The draft chain (issue 45, item 7): a model drafter's whole draft in one call into ``engine/draft_chain.c``.

The Python draft step is the reference: the C step must pick the same token from the same kept distribution, bit for
bit, and a drafter must hand the loop the same drafts with the chain and without it, on the fake backend and through
llama.cpp. Where the chain does not apply (or a row's mass is not finite) the Python step runs and says what it says.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import DraftRequest
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, candidates
from relaxtui.engine import chain, native
from relaxtui.engine.api import ChainSampling, RowSpec, TopLogits
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import NumericsError
from relaxtui.rules import make
from tests.support.markov import random_table

VOCAB = 300  # more ids than top-k keeps: the candidate rows are a row's top, as a real vocabulary's


def test_the_test_command_built_the_chain():
    """scripts/bootstrap.py builds it (``python -m relaxtui.engine.native``); without it every test below would
    compare the Python step with itself."""
    assert native.library() is not None, ("the draft chain is not built: run `.venv/bin/python -m "
                                          "relaxtui.engine.native` (scripts/bootstrap.py does)")
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
        with monkeypatch.context() as patch:
            if not use_chain:
                patch.setattr(native, "library", lambda: None)
            drafter = ModelDrafter(model, VOCAB)
            sampling = SamplingParams(0.8, 20, 0.95)
            model.set_candidates(0, RowSpec(20))
            request = DraftRequest(0, [1, 2, 3], 3, sampling, np.random.default_rng(0))
            with pytest.raises(NumericsError) as raised:
                drafter.draft([request])
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
        runs = []
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
        assert runs[0] == runs[1]
        assert all(len(tokens) == 5 for tokens, *_ in runs[0])
