"""Priced drafting (docs/method.md#priced-drafts): the cut's arithmetic against a brute-force reference, the keep
rates it learns from proposals and emitted tokens, and the drafter that cuts (``PricedDrafter``) in the loop: a wrong
drafter costs nothing, a right one keeps drafting, strict's law holds, and a relaxed bonus after a cut reads the
proposal's q, not the drafter's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.draft_cut import (
    BUCKETS,
    PRIOR_KEPT,
    PRIOR_SEEN,
    KeepOdds,
    bucket,
    check_prices,
    cuts_drafts,
    priced_length,
)
from relaxtui.decoding.drafters import DrafterOptions, ModelDrafter, Openers, make_drafter
from relaxtui.decoding.drafting import BaseDrafter, Draft, Drafter, DrafterTraits, DraftRequest, confirmed
from relaxtui.decoding.events import Finished, TokenEvent, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.priced import PricedDrafter
from relaxtui.decoding.sampling import SamplingParams, one_hot
from relaxtui.errors import UserError
from relaxtui.rules import make
from relaxtui.session import ModelOptions, fake_pair
from tests.support.markov import GREEDY, PLAIN, VOCAB, assert_two_step_law, cycle_table, fake

CPU = (1.0, 1.56, 1.9, 1.73, 2.22, 2.63, 3.02, 3.25, 3.48)  # v(1..9) measured on a 2-core Xeon (a dip at k = 4)
FLAT = (1.0,) * 9  # a GPU-like machine: width is free


def priced(drafter: Drafter, prices) -> PricedDrafter:  # noqa: ANN001 - prices: a tuple, or None (not measured)
    """``drafter`` with its drafts cut at ``prices`` (as the factory wraps a kind the pair's --draft-cut cuts)."""
    return PricedDrafter(drafter, lambda: prices, VOCAB)


# -- the cut's arithmetic ----------------------------------------------------------------------------------------
def brute_force(chances: Sequence[float], prices: Sequence[float]) -> tuple[int, float]:
    """Every prefix length j priced on its own: (the shortest j with the most expected tokens per step, that rate)."""
    rates = [(1 + sum(chances[:j])) / prices[j] for j in range(min(len(chances), len(prices) - 1) + 1)]
    best = max(rates)
    return next(j for j, rate in enumerate(rates) if rate >= best * (1 - 1e-12)), best


def test_the_cut_is_the_best_prefix_of_a_brute_force_search_over_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(0, 12))
        keep = rng.uniform(0, 1, n)
        chances = list(np.cumprod(keep))  # the chance the first i are all kept: never rising
        prices = (1.0, *np.cumsum(rng.uniform(0.05, 1.2, int(rng.integers(1, 14)))) + 1.0)
        j = priced_length(chances, prices)
        want, best = brute_force(chances, prices)
        assert j == want
        assert (1 + sum(chances[:j])) / prices[j] >= 1.0  # never below the verifier alone's token per step


def test_a_hand_computed_cut_on_this_machines_prices():
    # a drafter kept 90% of the time: j = 3 yields 1 + .9 + .81 + .729 = 3.439 tokens for 1.73 steps (1.99 a step);
    # j = 2 yields 2.71 for 1.9 (1.43), j = 1 1.9 for 1.56 (1.22); j = 4..8 cost more than they add
    chances = [0.9 ** i for i in range(1, 9)]
    assert priced_length(chances, CPU) == 3
    assert priced_length([0.3] + [0.0] * 7, CPU) == 0  # 1.3 tokens for 1.56 steps: slower than a plain step
    assert priced_length(chances, FLAT) == 8  # width costs nothing: every token with a chance is worth verifying
    assert priced_length([], CPU) == 0
    assert priced_length(chances, (1.0,)) == 0  # no price beyond one token: nothing to verify


def test_keep_odds_count_each_proposed_token_up_to_the_first_miss_by_streak_bucket():
    odds = KeepOdds()
    assert odds.observe([7, 8, 9], [7, 8, 9, 1]) == 3  # all three kept, then a bonus it had no token for: no miss
    assert odds.streak == 3
    assert odds.kept[:3] == [PRIOR_KEPT + 1] * 3 and odds.seen[:3] == [PRIOR_SEEN + 1] * 3  # streaks 0, 1, 2
    assert odds.observe([4, 5], [4, 5]) == 2  # both right: the streak grows to 5
    assert odds.streak == 5
    assert odds.observe([6, 3, 3], [6, 2]) == 1  # one right, then a miss (the unverified tail is no outcome)
    assert odds.streak == 0
    assert odds.seen[bucket(5)] == PRIOR_SEEN + 3 and odds.kept[bucket(5)] == PRIOR_KEPT + 2  # streaks 4..7: 4
    # (kept), 5 (kept), 6 (missed)
    assert odds.observe([], [5]) == 0  # nothing proposed: no outcome, and the streak starts again
    assert odds.streak == 0 and sum(odds.seen) == PRIOR_SEEN * BUCKETS + 7  # 3 + 2 + 2 outcomes in all
    odds.observe([1], [1, 2])
    assert odds.streak == 1


