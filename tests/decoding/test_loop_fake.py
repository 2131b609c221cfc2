"""The speculative loop on a fake backend: distribution, counters, seeds, context limits."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, TokenEvent, Verdict, acceptance_rate, mean_accepted_length
from relaxtui.decoding.loop import generate
from relaxtui.errors import UserError
from tests.support.markov import GREEDY, PLAIN, VOCAB, assert_two_step_law, cycle_table, exact_two_step, fake


def run(verifier, prompt, config, drafter=None, rule=None):
    events = list(generate(verifier, prompt, config, drafter=drafter, rule=rule))
    finished = events[-1]
    assert isinstance(finished, Finished)
    return [e for e in events if isinstance(e, TokenEvent)], finished


# -- distribution ---------------------------------------------------------------------------------------------
def test_strict_loop_emits_the_verifier_distribution(markov_pair):
    """Monte Carlo over seeds: the joint law of the first two emitted tokens matches the verifier's.

    Tolerance: every cell within 5 standard errors (sqrt(p(1-p)/n)) plus 0.002; a biased sampler (e.g. one
    that skips the residual) misses by >0.05 on these tables.
    """
    target, draft = markov_pair
    runs = 3000
    counts = Counter()
    verifier, draft_model = fake(target), fake(draft)
    drafter = ModelDrafter(draft_model, VOCAB)
    for seed in range(runs):
        config = GenerationConfig(draft_max=1, max_tokens=2, sampling=PLAIN, seed=seed)
        events, _ = run(verifier, [0], config, drafter)
        counts[(events[0].token_id, events[1].token_id)] += 1
    assert_two_step_law(counts, target, runs)


def test_drafter_distribution_alone_would_fail_the_same_check(markov_pair):
    """Guard on the test above: the drafter's own law is far from the verifier's on these tables."""
    target, draft = markov_pair
    gap = np.abs(exact_two_step(target, 0) - exact_two_step(draft, 0)).max()
    assert gap > 0.05


# -- scripted counters ------------------------------------------------------------------------------------------
def test_counters_match_a_hand_computed_case():
    # Round 1: last=0, draft 1,2,4 (mistake after 2) -> accept 1,2; resample 3.
    # Round 2: last=3, draft 4,5,0 -> all accepted; bonus 1.   (7 tokens)
    # Round 3: one token left -> N capped at 0: a verifier-only step emits 2.
    verifier, drafter = fake(cycle_table()), ModelDrafter(fake(cycle_table(mistake_after=2)), VOCAB)
    config = GenerationConfig(draft_max=3, max_tokens=8, sampling=GREEDY)
    events, finished = run(verifier, [0], config, drafter)
    assert [e.token_id for e in events] == [1, 2, 3, 4, 5, 0, 1, 2]
    assert [e.verdict for e in events] == [Verdict.ACCEPTED] * 2 + [Verdict.RESAMPLED] + [Verdict.ACCEPTED] * 3 + [
        Verdict.BONUS, Verdict.VERIFIER]
    assert events[2].rejected_token == 4 and events[2].draft_position == 3
    m = finished.metrics
    assert (m.rounds, m.drafted, m.accepted, m.output_tokens) == (3, 6, 5, 8)
    assert m.acceptance_rate == pytest.approx(5 / 6)
    assert m.mean_accepted_length == pytest.approx(1 + 5 / 3)
    assert m.per_position_reached == (2, 2, 2)
    assert m.per_position_accepted == (2, 2, 1)
    live = RoundCounters(3)  # a display's live counters, fed the same rounds, say the same (one definition each)
    for round_ in {e.round.index: e.round for e in events}.values():
        live.observe_round(round_)
    assert (live.acceptance_rate, live.mean_accepted_length) == (m.acceptance_rate, m.mean_accepted_length)
    assert (acceptance_rate(0, 0), mean_accepted_length(0, 0)) == (0.0, 1.0)  # before any draft, any round
    assert m.finish_reason == "max_tokens" and m.truncated
    assert verifier.decode_calls == [4, 4, 1]  # one verifier batch per round, N+1 wide (no prefill: 1-token prompt)


def test_verifier_only_runs_the_same_path():
    verifier = fake(cycle_table())
    events, finished = run(verifier, [0], GenerationConfig(draft_max=3, max_tokens=5, sampling=GREEDY))
    assert [e.token_id for e in events] == [1, 2, 3, 4, 5]
    assert {e.verdict for e in events} == {Verdict.VERIFIER}
    assert finished.metrics.rounds == 5 and finished.metrics.drafted == 0


# -- seeds, stopping, limits -----------------------------------------------------------------------------------
def test_seeded_runs_are_reproducible(markov_pair):
    target, draft = markov_pair

    def tokens(seed):
        drafter = ModelDrafter(fake(draft), VOCAB)
        events, _ = run(fake(target), [0], GenerationConfig(draft_max=3, max_tokens=40, sampling=PLAIN, seed=seed),
                        drafter)
        return [(e.token_id, e.verdict) for e in events]

    assert tokens(7) == tokens(7)
    assert tokens(7) != tokens(8)


def test_end_of_generation_stops_without_emitting_it():
    verifier = fake(cycle_table(), eog=3)
    events, finished = run(verifier, [0], GenerationConfig(draft_max=2, max_tokens=20, sampling=GREEDY),
                           ModelDrafter(fake(cycle_table()), VOCAB))
    assert [e.token_id for e in events] == [1, 2]
    assert finished.metrics.finish_reason == "eog" and not finished.metrics.truncated


def test_context_exhausted_mid_generation_keeps_what_was_generated():
    verifier = fake(cycle_table(), n_ctx=10)
    drafter = ModelDrafter(fake(cycle_table(), n_ctx=10), VOCAB)
    events, finished = run(verifier, [0, 1, 2], GenerationConfig(draft_max=3, max_tokens=50, sampling=GREEDY),
                           drafter)
    assert finished.metrics.finish_reason == "context" and finished.metrics.truncated
    assert 0 < len(events) <= 8  # 10 slots minus the 2 cached prompt tokens
    assert [e.token_id for e in events] == [(3 + i) % VOCAB for i in range(len(events))]


def test_prompt_longer_than_context_is_a_user_error():
    with pytest.raises(UserError, match="^ctx_size 4 is too small for a prompt of 5 tokens"):
        run(fake(cycle_table(), n_ctx=4), [0, 1, 2, 3, 4], GenerationConfig(sampling=GREEDY))


def test_stop_request_ends_at_a_round_boundary():
    verifier = fake(cycle_table())
    stream = generate(verifier, [0], GenerationConfig(draft_max=0, max_tokens=100, sampling=GREEDY),
                      should_stop=iter([False, False, True]).__next__)
    events = list(stream)
    assert len(events) == 3 and events[-1].metrics.finish_reason == "stopped"


@pytest.mark.parametrize("field,value", [("draft_max", -1), ("draft_max", 65), ("max_tokens", 0)])
def test_out_of_range_generation_options(field, value):
    with pytest.raises(UserError):
        GenerationConfig(**{field: value})


def test_events_are_immutable(markov_pair):
    events, _ = run(fake(markov_pair[0]), [0], GenerationConfig(max_tokens=1, sampling=PLAIN))
    with pytest.raises(AttributeError):
        events[0].token_id = 3  # type: ignore[misc]


def test_the_generators_draw_ahead_the_same_stream_as_numpys_own():
    """spawn_generators' streams hand numpy's default_rng values, in order, across the blocks they draw ahead (a seed
    reproduces what it did before the loops drew ahead); a draw of another shape once drawn ahead would come out of
    order and is refused."""
    from relaxtui.decoding.sampling import AheadGenerator, spawn_generators

    for seed in (0, 7, 2**62):
        ahead = spawn_generators(seed)
        plain = [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(2)]
        for mine, theirs in zip(ahead, plain, strict=True):
            count = 3 * AheadGenerator.BLOCK + 5
            assert [mine.random() for _ in range(count)] == [theirs.random() for _ in range(count)]
    fresh = spawn_generators(1)[0]
    assert fresh.random(3).shape == (3,)  # nothing drawn ahead yet: numpy's own
    fresh.random()
    with pytest.raises(RuntimeError, match="scalar float64 draws only"):
        fresh.random(2)
