"""The replayed speed-up (costmodel/replay.py, docs/metrics.md#replayed-speed-up): a rule's expected accepted length
on a recorded strict run's own drafts equals the Monte Carlo mean of the rule's real acceptance step on those drafts; at
greedy every rule replays as strict; one-hot drafts replay as the rules treat them; the price is the hand-computed
one; the screen says "does not pay here" below its bar."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxtui.costmodel.pricing import Rounds, priced_ms, priced_speedup, rounds_of_metrics
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.costmodel.replay import (
    MIN_GAIN,
    RecordedRun,
    acceptance_chances,
    chain,
    realised_rounds,
    replay,
    replay_settings,
    screen,
)
from relaxtui.decoding.acceptance import Acceptance, accept_draft
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Finished, RoundRows, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.round_rows import sparse_rows
from relaxtui.decoding.sampling import Candidates, SamplingParams, one_hot
from relaxtui.engine.fake import FakeBackend, demo_tables, markov_logits
from relaxtui.rules import make
from relaxtui.rules.strict import Strict

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)  # whole rows: the dense path
BOUNDED = SamplingParams(temperature=0.8, top_k=8, top_p=0.95)  # top-k/top-p: the support path
GREEDY = SamplingParams(temperature=0.0)
SETTINGS = [("strict", None), ("cactus", 1.0), ("mentored", 0.7), ("ensemble", 0.8), ("typical", 0.09),
            ("rfuzzy", 0.3), ("casc-opt", 0.0)]
DRAWS = 1500  # fresh acceptance draws per recorded round
SIGMAS = 4.5  # per-round tolerance in standard errors of the Monte Carlo mean (the pooled check uses 4)


class Capturing(FakeBackend):
    """The fake verifier, keeping each verify batch's tokens and rows (what the acceptance step read)."""

    def __init__(self, table: np.ndarray, **kwargs) -> None:
        super().__init__(markov_logits(table), table.shape[1], **kwargs)
        self.verified: list[tuple[list[int], object]] = []

    def decode_rows(self, seqs, blocks, *, last=False):
        rows = super().decode_rows(seqs, blocks, last=last)
        self.verified.append((list(blocks[0]), rows[0]))
        return rows


class CapturingDrafter(ModelDrafter):
    """The model drafter, keeping every draft it handed the loop."""

    def draft(self, requests):
        drafts = super().draft(requests)
        self.handed = [*getattr(self, "handed", []), *drafts]
        return drafts


def recorded(sampling: SamplingParams, *, seed: int = 3, draft_max: int = 4, max_tokens: int = 40, drafter=None,
             verifier_table: np.ndarray | None = None, prompt=(0,)):
    """A strict run on the demo pair with its rounds recorded; (finished, verify batches, drafts handed)."""
    target, draft = demo_tables()
    table = target if verifier_table is None else verifier_table
    verifier = Capturing(table)
    drafter = drafter or CapturingDrafter(FakeBackend(markov_logits(draft), draft.shape[1]), table.shape[1])
    config = GenerationConfig(draft_max=draft_max, max_tokens=max_tokens, sampling=sampling, seed=seed,
                              record_rows=True)
    finished = list(generate(verifier, list(prompt), config, drafter=drafter))[-1]
    assert isinstance(finished, Finished) and len(finished.round_rows) == finished.metrics.rounds
    assert len(verifier.verified) == finished.metrics.rounds  # one verify batch per round
    for rows, (block, _) in zip(finished.round_rows, verifier.verified, strict=True):
        assert list(rows.tokens) == block[1:]  # the recorded drafts are what was verified
    return finished, verifier.verified, [d for d in getattr(drafter, "handed", []) if d.tokens]


def moments(chances: np.ndarray) -> tuple[float, float]:
    """Mean and variance of the accepted count: P(A >= i) = Π_{j<=i} a_j, E[A²] = Σ (2i − 1) P(A >= i)."""
    reach = np.cumprod(chances)
    mean = float(reach.sum())
    return mean, float(((2 * np.arange(1, len(reach) + 1) - 1) * reach).sum()) - mean**2


def monte_carlo(rule, draft: Draft, rows, sampling: SamplingParams, rng: np.random.Generator) -> float:
    """The mean accepted count of the rule's real acceptance step on this draft and these rows, DRAWS times."""
    acceptance = Acceptance(rule, sampling)
    total = 0
    for _ in range(DRAWS):
        total += sum(e.verdict is Verdict.ACCEPTED for e in accept_draft(draft, rows, acceptance, rng))
    return total / DRAWS


