"""Cheap and adaptive drafting: n-gram proposals, --draft-p-min, --draft-min, adaptive N."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.checks import BadValue
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.draft_steps import draw_uniforms, propose
from relaxtui.decoding.drafters import DraftRequest, ModelDrafter
from relaxtui.decoding.events import TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.round import DraftLength
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.options import as_flag
from relaxtui.rules import make
from tests.support.markov import VOCAB, cycle_table, fake, random_table

GREEDY = SamplingParams(temperature=0)


@pytest.mark.parametrize(
    "context,n,expected",
    [
        ([1, 2, 3, 9, 1, 2], 3, [3, 9, 1]),  # trigram miss, bigram [1, 2] matched at the start
        ([5, 1, 2, 7, 7, 1, 2, 8, 1, 2], 2, [8, 1]),  # the most recent occurrence wins
        ([4, 5, 6, 4, 5, 6, 4, 5], 4, [6, 4, 5]),  # stops at the context's end
        ([1, 2, 3, 4], 3, []),  # nothing repeats
        ([7], 3, []),
    ],
)
def test_ngram_proposals_on_crafted_contexts(context, n, expected):
    assert proposed(NgramDrafter(n_min=1, n_max=3), context, n) == expected


def test_ngram_prefers_the_longest_match():
    # unigram [2] last seen before 5; the bigram [1, 2] was followed by 3
    drafter = NgramDrafter(n_min=1, n_max=2)
    assert proposed(drafter, [1, 2, 3, 0, 2, 5, 1, 2], 1) == [3]
    assert proposed(NgramDrafter(n_min=1, n_max=1), [1, 2, 3, 0, 2, 5, 1, 2], 1) == [5]


def proposed(drafter: NgramDrafter, context: list[int], n: int) -> list[int]:
    """What the drafter proposes after ``context`` (a fresh sequence each call), through its public draft call."""
    drafter.release(0)
    return list(drafter.draft([request(context, n)])[0].tokens)


def request(context, n, sampling=GREEDY, seq=0):
    return DraftRequest(seq, context, n, sampling, np.random.default_rng(0))


def test_ngram_draft_has_no_distribution():
    """The lookup proposes tokens only; its traits say so, and the loop makes q one-hot (test_drafter_interface)."""
    drafter = NgramDrafter(n_min=1, n_max=3)
    (draft,) = drafter.draft([request([1, 2, 1], 2)])
    assert draft.tokens == [2, 1] and draft.probs is None and draft.logits is None
    assert not drafter.traits.has_distribution and not drafter.traits.can_extend


def test_ngram_sizes_are_validated():
    with pytest.raises(BadValue, match=r"^ngram_min must be at most ngram_max \(got 3\.\.2\)$") as refused:
        NgramDrafter(n_min=3, n_max=2)
    assert str(as_flag(refused.value)) == "--ngram-min must be at most --ngram-max (got 3..2)"  # the CLI's spelling


def test_ngram_drafter_through_the_loop_on_a_repetitive_sequence():
    verifier = fake(cycle_table())  # greedy output cycles 1,2,3,4,5,0,... so lookup drafts are right
    events = list(generate(verifier, [0, 1, 2, 3, 4, 5, 0], GenerationConfig(draft_max=4, max_tokens=15,
                                                                             sampling=GREEDY),
                           drafter=NgramDrafter()))
    metrics = events[-1].metrics
    assert [e.token_id for e in events[:-1]] == [(1 + i) % VOCAB for i in range(15)]
    assert metrics.drafted > 0 and metrics.accepted == metrics.drafted


def test_rules_needing_drafter_logits_refuse_ngram():
    stream = generate(fake(random_table(1)), [0, 1], GenerationConfig(), drafter=NgramDrafter(),
                      rule=make("scd", 0.5))
    with pytest.raises(UserError, match="needs the drafter's logits"):
        next(stream)


def flat_after(token: int) -> np.ndarray:
    """A drafter table that is confident except after ``token``, where it is uniform."""
    table = cycle_table()
    table[token] = 0.0
    return table


def test_p_min_stops_drafting_when_the_drafter_is_unsure():
    plain = SamplingParams(1.0, 0, 1.0)
    (draft,) = ModelDrafter(fake(flat_after(2)), VOCAB, p_min=0.5).draft([request([0], 4, plain)])
    assert draft.tokens == [1, 2]  # after 2 the drafter's max q is 1/6 < 0.5: stop
    (draft,) = ModelDrafter(fake(flat_after(2)), VOCAB).draft([request([0], 4, plain)])
    assert len(draft.tokens) == 4


def test_draft_min_drops_short_drafts():
    drafter = ModelDrafter(fake(flat_after(0)), VOCAB, p_min=0.5)  # unsure at the start of every cycle
    config = GenerationConfig(draft_max=3, draft_min=2, max_tokens=12, sampling=GREEDY)
    events = [e for e in generate(fake(cycle_table()), [5], config, drafter=drafter) if isinstance(e, TokenEvent)]
    assert [e.token_id for e in events] == [(i) % VOCAB for i in range(12)]
    drafted_sizes = {e.round.n_drafted for e in events}
    assert drafted_sizes <= {0, 2, 3} and 0 in drafted_sizes


def test_adaptive_draft_length_grows_and_shrinks():
    length = DraftLength(maximum=5, minimum=1, adaptive=True)
    assert length.current == 5
    length.observe(5, 0)
    length.observe(4, 0)
    assert length.current == 3
    length.observe(3, 1)  # partial acceptance: unchanged
    assert length.current == 3
    length.observe(3, 3)
    assert length.current == 4
    for _ in range(5):
        length.observe(1, 0)
    assert length.current == 1
    fixed = DraftLength(maximum=4)
    fixed.observe(4, 0)
    assert fixed.current == 4


def test_a_draft_takes_its_uniforms_up_front_from_the_same_stream():
    """A sampled draft of n tokens takes its n uniforms from its generator before its first decode: the ones n
    draws in a row give; greedy takes none, an empty draft none, and a draft --draft-p-min may cut none ahead."""
    ahead, one_by_one = np.random.default_rng(7), np.random.default_rng(7)
    request = DraftRequest(0, [1, 2], 3, SamplingParams(0.8, 5, 1.0), ahead)
    assert draw_uniforms(request, 3) == [one_by_one.random() for _ in range(3)]
    assert draw_uniforms(request, 2) == [one_by_one.random() for _ in range(2)]
    assert draw_uniforms(DraftRequest(0, [1], 3, GREEDY, ahead), 3) is None
    assert draw_uniforms(request, 0) is None and draw_uniforms(request, 3, p_min=0.2) is None
    assert ahead.random() == one_by_one.random()


@pytest.mark.parametrize("p_min", [0.0, 0.45])
def test_a_sampled_draft_takes_one_uniform_per_drafted_token(p_min):
    """Whether its uniforms were drawn ahead or step by step (--draft-p-min cutting drafts short), a draft leaves its
    generator exactly as many draws further as it drafted tokens: a seed's later drafts do not depend on how."""
    drafter = ModelDrafter(fake(random_table(2, scale=2.5)), VOCAB, p_min=p_min)
    lengths = []
    for seed in range(40):
        rng, mirror = np.random.default_rng(seed), np.random.default_rng(seed)
        request = DraftRequest(0, [seed % VOCAB, (seed * 7) % VOCAB], 4, SamplingParams(1.0, 0, 1.0), rng)
        draft = drafter.draft([request])[0]
        for _ in draft.tokens:
            mirror.random()
        assert rng.random() == mirror.random()
        lengths.append(len(draft.tokens))
    assert set(lengths) == {4} if p_min == 0 else 0 < lengths.count(4) < len(lengths)  # p_min cut some drafts