def test_chances_multiply_the_rates_of_the_buckets_each_token_will_be_reached_in():
    odds = KeepOdds(streak=3)
    odds.kept[bucket(3)], odds.seen[bucket(3)] = 9.0, 10.0
    odds.kept[bucket(4)], odds.seen[bucket(4)] = 4.0, 5.0  # streaks 4..7
    assert odds.chances(3) == pytest.approx([0.9, 0.9 * 0.8, 0.9 * 0.8 * 0.8])
    assert bucket(0) == 0 and bucket(1) == 1 and bucket(3) == 2 and bucket(1000) == BUCKETS - 1


@pytest.mark.parametrize(("policy", "holds_model", "cuts"), [
    ("auto", False, True), ("auto", True, False), ("priced", True, True), ("priced", False, True),
    ("none", False, False), ("none", True, False)])
def test_which_drafters_a_policy_cuts(policy, holds_model, cuts):
    assert cuts_drafts(policy, holds_model) is cuts


@pytest.mark.parametrize("prices", [(1.2, 1.5), (1.0, 0.0), (1.0, float("inf")), (1.0, float("nan"))])
def test_prices_that_are_not_v_of_k_are_refused(prices):
    with pytest.raises(ValueError):
        check_prices(prices)
    with pytest.raises(UserError):
        fake_pair(prices=prices)


def test_an_unknown_cut_policy_is_one_line():
    for make_options in (lambda: ModelOptions(draft_cut="always"), lambda: DrafterOptions(draft_cut="always")):
        with pytest.raises(UserError, match="draft_cut must be one of auto, priced, none"):
            make_options()


def test_a_draft_cut_keeps_its_first_tokens_distributions_and_rows():
    q = tuple(one_hot(t) for t in (3, 4, 5))
    logits = np.arange(18, dtype=np.float32).reshape(3, VOCAB)
    draft = Draft([3, 4, 5], np.eye(VOCAB)[[3, 4, 5]], logits, 0.5, {"k": 1}, q)
    cut = draft.first(2)
    assert cut.tokens == [3, 4] and cut.q == q[:2] and cut.extra == {"k": 1}
    assert np.array_equal(cut.probs, np.eye(VOCAB)[[3, 4]]) and np.array_equal(cut.logits, logits[:2])
    q_at, raw = draft.row(2, VOCAB)  # what extend() would hand for the draft cut to two tokens
    assert np.array_equal(q_at, np.eye(VOCAB)[5]) and np.array_equal(raw, logits[2])


# -- the loop that cuts ------------------------------------------------------------------------------------------
class Proposer(BaseDrafter):
    """Proposes ``n_max`` tokens from a rule of the context, with no distribution (an n-gram drafter's shape)."""

    traits = DrafterTraits("proposer", has_distribution=False)

    def __init__(self, right: bool) -> None:
        self.right = right  # propose the cycle's next tokens (always kept at greedy), or tokens it never emits

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        return True

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        out = []
        for r in requests:
            last = r.context[-1]
            step = 1 if self.right else 3  # cycle_table's greedy chain is t -> t + 1
            out.append(Draft([(last + step * (i + 1)) % VOCAB for i in range(r.n_max)], None, None))
        return out


def run(verifier, config, drafter, rule=None, prompt=(0,)):
    events = list(generate(verifier, list(prompt), config, drafter=drafter, rule=rule))
    assert isinstance(events[-1], Finished)
    return [e for e in events if isinstance(e, TokenEvent)], events[-1].metrics


def test_a_drafter_that_is_always_wrong_soon_drafts_nothing_and_the_output_is_the_verifiers():
    verifier = fake(cycle_table())
    config = GenerationConfig(draft_max=4, max_tokens=40, sampling=GREEDY)
    events, metrics = run(verifier, config, priced(Proposer(right=False), CPU))
    alone, _ = run(verifier, GenerationConfig(draft_max=0, max_tokens=40, sampling=GREEDY), None)
    assert [e.token_id for e in events] == [e.token_id for e in alone]
    assert metrics.accepted == 0 and sum(1 for n in metrics.draft_lengths if n) <= 4  # a few tries, then nothing
    uncut, _ = run(verifier, config, Proposer(right=False))
    assert sum(1 for e in uncut if e.verdict is Verdict.RESAMPLED) == 39  # the guard: uncut, every round but the last
    # (no room left to draft) drafts and is rejected


