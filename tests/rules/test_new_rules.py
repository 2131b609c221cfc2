"""The rules the engines shipped since the paper (issue 46): fly, topk-delta, topk-ratio, threshold, mars.

Each rule against a derivation written here from its source's definition (docs/method.md), not the module called
twice: the acceptance chance and residual at random positions (worst error 1e-12), the emitted token's law by Monte
Carlo through the loop (5 standard errors + 0.003 per token, as tests/rules/test_rules.py), FLy's window on hand-made
rounds (a scripted generator hands each uniform, so the round can be read step by step), the greedy relaxations, the
second-knob syntax through the factory, the server's request reader and `rules list`, and FLy's draft-length refusal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from relaxtui.checks import BadValue
from relaxtui.cli import main
from relaxtui.decoding.acceptance import Acceptance, accept_draft, row_spec
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest
from relaxtui.decoding.events import TokenEvent, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, process, softmax
from relaxtui.engine.api import RowSpec, top_of
from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, RULES, make, split_spec
from tests.support.markov import PLAIN, VOCAB, fake, first_token_counts, random_table

EXACT = 1e-12
GREEDY = SamplingParams(0.0, 0, 1.0)
TOP3 = SamplingParams(1.0, 3, 1.0)  # the support path, and drafts p gives no mass
PAPERS = SamplingParams(0.8, 20, 0.95)


class Uniforms:
    """A generator that hands the round these uniforms in order, and fails if the round asks for one more."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def positions(seed: int, count: int, vocab: int = 40, sampling: SamplingParams = PAPERS):
    """(p, q, z, x): a processed verifier row, a drafter row, the verifier's raw logits, a drafted token (drawn from q
    at even positions, any id at odd ones: drafts q or p gives no mass too)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        z = rng.normal(scale=2.5, size=vocab)
        p = process(z, sampling)
        q = process(0.5 * z + rng.normal(scale=2.0, size=vocab), sampling)
        out.append((p, q, z, int(rng.choice(vocab, p=q)) if i % 2 == 0 else int(rng.integers(vocab))))
    return out


def strict_chance(p: np.ndarray, q: np.ndarray, x: int) -> float:
    return 0.0 if q[x] == 0 else min(1.0, p[x] / q[x])


def raw_order(z: np.ndarray) -> list[int]:
    """Token ids by raw logit, largest first (equal logits: the lower id first)."""
    return sorted(range(len(z)), key=lambda v: (-z[v], v))


def raw_probs(z: np.ndarray) -> list[float]:
    """softmax(z) at T = 1 in Python floats (a log-sum-exp by math.fsum)."""
    top = max(z)
    total = math.fsum(math.exp(v - top) for v in z)
    return [math.exp(v - top) / total for v in z]


# -- exactness: each rule's decision against its source's definition ----------------------------------------------
@pytest.mark.parametrize("spec", ["topk-delta:0.6", "topk-delta:0.2:3", "topk-ratio:0.5", "topk-ratio:0.2:5"])
def test_topk_rules_keep_exactly_the_near_top_drafts(spec):
    """A = the k likeliest raw tokens within δ of (or at least r times) the top raw probability; a draft in A other
    than the top one is kept outright (q(x) > 0), every other draft is strict's; π_res = p."""
    name, knob = split_spec(spec)
    rule = make(name, knob, temperature=0.8)
    k = int(rule.knob2)
    kept = worst = 0.0
    for p, q, z, x in positions(1, 600):
        order, raw = raw_order(z), raw_probs(z)
        floor = raw[order[0]] - knob if name.startswith("topk-delta") else knob * raw[order[0]]
        in_set = x in order[1:k] and raw[x] >= floor
        expected = (1.0 if q[x] > 0 else 0.0) if in_set else strict_chance(p, q, x)
        decision = rule.decide(p, q, x, logits_p=z)
        worst = max(worst, abs(decision.accept_prob - expected))
        assert np.array_equal(decision.pi_res, p) and dict(decision.statistic)["in_set"] == float(in_set)
        kept += in_set and q[x] > 0 and p[x] < q[x]  # kept where strict would have risked it
    assert worst <= EXACT and kept >= 5


