"""Every acceptance rule: strict limits, properties on random distributions, Monte Carlo through the loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, softmax
from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, RULES, make
from relaxtui.rules.base import residual
from relaxtui.rules.cactus import boosted_mass
from relaxtui.rules.strict import Strict
from tests.support.markov import VOCAB, fake, first_token_counts, random_table
from tests.support.rule_checks import exact_first_token_law

STRICT_SETTINGS = {
    "strict": None, "mentored": 0.0, "cactus": 0.0, "ensemble": 1.0, "rfuzzy": -1.0,
    "casc-opt": -np.inf, "casc-tok": -np.inf, "scd": 0.0,
    "fly": 2.0, "topk-delta": 0.0, "topk-ratio": 1.0, "mars": 1.0,
}
# no setting is p's targets: typical (a deterministic test), threshold (target-only: exact at 1 and 1, but it reads
# p(x) alone, so its π_rej is not p; tests/rules/test_new_rules.py checks that it emits p)
NO_STRICT_TARGETS = {"typical", "threshold"}


def dist(seed: int, vocab: int = 12, sparsity: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A random distribution and the logits it came from; ``sparsity`` zeroes a share of entries."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=vocab)
    probs = softmax(logits)
    if sparsity:
        probs[rng.random(vocab) < sparsity] = 0.0
        probs[int(np.argmax(logits))] = max(probs.max(), 1e-3)
        probs /= probs.sum()
    return probs, logits


# -- strict limits --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,knob", STRICT_SETTINGS.items())
@pytest.mark.parametrize("seed", range(5))
def test_every_rule_is_p_at_its_strict_setting(name, knob, seed):
    p, logits_p = dist(seed, sparsity=0.3)
    q, logits_q = dist(seed + 100)
    rule = make(name, knob)
    for x in range(len(p)):
        pi_rej, pi_res = rule.targets(p, q, x, logits_p=logits_p, logits_q=logits_q)
        assert np.allclose(pi_rej, p), (name, x)
        if rule.subtract_draft:
            assert np.allclose(pi_res, p), (name, x)
        else:  # (mars carries strict's residual in π_res, drawn as it is)
            assert np.allclose(pi_res, residual(p, q) / residual(p, q).sum()), (name, x)


@pytest.mark.parametrize("name,knob", [(n, k) for n, ks in PAPER_GRID.items() for k in ks])
@pytest.mark.parametrize("seed", range(6))
def test_a_pointwise_rule_decides_from_p_x_and_q_x_as_from_the_arrays(name, knob, seed):
    """A rule that declares its test reads p(x) and q(x) alone (``pointwise``) gives exactly ``decide``'s π_rej(x),
    acceptance probability and statistic, for drafts inside and outside either support: the support path tests an
    accepted draft with it and builds arrays only for a rejection."""
    rule = make(name, knob)
    p, _ = dist(seed, sparsity=0.4)
    q, _ = dist(seed + 100, sparsity=0.4)
    for x in range(len(p)):
        point = rule.pointwise(float(p[x]), float(q[x]))
        if point is None:
            assert name in {"typical", "rfuzzy", "casc-opt", "casc-tok", "scd",  # they read all of p or q,
                            "fly", "topk-delta", "topk-ratio", "mars"}  # or its top entries, or the raw logits
            return
        decision = rule.decide(p, q, x)
        assert point[0] == float(decision.pi_rej[x])
        chance = 0.0 if q[x] == 0 else min(1.0, point[0] / float(q[x]))
        assert (("accept_prob", chance), *point[1]) == decision.statistic and chance == decision.accept_prob


def test_a_rule_refining_evaluate_without_its_own_pointwise_reads_whole_supports():
    """A subclass that changes the test (its own ``evaluate``) must not inherit the pointwise answer of the rule it
    refines: that would accept by the old test on the support path while the dense path uses the new one."""
    class HalfStrict(Strict):
        def evaluate(self, p, q, x, *, logits_p=None, logits_q=None):
            return p / 2, p, {}

    class DecidesItself(Strict):
        def decide(self, p, q, x, *, logits_p=None, logits_q=None):
            return super().decide(p / 2, q, x)

    class StrictAgain(Strict):
        pass

    assert HalfStrict().pointwise(0.5, 0.5) is None and DecidesItself().pointwise(0.5, 0.5) is None
    assert StrictAgain().pointwise(0.5, 0.25) == (0.5, ())


def test_every_registered_rule_has_a_strict_setting_or_is_typical():
    assert set(RULES) == set(STRICT_SETTINGS) | NO_STRICT_TARGETS


# -- properties (hypothesis) ----------------------------------------------------------------------------------------
RELAXED = [(name, knob) for name, knobs in PAPER_GRID.items() for knob in knobs]
distribution_seeds = st.integers(min_value=0, max_value=2**31)


@settings(max_examples=60, deadline=None)
@given(seed=distribution_seeds, which=st.integers(0, len(RELAXED) - 1), x=st.integers(0, 11),
       sparsity=st.sampled_from([0.0, 0.5]))
def test_targets_are_distributions(seed, which, x, sparsity):
    name, knob = RELAXED[which]
    p, logits_p = dist(seed, sparsity=sparsity)
    q, logits_q = dist(seed + 1)
    rule = make(name, knob)
    decision = rule.decide(p, q, x, logits_p=logits_p, logits_q=logits_q)
    assert np.all(decision.pi_res >= 0) and decision.pi_res.sum() == pytest.approx(1.0)
    # mentored's π_rej = min(p/(1-α), 1), and the rules since the paper that keep a draft outright (π_rej ≥ q there)
    # or judge it target-only (π_rej = a·q), only scale the test; they are not distributions
    if name not in {"mentored", "topk-delta", "topk-ratio", "threshold", "mars"}:
        assert np.all(decision.pi_rej >= 0) and decision.pi_rej.sum() == pytest.approx(1.0)
    assert 0.0 <= decision.accept_prob <= 1.0
    assert np.all(residual(decision.pi_res, q) >= 0) and residual(decision.pi_res, q).sum() > 0


@settings(max_examples=100, deadline=None)
@given(seed=distribution_seeds, x=st.integers(0, 11), delta=st.floats(0.0, 20.0))
def test_cactus_boost_and_its_divergence_bound(seed, x, delta):
    p, _ = dist(seed)
    q, _ = dist(seed + 1)
    decision = make("cactus", delta).decide(p, q, x)
    gamma = dict(decision.statistic)["gamma"]
    p_x = float(p[x])
    assert gamma >= p_x - 1e-12 and gamma == pytest.approx(boosted_mass(p_x, delta))
    # H_x only moves mass between x and the rest, so KL(H‖p) is the Bernoulli KL(γ‖p(x)).
    target = decision.pi_res
    support = target > 0
    kl = float(np.sum(target[support] * np.log(target[support] / p[support])))
    second_order = (gamma - p_x) ** 2 / (2 * p_x * (1 - p_x))
    assert second_order <= delta + 1e-9  # equality unless γ is clipped at 1
    assert kl <= np.log1p(2 * second_order) + 1e-9  # KL ≤ log(1 + χ²), χ² = 2 × the second-order term


@settings(max_examples=50, deadline=None)
@given(seed=distribution_seeds, x=st.integers(0, 11))
def test_casc_tok_at_alpha_one_is_q_and_ensemble_at_zero_always_accepts(seed, x):
    p, logits_p = dist(seed)
    q, _ = dist(seed + 1)
    pi_rej, pi_res = make("casc-tok", 1.0).targets(p, q, x, logits_p=logits_p)
    assert np.allclose(pi_rej, q) and np.allclose(pi_res, q)
    assert make("ensemble", 0.0).decide(p, q, x).accept_prob == 1.0


def test_typical_accepts_deterministically_by_threshold():
    rule = make("typical")
    assert rule.knob == 0.09
    peaked = np.array([0.9, 0.05, 0.05])
    assert rule.accepts(peaked, 0) and not rule.accepts(peaked, 1)
    flat = np.full(10, 0.1)  # H = ln 10, threshold = min(0.09, 0.3/10) = 0.03 < 0.1
    assert all(rule.accepts(flat, x) for x in range(10))
    assert rule.decide(peaked, np.full(3, 1 / 3), 1).accept_prob == 0.0


# -- Monte Carlo through the loop ---------------------------------------------------------------------------------
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)


@pytest.mark.parametrize("name,knob", [(n, k) for n, ks in PAPER_GRID.items() for k in ks[:2]
                                       if not RULES[n].lookahead])  # (fly's law reads the drafts after: test_new_rules)
def test_emitted_token_law_through_the_loop(name, knob):
    """2,000 seeded runs of the real loop on Markov fakes; first-token frequencies within 5 standard errors
    (+0.003) of the exact law. For x-independent rules with π_rej = π_res that law is π itself."""
    target_table, draft_table = random_table(1), random_table(1) + random_table(2, scale=1.0)
    rule = make(name, knob)
    p, q = softmax(target_table[0]), softmax(draft_table[0])
    law = exact_first_token_law(rule, p, q, target_table[0], draft_table[0])
    if name in {"strict", "ensemble", "rfuzzy", "casc-opt", "casc-tok", "scd"}:
        pi, _ = rule.targets(p, q, 0, logits_p=target_table[0], logits_q=draft_table[0])
        assert np.allclose(law, pi)
    runs = 2000
    verifier, drafter = fake(target_table), ModelDrafter(fake(draft_table), VOCAB)
    counts = first_token_counts(verifier, drafter, rule, PLAIN, VOCAB, runs)
    tolerance = 5 * np.sqrt(law * (1 - law) / runs) + 0.003
    assert np.all(np.abs(counts / runs - law) <= tolerance), (counts / runs, law)


def test_scd_bonus_uses_one_extra_drafter_step():
    table = random_table(3)
    verifier, draft_model = fake(table), fake(table)  # q == p: every draft accepted, so every round has a bonus
    drafter = ModelDrafter(draft_model, VOCAB)
    events = list(generate(verifier, [0], GenerationConfig(draft_max=2, max_tokens=3, sampling=PLAIN, seed=1),
                           drafter=drafter, rule=make("scd", 0.5)))
    bonus = [e for e in events if isinstance(e, TokenEvent)][-1]
    assert bonus.verdict.value == "bonus" and bonus.q_x is not None  # the drafter's N+1 distribution was used
    assert draft_model.decode_calls == [1, 1, 1]  # x1 context, x2 step, then the extra step for the bonus


# -- greedy and bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,knob", [(n, k[-1]) for n, k in PAPER_GRID.items() if n not in {"rfuzzy", "scd"}
                                       and not make(n, k[-1]).greedy_top()])  # (fly, topk-*: test_new_rules)
def test_greedy_falls_back_to_argmax_matching(name, knob):
    target_table, draft_table = random_table(4), random_table(5)
    greedy = GenerationConfig(draft_max=3, max_tokens=12, sampling=SamplingParams(temperature=0))

    def tokens(rule):
        events = generate(fake(target_table), [0], greedy, drafter=ModelDrafter(fake(draft_table), VOCAB), rule=rule)
        return [e.token_id for e in events if isinstance(e, TokenEvent)]

    baseline = [e.token_id for e in generate(fake(target_table), [0], GenerationConfig(draft_max=0, max_tokens=12,
                sampling=SamplingParams(temperature=0))) if isinstance(e, TokenEvent)]
    assert tokens(make(name, knob)) == baseline


@pytest.mark.parametrize("name,knob", [("rfuzzy", 0.2), ("scd", 0.5)])
def test_rules_that_cannot_run_greedy(name, knob):
    stream = generate(fake(random_table(1)), [0], GenerationConfig(sampling=SamplingParams(temperature=0)),
                      rule=make(name, knob))
    with pytest.raises(UserError, match="cannot run greedy"):
        next(stream)


@pytest.mark.parametrize(
    "name,knob,message",
    [
        ("nope", None, "unknown rule 'nope'; known rules: strict, mentored, cactus"),
        ("mentored", 1.0, "out of range for 'mentored': alpha in [0, 1); bigger = more relaxed"),
        ("cactus", -0.1, "delta >= 0; bigger = more relaxed"),
        ("ensemble", 1.5, "smaller = more relaxed"),
        ("casc-tok", 2.0, "<= 1"),
        ("scd", -1.0, "usually lower acceptance"),
        ("typical", 0.0, "in (0, 1)"),
        ("mentored", None, "needs a knob"),
        ("strict", 0.5, "takes no knob"),
        ("cactus", float("nan"), "out of range"),
    ],
)
def test_bad_rule_input(name, knob, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        make(name, knob)


def test_finished_event_closes_every_rule_stream():
    for name, knobs in PAPER_GRID.items():
        events = list(generate(fake(random_table(1)), [0], GenerationConfig(max_tokens=4, sampling=PLAIN),
                               drafter=ModelDrafter(fake(random_table(2)), VOCAB), rule=make(name, knobs[0])))
        assert isinstance(events[-1], Finished) and events[-1].metrics.output_tokens == 4


# -- bonus policy -------------------------------------------------------------------------------------------------
def test_bonus_target_policy_skips_the_extra_drafter_step():
    table = random_table(3)
    draft_model = fake(table)
    events = list(generate(fake(table), [0], GenerationConfig(draft_max=2, max_tokens=3, sampling=PLAIN, seed=1,
                                                             bonus="target"),
                           drafter=ModelDrafter(draft_model, VOCAB), rule=make("scd", 0.5)))
    bonus = [e for e in events if isinstance(e, TokenEvent)][-1]
    assert bonus.verdict.value == "bonus" and bonus.q_x is None
    assert draft_model.decode_calls == [1, 1]


def test_relaxed_bonus_samples_the_rule_target_at_n_plus_one():
    """ensemble w=0 accepts every draft and its relaxed bonus is q itself, so with N=1 the two emitted tokens
    follow the drafter's own two-step law. 2,000 runs; 5 standard errors + 0.003 per cell."""
    target_table, draft_table = random_table(1), random_table(6)
    drafter = ModelDrafter(fake(draft_table), VOCAB)
    verifier = fake(target_table)
    runs, counts = 2000, np.zeros(VOCAB)
    for seed in range(runs):
        events = generate(verifier, [0], GenerationConfig(draft_max=1, max_tokens=2, sampling=PLAIN, seed=seed,
                                                          bonus="relaxed"), drafter=drafter, rule=make("ensemble", 0))
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        assert [t.verdict.value for t in tokens] == ["accepted", "bonus"]
        counts[tokens[1].token_id] += 1
    first = softmax(draft_table[0])
    law = sum(first[a] * softmax(draft_table[a]) for a in range(VOCAB))
    assert np.all(np.abs(counts / runs - law) <= 5 * np.sqrt(law * (1 - law) / runs) + 0.003)


