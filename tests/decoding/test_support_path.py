"""The support path (issue 21): where top-k/top-p bound p and q, rules run on the union of their supports.

Same numbers as whole rows (``candidates`` vs ``process``; every rule's decision inputs on random logits), the
same tokens from the same generator (both paths, every rule that takes supports), the same law (Monte Carlo
through the loop), whole rows for a rule that declares it needs them, and the same sampled tokens on SmolLM2.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.acceptance import Acceptance, accept_draft, takes_support
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import Candidates, SamplingParams, bounds_support, candidates, process, sample
from relaxtui.engine.api import WholeRow
from relaxtui.rules import PAPER_GRID, make
from relaxtui.rules.base import residual
from tests.support.markov import VOCAB, fake, first_token_counts, random_table
from tests.support.rule_checks import SUPPORT_RULES, Spy, rows
from tests.support.tolerances import TOLERANCE

BOUNDED = [SamplingParams(0.6, 20, 0.95), SamplingParams(1.0, 8, 1.0), SamplingParams(0.8, 0, 0.9),
           SamplingParams(1.3, 50, 0.5)]


@pytest.mark.parametrize("sampling", BOUNDED + [SamplingParams(0.0, 0, 1.0), SamplingParams(0.7, 0, 1.0)])
@pytest.mark.parametrize("seed", range(20))
def test_candidates_are_the_processed_row_on_its_support(sampling, seed):
    logits = rows(seed, 1, 3000)[0]
    found, dense = candidates(logits, sampling), process(logits, sampling)
    assert np.all(np.diff(found.ids) > 0)  # ascending, unique
    assert np.array_equal(found.dense(len(logits)), dense)  # the same numbers, bit for bit
    assert np.count_nonzero(dense) == len(found.ids) and found.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert bounds_support(sampling, len(logits)) == (len(found.ids) < len(logits))
    draws = [np.random.default_rng(seed) for _ in range(2)]  # the same stream for both
    assert found.pick(draws[0].random()) == sample(dense, draws[1])  # one uniform picks the same id on both


@pytest.mark.parametrize("seed", range(10))
def test_candidates_from_plain_numbers_are_the_candidates_from_arrays(seed):
    """A drafter's step hands q as plain lists (no numpy between two decodes): read as arrays they are the arrays,
    and every draw picks what the arrays' draw picks from the same uniform."""
    found = candidates(rows(seed, 1, 3000)[0], SamplingParams(0.9, 40, 0.9))
    plain = Candidates(found.ids.tolist(), found.probs.tolist())
    assert plain.ids.dtype == np.int64 and plain.probs.dtype == np.float64
    assert np.array_equal(plain.ids, found.ids) and np.array_equal(plain.probs, found.probs)
    assert plain.top_prob() == found.top_prob() == found.probs.max() and len(plain) == len(found)
    for uniform in np.random.default_rng(seed).random(50):
        cumulative = np.cumsum(found.probs)  # (sample's arithmetic: running sums, the target on the last one)
        index = int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"))
        assert Candidates(found.ids.tolist(), found.probs.tolist()).index_at(uniform) == found.index_at(uniform) \
            == min(index, len(found) - 1)
        assert plain.pick(uniform) == found.pick(uniform) == int(found.ids[found.index_at(uniform)])


@pytest.mark.parametrize("seed", range(30))
def test_the_temperature_one_log_prob_matches_a_float64_reference(seed):
    logits = rows(seed, 1, 151_936, scale=4.0)[0]
    reference = logits.astype(np.float64)
    lse = reference.max() + np.log(np.exp(reference - reference.max()).sum())
    for token in (int(np.argmax(logits)), int(np.argmin(logits)), seed):
        assert WholeRow(logits).log_prob(token) == pytest.approx(reference[token] - lse, abs=TOLERANCE)


def round_inputs(seed: int, vocab: int, n: int, sampling: SamplingParams):
    """A verify block [N+1, V], a draft of N tokens drawn from q, and q's rows (processed) and logits."""
    target, draft_logits = rows(seed, n + 1, vocab), rows(seed + 10_000, n, vocab)
    # the drafter agrees with the verifier in part, so rounds both accept and reject
    draft_logits = 0.6 * target[:n] + 0.4 * draft_logits
    q = np.stack([process(row, sampling) for row in draft_logits])
    rng = np.random.default_rng(seed)
    tokens = [sample(row, rng) for row in q]
    return tokens, q, draft_logits, target