def test_a_drafter_that_is_always_right_keeps_drafting_at_the_length_that_pays():
    verifier = fake(cycle_table())
    config = GenerationConfig(draft_max=8, max_tokens=60, sampling=GREEDY)
    _, metrics = run(verifier, config, priced(Proposer(right=True), CPU))
    assert metrics.accepted == metrics.drafted > 0
    assert metrics.draft_lengths.count(3) > metrics.rounds * 0.7  # k = 4 is this machine's cheap block
    _, flat = run(verifier, config, priced(Proposer(right=True), FLAT))
    assert max(flat.draft_lengths) == 8  # on a machine where width is free it drafts the whole N


def test_without_prices_or_with_a_model_drafter_under_auto_nothing_is_cut(markov_pair):
    verifier = fake(cycle_table())
    config = GenerationConfig(draft_max=4, max_tokens=20, sampling=GREEDY)
    _, unpriced = run(verifier, config, priced(Proposer(right=False), None))  # prices not measured (yet)
    assert unpriced.drafted == sum(min(4, 20 - 1 - i) for i in range(20))  # every round drafts what room allows
    target, draft = markov_pair
    openers = Openers(model=lambda _: fake(draft))
    for policy, kind, wrapped in [("auto", "model", False), ("auto", "ngram", True), ("priced", "model", True),
                                  ("none", "ngram", False)]:  # the factory wraps a kind the policy cuts, and says so
        built = make_drafter(DrafterOptions(kind=kind, draft_cut=policy), fake(target), openers, lambda: CPU)
        assert isinstance(built, PricedDrafter) is wrapped and (built.traits.cut == "priced") is wrapped
        assert built.traits.kind == kind
    model = make_drafter(DrafterOptions(kind="model"), fake(target), openers, lambda: CPU)  # auto leaves it whole
    _, whole = run(fake(target), GenerationConfig(draft_max=3, max_tokens=20, sampling=PLAIN), model)
    assert set(whole.draft_lengths[:-1]) == {3}


def test_strict_with_priced_cuts_emits_the_verifier_distribution(markov_pair):
    """Monte Carlo over seeds, as tests/decoding/test_loop_fake.py: the first two tokens follow the verifier's law
    when the cut depends on what came before. At these prices the first round's draft of 3 is cut to 2 (the prior's
    chances, 2/3 a token), and after a rejected first token the second round verifies nothing (streak 0 now keeps 2 in
    4: no prefix beats a plain step), so the second token's round is cut by the first round's outcome. The drafter's
    q is a real distribution (the priced policy cuts a model drafter too)."""
    target, draft = markov_pair
    runs = 3000
    counts, first, second = priced_first_two_tokens(fake(target), priced(ModelDrafter(fake(draft), VOCAB),
                                                                         (1.0, 1.6, 1.85, 9.0)), runs)
    assert first[2] == runs and second[0] == sum(second.values()) > 300  # every cut as the prices say
    assert_two_step_law(counts, target, runs)


def priced_first_two_tokens(verifier, drafter, runs) -> tuple[Counter, Counter, Counter]:
    """Over ``runs`` seeds at N = 3 with a drafter cut by price: the (first, second) token pairs emitted, the first
    round's verified draft lengths, and the second round's where the second token came from it."""
    counts, first, second = Counter(), Counter(), Counter()
    for seed in range(runs):
        config = GenerationConfig(draft_max=3, max_tokens=4, sampling=PLAIN, seed=seed)
        events, metrics = run(verifier, config, drafter)
        counts[(events[0].token_id, events[1].token_id)] += 1
        first[metrics.draft_lengths[0]] += 1
        if events[0].verdict is Verdict.RESAMPLED:  # the second token came from round 2
            second[metrics.draft_lengths[1]] += 1
    return counts, first, second


def test_strict_stays_lossless_when_a_sampled_draft_stops_early_on_what_it_drew(markov_pair):
    """--draft-p-min stops a sampled model draft where the drafter is unsure, which here depends on the token it drew
    first: the draft has one token unless it drew 4 (q(.|4) tops 0.88 > 0.6; every other row < 0.6). At these prices
    a draft of one is not worth verifying on its own (v(2) = 1.8 > 1 + 2/3) while a longer one is, so a cut chosen
    from the draft's own length would verify the first token only when it is 4, and emit 4 first 40% of the time
    instead of the verifier's 30.5%. The cut is chosen for the N asked (2 of 3 here) and bounded by the draft."""
    target, draft = markov_pair
    runs = 3000
    counts, first, _ = priced_first_two_tokens(fake(target), priced(ModelDrafter(fake(draft), VOCAB, p_min=0.6),
                                                                    (1.0, 1.8, 1.9, 9.0)), runs)
    assert set(first) == {1, 2} and min(first.values()) > 300  # one-token drafts verified, longer ones cut to 2
    assert_two_step_law(counts, target, runs)


