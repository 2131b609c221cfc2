"""No NaN or infinity ever reaches an acceptance decision; padded drafter vocabularies work for every rule."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.acceptance import Acceptance, accept_draft
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, process, sample, softmax
from relaxtui.engine.fake import FakeBackend
from relaxtui.errors import NumericsError
from relaxtui.rules import PAPER_GRID, RULES, Rule, acceptance_probability, make
from relaxtui.rules.rfuzzy import js_divergence
from tests.support.markov import first_token_counts
from tests.support.rule_checks import exact_first_token_law

DENSE = SamplingParams(temperature=0.6, top_k=0, top_p=1.0)
PROCESSED = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
GRID = [(name, knob) for name, knobs in PAPER_GRID.items() for knob in knobs[:2]]


# -- the reported failure: float32 underflow made JS = 0 and "accept" ----------------------------------------------
def test_rfuzzy_dense_js_of_opposite_distributions_is_ln2_not_zero():
    logits = np.random.default_rng(0).normal(size=1000).astype(np.float32) * 20
    p, q = process(logits, DENSE), process(-logits, DENSE)
    assert np.count_nonzero(p.astype(np.float32) == 0) > 0  # the float32 underflow that made 0·log 0 = NaN
    assert js_divergence(p, q) == pytest.approx(np.log(2), abs=1e-9)
    x = int(np.argmax(q))
    decision = make("rfuzzy", 0.3).decide(p, q, x)
    assert decision.accept_prob < 1e-12  # q is far from p: the rule keeps p, and p(x) ~ 0


@pytest.mark.parametrize("seed", range(3))
def test_js_is_exact_in_float64_on_dense_rows(seed):
    rng = np.random.default_rng(seed)
    p, q = softmax(rng.normal(size=3000) * 8), softmax(rng.normal(size=3000) * 8)
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = lambda a: float(np.sum(np.where(a > 0, a * np.log(a / m), 0.0)))  # noqa: E731
    assert js_divergence(p, q) == pytest.approx(0.5 * kl(p) + 0.5 * kl(q), rel=1e-12, abs=1e-15)


# -- guards ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pi_x,q_x", [(np.nan, 0.5), (0.5, np.nan), (np.inf, 0.5), (0.5, np.inf)])
def test_acceptance_probability_refuses_non_finite_inputs(pi_x, q_x):
    pi, q = np.array([pi_x, 0.5]), np.array([q_x, 0.5])
    with pytest.raises(NumericsError, match="non-finite"):
        acceptance_probability(pi, q, 0)


@pytest.mark.parametrize("row", [[np.nan, 1.0], [np.inf, 1.0], [np.inf, np.inf]])
def test_sampling_refuses_non_finite_mass(row):
    with pytest.raises(NumericsError, match="non-finite"):
        sample(np.array(row), np.random.default_rng(0))


class NaNRule(Rule):
    """A broken rule whose targets are NaN: it must never be read as "accept"."""

    name = "nan"

    def evaluate(self, p, q, x, *, logits_p=None, logits_q=None):  # type: ignore[no-untyped-def]
        broken = np.full_like(p, np.nan)
        return broken, broken, {}


def test_a_rule_returning_nan_raises_instead_of_accepting():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 8)).astype(np.float32)
    draft_probs = np.stack([softmax(row) for row in logits[:2]])
    with pytest.raises(NumericsError, match="rule nan at draft position 1"):
        accept_draft(Draft([1, 2], draft_probs, logits[:2]), logits, Acceptance(NaNRule(), SamplingParams(1.0, 0, 1.0)),
                     np.random.default_rng(0))


@pytest.mark.parametrize("name,knob", [*GRID, ("typical", 0.09)])
@pytest.mark.parametrize("sampling", [PROCESSED, SamplingParams(0.0)], ids=["sampled", "greedy"])
def test_nan_verifier_logits_raise_through_the_loop_for_every_rule(name, knob, sampling):
    """A model that returns NaN logits stops the run with a clear error; nothing is accepted from it."""
    if sampling.greedy and not RULES[name].greedy_ok:
        pytest.skip("rule refuses greedy")
    table = np.random.default_rng(2).normal(size=(8, 8)).astype(np.float32)
    poisoned = table.copy()
    poisoned[:, 3] = np.nan
    verifier = FakeBackend(lambda ctx: poisoned[ctx[-1]], 8)
    drafter = ModelDrafter(FakeBackend(lambda ctx: table[ctx[-1]], 8), 8)
    with pytest.raises(NumericsError):
        list(generate(verifier, [0, 1], GenerationConfig(draft_max=3, max_tokens=16, sampling=sampling, seed=0),
                      drafter=drafter, rule=make(name, knob)))


# -- a drafter vocabulary 128 smaller than the verifier's (llama.cpp allows it) -------------------------------------
VERIFIER_VOCAB, PAD = 140, 128
DRAFTER_VOCAB = VERIFIER_VOCAB - PAD


def padded_pair(seed: int = 5) -> tuple[FakeBackend, ModelDrafter, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = rng.normal(scale=2.0, size=(VERIFIER_VOCAB, VERIFIER_VOCAB)).astype(np.float32)
    target[:, DRAFTER_VOCAB:] -= 3.0  # the verifier mostly writes ids the drafter has, so drafts get accepted
    draft = (target[:, :DRAFTER_VOCAB] + rng.normal(size=(VERIFIER_VOCAB, DRAFTER_VOCAB))).astype(np.float32)
    verifier = FakeBackend(lambda ctx: target[ctx[-1]], VERIFIER_VOCAB)
    drafter = ModelDrafter(FakeBackend(lambda ctx: draft[ctx[-1]], DRAFTER_VOCAB), VERIFIER_VOCAB)
    return verifier, drafter, target, draft


def test_scd_keeps_padded_ids_outside_its_support():
    _, _, target, draft = padded_pair()
    logits_q = np.concatenate([draft[0], np.full(PAD, -np.inf, np.float32)])
    for sampling in (DENSE, PROCESSED):
        p = process(target[0], sampling)
        pi = make("scd", 1.0, temperature=0.6).contrast(p, target[0], logits_q)
        assert np.all(np.isfinite(pi)) and pi.sum() == pytest.approx(1.0)
        assert np.all(pi[DRAFTER_VOCAB:] == 0)  # −β·(−inf) would have given them all the mass


@pytest.mark.parametrize("name,knob", [*GRID, ("typical", 0.09)])
@pytest.mark.parametrize("sampling", [DENSE, PROCESSED], ids=["dense", "processed"])
def test_every_rule_runs_with_a_padded_drafter_vocabulary(name, knob, sampling):
    verifier, drafter, _, _ = padded_pair()
    events = list(generate(verifier, [0, 1], GenerationConfig(draft_max=3, max_tokens=40, sampling=sampling,
                                                              seed=3), drafter=drafter,
                           rule=make(name, knob, temperature=sampling.temperature)))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert isinstance(events[-1], Finished) and len(tokens) == 40
    assert events[-1].metrics.drafted > 0
    for event in tokens:
        numbers = [event.p_x, event.pi_x] + [v for v in (event.q_x, event.accept_prob) if v is not None]
        assert all(np.isfinite(numbers)), event
        if event.verdict.value == "accepted":
            assert event.token_id < DRAFTER_VOCAB  # the drafter can only propose ids it has
    assert any(e.verdict.value == "accepted" for e in tokens)


@pytest.mark.parametrize("name,knob", [("strict", None), ("scd", 1.0), ("rfuzzy", 0.3)])
def test_first_token_law_with_a_padded_drafter(name, knob):
    """Monte Carlo through the loop (2,000 seeds, 5 standard errors + 0.003) against the exact law."""
    verifier, drafter, target, draft = padded_pair()
    rule = make(name, knob)
    plain = SamplingParams(1.0, 0, 1.0)
    logits_q = np.concatenate([draft[0], np.full(PAD, -np.inf, np.float32)])
    p, q = softmax(target[0]), softmax(logits_q)
    law = exact_first_token_law(rule, p, q, target[0], logits_q)
    runs = 2000
    counts = first_token_counts(verifier, drafter, rule, plain, VERIFIER_VOCAB, runs)
    tolerance = 5 * np.sqrt(law * (1 - law) / runs) + 0.003
    assert np.all(np.abs(counts / runs - law) <= tolerance)