def check_against_monte_carlo(finished: Finished, verified, drafts, sampling: SamplingParams) -> int:
    """Every setting's replayed E[accepted] per round within SIGMAS standard errors of the Monte Carlo mean, and
    pooled over the rounds within 4; returns the rounds compared."""
    rng = np.random.default_rng(2024)
    drafted = [(r, rows) for r, (_, rows) in zip(finished.round_rows, verified, strict=True) if r.tokens]
    assert len(drafted) == len(drafts) >= 8
    run = RecordedRun(finished.round_rows, sampling, 4)
    for name, knob in SETTINGS:
        rule = make(name, knob, temperature=sampling.temperature)
        expected_total = observed_total = variance_total = 0.0
        for (rows, verifier_rows), draft in zip(drafted, drafts, strict=True):
            assert list(draft.tokens) == list(rows.tokens)
            mean, variance = moments(acceptance_chances(rule, rows, sampling))
            observed = monte_carlo(rule, draft, verifier_rows, sampling, rng)
            tolerance = SIGMAS * math.sqrt(variance / DRAWS) + 1e-9
            assert abs(observed - mean) <= tolerance, (name, rows.index, observed, mean, tolerance)
            expected_total, observed_total, variance_total = (expected_total + mean, observed_total + observed,
                                                              variance_total + variance)
        assert abs(observed_total - expected_total) <= 4 * math.sqrt(variance_total / DRAWS) + 1e-9, name
        assert replay([run], rule).expected_accepted == pytest.approx(expected_total)
    return len(drafted)


@pytest.mark.parametrize("sampling", [PLAIN, BOUNDED], ids=["whole-rows", "support"])
def test_replayed_length_is_the_monte_carlo_mean_of_real_rounds_on_the_same_drafts(sampling):
    """Seven settings (strict, cactus, mentored, ensemble, typical and the whole-row readers rfuzzy and casc-opt),
    each round's drafts judged DRAWS times by ``accept_draft`` with fresh uniforms on the verifier's real rows."""
    finished, verified, drafts = recorded(sampling, max_tokens=28)
    assert check_against_monte_carlo(finished, verified, drafts, sampling) >= 8


def test_the_monte_carlo_check_would_catch_a_replay_that_ignores_the_rule():
    """Guard: strict's chances in place of mentored's miss the Monte Carlo mean by far more than the tolerance."""
    finished, verified, drafts = recorded(PLAIN)
    rows, (_, verifier_rows) = next((r, v) for r, v in zip(finished.round_rows, verified, strict=True) if r.tokens)
    mentored = make("mentored", 0.95)
    observed = monte_carlo(mentored, drafts[0], verifier_rows, PLAIN, np.random.default_rng(1))
    wrong, variance = moments(acceptance_chances(Strict(), rows, PLAIN))
    right, _ = moments(acceptance_chances(mentored, rows, PLAIN))
    assert abs(observed - right) < abs(observed - wrong) and abs(observed - wrong) > 8 * math.sqrt(variance / DRAWS)


def test_strict_replayed_on_its_own_run_matches_what_it_accepted_on_average():
    """Strict's replay is its expectation on the drafts it made: over many seeds, the realised accepted counts
    sum to it within 4 standard errors (each round's count given its drafts has the replay's law, so the deviations
    are martingale differences whose variances add) — the sampling luck the replay removes."""
    expected = realised = variance = 0.0
    for seed in range(30):
        finished, _, _ = recorded(BOUNDED, seed=seed, max_tokens=24)
        for rows in finished.round_rows:
            mean, spread = moments(acceptance_chances(Strict(), rows, BOUNDED))
            expected, variance = expected + mean, variance + spread
        assert replay([RecordedRun(finished.round_rows, BOUNDED, 4)], Strict()).expected_accepted == pytest.approx(
            sum(moments(acceptance_chances(Strict(), r, BOUNDED))[0] for r in finished.round_rows))
        realised += finished.metrics.accepted
    assert variance > 10 and abs(realised - expected) <= 4 * math.sqrt(variance)


# -- greedy, one-hot drafts, what cannot be replayed ------------------------------------------------------------------
def test_at_greedy_every_rule_replays_as_strict_and_as_the_run_itself():
    finished, _, _ = recorded(GREEDY, max_tokens=48)
    run = RecordedRun(finished.round_rows, GREEDY, 4)
    strict = replay([run], Strict())
    assert strict.greedy and strict.expected_accepted == finished.metrics.accepted  # argmax matching is certain
    assert strict.rounds == realised_rounds([run])
    for name, knob in [("cactus", 10.0), ("mentored", 0.95), ("ensemble", 0.0), ("typical", 0.09),
                       ("casc-tok", 0.8)]:  # casc-tok reads logits, but greedy matches argmaxes whatever the rule
        relaxed = replay([run], make(name, knob, temperature=0.0))
        assert relaxed.rounds == strict.rounds and relaxed.greedy, name


