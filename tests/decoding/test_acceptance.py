"""The acceptance step and sampling helpers on hand-written distributions."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.decoding.acceptance import Acceptance, accept_draft
from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Verdict
from relaxtui.decoding.sampling import SamplingParams, process, sample
from relaxtui.errors import NumericsError, UserError
from relaxtui.rules import acceptance_probability, residual
from relaxtui.rules.strict import Strict

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)


def logits_of(probs):
    return np.log(np.maximum(np.asarray(probs, dtype=np.float64), 1e-300))


# -- greedy: a parametrised table of tiny cases (vLLM style) -----------------------------------------------------
@pytest.mark.parametrize(
    "draft,argmaxes,expected_tokens,expected_verdicts",
    [
        ([1, 2], [1, 2, 3], [1, 2, 3], ["accepted", "accepted", "bonus"]),
        ([1, 2], [1, 0, 3], [1, 0], ["accepted", "resampled"]),
        ([1, 2], [2, 2, 3], [2], ["resampled"]),
        ([], [3], [3], ["verifier"]),
    ],
)
def test_greedy_is_exact_argmax_matching(draft, argmaxes, expected_tokens, expected_verdicts):
    target = np.full((len(argmaxes), 4), -1.0)
    for row, best in enumerate(argmaxes):
        target[row, best] = 3.0
    draft_logits = np.zeros((len(draft), 4))
    emitted = accept_draft(Draft(draft, np.zeros((len(draft), 4)), draft_logits), target,
                           Acceptance(Strict(), SamplingParams(temperature=0)), np.random.default_rng(0))
    assert [e.token_id for e in emitted] == expected_tokens
    assert [e.verdict.value for e in emitted] == expected_verdicts


# -- random path -------------------------------------------------------------------------------------------------
def test_zero_draft_probability_always_rejects():
    p, q = np.array([0.5, 0.5, 0.0]), np.array([1.0, 0.0, 0.0])
    assert acceptance_probability(p, q, 1) == 0.0
    emitted = accept_draft(Draft([1], q[None], None), np.stack([logits_of(p)] * 2), Acceptance(Strict(), PLAIN),
                           np.random.default_rng(0))
    assert emitted[0].verdict is Verdict.RESAMPLED and emitted[0].rejected_token == 1


def test_residual_has_a_documented_zero_mass_fallback():
    p = np.array([0.2, 0.8])
    assert np.array_equal(residual(p, p), p)  # (p - q)+ = 0: fall back to π_res, never normalise zeros
    assert np.allclose(residual(p, np.array([0.5, 0.5])), [0.0, 0.3])


def test_single_position_marginal_is_p():
    """One draft position, strict: P(emit y) = p(y) exactly. Monte Carlo, 40k draws, 5-sigma tolerance."""
    p = np.array([0.1, 0.5, 0.15, 0.25])
    q = np.array([0.4, 0.2, 0.3, 0.1])
    rng = np.random.default_rng(123)
    draws = 40_000
    counts = np.zeros(4)
    target = np.stack([logits_of(p), logits_of(p)])
    for _ in range(draws):
        x = sample(q, rng)
        emitted = accept_draft(Draft([x], q[None], None), target, Acceptance(Strict(), PLAIN), rng)
        counts[emitted[0].token_id] += 1
    tolerance = 5 * np.sqrt(p * (1 - p) / draws)
    assert np.all(np.abs(counts / draws - p) <= tolerance)


def test_sample_follows_its_weights_and_refuses_zeros():
    rng = np.random.default_rng(5)
    weights = np.array([0.0, 2.0, 0.0, 6.0])  # unnormalised on purpose
    draws = np.array([sample(weights, rng) for _ in range(20_000)])
    assert set(np.unique(draws)) == {1, 3}
    assert abs((draws == 3).mean() - 0.75) < 5 * np.sqrt(0.75 * 0.25 / 20_000)
    with pytest.raises(NumericsError):
        sample(np.zeros(3), rng)


# -- processing --------------------------------------------------------------------------------------------------
def test_processing_applies_temperature_then_top_k_then_top_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert np.allclose(process(logits, SamplingParams(1.0, 0, 1.0)), [0.5, 0.3, 0.15, 0.05])
    assert np.allclose(process(logits, SamplingParams(1.0, 2, 1.0)), [0.625, 0.375, 0, 0])
    # top-p 0.8 keeps 0.5 and 0.3 (the token that crosses 0.8 stays)
    assert np.allclose(process(logits, SamplingParams(1.0, 0, 0.8)), [0.625, 0.375, 0, 0])
    assert np.allclose(process(logits, SamplingParams(1.0, 0, 0.81)), np.array([0.5, 0.3, 0.15, 0]) / 0.95)
    cold = process(logits, SamplingParams(0.5, 0, 1.0))
    assert np.allclose(cold, np.array([0.25, 0.09, 0.0225, 0.0025]) / 0.365)
    assert np.array_equal(process(logits, SamplingParams(0.0)), [1, 0, 0, 0])


@pytest.mark.parametrize("kwargs", [{"temperature": -0.1}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_out_of_range_sampling_options(kwargs):
    with pytest.raises(UserError):
        SamplingParams(**kwargs)