def test_a_model_drafters_steps_past_the_cut_are_priced_as_extra_draft_steps():
    """It decoded its whole proposal: a round that verifies 2 of 3 paid three drafter steps."""
    drafter = priced(ModelDrafter(fake(cycle_table()), VOCAB), (1.0, 1.5, 1.8, 9.0))
    config = GenerationConfig(draft_max=3, max_tokens=30, sampling=GREEDY)
    _, metrics = run(fake(cycle_table()), config, drafter)
    cut = sum(1 for n in metrics.draft_lengths if n == 2)
    assert cut == metrics.rounds == 10  # three tokens a round
    assert metrics.extra_draft_steps == cut - 1  # every round's third step but the last's (room for only two there)


class Recording(Proposer):
    """A right proposer that records what each round tells it (``accept``): the drafts kept, and how many of its
    last proposal the emitted tokens confirmed (``drafting.confirmed``, what ngram-map and ngram-mod learn from)."""

    def __init__(self) -> None:
        super().__init__(right=True)
        self.told: list[tuple[int, int]] = []
        self.proposed: list[int] = []

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = super().draft(requests)
        self.proposed = drafts[0].tokens
        return drafts

    def accept(self, seq: int, n_accepted: int, emitted) -> None:  # noqa: ANN001 - the test double's override
        self.told.append((n_accepted, confirmed(self.proposed, emitted)))
        self.proposed = []


def test_a_lookup_is_told_what_was_kept_and_what_the_round_emitted_so_it_learns_from_its_whole_proposal():
    """ngram-map sizes its next draft, and ngram-mod judges its table, by how much of its proposal the round
    confirmed: a proposal the price left unverified but the round's token confirmed was right, and must not read as
    rejected; the count it is told stays the drafts the verify kept."""
    drafter = Recording()
    config = GenerationConfig(draft_max=3, max_tokens=10, sampling=GREEDY)
    _, metrics = run(fake(cycle_table()), config, priced(drafter, (1.0, 50.0, 60.0, 70.0)))
    assert metrics.drafted == 0  # width costs too much here: every round is a plain verifier step
    assert len(drafter.told) == 10 and all(kept == 0 for kept, _ in drafter.told)  # nothing verified, nothing kept
    assert [right for _, right in drafter.told[:-1]] == [1] * 9  # each round's token confirmed its first
    wrong = Recording()
    wrong.right = False
    run(fake(cycle_table()), config, priced(wrong, (1.0, 50.0, 60.0, 70.0)))
    assert {right for _, right in wrong.told} == {0}


class NoExtend(ModelDrafter):
    """A model drafter whose extend() must not be called: after a cut, q at N+1 is the proposal's own row."""

    extended = 0

    def extend(self, seq, sampling):  # noqa: ANN001, ANN201 - the test double's override
        NoExtend.extended += 1
        return super().extend(seq, sampling)


def first_tokens(verifier, config, drafter, rule, count):
    """The first ``count`` tokens of a generation, the rest never run (its last rounds would draft shorter)."""
    events = generate(verifier, [0], config, drafter=drafter, rule=rule)
    tokens: list[TokenEvent] = []
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event)
            if len(tokens) == count:
                events.close()
                break
    return tokens


def test_a_relaxed_bonus_after_a_cut_reads_q_from_the_proposal_not_the_drafter(markov_pair):
    """These prices never verify a third draft token (it would cost 1.05 steps for at most one token), so every
    draft of 3 is cut and every bonus follows a cut: q at N+1 must come from the proposal, never from extend()."""
    target, draft = markov_pair
    drafter = priced(NoExtend(fake(draft), VOCAB), (1.0, 1.3, 1.45, 2.5))
    NoExtend.extended = 0
    bonuses = 0
    for seed in range(100):
        config = GenerationConfig(draft_max=3, max_tokens=200, sampling=SamplingParams(1.0, 0, 1.0), seed=seed,
                                  bonus="relaxed")
        tokens = first_tokens(fake(target), config, drafter, make("mentored", 0.5), 20)
        bonuses += sum(1 for e in tokens if e.verdict is Verdict.BONUS)
    assert bonuses > 20 and NoExtend.extended == 0
    for seed in range(50):  # the guard: a full draft (the drafter not cut) does ask the drafter
        config = GenerationConfig(draft_max=3, max_tokens=200, sampling=SamplingParams(1.0, 0, 1.0), seed=seed,
                                  bonus="relaxed")
        first_tokens(fake(target), config, drafter.inner, make("mentored", 0.5), 20)
    assert NoExtend.extended > 0
