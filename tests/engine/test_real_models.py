"""Real GGUF models through real llama.cpp: the engine and the strict loop end to end."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, TokenEvent, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, argmax
from relaxtui.engine.llama import LlamaModel
from relaxtui.session import ModelOptions, load_pair, prompt_tokens

GREEDY = SamplingParams(temperature=0.0)


class RecordingBackend:
    """Wraps a backend and keeps every logits block it returned, to check emitted tokens against them."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list = []  # whole rows, or the engine's candidate rows (TopLogits)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, seq, tokens, logits_rows=()):
        logits = self.inner.decode(seq, tokens, logits_rows)
        if len(logits):
            self.batches.append(logits.copy())
        return logits

    def decode_rows(self, seqs, blocks, *, last=False):  # the verify batch's path
        out = self.inner.decode_rows(seqs, blocks, last=last)
        self.batches += [rows.copy() for rows in out]
        return out


def collect(stream):
    events = list(stream)
    assert isinstance(events[-1], Finished)
    return [e for e in events if isinstance(e, TokenEvent)], events[-1]


@pytest.fixture(scope="module")
def smol(test_model_path):
    model = LlamaModel(test_model_path, n_ctx=512)
    yield model
    model.close()


@pytest.mark.model
def test_engine_basics(smol):
    tokens = smol.tokenize("Hello, world!", add_special=False)
    assert tokens and all(0 <= t < smol.n_vocab for t in tokens)
    assert b"".join(smol.token_piece(t) for t in tokens) == b"Hello, world!"
    smol.reset()
    logits = smol.decode(0, tokens, logits_rows=[-1, 0])
    assert logits.shape == (2, smol.n_vocab) and np.isfinite(logits).all()
    assert len(smol.tokens_of(0)) == len(tokens)
    smol.rollback(0, 2)
    assert len(smol.tokens_of(0)) == 2
    # after rollback, decoding the same suffix gives the same last-row logits
    again = smol.decode(0, tokens[2:], logits_rows=[-1])
    assert np.allclose(again[0], logits[0], atol=1e-3)


@pytest.mark.model
def test_self_drafting_accepts_everything_and_matches_greedy_baseline(smol, test_model_path):
    prompt = prompt_tokens(smol, "Write a haiku about the sea.")
    baseline, base_done = collect(generate(smol, prompt, GenerationConfig(draft_max=0, max_tokens=40,
                                                                          sampling=GREEDY)))
    with LlamaModel(test_model_path, n_ctx=512) as twin:
        drafter = ModelDrafter(twin, smol.n_vocab)
        spec, spec_done = collect(generate(smol, prompt, GenerationConfig(draft_max=4, max_tokens=40,
                                                                          sampling=GREEDY), drafter=drafter))
    assert [e.token_id for e in spec] == [e.token_id for e in baseline]
    assert spec_done.text == base_done.text
    assert spec_done.metrics.drafted > 0
    assert spec_done.metrics.accepted == spec_done.metrics.drafted  # every draft accepted
    assert Verdict.RESAMPLED not in {e.verdict for e in spec}


@pytest.mark.model
def test_self_drafting_at_temperature_accepts_nearly_everything(smol, test_model_path):
    """Sampling with q ≈ p: batch kernels differ slightly from single steps (docs/architecture.md#llamacpp-pitfalls),
    so min(1, p/q) can dip just below 1; acceptance must still be ≥ 0.95 over 64 tokens."""
    prompt = prompt_tokens(smol, "Tell me about cats.")
    with LlamaModel(test_model_path, n_ctx=512) as twin:
        drafter = ModelDrafter(twin, smol.n_vocab)
        _, done = collect(generate(smol, prompt, GenerationConfig(draft_max=4, max_tokens=64, seed=3,
                                                                  sampling=SamplingParams(0.8, 40, 0.95)),
                                   drafter=drafter))
    assert done.metrics.drafted > 20 and done.metrics.acceptance_rate >= 0.95


@pytest.mark.model
def test_seeded_real_runs_are_reproducible(smol, test_model_path):
    prompt = prompt_tokens(smol, "Name three colours.")
    config = GenerationConfig(draft_max=3, max_tokens=24, seed=11, sampling=SamplingParams(1.0, 0, 1.0))

    def run():
        with LlamaModel(test_model_path, n_ctx=512) as twin:
            events, _ = collect(generate(smol, prompt, config, drafter=ModelDrafter(twin, smol.n_vocab)))
        return [(e.token_id, e.verdict) for e in events]

    assert run() == run()


@pytest.mark.embedded
def test_embedded_pair_greedy_tokens_are_verifier_argmaxes(embedded_paths):
    verifier_path, drafter_path = embedded_paths
    pair = load_pair(ModelOptions(str(verifier_path), str(drafter_path), ctx_size=1024))
    try:
        recorder = RecordingBackend(pair.verifier)
        prompt = prompt_tokens(pair.verifier, "Write a Python function that reverses a string.")
        events, done = collect(generate(recorder, prompt, GenerationConfig(draft_max=3, max_tokens=48,
                                                                           sampling=GREEDY),
                                        drafter=pair.drafter))
    finally:
        pair.close()
    assert done.metrics.drafted > 0 and done.metrics.accepted > 0
    rounds = {}
    for event in events:
        rounds.setdefault(event.round.index, []).append(event)
    assert max(rounds) < len(recorder.batches)  # a round ending on end-of-generation emits no event
    for index, round_events in rounds.items():
        batch = recorder.batches[index]
        for event in round_events:
            row = max(event.draft_position, 1) - 1
            assert event.token_id == argmax(batch[row]), (index, event)  # a whole row or the engine's candidates
