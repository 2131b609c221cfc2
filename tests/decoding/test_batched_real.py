"""The batched loop and multi-sequence engine on a real GGUF (SmolLM2): agreement with K = 1, isolated caches."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import SeqDecode
from relaxtui.engine.llama import LlamaModel
from relaxtui.session import prompt_tokens
from tests.support.tolerances import MIN_AGREEMENT  # measured: see there

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ("Write a haiku about the sea.", "What is 12 times 7?", "Name three primary colours.",
           "Explain recursion in one sentence.")


def agreement(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Share of the longer output that both runs wrote identically (common prefix)."""
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return same / max(len(a), len(b), 1)


@pytest.mark.model
def test_four_sequences_agree_with_one_at_a_time(test_model_path):
    with LlamaModel(test_model_path, n_ctx=256, n_seq=4) as verifier, \
            LlamaModel(test_model_path, n_ctx=256, n_seq=4) as draft_model:
        drafter = ModelDrafter(draft_model, verifier.n_vocab)
        jobs = [Job(prompt_tokens(verifier, text), GenerationConfig(draft_max=n, max_tokens=24, sampling=GREEDY),
                    speculative=n > 0, tag=(text, n)) for text in PROMPTS for n in (0, 3)]
        batched = {job.tag: f for job, f in generate_many(verifier, jobs, drafter=drafter)}
        verifier.reset()
        draft_model.reset()
        rates = []
        for job in jobs:
            *_, alone = generate(verifier, job.prompt, job.config,  # sequence 0, alone
                                 drafter=ModelDrafter(draft_model, verifier.n_vocab) if job.speculative else None)
            assert isinstance(alone, Finished)
            rates.append(agreement(batched[job.tag].token_ids, alone.token_ids))
    print(f"greedy agreement K=4 vs K=1: {np.mean(rates):.3f} per token, {np.mean([r == 1 for r in rates]):.3f} "
          "per job")
    assert np.mean(rates) >= MIN_AGREEMENT, rates


@pytest.mark.model
def test_rejecting_a_first_draft_leaves_the_neighbours_cache_bit_identical(test_model_path):
    """Two sequences verified in one batch; sequence 0 rolls back to `last` (first draft rejected), sequence 1
    keeps everything. Sequence 1's next logits are bit-identical to a run where sequence 0 kept its drafts."""
    def next_logits(reject: bool) -> np.ndarray:
        with LlamaModel(test_model_path, n_ctx=128, n_seq=2) as model:
            a, b = model.tokenize("The cat sat on"), model.tokenize("Once upon a time")
            model.decode(0, a[:-1])
            model.decode(1, b[:-1])
            model.decode_many([SeqDecode(0, [a[-1], 11, 12, 13], range(4)), SeqDecode(1, [b[-1], 21, 22], range(3))])
            if reject:
                model.rollback(0, len(a))
                assert list(model.tokens_of(0)) == a
            assert list(model.tokens_of(1)) == [*b, 21, 22]
            return model.decode_many([SeqDecode(0, [14], [0]), SeqDecode(1, [23], [0])])[1]

    assert np.array_equal(next_logits(reject=True), next_logits(reject=False))


@pytest.mark.model
def test_a_copied_prompt_gives_the_logits_of_a_fresh_prefill(test_model_path):
    """share_prefix copies a whole KV stream and trims it, the data copy queued until the next decode: each copy
    must be the prompt's cells and nothing else, bit for bit — sequence 0 has moved on past the prompt, sequence
    2 held other text, and the second copy's source (1) is itself a copy still waiting to happen."""
    with LlamaModel(test_model_path, n_ctx=128, n_seq=4) as model:
        prompt = model.tokenize("The quick brown fox jumps over")
        model.decode(0, prompt[:-1])
        model.decode(0, [prompt[-1], 11, 12])
        model.decode(2, model.tokenize("Unrelated words that fill the cache"))
        model.share_prefix(0, 1, len(prompt) - 1)
        model.share_prefix(1, 2, len(prompt) - 1)
        copies = [model.decode(seq, [prompt[-1], 40], [0, 1]) for seq in (1, 2)]
        model.decode(3, prompt[:-1])
        fresh = model.decode(3, [prompt[-1], 40], [0, 1])
        assert [list(model.tokens_of(seq)) for seq in (1, 2, 3)] == [[*prompt, 40]] * 3
        assert list(model.tokens_of(0)) == [*prompt, 11, 12]
        for copied in copies:
            assert np.array_equal(copied, fresh)