class KeepsAtGreedy(Strict):
    """A rule declaring that it keeps its relaxation at temperature 0 (``Rule.greedy_top``, as topk-delta does)."""

    name = "keeps-at-greedy"

    def greedy_top(self) -> int:
        return 3


class LooksAhead(Strict):
    """A rule declaring a look-ahead (``Rule.lookahead``, as FLy does): a draft kept by the drafts after it."""

    name = "looks-ahead"
    lookahead = True


def test_rules_that_declare_other_greedy_or_look_ahead_behaviour_are_not_replayed_as_argmax_matching():
    greedy, _, _ = recorded(GREEDY, max_tokens=24)
    sampled, _, _ = recorded(BOUNDED, max_tokens=24)
    at_greedy, when_sampling = RecordedRun(greedy.round_rows, GREEDY, 4), RecordedRun(sampled.round_rows, BOUNDED, 4)
    assert "temperature 0" in (replay([at_greedy], KeepsAtGreedy()).why_not or "")
    assert replay([when_sampling], KeepsAtGreedy()).replayable  # sampling: its test is strict's here
    for run in (at_greedy, when_sampling):
        assert "look-ahead" in (replay([run], LooksAhead()).why_not or "")


def test_rules_that_read_raw_logits_are_not_replayable_and_say_so():
    finished, _, _ = recorded(BOUNDED)
    run = RecordedRun(finished.round_rows, BOUNDED, 4)
    for name, knob in [("scd", 0.5), ("casc-tok", 0.35)]:
        found = replay([run], make(name, knob, temperature=0.8))
        assert not found.replayable and found.speedup(MACHINE) is None
        assert "raw logits" in (found.why_not or "")
        verdict = screen(found.speedup(MACHINE), 1.2, why_not=found.why_not)
        assert verdict.pays and "runs unscreened" in verdict.reason  # the race runs it unscreened


def test_whole_row_rules_on_truncated_rows_are_not_replayable_but_pointwise_ones_are_exact():
    """A 100-token vocabulary with no top-k: rows keep 32 entries. rfuzzy reads whole rows (refused); mentored reads
    p(x) and q(x), kept exactly, so its replay still matches the Monte Carlo mean."""
    target = np.random.default_rng(5).normal(scale=1.0, size=(100, 100))
    draft = target + np.random.default_rng(6).normal(scale=0.5, size=target.shape)
    drafter = CapturingDrafter(FakeBackend(markov_logits(draft), 100), 100)
    finished, verified, drafts = recorded(PLAIN, verifier_table=target, drafter=drafter, max_tokens=24)
    assert max(float(r.p.rest.max(initial=0)) for r in finished.round_rows) > 0.01  # truncated
    run = RecordedRun(finished.round_rows, PLAIN, 4)
    assert "likeliest entries" in (replay([run], make("rfuzzy", 0.3)).why_not or "")
    mentored, rng = make("mentored", 0.7), np.random.default_rng(9)
    pairs = [(r, v) for r, (_, v) in zip(finished.round_rows, verified, strict=True) if r.tokens]
    for (rows, verifier_rows), handed in zip(pairs, drafts, strict=True):
        mean, variance = moments(acceptance_chances(mentored, rows, PLAIN))
        observed = monte_carlo(mentored, handed, verifier_rows, PLAIN, rng)
        assert abs(observed - mean) <= SIGMAS * math.sqrt(variance / DRAWS) + 1e-9