@pytest.mark.parametrize("name,knob", SUPPORT_RULES)
def test_both_paths_emit_the_same_tokens_and_numbers_for_every_rule(name, knob):
    """200 rounds per rule over four bounded samplings: the same tokens, verdicts and positions from the same
    generator, and every number within 1e-6 — while the support path hands the rule a few dozen ids."""
    verdicts = set()
    for seed in range(200):
        sampling = BOUNDED[seed % len(BOUNDED)]
        rule = make(name, knob, temperature=sampling.temperature)
        tokens, q, q_logits, target = round_inputs(seed, 2000, 1 + seed % 4, sampling)
        assert takes_support(rule, sampling, 2000)
        draft = Draft(tokens, q, q_logits)
        support = accept_draft(draft, target, Acceptance(rule, sampling, show=True), np.random.default_rng(seed))
        whole = accept_draft(draft, target, Acceptance(rule, sampling, dense=True, show=True),
                             np.random.default_rng(seed))
        assert [(e.token_id, e.verdict, e.draft_position, e.rejected_token) for e in support] == \
               [(e.token_id, e.verdict, e.draft_position, e.rejected_token) for e in whole]
        for a, b in zip(support, whole, strict=True):
            verdicts.add(a.verdict)
            assert a.shown.ids is not None and len(a.shown.ids) < 2000 and b.shown.ids is None
            for field in ("p_x", "q_x", "pi_x", "accept_prob", "logp_x"):
                x, y = getattr(a, field), getattr(b, field)
                assert (x is None) == (y is None) and (x is None or abs(x - y) <= TOLERANCE), (field, x, y)
            assert [k for k, _ in a.statistic] == [k for k, _ in b.statistic]
            assert np.allclose([v for _, v in a.statistic], [v for _, v in b.statistic], rtol=0, atol=TOLERANCE)
            dense_p = np.zeros(2000)
            dense_p[a.shown.ids] = a.shown.p
            assert np.allclose(dense_p, b.shown.p, rtol=0, atol=TOLERANCE)  # p on the support is p
    assert len(verdicts) >= 2, verdicts  # both branches ran


@pytest.mark.parametrize("name,knob", SUPPORT_RULES)
def test_every_rules_decision_inputs_agree_on_the_support(name, knob):
    """π_rej and π_res on the union of supports equal the whole-row ones there, and the whole-row ones are 0
    elsewhere (so nothing a rule could read is lost), on random logits."""
    sampling = SamplingParams(0.6, 20, 0.95)
    rule = make(name, knob, temperature=0.6)
    for seed in range(40):
        p_logits, q_logits = rows(seed, 2, 4000)
        p_full, q_full = process(p_logits, sampling), process(0.5 * p_logits + 0.5 * q_logits, sampling)
        ids = np.union1d(np.flatnonzero(p_full), np.flatnonzero(q_full))
        x = int(ids[seed % len(ids)])
        at = int(np.searchsorted(ids, x))
        whole = rule.decide(p_full, q_full, x)
        part = rule.decide(p_full[ids], q_full[ids], at)
        assert abs(whole.accept_prob - part.accept_prob) <= TOLERANCE
        for mine, theirs in ((part.pi_rej, whole.pi_rej), (part.pi_res, whole.pi_res)):
            assert np.allclose(mine, theirs[ids], rtol=0, atol=TOLERANCE)
            outside = np.delete(theirs, ids)
            assert not outside.any()
        assert np.allclose(residual(part.pi_res, part_q := q_full[ids]), residual(whole.pi_res, q_full)[ids],
                           rtol=0, atol=TOLERANCE) and len(part_q) == len(ids)


@pytest.mark.parametrize("needs_logits", [True, False])
@pytest.mark.parametrize("sampling", [SamplingParams(0.6, 20, 0.95), SamplingParams(1.0, 0, 1.0)])
def test_a_rule_that_declares_whole_rows_gets_them(needs_logits, sampling):
    tokens, q, q_logits, target = round_inputs(3, 1000, 3, sampling)
    spy = Spy(needs_logits)
    accept_draft(Draft(tokens, q, q_logits), target, Acceptance(spy, sampling), np.random.default_rng(0))
    assert spy.seen
    whole = needs_logits or not bounds_support(sampling, 1000)
    assert all((length == 1000) == whole and has_logits == whole for length, has_logits in spy.seen), spy.seen


BOUNDED_SMALL = SamplingParams(temperature=1.0, top_k=4, top_p=0.9)  # 4 then fewer of the fakes' 6 tokens


@pytest.mark.parametrize("name,knob", [(n, k) for n, k in SUPPORT_RULES if k == PAPER_GRID[n][0]
                                       and not make(n, k).lookahead])  # (fly's law: tests/rules/test_new_rules.py)