def test_threshold_is_sglangs_target_only_test():
    """a(x) = 1 if p(x) >= t_single, else min(1, p(x) / t_acc), whatever q(x) > 0 is; the residual is p without x."""
    rule = make(*split_spec("threshold:0.4:0.7"))
    worst = 0.0
    for p, q, _, x in positions(2, 500):
        expected = 0.0 if q[x] == 0 else (1.0 if p[x] >= 0.7 else min(1.0, p[x] / 0.4))
        decision = rule.decide(p, q, x)
        worst = max(worst, abs(decision.accept_prob - expected))
        if p[x] < 1:
            rest = np.array([0.0 if v == x else p[v] for v in range(len(p))])
            assert np.allclose(decision.pi_res, rest / rest.sum(), rtol=0, atol=EXACT)
    assert worst <= EXACT


@pytest.mark.parametrize("theta", [0.9, 0.5, -0.5])
def test_mars_relaxes_where_the_two_largest_logits_are_close(theta):
    """The authors' evaluate_posterior: z2 / z1 > θ (z1 > 0, the runner-up in p's support) keeps the top or the
    runner-up outright and draws any other rejection from p itself; elsewhere strict, with strict's residual."""
    rule = make("mars", theta, temperature=0.8)
    relaxed_seen = strict_seen = 0
    worst = 0.0
    for p, q, z, x in positions(3, 500):
        order = raw_order(z)
        z1, z2 = z[order[0]], z[order[1]]
        relaxed = z1 > 0 and p[order[1]] > 0 and z2 / z1 > theta
        if relaxed:
            expected = 1.0 if x in order[:2] and q[x] > 0 else 0.0
            draw_from = p
        else:
            expected = strict_chance(p, q, x)
            excess = np.array([max(0.0, a - b) for a, b in zip(p, q, strict=True)])
            draw_from = excess / excess.sum() if excess.sum() > 0 else p
        decision = rule.decide(p, q, x, logits_p=z)
        worst = max(worst, abs(decision.accept_prob - expected))
        assert np.allclose(decision.pi_res, draw_from, rtol=0, atol=EXACT) and not rule.subtract_draft
        relaxed_seen += relaxed
        strict_seen += not relaxed
    assert worst <= EXACT and relaxed_seen >= 10 and strict_seen >= 10


def test_fly_judges_each_position_as_strict_does_and_reports_the_top3_entropy():
    rule = make("fly")
    for p, q, _, x in positions(4, 200):
        decision = rule.decide(p, q, x)
        assert decision.accept_prob == strict_chance(p, q, x) and np.array_equal(decision.pi_res, p)
        top = sorted(p, reverse=True)[:3]
        expected = -math.fsum(v * math.log(v) for v in top if v > 0)
        assert abs(dict(decision.statistic)["entropy"] - expected) <= EXACT
        assert rule.defers(p) == (expected >= 0.3)


# -- the emitted token's law, Monte Carlo through the loop --------------------------------------------------------
def within(counts: np.ndarray, law: np.ndarray, runs: int) -> bool:
    return bool(np.all(np.abs(counts / runs - law) <= 5 * np.sqrt(law * (1 - law) / runs) + 0.003))