def test_one_hot_drafts_replay_as_the_rules_treat_them():
    """An n-gram drafter on a repetitive prompt: q is one-hot on each draft. Replayed lengths match the Monte Carlo
    mean of the real acceptance step with that one-hot q, and each position's chance is the table's in
    docs/method.md#every-rule-with-a-one-hot-q; casc-opt, refused with such drafts, is not replayable."""
    table = np.full((8, 8), -1.0)
    for t in range(8):
        table[t, (t + 1) % 8] = 1.5  # a cycle the prompt repeats, which the verifier finds likely, not certain
    sampling = SamplingParams(temperature=0.8, top_k=4, top_p=1.0)
    finished, verified, _ = recorded(sampling, drafter=NgramDrafter(), verifier_table=table, max_tokens=40,
                                     prompt=[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3])
    run = RecordedRun(finished.round_rows, sampling, 4)
    drafted = [(r, rows) for r, (_, rows) in zip(finished.round_rows, verified, strict=True) if r.tokens]
    assert len(drafted) >= 5 and not any(r.has_distribution for r, _ in drafted)
    rng = np.random.default_rng(11)
    for name, knob in [("strict", None), ("mentored", 0.7), ("cactus", 1.0), ("ensemble", 0.8), ("typical", 0.09)]:
        rule = make(name, knob, temperature=0.8)
        for rows, verifier_rows in drafted:
            chances = acceptance_chances(rule, rows, sampling)
            p_x = rows.p.at_x
            if name == "strict":
                assert np.allclose(chances, p_x)  # min(1, p(x) / 1)
            elif name == "mentored":
                assert np.allclose(chances, np.minimum(1.0, p_x / 0.3))
            elif name == "ensemble":
                assert np.allclose(chances, 0.8 * p_x + 0.2)
            draft = Draft(list(rows.tokens), None, None, q=tuple(one_hot(x) for x in rows.tokens))
            mean, variance = moments(chances)
            observed = monte_carlo(rule, draft, verifier_rows, sampling, rng)
            assert abs(observed - mean) <= SIGMAS * math.sqrt(variance / DRAWS) + 1e-9, (name, rows.index)
    assert "distribution" in (replay([run], make("casc-opt", 0.0, temperature=0.8)).why_not or "")


# -- the price ------------------------------------------------------------------------------------------------------
MACHINE = CostProfile("unit", "", "", "", 10.0, 2.0, {1: 10.0, 2: 14.0, 3: 17.0, 4: 20.0, 5: 23.0}, draft_round_ms=1.0,
                      resync_ms=3.0, emit_ms=0.5)


def hand_rows(tokens, p_x, q_x, n_accepted=0) -> RoundRows:
    """A round whose rows hold only the drafted tokens' probabilities (enough for the pointwise rules)."""
    p = sparse_rows([Candidates([x], [px]) for x, px in zip(tokens, p_x, strict=True)], tokens)
    q = sparse_rows([Candidates([x], [qx]) for x, qx in zip(tokens, q_x, strict=True)], tokens)
    return RoundRows(0, tuple(tokens), n_accepted, p, q)


def test_the_replayed_price_is_the_hand_computed_one():
    """Two rounds of 3 drafts and a verifier step, strict and mentored(0.5), the run ending on an end token.

    strict:   round 1 a = (0.5, 0.8, 1.0)  -> E = 0.5 + 0.4 + 0.4 = 1.3, P(all) = 0.4
              round 2 a = (0.25, 1, 1)     -> E = 0.25 · 3 = 0.75,       P(all) = 0.25
    mentored: a = min(1, p(x) / (0.5 q(x))) -> round 1 (1, 1, 1): E = 3, P = 1; round 2 (0.5, 1, 1): E = 1.5, P = 0.5
    tokens = Σ (E + 1) over 3 rounds, one of them the end token (output = tokens − 1)."""
    run = RecordedRun((hand_rows([1, 2, 3], [0.25, 0.4, 0.3], [0.5, 0.5, 0.3]),
                       hand_rows([4, 5, 6], [0.2, 0.6, 0.9], [0.8, 0.5, 0.1]),
                       hand_rows([], [], [])), PLAIN, 3, end_token=True)
    for rule, accepted, full in [(Strict(), 1.3 + 0.75, 0.4 + 0.25), (make("mentored", 0.5), 3 + 1.5, 1 + 0.5)]:
        found = replay([run], rule)
        tokens = accepted + 3
        assert found.rounds == Rounds({3: 2.0, 0: 1.0}, tokens - 1, full, 0.0, 1.0)
        cost = 2 * (20.0 + 3 * 2.0 + 1.0) + 10.0 + full * 3.0 + (tokens - 1) * 0.5  # round(3) = t_V(4) + 3 t_D + 1
        alone = tokens * 10.0 + (tokens - 1) * 0.5  # one step per token, the end token's too
        assert priced_ms(MACHINE, found.rounds) == pytest.approx(cost)
        assert found.speedup(MACHINE) == pytest.approx(alone / cost)
        assert found.mean_accepted_length == pytest.approx(1 + accepted / 3)
    cut = replay([run], make("mentored", 0.5), n=2)  # each round's first two drafts: (1, 1) and (0.5, 1)
    assert cut.rounds == Rounds({2: 2.0, 0: 1.0}, 2 + 1 + 3 - 1, 1.5, 0.0, 1.0)
    assert "cannot replay N=4" in (replay([run], Strict(), n=4).why_not or "")
    relaxed_bonus = replay([run], make("mentored", 0.5), bonus_steps=1)
    assert relaxed_bonus.rounds is not None and relaxed_bonus.rounds.extra_draft_steps == pytest.approx(1.5)