def test_unknown_bonus_policy():
    with pytest.raises(UserError, match="bonus must be one of auto, target, relaxed"):
        GenerationConfig(bonus="sometimes")


@pytest.mark.parametrize("name,knob", [(n, k) for n, k in STRICT_SETTINGS.items() if n != "strict"])
def test_loop_at_a_strict_setting_reproduces_strict(name, knob):
    """Same seeds, same models: a rule at its strict setting emits exactly strict's tokens and verdicts."""
    target_table, draft_table = random_table(1), random_table(1) + random_table(2, scale=1.0)

    def run(rule):
        events = generate(fake(target_table), [0], GenerationConfig(draft_max=3, max_tokens=40, sampling=PLAIN,
                                                                    seed=11), drafter=ModelDrafter(fake(draft_table),
                                                                                                   VOCAB), rule=rule)
        return [(e.token_id, e.verdict) for e in events if isinstance(e, TokenEvent)]

    assert run(make(name, knob)) == run(make("strict"))


@pytest.mark.parametrize("seed", range(3))
def test_js_divergence_fast_paths_agree_with_the_definition(seed):
    from relaxtui.rules.rfuzzy import js_divergence

    rng = np.random.default_rng(seed)
    dense_p, dense_q = softmax(rng.normal(size=5000) * 3), softmax(rng.normal(size=5000) * 3)
    sparse_p, sparse_q = dense_p.copy(), dense_q.copy()
    sparse_p[rng.random(5000) < 0.95] = 0
    sparse_q[rng.random(5000) < 0.95] = 0
    sparse_p, sparse_q = sparse_p / sparse_p.sum(), sparse_q / sparse_q.sum()
    for p, q in ((dense_p, dense_q), (sparse_p, sparse_q)):
        m = (p + q) / 2
        reference = 0.5 * sum(a * np.log(a / b) for a, b in zip(p, m, strict=True) if a > 0) + \
            0.5 * sum(a * np.log(a / b) for a, b in zip(q, m, strict=True) if a > 0)
        assert js_divergence(p, q) == pytest.approx(reference, abs=2e-5)
