"""The suffix drafter (SuffixDecoding, docs/method.md#drafters): what it drafts on hand-made contexts and how long,
the shared corpus of earlier outputs and its bound, sequences kept apart, the index's counts against brute force, and
strict greedy through both loops giving the verifier alone's tokens (fake backend only)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import DrafterOptions, Openers, make_drafter
from relaxtui.decoding.drafting import Drafter, DraftRequest
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.decoding.suffix import SuffixSettings
from relaxtui.decoding.suffix_index import SuffixAutomaton
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import UserError
from relaxtui.rules import make

GREEDY = SamplingParams(temperature=0.0)
PASSAGE = list(range(100, 130))  # 30 distinct tokens, none of them in any filler below


def suffix(**options) -> Drafter:
    """A suffix drafter through the factory (it opens no file)."""
    def no_model(_: DrafterOptions) -> FakeBackend:
        raise AssertionError("the suffix kind opens no model")
    verifier = FakeBackend(markov_logits(np.zeros((8, 8))), 8)
    return make_drafter(DrafterOptions(kind="suffix", **options), verifier, Openers(model=no_model))


def draft(drafter: Drafter, context: Sequence[int], n_max: int = 8, seq: int = 0) -> list[int]:
    request = DraftRequest(seq, context, n_max, GREEDY, np.random.default_rng(0))
    return drafter.draft([request])[0].tokens


def filler(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


# -- what it drafts, and how long ------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 12])
def test_a_repeated_passage_is_drafted_for_as_long_as_the_match(k):
    drafter = suffix()
    context = filler(1, 20) + PASSAGE + filler(40, 10) + PASSAGE[:k]  # the passage again, k tokens in
    assert draft(drafter, context) == PASSAGE[k:k + min(8, k)]  # factor 1: a k-token match drafts k, capped by N


def test_the_spec_factor_scales_the_draft_length():
    context = filler(1, 20) + PASSAGE + filler(40, 10) + PASSAGE[:6]
    assert draft(suffix(suffix_factor=0.5), context) == PASSAGE[6:9]
    assert draft(suffix(suffix_factor=2.0), context, n_max=20) == PASSAGE[6:18]
    assert draft(suffix(), context, n_max=2) == PASSAGE[6:8]  # the request's N caps it


def test_the_match_is_bounded_by_the_depth():
    context = filler(1, 20) + PASSAGE + filler(40, 10) + PASSAGE[:20]
    assert draft(suffix(suffix_depth=4), context, n_max=16) == PASSAGE[20:24]  # a 4-token match at most


@pytest.mark.parametrize("rare_first", [False, True])
def test_the_most_frequent_continuation_wins_and_the_draft_stops_below_the_minimum_probability(rare_first):
    # "1 2" was followed by 9 twice and by 8 once (first or last), each time after a different token
    context = [50, 1, 2, 9, 51, 1, 2, 9, 52, 1, 2, 8, 53, 1, 2]
    if rare_first:
        context = [50, 1, 2, 8, 51, 1, 2, 9, 52, 1, 2, 9, 53, 1, 2]
    after = 52 if rare_first else 51  # "1 2 9" was then followed by two tokens once each: the first seen
    assert draft(suffix(), context) == [9, after]  # p(9) = 2/3, then p(9 x) = 2/3 · 1/2 = 1/3 >= 0.1
    assert draft(suffix(suffix_min_prob=0.5), context) == [9]  # 1/3 < 0.5: stops after one
    assert draft(suffix(suffix_min_prob=0.7), context) == []  # 2/3 < 0.7: nothing


def test_nothing_found_is_an_empty_draft():
    drafter = suffix()
    assert draft(drafter, filler(1, 50)) == []
    assert draft(drafter, filler(1, 20) + PASSAGE + filler(40, 10) + PASSAGE[:4], n_max=0) == []


# -- the shared corpus ----------------------------------------------------------------------------------------------
def replay(drafter: Drafter, seq: int, prompt: list[int], output: list[int], n_max: int = 8) -> tuple[int, int, int]:
    """Greedy verification by hand: each round drafts, keeps the drafts that match ``output`` and one more token.
    Returns (drafted, accepted, rounds)."""
    drafter.begin(seq, prompt)
    context, done, drafted, accepted, rounds = list(prompt), 0, 0, 0, 0
    while done < len(output):
        tokens = draft(drafter, context, n_max, seq)
        kept = 0
        while kept < len(tokens) and done + kept < len(output) and tokens[kept] == output[done + kept]:
            kept += 1
        drafted, accepted, rounds = drafted + len(tokens), accepted + kept, rounds + 1
        context += output[done:done + kept + 1]
        done += kept + 1
    drafter.finished(seq, output)
    return drafted, accepted, rounds


def test_a_finished_output_is_learned_and_a_second_request_repeating_it_is_drafted_in_full():
    output = filler(200, 60)
    fresh = suffix()
    assert replay(fresh, 0, filler(1, 5), output)[0] == 0  # nothing to draft from the first time
    drafted, accepted, rounds = replay(fresh, 1, filler(300, 5), output)  # another sequence, another prompt
    assert drafted == accepted == len(output) - rounds  # every token after each round's first was drafted, and kept
    assert rounds <= 11  # drafts grow with the match (1, 2, 4, 8, 8, ...), not one token a round
    assert replay(suffix(suffix_corpus_tokens=0), 1, filler(300, 5), output)[0] == 0  # no corpus: nothing learned


def test_the_corpus_keeps_its_bound_by_evicting_the_oldest_outputs_first():
    drafter = suffix(suffix_corpus_tokens=100, suffix_corpus_outputs=8)
    outputs = [filler(1000 + 20 * i, 10) for i in range(20)]
    for output in outputs:
        drafter.finished(0, output)
        assert drafter.corpus.tokens <= 100 and drafter.corpus.outputs <= 8
    kept = [bool(draft(drafter, filler(1, 5) + output[:3], seq=i + 1)) for i, output in enumerate(outputs)]
    assert kept[-1] and not kept[0]
    assert kept == sorted(kept)  # what is left is the newest outputs: the oldest went first
    assert sum(kept) * 10 <= 100


def test_an_output_longer_than_the_corpus_keeps_its_end():
    drafter = suffix(suffix_corpus_tokens=16)
    drafter.finished(0, filler(500, 40))
    assert drafter.corpus.tokens == 16
    assert draft(drafter, [1, 2, 530, 531, 532]) == [533, 534, 535]
    assert draft(drafter, [1, 2, 501, 502, 503]) == []


# -- sequences are kept apart ----------------------------------------------------------------------------------------
def test_sequences_do_not_leak_into_each_other():
    drafter = suffix()
    drafter.begin(0, filler(1, 20) + PASSAGE)
    drafter.begin(1, filler(60, 20))
    assert draft(drafter, filler(60, 20) + PASSAGE[:5], seq=1) == []  # sequence 0's prompt is not sequence 1's
    assert draft(drafter, filler(1, 20) + PASSAGE + PASSAGE[:5], seq=0) == PASSAGE[5:10]
    drafter.begin(0, filler(60, 10) + PASSAGE[:5])  # another request on sequence 0 forgets the last one's context
    assert draft(drafter, filler(60, 10) + PASSAGE[:5], seq=0) == []
    drafter.release(0)
    assert 0 not in drafter._seqs and 1 in drafter._seqs


def test_a_context_that_extends_the_last_one_is_appended_not_rebuilt():
    drafter = suffix()
    turn = filler(1, 20) + PASSAGE
    drafter.begin(0, turn)
    index = drafter._seqs[0].index
    assert draft(drafter, turn + [7, 8] + PASSAGE[:3]) == PASSAGE[3:6]  # a chat's next turn: the old one extended
    assert drafter._seqs[0].index is index and index.size == len(turn) + 5
    drafter.begin(0, [9, *turn])  # not an extension: rebuilt
    assert drafter._seqs[0].index is not index and drafter._seqs[0].index.size == len(turn) + 1


# -- the index -------------------------------------------------------------------------------------------------------
def occurrences(text: list[int], pattern: list[int]) -> int:
    m = len(pattern)
    return sum(text[i:i + m] == pattern for i in range(len(text) - m + 1))


def test_the_index_counts_every_pattern_up_to_its_depth_exactly():
    rng = random.Random(0)
    for trial in range(120):
        vocab, n, depth = rng.choice([2, 3, 5]), rng.randint(1, 60), rng.randint(2, 8)
        text = [rng.randrange(vocab) for _ in range(n)]
        if trial % 3 == 0:
            text = (text[:rng.randint(1, 4)] * 60)[:n]  # periodic runs: the count walk's worst case
        index = SuffixAutomaton(depth, text)
        for _ in range(30):
            start, m = rng.randrange(n), rng.randint(1, depth)
            pattern = text[start:start + m]
            state, matched = index.match(pattern, 10**6)
            assert matched == len(pattern) and index.count[state] == occurrences(text, pattern)
        for limit in sorted({1, min(3, depth), depth}):
            longest = max([m for m in range(1, min(limit, n - 1) + 1) if occurrences(text, text[n - m:]) >= 2],
                          default=0)
            assert index.repeated_suffix(limit)[1] == longest


def test_matching_another_text_finds_its_longest_suffix_within_the_limit():
    rng = random.Random(1)
    for _ in range(120):
        text = [rng.randrange(3) for _ in range(rng.randint(1, 40))]
        index, limit = SuffixAutomaton(8, text), rng.randint(1, 8)
        state, matched, query = 0, 0, [rng.randrange(3) for _ in range(30)]
        for end in range(1, len(query) + 1):
            state, matched = index.follow(state, matched, query[end - 1], limit)
            expected = max([m for m in range(1, min(limit, end) + 1) if occurrences(text, query[end - m:end])],
                           default=0)
            assert matched == expected
            if matched:
                assert index.count[state] == occurrences(text, query[end - matched:end])


# -- through the loops ------------------------------------------------------------------------------------------------
def cycle_verifier(n_seq: int = 1, vocab: int = 64, seed: int = 3) -> FakeBackend:
    """Greedy output walks one cycle through the whole vocabulary: no token repeats for ``vocab`` steps."""
    order = list(range(vocab))
    random.Random(seed).shuffle(order)
    table = np.full((vocab, vocab), -5.0)
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        table[a, b] = 5.0
    return FakeBackend(markov_logits(table + np.random.default_rng(seed).normal(size=table.shape)), vocab,
                       n_seq=n_seq)


def run(drafter: Drafter | None, prompt: list[int], config: GenerationConfig, rule=None) -> Finished:
    *_, finished = generate(cycle_verifier(), prompt, config, drafter=drafter, rule=rule)
    return finished


def test_strict_greedy_with_the_suffix_drafter_gives_the_verifier_alone_tokens_and_learns_across_requests():
    config = GenerationConfig(draft_max=8, max_tokens=40, sampling=GREEDY)
    alone = run(None, [0], GenerationConfig(draft_max=0, max_tokens=40, sampling=GREEDY))
    drafter = suffix()
    first = run(drafter, [0], config, make("strict"))
    second = run(drafter, [0], config, make("strict"))  # the same request again: its output is in the corpus
    assert first.token_ids == second.token_ids == alone.token_ids
    assert first.metrics.drafted == 0  # nothing repeats in the first one
    assert second.metrics.accepted == second.metrics.drafted >= 30


@pytest.mark.parametrize(("kind", "sizes"), [("suffix", {}), ("ngram-cache", {}),
                                             ("ngram-mod", {"ngram_size_n": 2, "ngram_mod_n_min": 1})])
def test_a_generation_that_does_not_learn_leaves_the_next_one_drafting_cold(kind, sizes):
    """eval, bench and generate's probe run with ``learn`` off: the same request again drafts as the first did (no
    corpus entry from it), so no config or N is measured drafting from another's output of the same prompt."""
    cold = GenerationConfig(draft_max=8, max_tokens=40, sampling=GREEDY, learn=False)
    drafter = make_drafter(DrafterOptions(kind=kind, **sizes), cycle_verifier(),
                           Openers(model=lambda _: cycle_verifier()))
    runs = [run(drafter, [0], cold, make("strict")) for _ in range(3)]
    assert [(f.token_ids, f.metrics.drafted, f.metrics.accepted) for f in runs] == [
        (runs[0].token_ids, runs[0].metrics.drafted, runs[0].metrics.accepted)] * 3
    # learning on: the first such run drafts as cold did (nothing was learned before it); after a few, the same
    # request drafts from them (ngram-cache's dynamic cache wants an n-gram seen 2 to 4 times before it drafts)
    learning = [run(drafter, [0], replace(cold, learn=True), make("strict")) for _ in range(4)]
    after = run(drafter, [0], cold, make("strict"))
    assert learning[0].metrics.drafted == runs[0].metrics.drafted
    assert after.metrics.accepted > runs[0].metrics.accepted