def fly_first_token_law(tau: float, target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """FLy's first emitted token with N = 2 (so W = 1) on Markov tables at T = 1, derived from its definition: x₁ is
    kept if its own test passes, or — the verifier's top-3 entropy at position 1 at least τ, p₁(x₁) > 0, q₁(x₁) > 0 —
    if x₂ ~ q₂(·|x₁) then passes its test, which happens with Σ min(p₂, q₂); else the residual norm((p₁ − q₁)+)."""
    p1, q1 = softmax(target[0]), softmax(draft[0])
    top = sorted(p1, reverse=True)[:3]
    gate = -sum(v * math.log(v) for v in top) >= tau
    excess = np.maximum(p1 - q1, 0.0)
    law = np.zeros(VOCAB)
    for x1 in range(VOCAB):
        own = min(1.0, p1[x1] / q1[x1])
        window = float(np.minimum(softmax(target[x1]), softmax(draft[x1])).sum()) if gate else 0.0
        kept = own + (1 - own) * window
        law[x1] += q1[x1] * kept
        law += q1[x1] * (1 - kept) * excess / excess.sum()
    return law


@pytest.mark.parametrize("tau", [0.3, 2.0])
def test_fly_first_token_law_through_the_loop(tau):
    """2,000 seeded runs at N = 2: the first token follows the derived law; at τ = 0.3 that law is not p (the wait
    keeps drafts strict rejects, checked to be at least 0.05 away somewhere), at τ = 2 > ln 3 it is p."""
    target_table, draft_table = random_table(11, scale=0.8), random_table(12, scale=1.5)
    law = fly_first_token_law(tau, target_table, draft_table)
    p1 = softmax(target_table[0])
    if tau < 1:
        assert np.abs(law - p1).max() > 0.05
    else:
        assert np.allclose(law, p1, atol=EXACT)
    runs = 2000
    counts = first_token_counts(fake(target_table), ModelDrafter(fake(draft_table), VOCAB), make("fly", tau), PLAIN,
                                VOCAB, runs)
    assert within(counts, law, runs), (counts / runs, law)


def target_only_law(t_acc: float, t_single: float, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    law = np.zeros(len(p))
    for x in range(len(p)):
        chance = 1.0 if p[x] >= t_single else min(1.0, p[x] / t_acc)
        rest = p.copy()
        rest[x] = 0.0
        law[x] += q[x] * chance
        law += q[x] * (1 - chance) * rest / rest.sum()
    return law


@pytest.mark.parametrize("t_acc,t_single", [(1.0, 1.0), (0.5, 0.6)])
def test_threshold_law_through_the_loop_and_exact_at_one(t_acc, t_single):
    """The first token follows Σ_x q(x)[a(x) δ_x + (1 − a(x)) p without x]; at 1 and 1 that is p exactly, for a
    drafter with a distribution too (target-only, yet lossless: the one-hot argument of docs/method.md)."""
    target_table, draft_table = random_table(13), random_table(14)
    p, q = softmax(target_table[0]), softmax(draft_table[0])
    law = target_only_law(t_acc, t_single, p, q)
    if t_acc == t_single == 1.0:
        assert np.abs(law - p).max() <= EXACT
    else:
        assert np.abs(law - p).max() > 0.05
    runs = 2000
    rule = make(f"threshold[t_single={t_single}]", t_acc)
    counts = first_token_counts(fake(target_table), ModelDrafter(fake(draft_table), VOCAB), rule, PLAIN, VOCAB, runs)
    assert within(counts, law, runs), (counts / runs, law)


@pytest.mark.parametrize("spec", ["topk-delta:0.6:4", "topk-ratio:0.3", "mars:0.6"])
def test_one_position_rules_law_through_the_loop(spec):
    """The first token follows Σ_x q(x)[a(x) δ_x + (1 − a(x)) R_x], a(x) and R_x from the derivations above."""
    name, knob = split_spec(spec)
    target_table, draft_table = random_table(15, scale=1.0), random_table(15, scale=1.0) + random_table(16)
    z = target_table[0]
    p, q = softmax(z), softmax(draft_table[0])
    order, raw = raw_order(z), raw_probs(z)
    law = np.zeros(VOCAB)
    for x in range(VOCAB):
        if name.startswith("topk"):
            k = int(make(name, knob).knob2)
            floor = raw[order[0]] - knob if name.startswith("topk-delta") else knob * raw[order[0]]
            chance = 1.0 if x in order[1:k] and raw[x] >= floor else min(1.0, p[x] / q[x])
            rest = np.maximum(p - q, 0.0)
        elif z[order[1]] / z[order[0]] > knob and z[order[0]] > 0:  # mars, relaxed at this position
            chance, rest = float(x in order[:2]), p
        else:
            chance, rest = min(1.0, p[x] / q[x]), np.maximum(p - q, 0.0)
        law[x] += q[x] * chance
        law += q[x] * (1 - chance) * rest / rest.sum()
    assert np.abs(law - p).max() > 0.02  # the rule does move the law
    runs = 2000
    counts = first_token_counts(fake(target_table), ModelDrafter(fake(draft_table), VOCAB), make(name, knob), PLAIN,
                                VOCAB, runs)
    assert within(counts, law, runs), (counts / runs, law)


# -- FLy's window on hand-made rounds ------------------------------------------------------------------------------
V = 5
FLAT = [1.0, 0.9, 0.8, -4.0, -4.0]  # top-3 entropy ~1.09 nats: the gate is open at τ = 0.3
PEAKED = [6.0, -4.0, -4.0, -4.0, -4.0]  # top-3 entropy ~1e-3: closed


def on(token: int, strength: float = 6.0) -> list[float]:
    """Logits that put nearly all the mass on ``token``."""
    return [strength if v == token else -strength for v in range(V)]


def round_of(tokens: Sequence[int], verifier: Sequence[Sequence[float]], drafter_mass: float = 0.9):
    """A draft whose q puts ``drafter_mass`` on each drafted token (the rest spread), and the verifier's N+1 rows."""
    q = np.full((len(tokens), V), (1 - drafter_mass) / (V - 1))
    q[np.arange(len(tokens)), tokens] = drafter_mass
    return Draft(list(tokens), q, None), np.array(verifier, dtype=np.float32)


def judged(spec: str, tokens, verifier, uniforms: Sequence[float], sampling: SamplingParams = PLAIN):
    draft, rows = round_of(tokens, verifier)
    rng = Uniforms(*uniforms)
    out = accept_draft(draft, rows, Acceptance(make(*split_spec(spec), temperature=sampling.temperature or 1.0),
                                               sampling), rng)  # type: ignore[arg-type]
    assert not rng.values, "the round left uniforms unread"
    return [(e.token_id, e.verdict) for e in out], out


def residual_pick(row: Sequence[float], q_row: np.ndarray, uniform: float) -> int:
    """The inverse-CDF pick of norm((p − q)+) at ``uniform``, p = softmax(row)."""
    excess = np.maximum(softmax(np.array(row, dtype=np.float64)) - q_row, 0.0)
    return int(np.searchsorted(np.cumsum(excess), uniform * excess.sum(), side="right"))


def test_fly_keeps_a_rejection_the_window_confirms():
    """x₁ = 2 fails its own test (u = 0.95 > p₁(2)/q₁(2) ~ 0.34) where the verifier is unsure; x₂ and x₃ pass: all
    three are kept, the first marked deferred, then the bonus. Strict, from the same uniforms, rejects x₁."""
    verifier = [FLAT, on(3), on(4), on(1)]
    tokens, out = judged("fly:0.3:2", [2, 3, 4], verifier, [0.95, 0.5, 0.5, 0.1])
    assert tokens == [(2, Verdict.ACCEPTED), (3, Verdict.ACCEPTED), (4, Verdict.ACCEPTED), (1, Verdict.BONUS)]
    assert dict(out[0].statistic)["deferred"] == 1.0 and "deferred" not in dict(out[1].statistic)
    strict, _ = judged("strict", [2, 3, 4], verifier, [0.95, 0.1])
    assert strict[0][1] is Verdict.RESAMPLED


def test_fly_rejects_where_the_window_refutes_it_with_stricts_residual():
    """The same round, but x₃ fails (p₃(4) ~ 1e-5): x₁ is rejected after all, with a token from norm((p₁ − q₁)+),
    drawn with the uniform after the window's."""
    verifier = [FLAT, on(3), on(0), on(1)]
    draft, _ = round_of([2, 3, 4], verifier)
    expected = residual_pick(FLAT, draft.probs[0], 0.3)
    tokens, out = judged("fly:0.3:2", [2, 3, 4], verifier, [0.95, 0.5, 0.5, 0.3])
    assert tokens == [(expected, Verdict.RESAMPLED)] and out[0].rejected_token == 2 and expected != 2


def test_fly_defers_nothing_when_the_window_runs_past_the_draft():
    """x₂ fails where the verifier is unsure and x₃ would pass, but W = 2 drafts after position 2 are not in a draft
    of 3: rejected there, and the round reads no uniform for position 3. With W = 1 the window fits and x₂ is kept."""
    verifier = [on(1), FLAT, on(4), on(0)]
    draft, _ = round_of([1, 2, 4], verifier)
    expected = residual_pick(FLAT, draft.probs[1], 0.7)
    tokens, _ = judged("fly:0.3:2", [1, 2, 4], verifier, [0.1, 0.95, 0.7])
    assert tokens == [(1, Verdict.ACCEPTED), (expected, Verdict.RESAMPLED)]
    kept, _ = judged("fly:0.3:1", [1, 2, 4], verifier, [0.1, 0.95, 0.5, 0.2])
    assert [t for t, _ in kept] == [1, 2, 4, 0]


def test_fly_rejects_at_once_where_the_verifier_is_sure_or_rules_the_draft_out():
    """A closed gate (top-3 entropy below τ) rejects as strict does, though the window would pass; so does a draft
    outside p's support (top-k 3 leaves id 4 out) — neither reads the window's uniforms."""
    verifier = [PEAKED, on(3), on(4), on(1)]
    draft, _ = round_of([2, 3, 4], verifier)
    tokens, _ = judged("fly:0.3:2", [2, 3, 4], verifier, [0.95, 0.4])
    assert tokens == [(residual_pick(PEAKED, draft.probs[0], 0.4), Verdict.RESAMPLED)]
    outside = [FLAT, on(3), on(2), on(1)]
    tokens, out = judged("fly:0.3:2", [4, 3, 2], outside, [0.0, 0.5], sampling=TOP3)
    assert tokens[0][1] is Verdict.RESAMPLED and out[0].rejected_token == 4 and tokens[0][0] in (0, 1, 2)


@pytest.mark.parametrize("candidate_rows", [False, True])
def test_fly_at_greedy_waits_for_argmaxes(candidate_rows):
    """Temperature 0: a draft that is not the argmax, where the T = 1 top-3 entropy is at least τ, is kept when the W
    drafts after it are their rows' argmaxes (vLLM's greedy FLy); else the argmax is emitted. The same on the
    engine's candidate rows (top 3 with the normaliser, what row_spec asks for) as on whole rows."""
    rule = make("fly:0.3:2".split(":")[0] + "[W=2]", 0.3, temperature=0.0)
    assert row_spec(rule, GREEDY, V) == RowSpec(3, True)

    def run(tokens, verifier):
        rows = np.array(verifier, dtype=np.float32)
        handed = [top_of(row, RowSpec(3, True)) for row in rows] if candidate_rows else rows
        out = accept_draft(Draft(list(tokens), None, None), handed, Acceptance(rule, GREEDY), Uniforms())
        return [(e.token_id, e.verdict) for e in out], out

    confirmed, out = run([2, 3, 4], [FLAT, on(3), on(4), on(1)])
    assert confirmed == [(2, Verdict.ACCEPTED), (3, Verdict.ACCEPTED), (4, Verdict.ACCEPTED), (1, Verdict.BONUS)]
    assert dict(out[0].statistic)["relaxed"] == 1.0
    assert run([2, 3, 4], [FLAT, on(3), on(0), on(1)])[0] == [(0, Verdict.RESAMPLED)]  # refuted: the argmax
    assert run([1, 2, 4], [on(1), FLAT, on(4), on(0)])[0] == [(1, Verdict.ACCEPTED), (0, Verdict.RESAMPLED)]  # past
    assert run([2, 3, 4], [PEAKED, on(3), on(4), on(1)])[0] == [(0, Verdict.RESAMPLED)]  # sure: argmax matching


def test_fly_needs_two_drafts_and_a_window_inside_them():
    """N = 1 leaves nothing to confirm a waiting rejection: one line naming draft_max (each face spells it); a window
    W as long as the draft is refused the same way; N = 0 (the verifier alone) judges nothing and passes."""
    with pytest.raises(BadValue) as refused:
        make("fly").check_draft_max(1)
    assert refused.value.name == "draft_max" and "\n" not in str(refused.value) and "'fly'" in str(refused.value)
    with pytest.raises(BadValue, match="window of rule 'fly', W=4"):
        make(*split_spec("fly:0.3:4")).check_draft_max(4)
    make("fly").check_draft_max(0)
    make(*split_spec("fly:0.3:4")).check_draft_max(5)
    assert make("fly").window(8, None) == 6 and make("fly").window(3, 8) == 6 and make("fly").window(8, 3) == 2
    assert make("strict").check_draft_max(1) is None


# -- greedy relaxations --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["topk-delta:0.3:3", "topk-ratio:0.5"])
def test_topk_rules_keep_a_near_top_draft_at_greedy_and_emit_the_argmax_otherwise(spec):
    """TensorRT-LLM's greedy rule: a draft among the k likeliest, within δ of (r times) the top T = 1 probability,
    is kept; any other rejection emits the argmax. Through the loop on Markov fakes, every accepted token that is
    not its row's argmax is checked against that set, and some were kept."""
    name, knob = split_spec(spec)
    rule = make(name, knob, temperature=0.0)
    k = int(rule.knob2)
    target_table, draft_table = random_table(17, scale=0.7), random_table(18, scale=0.7)
    relaxed = 0
    for seed in range(20):
        config = GenerationConfig(draft_max=3, max_tokens=20, sampling=GREEDY, seed=seed)
        context = [seed % VOCAB]
        for event in generate(fake(target_table), list(context), config,
                              drafter=ModelDrafter(fake(draft_table), VOCAB), rule=rule):
            if not isinstance(event, TokenEvent):
                continue
            z = target_table[context[-1]]
            order, raw = raw_order(z), raw_probs(z)
            floor = raw[order[0]] - knob if name.startswith("topk-delta") else knob * raw[order[0]]
            if event.verdict is Verdict.ACCEPTED and event.token_id != order[0]:
                assert event.token_id in order[1:k] and raw[event.token_id] >= floor
                relaxed += 1
            elif event.verdict is not Verdict.ACCEPTED:
                assert event.token_id == order[0]
            context.append(event.token_id)
    assert relaxed >= 5


@pytest.mark.parametrize("name", ["threshold", "mars"])
def test_threshold_and_mars_match_argmaxes_at_greedy(name):
    """SGLang verifies greedy requests by argmax, and so does the MARS authors' code at temperature 0."""
    target_table, draft_table = random_table(4), random_table(5)
    rule = make(name, PAPER_GRID[name][0], temperature=0.0)
    assert rule.greedy_top() == 0

    def tokens(rule, draft_max):
        config = GenerationConfig(draft_max=draft_max, max_tokens=12, sampling=GREEDY)
        events = generate(fake(target_table), [0], config, drafter=ModelDrafter(fake(draft_table), VOCAB), rule=rule)
        return [e.token_id for e in events if isinstance(e, TokenEvent)]

    assert tokens(rule, 3) == tokens(None, 0)


# -- drafts without a distribution ---------------------------------------------------------------------------------
class Fixed(BaseDrafter):
    """Proposes the same tokens whatever the context, with no distribution (q one-hot, as the n-gram kinds)."""

    traits = DrafterTraits("fixed", has_distribution=False)

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        return True

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return [Draft(self.tokens[:r.n_max], None, None) for r in requests]


def test_fly_on_a_draft_without_a_distribution():
    """q one-hot on x: x₁ passes with p₁(x₁), or waits (gate open, p₁(x₁) > 0) and is kept when x₂ then passes with
    p₂(x₂); a rejection draws p₁ without x₁. 3,000 seeded runs through the loop (5 SE + 0.003)."""
    target_table = random_table(19, scale=0.6)
    x1, x2 = 3, 1
    p1, p2 = softmax(target_table[0]), softmax(target_table[x1])
    assert -sum(v * math.log(v) for v in sorted(p1)[-3:]) >= 0.3  # the gate is open at position 1
    kept = p1[x1] + (1 - p1[x1]) * p2[x2]
    rest = p1.copy()
    rest[x1] = 0
    law = kept * np.eye(VOCAB)[x1] + (1 - kept) * rest / rest.sum()
    runs, counts = 3000, np.zeros(VOCAB)
    verifier, drafter = fake(target_table), Fixed([x1, x2])
    for seed in range(runs):
        config = GenerationConfig(draft_max=2, max_tokens=3, sampling=PLAIN, seed=seed)
        first = next(e for e in generate(verifier, [0], config, drafter=drafter, rule=make("fly"))
                     if isinstance(e, TokenEvent))
        counts[first.token_id] += 1
    assert within(counts, law, runs) and abs(law[x1] - p1[x1]) > 0.05


def test_threshold_at_one_is_strict_for_a_draft_without_a_distribution():
    """Target-only by design: with q one-hot (its own assumption) t_acc = t_single = 1 is strict, token for token."""
    table = random_table(20)

    def run(rule):
        config = GenerationConfig(draft_max=2, max_tokens=30, sampling=PLAIN, seed=3)
        events = generate(fake(table), [0, 1], config, drafter=Fixed([2, 4]), rule=rule)
        return [(e.token_id, e.verdict) for e in events if isinstance(e, TokenEvent)]

    assert run(make("threshold", 1.0)) == run(make("strict"))


# -- the second knob through every reader of a rule name -------------------------------------------------------------
def test_second_knobs_ride_in_the_name_through_split_spec_and_make():
    assert split_spec("topk-delta:0.5:15") == ("topk-delta[k=15]", 0.5)
    assert split_spec("fly::4") == ("fly[W=4]", None) and split_spec("fly::4", 0.2) == ("fly[W=4]", 0.2)
    assert split_spec("topk-delta[k=15]:0.5") == ("topk-delta[k=15]", 0.5)  # the name as a face echoes it, read back
    rule = make(*split_spec("topk-delta:0.5:15"))
    assert (rule.name, rule.knob, rule.knob2, repr(rule)) == ("topk-delta", 0.5, 15.0, "topk-delta(delta=0.5, k=15)")
    assert make("topk-delta", 0.5).knob2 == 10 and make("topk-ratio", 0.5).knob2 == 3 and make("fly").knob2 is None
    assert make("threshold", 0.5).knob2 == 1.0 and PAPER_GRID["topk-delta[k=15]"] == PAPER_GRID["topk-delta"]
    assert split_spec("mentored:0.5") == ("mentored", 0.5)  # one-knob specs unchanged


@pytest.mark.parametrize("spec,message", [
    ("mentored:0.5:3", "rule 'mentored:0.5:3': rule 'mentored' takes no second knob"),
    ("fly:0.3:0", "rule 'fly': 0 is out of range for W, a whole number >= 1"),
    ("topk-delta:0.5:2.5", "out of range for k, a whole number in 1..1024"),
    ("topk-ratio:0.5:1e15", "out of range for k, a whole number in 1..1024"),
    ("topk-delta:0.5:x", "the second knob must be a number"),
    ("threshold:0.5:0", "out of range for t_single, in (0, 1]"),
    ("fly:1:2:3", "give at most two knobs, NAME:KNOB:KNOB2"),
    ("fly[W=2]:0.3:3", "the second knob is given twice"),
    ("fly[k=2]", "rule 'fly' has no knob 'k' (its second knob is 'W')"),
    ("topk-delta[k=3", "a second knob is written NAME[KNOB2NAME=VALUE]"),
    ("nope:1:2", "unknown rule 'nope'"),
    ("topk-ratio:0", "out of range for 'topk-ratio': r in (0, 1]"),
])
def test_a_bad_second_knob_is_one_line(spec, message):
    with pytest.raises(UserError) as refused:
        make(*split_spec(spec))
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_servers_request_reader_takes_a_second_knob():
    from relaxtui.options import Speculative
    from relaxtui.serve.body import ApiError
    from relaxtui.serve.protocol import Defaults, parse_speculative

    defaults = Defaults(Speculative("strict", None, 3, "model"), PLAIN)
    speculative, rule = parse_speculative({"rule": "topk-delta:0.5:15"}, defaults, PLAIN)
    assert speculative.rule == "topk-delta[k=15]" and speculative.knob == 0.5 and rule is not None
    assert (rule.name, rule.knob2) == ("topk-delta", 15.0)
    with pytest.raises(ApiError, match="speculative.rule: 'fly': 0 is out of range for W"):
        parse_speculative({"rule": "fly:0.3:0"}, defaults, PLAIN)


def test_rules_list_shows_each_new_rule_with_its_knobs(capsys):
    assert main(["rules", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    for name in ("fly", "topk-delta", "topk-ratio", "threshold", "mars"):
        cls = RULES[name]
        assert f"{cls.knob_name}: " in lines[name], name
        grid = ", ".join(f"{k:g}" for k in PAPER_GRID[name])
        assert lines[name].endswith(f"[paper grid: {grid}]")
        if cls.knob2_name:
            assert f"second knob ({name}:KNOB:KNOB2) {cls.knob2_name}: " in lines[name]
