"""KV reuse across calls: only what the cache lacks is decoded, in both models, and results are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.prefill import common_prefix, prefill, reusable
from relaxtui.decoding.sampling import SamplingParams
from tests.support.markov import VOCAB, fake, random_table

SAMPLED = SamplingParams(1.0, 0, 1.0)


def run(verifier, drafter, prompt, reuse="exact", seed=4, should_stop=lambda: False):
    config = GenerationConfig(draft_max=3, max_tokens=12, sampling=SAMPLED, seed=seed, reuse=reuse)
    events = list(generate(verifier, prompt, config, drafter=drafter, should_stop=should_stop))
    finished = events[-1]
    assert isinstance(finished, Finished)
    return [(e.token_id, e.verdict) for e in events if isinstance(e, TokenEvent)], finished.metrics


@pytest.mark.parametrize("cached,prefix,policy,expected", [
    ([1, 2, 3, 4], [1, 2, 3], "exact", 3),  # a repeat of the same prompt: all of it stays
    ([1, 2, 3, 4], [1, 2, 5], "exact", 0),  # anything else: a fresh prefill (bit-identical results)
    ([1, 2, 3, 4], [1, 2, 5], "longest", 2),  # a chat turn: the shared prefix stays
    ([1, 2], [1, 2, 3, 4], "longest", 2),
    ([], [1], "longest", 0),
])
def test_reusable_prefix(cached, prefix, policy, expected):
    assert reusable(cached, prefix, policy) == expected
    assert common_prefix(cached, prefix) >= expected


def _loop_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_common_prefix_finds_the_first_difference_anywhere_in_long_sequences():
    rng = np.random.default_rng(7)
    for _ in range(300):
        a = rng.integers(0, 4, int(rng.integers(0, 400))).tolist()
        b = a[:int(rng.integers(0, len(a) + 1))] + rng.integers(0, 4, int(rng.integers(0, 50))).tolist()
        expected = _loop_prefix(a, b)
        assert common_prefix(a, b) == expected
        assert common_prefix(b, a) == expected
        assert common_prefix(tuple(a), b) == expected  # a tuple beside a list: compared token by token


def test_same_prompt_twice_decodes_nothing_new_and_gives_the_same_tokens(markov_pair):
    target, draft = markov_pair
    verifier, draft_model = fake(target), fake(draft)
    drafter = ModelDrafter(draft_model, VOCAB)
    prompt = [0, 1, 2, 3, 4, 5, 0, 1]
    first, metrics_first = run(verifier, drafter, prompt)
    calls_before = len(verifier.decode_calls)
    again, metrics_again = run(verifier, drafter, prompt)
    assert again == first
    assert metrics_first.prefill_decoded == len(prompt) - 1 and metrics_again.prefill_decoded == 0
    assert len(prompt) - 1 not in verifier.decode_calls[calls_before:]  # no prefill batch the second time


def test_a_chat_turn_decodes_only_the_new_tokens_in_both_models(markov_pair):
    target, draft = markov_pair
    verifier, draft_model = fake(target), fake(draft)
    drafter = ModelDrafter(draft_model, VOCAB)
    turn_one = [0, 1, 2, 3]
    tokens, _ = run(verifier, drafter, turn_one, reuse="longest")
    turn_two = turn_one + [t for t, _ in tokens] + [5, 4, 3]
    shared_verifier = common_prefix(verifier.tokens_of(0), turn_two[:-1])
    shared_drafter = common_prefix(draft_model.tokens_of(0), turn_two[:-1])
    assert shared_verifier > len(turn_one) and shared_drafter > len(turn_one)
    drafter_calls = len(draft_model.decode_calls)
    _, metrics = run(verifier, drafter, turn_two, reuse="longest")
    assert metrics.prefill_decoded == len(turn_two) - 1 - shared_verifier
    assert draft_model.decode_calls[drafter_calls] == len(turn_two) - 1 - shared_drafter  # the drafter's prefill
    fresh_verifier, fresh_drafter = fake(target), ModelDrafter(fake(draft), VOCAB)
    assert run(fresh_verifier, fresh_drafter, turn_two)[0] == run(verifier, drafter, turn_two, reuse="longest")[0]


def test_a_stop_during_prefill_ends_with_no_tokens_and_the_next_call_completes():
    verifier = fake(random_table(3))
    polls = []

    def stop_on_third_poll() -> bool:
        polls.append(1)
        return len(polls) >= 3

    prompt = list(np.arange(400) % VOCAB)
    done, completed = prefill(verifier, 0, prompt, should_stop=stop_on_third_poll, chunk=100)
    assert (done, completed) == (200, False) and len(verifier.tokens_of(0)) == 200
    tokens, metrics = run(verifier, None, prompt, should_stop=lambda: True)
    assert tokens == [] and metrics.finish_reason == "stopped"
    tokens, metrics = run(verifier, None, prompt, reuse="longest")
    assert len(tokens) == 12 and verifier.tokens_of(0)[: len(prompt) - 1] == prompt[:-1]


def test_a_timing_on_the_drafter_model_cannot_desync_the_drafter(markov_pair):
    """The drafter reads the model's own cached tokens, so a reset behind its back is harmless."""
    target, draft = markov_pair
    verifier, draft_model = fake(target), fake(draft)
    drafter = ModelDrafter(draft_model, VOCAB)
    prompt = [0, 1, 2, 3]
    first, _ = run(verifier, drafter, prompt)
    draft_model.reset()  # what a step-time measurement does
    assert run(verifier, drafter, prompt)[0] == first


# -- the real engine ---------------------------------------------------------------------------------------------
@pytest.mark.model
def test_llama_kv_after_reuse_matches_a_fresh_prefill(test_model_path):
    """Roll back into a cached conversation, decode the new turn: the logits equal a fresh prefill's."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=512) as reused, LlamaModel(test_model_path, n_ctx=512) as fresh:
        turn_one = reused.tokenize("<|im_start|>user\nHello there, how are you?<|im_end|>\n<|im_start|>assistant\n")
        turn_two = turn_one + reused.tokenize("I am fine.<|im_end|>\n<|im_start|>user\nAnd the weather?",
                                              add_special=False)
        prefill(reused, 0, turn_one + reused.tokenize(" something else entirely", add_special=False))
        decoded, completed = prefill(reused, 0, turn_two[:-1], reuse="longest")
        assert completed and decoded == len(turn_two) - 1 - len(turn_one)
        assert list(reused.tokens_of(0)) == turn_two[:-1]
        prefill(fresh, 0, turn_two[:-1])
        got = reused.decode(0, [turn_two[-1]], logits_rows=[0])[0]
        want = fresh.decode(0, [turn_two[-1]], logits_rows=[0])[0]
        assert int(np.argmax(got)) == int(np.argmax(want))
        assert np.max(np.abs(got - want)) < 0.05 * np.std(want)