def test_strict_greedy_through_the_batched_loop_gives_the_verifier_alone_tokens():
    config = GenerationConfig(draft_max=6, max_tokens=48, sampling=GREEDY)
    prompts = [[0], [5, 9], [0], [17, 3, 8]]
    alone = {i: run(None, p, GenerationConfig(draft_max=0, max_tokens=48, sampling=GREEDY)).token_ids
             for i, p in enumerate(prompts)}
    drafter = suffix()
    jobs = [Job(p, config, make("strict"), tag=i) for i, p in enumerate(prompts)]
    results = dict((job.tag, f) for job, f in generate_many(cycle_verifier(2), jobs, drafter=drafter))
    assert {i: f.token_ids for i, f in results.items()} == alone
    assert sum(f.metrics.drafted for f in results.values()) > 0 and drafter.corpus.outputs == 4


# -- settings --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [{"depth": 0}, {"factor": 0.0}, {"min_prob": 1.5}, {"corpus_tokens": -1}])
def test_bad_settings_are_refused_in_one_line(bad):
    with pytest.raises(UserError, match="suffix drafter"):
        SuffixSettings(**bad)


def test_the_factory_builds_it_with_its_options_and_it_declares_no_distribution():
    drafter = suffix(suffix_depth=8, suffix_factor=0.5, suffix_min_prob=0.2, suffix_corpus_tokens=64,
                     suffix_corpus_outputs=4)
    assert drafter.traits.kind == "suffix" and not drafter.traits.has_distribution and not drafter.traits.can_extend
    assert drafter.settings == SuffixSettings(8, 0.5, 0.2, 64, 4)


def test_eval_units_bench_runs_and_the_auto_probe_draft_cold_while_serve_and_chat_learn(monkeypatch):
    """Where ``learn`` is off (a measurement: no run may draft from another's output of the same prompt) and on (a
    server's later requests and a chat's later turns learn): each face's own config, read where it is built."""
    from relaxtui.costmodel import bench
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.evals.run.units import WorkUnit, unit_config
    from relaxtui.evals.tasks.base import Sample

    plan = EvalPlan(rules=("strict",), draft_max=(3,))
    unit = WorkUnit(Sample("s", (), None), plan.points()[-1], "id", seed=0, repeat=0)
    assert unit_config(plan, unit)[0].learn is False
    seen: list[GenerationConfig] = []

    def spy(verifier, prompt, config, drafter=None, rule=None):
        seen.append(config)
        return iter(())

    monkeypatch.setattr(bench, "generate", spy)
    with pytest.raises(RuntimeError):
        bench._run_one(cycle_verifier(), [0], GenerationConfig(), None)
    assert [config.learn for config in seen] == [False]
    assert GenerationConfig().learn is True  # what serve's scheduler and the chat build their configs from