@pytest.mark.parametrize("p_min", [0.0, 0.6])
@pytest.mark.parametrize("sampling", [SamplingParams(1.0, 0, 1.0), SamplingParams(0.7, 4, 0.9)])
def test_a_batched_draft_draws_each_step_as_one_propose_per_step_would(sampling, p_min):
    """Two sequences drafted in one call (uniforms ahead, or step by step under --draft-p-min) give the tokens a
    step-by-step reference gives: each step proposed from that sequence's own row with its own generator's next
    uniform (a uniform used twice, at the wrong step, or from the other sequence's generator changes them)."""
    table = random_table(3, scale=2.0)
    drafter = ModelDrafter(fake(table, n_seq=2), VOCAB, p_min=p_min)
    lengths = []
    for seed in range(30):
        contexts = [[seed % VOCAB, (seed + 1) % VOCAB], [(seed * 5) % VOCAB, (seed * 3) % VOCAB, 2]]
        requests = [DraftRequest(seq, context, 4, sampling, np.random.default_rng([seed, seq]))
                    for seq, context in enumerate(contexts)]
        drafts = drafter.draft(requests)
        for seq, context in enumerate(contexts):
            mirror, expected, last = np.random.default_rng([seed, seq]), [], context[-1]
            while len(expected) < 4 and (step := propose(table[last], sampling, mirror, p_min)) is not None:
                expected.append(last := step[0])
            assert drafts[seq].tokens == expected, (seed, seq)
            assert requests[seq].rng.random() == mirror.random()  # both as far along their stream
            lengths.append(len(expected))
    assert len(set(lengths)) > 1 if p_min else set(lengths) == {4}


@pytest.mark.parametrize("kind", ["ngram", "ngram-simple", "ngram-map", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                                  "suffix"])
def test_a_kind_that_drafts_from_another_sequences_output_declares_that_it_learns(kind):
    """``DrafterTraits.learns`` is what a server reads to give each tenant its own instance: a kind whose draft for
    one sequence changes after another sequence finished must declare it (else one key's output would draft for
    another), and one that declares it must really draft from it (the declaration costs memory per tenant)."""
    from relaxtui.decoding.drafters import DrafterOptions, make_drafter
    from relaxtui.engine.fake import FakeBackend

    verifier = FakeBackend(lambda context: np.zeros(VOCAB), VOCAB)
    options = DrafterOptions(kind=kind, ngram_min=1, ngram_max=3, ngram_size_n=2, ngram_size_m=4, ngram_mod_n_min=1)
    other = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] * 4  # another sequence's output: it repeats, so counts pass
    prompt = [9, 0, 3, 4]  # leads into it, and repeats nothing of its own

    def draft(learned: bool) -> list[int]:
        drafter = make_drafter(options, verifier, openers=None)  # a standalone kind opens nothing
        if learned:
            drafter.begin(0, [0, 1])
            drafter.finished(0, other)
            drafter.release(0)
        drafter.begin(1, prompt)
        return list(drafter.draft([request(prompt, 4, seq=1)])[0].tokens)

    changed = draft(learned=True) != draft(learned=False)
    assert changed == make_drafter(options, verifier, openers=None).traits.learns