def test_the_run_itself_priced_from_its_rows_is_its_priced_speedup():
    """realised_rounds: each round's own accepted count, priced as the run's metrics are."""
    finished, _, _ = recorded(BOUNDED, max_tokens=30)
    run = RecordedRun(finished.round_rows, BOUNDED, 4, end_token=finished.metrics.finish_reason == "eog")
    assert priced_speedup(MACHINE, realised_rounds([run])) == pytest.approx(
        priced_speedup(MACHINE, rounds_of_metrics([finished.metrics])))


def test_chain_is_the_sum_of_running_products():
    assert chain(np.array([0.5, 0.5, 1.0])) == (pytest.approx(0.5 + 0.25 + 0.25), pytest.approx(0.25))
    assert chain(np.zeros(0)) == (0.0, 0.0)


# -- the screen -----------------------------------------------------------------------------------------------------
def test_the_screen_needs_min_gain_over_the_best_strict_n_and_over_the_verifier_alone():
    assert MIN_GAIN == 1.02
    assert screen(1.25, 1.2).pays and screen(1.224, 1.2).pays  # 1.2 × 1.02 = 1.224
    below = screen(1.22, 1.2)
    assert not below.pays and below.reason.startswith("does not pay here") and below.bar == pytest.approx(1.224)
    assert not screen(0.99, 0.8).pays  # above strict, below the verifier alone: never "faster"
    assert screen(1.02, 0.8).pays and screen(1.0, 1.2, min_gain=0.8).pays
    with pytest.raises(ValueError):
        screen(1.0, 1.0, min_gain=float("nan"))


def test_replay_settings_screens_each_setting_on_its_own_n():
    """Strict recorded at N=2 and N=4; a setting at N=3 replays N=4's rounds cut to 3."""
    runs = {n: [RecordedRun(recorded(BOUNDED, seed=s, draft_max=n, max_tokens=30)[0].round_rows, BOUNDED, n)
                for s in range(3)] for n in (2, 4)}
    settings = [(make("mentored", 0.95), 4), (make("cactus", 0.1), 2), (make("typical", 0.09), 3),
                (make("scd", 0.5, temperature=0.8), 4), (make("mentored", 0.7), 6)]
    best, lines = replay_settings(runs, settings, MACHINE)
    strict = {n: replay(rs, Strict()).speedup(MACHINE) for n, rs in runs.items()}
    assert best == pytest.approx(max(strict.values()))
    by = {(line.rule.name, line.n): line for line in lines}
    assert by[("mentored", 4)].strict_speedup == pytest.approx(strict[4])
    assert by[("mentored", 4)].vs_strict == pytest.approx(by[("mentored", 4)].speedup / strict[4])
    assert by[("typical", 3)].replay.n == 3 and by[("typical", 3)].replay.replayable
    assert by[("scd", 4)].verdict.pays and by[("scd", 4)].speedup is None  # not replayable: runs unscreened
    assert "no strict run at N >= 6" in (by[("mentored", 6)].replay.why_not or "")
    for line in lines:
        if line.speedup is not None:
            assert line.verdict.pays == (line.speedup >= MIN_GAIN * max(best, 1.0))


def test_a_setting_scoped_to_thinking_is_not_replayed():
    """--relax-scope thinking/answer: the recorded strict rounds do not say which side of a thinking tag each was on,
    so a scoped relaxed setting runs unscreened; strict, the same on either side, still replays."""
    runs = {2: [RecordedRun(recorded(BOUNDED, seed=0, draft_max=2, max_tokens=30)[0].round_rows, BOUNDED, 2)]}
    _, lines = replay_settings(runs, [(make("mentored", 0.7), 2), (Strict(), 2)], MACHINE, scope="thinking")
    scoped, strict = lines
    assert scoped.speedup is None and scoped.verdict.pays and "--relax-scope thinking" in (scoped.replay.why_not or "")
    assert strict.speedup is not None
    _, unscoped = replay_settings(runs, [(make("mentored", 0.7), 2)], MACHINE)
    assert unscoped[0].speedup is not None