def test_the_emitted_token_law_holds_through_the_support_path(name, knob):
    """2,000 seeded runs of the loop per rule on Markov fakes with a bounded support; first-token frequencies
    within 5 standard errors (+0.003) of the exact law on the processed p and q."""
    target_table, draft_table = random_table(1), random_table(1) + random_table(2, scale=1.0)
    rule = make(name, knob)
    assert takes_support(rule, BOUNDED_SMALL, VOCAB)
    p, q = process(target_table[0], BOUNDED_SMALL), process(draft_table[0], BOUNDED_SMALL)
    law = np.zeros(VOCAB)
    for x in np.flatnonzero(q):
        decision = rule.decide(p, q, int(x))
        fallback = residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res
        law[x] += q[x] * decision.accept_prob
        law += q[x] * (1 - decision.accept_prob) * fallback / fallback.sum()
    runs = 2000
    verifier, drafter = fake(target_table), ModelDrafter(fake(draft_table), VOCAB)
    counts = first_token_counts(verifier, drafter, rule, BOUNDED_SMALL, VOCAB, runs)
    tolerance = 5 * np.sqrt(law * (1 - law) / runs) + 0.003
    assert np.all(np.abs(counts / runs - law) <= tolerance), (counts / runs, law)


@pytest.mark.model
@pytest.mark.parametrize("rule_spec,temperature", [(("strict", None), 0.6), (("cactus", 1.0), 0.6),
                                                   (("mentored", 0.7), 0.6), (("strict", None), 0.0)])
def test_smollm2_gives_the_same_tokens_on_both_paths(test_model_path, rule_spec, temperature):
    """The paper's sampling (T 0.6, top-k 20, top-p 0.95) and greedy, SmolLM2 drafting for itself: candidate rows
    from llama.cpp's backend sampling and whole rows emit the same tokens and verdicts from the same seeds, and —
    with log-probabilities asked for — the same log p(x) at T=1; without, the candidate path reports none."""
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.session import prompt_tokens

    name, knob = rule_spec
    with LlamaModel(test_model_path, n_ctx=512, n_threads=1) as model, \
            LlamaModel(test_model_path, n_ctx=512, n_threads=1) as twin:
        prompt = prompt_tokens(model, "Write a haiku about the sea.")
        outputs, copied = [], []
        for dense, logprobs in ((False, True), (True, False), (False, False)):
            model.reset()
            twin.reset()
            config = GenerationConfig(draft_max=3, max_tokens=40, sampling=SamplingParams(temperature, 20, 0.95),
                                      seed=5, dense_rows=dense, logprobs=logprobs)
            events = list(generate(model, prompt, config, drafter=ModelDrafter(twin, model.n_vocab),
                                   rule=make(name, knob, temperature=temperature or 1.0)))
            assert isinstance(events[-1], Finished)
            outputs.append([(e.token_id, e.verdict, e.logp_x) for e in events if isinstance(e, TokenEvent)])
            copied.append(events[-1].metrics.copied_bytes / events[-1].metrics.rounds)
        assert len(outputs[0]) > 10
        assert [t[:2] for t in outputs[0]] == [t[:2] for t in outputs[1]] == [t[:2] for t in outputs[2]]
        assert max(abs(a[2] - b[2]) for a, b in zip(outputs[0], outputs[1], strict=True)) <= TOLERANCE
        assert all(t[2] is None for t in outputs[2])
        assert copied[0] < 8 * 1024 < 4 * model.n_vocab <= copied[1]  # a few hundred bytes a row, not whole rows


@pytest.mark.parametrize("bonus", ["auto", "target", "relaxed"])
def test_both_paths_agree_with_drafter_supports_a_relaxed_bonus_and_drafts_outside_q(bonus):
    """The cases the first test leaves out: q on its support from the drafter (as ModelDrafter does), the bonus
    policies with an extra drafter step for q at N+1, and drafted tokens q gives no mass (n-gram style one-hot q
    elsewhere, or an arbitrary id): the same tokens, verdicts and numbers on both paths."""
    sampling = SamplingParams(0.8, 16, 0.9)
    for seed in range(60):
        for name, knob in SUPPORT_RULES[seed % len(SUPPORT_RULES)::7]:
            rule = make(name, knob, temperature=0.8)
            tokens, q, q_logits, target = round_inputs(seed, 1500, 1 + seed % 3, sampling)
            if seed % 3 == 0:  # a token q gives no mass: judged (and rejected) like on the dense path
                tokens[0] = int(np.flatnonzero(q[0] == 0)[seed])
            handed = tuple(Candidates(ids, row[ids]) for row in q for ids in [np.flatnonzero(row)]) if seed % 2 else ()
            extra = rows(seed + 20_000, 1, 1500)[0]

            def step(extra: np.ndarray = extra) -> tuple[np.ndarray, np.ndarray]:
                return process(extra, sampling), extra

            draft = Draft(tokens, q, q_logits, q=handed)
            got = [accept_draft(draft, target, Acceptance(rule, sampling, bonus, dense), np.random.default_rng(seed),
                                bonus_draft=step) for dense in (False, True)]
            assert [(e.token_id, e.verdict) for e in got[0]] == [(e.token_id, e.verdict) for e in got[1]]
            for a, b in zip(*got, strict=True):
                for field in ("p_x", "pi_x", "accept_prob", "logp_x"):
                    x, y = getattr(a, field), getattr(b, field)
                    assert (x is None) == (y is None) and (x is None or abs(x - y) <= TOLERANCE), (field, x, y)
