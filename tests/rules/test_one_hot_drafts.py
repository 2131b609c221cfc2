"""Rules on drafts without a distribution (docs/method.md "Drafts without a distribution", issue 33 item 3).

An n-gram or suffix draft is a token with no q: the loop makes q one-hot on it. Three claims are checked here:

1. strict stays lossless: the emitted tokens follow p exactly (Monte Carlo, two drafters, two samplings), and the
   same check fails when the q handed to the rule is not the draft's one-hot;
2. every rule either runs on one-hot q with the documented stand-in (its acceptance and residual as docs/method.md
   states them, computed here from p alone) or declares that it needs the drafter's own distribution and is
   refused, in one line naming the rule and the drafter kind, also through the CLI (exit code 2);
3. the drift signals show the degeneration the paper warns about: a relaxed rule that trusts a copied draft moves
   off what the verifier would write (log-probability per token down, or tokens off its support), strict does not.

Tolerances for the Monte Carlo checks (``tv_bound``): the empirical distribution of n draws from p has
E[TV] <= ½ Σ_v sqrt(p(v)(1 − p(v)) / n) (Jensen, cell by cell), and one draw moves TV by at most 1/n, so by
McDiarmid's inequality TV exceeds that mean bound by sqrt(ln(1/δ) / 2n) with probability at most δ = 1e-3. At
n = 40,000 over 6 tokens the bound is <= 0.015; every seed is fixed, so a pass is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from relaxtui.cli import main
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest
from relaxtui.decoding.loop import generate
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.round import _one_hot, check_request
from relaxtui.decoding.sampling import SamplingParams, process
from relaxtui.errors import UserError
from relaxtui.evals.analysis.drift import record_signals, signals
from relaxtui.rules import PAPER_GRID, RULES, Rule, make, residual
from tests.support.markov import VOCAB, fake, random_table

TABLE = random_table(1)  # the verifier: a first-order Markov LM over 6 tokens (row = previous token)
PROMPT = [0, 4, 1, 3, 2, 5, 0]  # every token occurs, so the copying drafter always finds something to copy
DENSE = SamplingParams(0.8, 0, 1.0)  # whole rows: the dense path
TOP4 = SamplingParams(0.8, 4, 1.0)  # top-k bounds the support: the support path, and drafts p gives no mass
N = 2  # draft length: the first two emitted tokens cover an accepted first draft and the second position
BULK = 40_000  # rule-level samples per check (vectorised)
LOOP = 3_000  # whole-loop samples per check
DELTA = 1e-3  # the chance that a correct law fails one TV check


class FixedDrafter(BaseDrafter):
    """Proposes the same tokens whatever the context: the simplest draft that is a function of the context."""

    traits = DrafterTraits("fixed", has_distribution=False)

    def __init__(self, tokens: Sequence[int] = (4, 5)) -> None:
        self.tokens = list(tokens)

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        return True

    def propose(self, context: Sequence[int], n: int) -> list[int]:
        return self.tokens[:n]

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return [Draft(self.propose(r.context, r.n_max), None, None) for r in requests]


class CopyDrafter(FixedDrafter):
    """A 1-gram prompt lookup: copies what followed the last earlier occurrence of the context's last token."""

    traits = DrafterTraits("copy", has_distribution=False)

    def propose(self, context: Sequence[int], n: int) -> list[int]:
        last = context[-1]
        for start in range(len(context) - 2, -1, -1):
            if context[start] == last:
                return list(context[start + 1:start + 1 + n])
        return []


class GuessingDrafter(FixedDrafter):
    """Draws its token at random (from a fixed law it does not hand over): one-hot q on a draft that is *not* a
    function of the context. Strict stays exact even then (docs/method.md): given x, the one-hot test emits p."""

    traits = DrafterTraits("guess", has_distribution=False)
    law = np.array([0.05, 0.05, 0.1, 0.1, 0.2, 0.5])

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return [Draft([int(r.rng.choice(VOCAB, p=self.law)) for _ in range(r.n_max)], None, None) for r in requests]


class ClaimingDrafter(FixedDrafter):
    """Hands a q that is not its draft's law: uniform, beside fixed tokens. The law must break (the failing check)."""

    traits = DrafterTraits("claims", has_distribution=True)

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = []
        for r in requests:
            tokens = self.propose(r.context, r.n_max)
            drafts.append(Draft(tokens, np.full((len(tokens), VOCAB), 1.0 / VOCAB), None))
        return drafts


# -- the law and its bound ------------------------------------------------------------------------------------------
def p_after(token: int, sampling: SamplingParams) -> np.ndarray:
    """The verifier's processed distribution after ``token`` (the Markov row), as the loop computes it."""
    return process(TABLE[token], sampling)


def joint_law(sampling: SamplingParams) -> np.ndarray:
    """[first, second]: p(y1 | prompt) · p(y2 | y1), what the verifier alone samples."""
    first = p_after(PROMPT[-1], sampling)
    return first[:, None] * np.stack([p_after(y, sampling) for y in range(VOCAB)])


def tv(counts: np.ndarray, law: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - law).sum())


def tv_bound(law: np.ndarray, n: int) -> float:
    """TV between ``law`` and the empirical law of n draws from it stays below this with probability 1 − DELTA."""
    return 0.5 * float(np.sqrt(law * (1 - law)).sum()) / math.sqrt(n) + math.sqrt(math.log(1 / DELTA) / (2 * n))


def law_gaps(pairs: np.ndarray, sampling: SamplingParams) -> list[tuple[str, float, float]]:
    """(what, measured TV, bound) for the first token, the (first, second) pair, and the second token given each
    first token seen at least 2,000 times: a correct law has every measured TV below its bound."""
    joint = joint_law(sampling)
    counts = np.zeros((VOCAB, VOCAB))
    np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
    n = len(pairs)
    gaps = [("first", tv(counts.sum(1), joint.sum(1)), tv_bound(joint.sum(1), n)),
            ("pair", tv(counts.ravel(), joint.ravel()), tv_bound(joint.ravel(), n))]
    for y in range(VOCAB):
        seen = int(counts[y].sum())
        if seen >= 2_000:
            given = p_after(y, sampling)
            gaps.append((f"second | first={y}", tv(counts[y], given), tv_bound(given, seen)))
    return gaps


# -- the rule's maths vectorised over samples ------------------------------------------------------------------------
QOf = Callable[[Draft], np.ndarray]


def one_hot_q(draft: Draft) -> np.ndarray:
    """The loop's q for a drafter without a distribution (``round._one_hot``), as whole rows."""
    return _one_hot(draft, VOCAB).dense_probs(VOCAB)


def spread_q(spread: float) -> QOf:
    """A wrong q: the draft's one-hot with ``spread`` of its mass spread evenly over the vocabulary (1: uniform, what
    a drafter claiming to be unsure of every token would hand)."""
    return lambda draft: (1 - spread) * one_hot_q(draft) + spread / VOCAB


def draw(target: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` inverse-CDF draws from the unnormalised ``target`` (an entry with no mass is never drawn)."""
    cdf = np.cumsum(target)
    return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), VOCAB - 1)


def simulate(rule: Rule, sampling: SamplingParams, drafter: FixedDrafter, q_of: QOf, context: list[int],
             rows: np.ndarray, out: np.ndarray, column: int, rng: np.random.Generator) -> None:
    """Fill ``out[rows, column:]`` with the tokens speculative rounds emit after ``context``: the draft and the rule's
    decision once per context (the rule is pure), its acceptance tests and draws vectorised over the samples in
    ``rows``. Algorithm 2 as docs/method.md states it; a rejected or bonus token forks the context."""
    if column == out.shape[1] or not len(rows):
        return
    (draft,) = drafter.draft([DraftRequest(0, context, N, sampling, rng)])
    q = q_of(draft)
    context = list(context)
    for i, x in enumerate(draft.tokens):
        p = p_after(context[-1], sampling)
        decision = rule.decide(p, q[i], x, logits_p=TABLE[context[-1]])
        accepted = rng.random(len(rows)) < decision.accept_prob
        rejected = rows[~accepted]
        ys = draw(residual(decision.pi_res, q[i]) if rule.subtract_draft else decision.pi_res, len(rejected), rng)
        out[rejected, column] = ys
        for y in np.unique(ys):
            simulate(rule, sampling, drafter, q_of, [*context, int(y)], rejected[ys == y], out, column + 1, rng)
        rows = rows[accepted]
        out[rows, column] = x
        context.append(x)
        column += 1
        if column == out.shape[1] or not len(rows):
            return
    ys = draw(rule.bonus(p_after(context[-1], sampling)), len(rows), rng)
    out[rows, column] = ys
    for y in np.unique(ys):
        simulate(rule, sampling, drafter, q_of, [*context, int(y)], rows[ys == y], out, column + 1, rng)


def drafted_p(drafter: FixedDrafter, sampling: SamplingParams) -> list[float]:
    """p(x) of every draft position of the rounds that start after the prompt and after each first token."""
    seen = []
    for context in (PROMPT, *([*PROMPT, y] for y in range(VOCAB))):
        previous = context[-1]
        for x in drafter.propose(context, N):
            seen.append(float(p_after(previous, sampling)[x]))
            previous = x
    return seen


def bulk_pairs(drafter: FixedDrafter, sampling: SamplingParams, q_of: QOf = one_hot_q, rule: Rule | None = None,
               seed: int = 0) -> np.ndarray:
    out = np.full((BULK, 2), -1)
    simulate(rule or make("strict"), sampling, drafter, q_of, PROMPT, np.arange(BULK), out, 0,
             np.random.default_rng(seed))
    assert (out >= 0).all()
    return out


def loop_pairs(drafter: BaseDrafter, sampling: SamplingParams, runs: int = LOOP) -> np.ndarray:
    """The first two tokens of ``runs`` seeded generations through the whole loop (N = 2: the first round drafts
    two tokens; the fake verifier hands candidate rows where top-k bounds the support)."""
    verifier = fake(TABLE)
    pairs = np.empty((runs, 2), dtype=int)
    for seed in range(runs):
        config = GenerationConfig(draft_max=N, max_tokens=3, sampling=sampling, seed=seed)
        *_, finished = generate(verifier, PROMPT, config, drafter=drafter, rule=make("strict"))
        pairs[seed] = finished.token_ids[:2]
    return pairs


# -- 1. strict with one-hot q: the law holds ----------------------------------------------------------------------
@pytest.mark.parametrize("drafter", [FixedDrafter(), CopyDrafter()], ids=["fixed", "copy"])
@pytest.mark.parametrize("sampling", [DENSE, TOP4], ids=["dense", "top4"])
def test_strict_with_one_hot_q_emits_p_exactly(drafter, sampling):
    """40,000 samples of the rule's maths on the loop's one-hot q: the first token, the pair and the second token
    given the first all follow the verifier's law within the stated TV bound (<= 0.02 for the first token)."""
    if sampling is TOP4:  # the check covers drafts p rules out (always rejected) and drafts it keeps
        seen = drafted_p(drafter, sampling)
        assert min(seen) == 0 and max(seen) > 0
    gaps = law_gaps(bulk_pairs(drafter, sampling), sampling)
    assert gaps[0][2] < 0.02 and len(gaps) >= 4
    for what, measured, bound in gaps:
        assert measured < bound, f"{what}: TV {measured:.4f} >= {bound:.4f}"


@pytest.mark.parametrize("spread", [1.0, 0.1], ids=["uniform", "nearly-one-hot"])
@pytest.mark.parametrize("sampling", [DENSE, TOP4], ids=["dense", "top4"])
def test_the_same_check_fails_when_q_is_not_the_drafts_one_hot(sampling, spread):
    """A fixed draft judged against a q it does not come from (uniform, or one-hot with 10% of its mass spread):
    x is emitted with min(1, p(x)/q(x)) and rejections drawn from norm((p − q)+), which is not p. The check sees it:
    the measured first-token TV is that wrong law's exact TV from p (0.62–0.66 uniform, 0.033–0.035 nearly one-hot),
    above the bound (~0.014) even for the small error."""
    x = FixedDrafter().tokens[0]
    p = p_after(PROMPT[-1], sampling)
    q = (1 - spread) * np.eye(VOCAB)[x] + spread / VOCAB
    chance = min(1.0, p[x] / q[x])
    rest = np.maximum(p - q, 0.0)
    wrong = chance * np.eye(VOCAB)[x] + (1 - chance) * rest / rest.sum()
    expected_gap = 0.5 * float(np.abs(wrong - p).sum())
    _, measured, bound = law_gaps(bulk_pairs(FixedDrafter(), sampling, q_of=spread_q(spread)), sampling)[0]
    assert expected_gap > 2 * bound and measured > bound and abs(measured - expected_gap) < bound


@pytest.mark.parametrize("drafter,sampling", [(CopyDrafter(), TOP4), (FixedDrafter(), DENSE),
                                              (GuessingDrafter(), TOP4)], ids=["copy-top4", "fixed-dense", "guess"])
def test_strict_through_the_whole_loop_with_a_drafter_without_a_distribution(drafter, sampling):
    """3,000 seeded generations through the loop itself (one-hot q built by the round, the support or dense path of
    acceptance, the real draws): the first token and the pair follow p within the bound (~0.05 and ~0.07 at this
    size). A drafter that guesses at random passes too: given its draft, the one-hot test emits p."""
    for what, measured, bound in law_gaps(loop_pairs(drafter, sampling), sampling)[:2]:
        assert measured < bound, f"{what}: TV {measured:.4f} >= {bound:.4f}"


def test_the_whole_loop_check_fails_with_a_q_that_is_not_the_drafts_law():
    """The loop-level twin of the failing check: a drafter that hands uniform q beside fixed tokens breaks the law,
    and the first-token TV is several bounds away."""
    (what, measured, bound), *_ = law_gaps(loop_pairs(ClaimingDrafter(), TOP4), TOP4)
    assert measured > 3 * bound


# -- 2. what every other rule does with one-hot q -----------------------------------------------------------------
def js_against_one_hot(p_x: float) -> float:
    """JS(p, one-hot(x)) in nats, which depends on p(x) alone: ln 2 + ½[p(x) ln p(x) − (1 + p(x)) ln(1 + p(x))]."""
    return math.log(2) + 0.5 * ((p_x * math.log(p_x) if p_x > 0 else 0.0) - (1 + p_x) * math.log1p(p_x))


def entropy(p: np.ndarray) -> float:
    return float(-(p[p > 0] * np.log(p[p > 0])).sum())


# Acceptance probability of a draft x under q = one-hot(x), from the verifier alone (docs/method.md's table):
# (rule, knob) -> f(p, x, z_p). Every rule is here or in REFUSED, so a new rule fails until it is classified.
STAND_INS: dict[tuple[str, float | None], Callable[[np.ndarray, int, np.ndarray], float]] = {
    ("strict", None): lambda p, x, z: p[x],
    ("mentored", 0.7): lambda p, x, z: min(1.0, p[x] / 0.3),
    ("cactus", 1.0): lambda p, x, z: min(1.0, p[x] + math.sqrt(2 * 1.0 * p[x] * (1 - p[x]))),
    ("ensemble", 0.8): lambda p, x, z: 0.8 * p[x] + 0.2,
    ("rfuzzy", 0.2): lambda p, x, z: 1.0 if js_against_one_hot(p[x]) <= 0.2 else p[x],
    ("casc-tok", 0.35): lambda p, x, z: 1.0 if z[x] >= z.max() + math.log(1 - 0.35) else p[x],
    ("typical", 0.09): lambda p, x, z: 1.0 if p[x] > min(0.09, 0.3 * math.exp(-entropy(p))) else 0.0,
    # the rules since the paper (docs/method.md); fly's own test is strict's, its wait for the drafts after a rejection
    # is checked in tests/rules/test_new_rules.py
    ("fly", 0.3): lambda p, x, z: p[x],
    ("topk-delta", 0.6): lambda p, x, z: 1.0 if near_top(z, x, 10, lambda top: top - 0.6) else p[x],
    ("topk-ratio", 0.5): lambda p, x, z: 1.0 if near_top(z, x, 3, lambda top: 0.5 * top) else p[x],
    ("threshold", 0.5): lambda p, x, z: 1.0 if p[x] >= 1.0 else min(1.0, p[x] / 0.5),
    ("mars", 0.9): lambda p, x, z: float(x in np.argsort(-z)[:2]) if indecisive(p, z, 0.9) else p[x],
}
# rules that, after rejecting, draw from p itself (x may come back) rather than p without x
FROM_P: dict[str, Callable[[np.ndarray, np.ndarray], bool]] = {
    "typical": lambda p, z: True,
    "mars": lambda p, z: indecisive(p, z, 0.9),
}
REFUSED = {"scd", "casc-opt"}  # read the drafter's logits / its confidence max q: drafters with a distribution only


def near_top(z: np.ndarray, x: int, k: int, floor: Callable[[float], float]) -> bool:
    """x is among the k likeliest at T = 1, not the likeliest, and its raw probability reaches floor(the top one's)."""
    raw = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    order = np.argsort(-z, kind="stable")
    return x in order[1:k] and raw[x] >= floor(raw[order[0]])


def indecisive(p: np.ndarray, z: np.ndarray, theta: float) -> bool:
    """MARS relaxes: the two largest raw logits z1 > 0 and z2 / z1 > θ, the runner-up kept by the sampling."""
    z1, z2 = np.sort(z)[::-1][:2]
    return bool(z1 > 0 and p[np.argsort(-z, kind="stable")[1]] > 0 and z2 / z1 > theta)


def test_every_rule_is_classified_and_the_refused_ones_declare_it():
    assert {name for name, _ in STAND_INS} | REFUSED == set(RULES) and not {n for n, _ in STAND_INS} & REFUSED
    assert {name for name, cls in RULES.items() if cls.needs_draft_logits} == REFUSED


def random_rows(rng: np.random.Generator, count: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """(p, z_p, x): processed rows at T = 0.8 with top-k 4 of 6 (so some drafts fall outside p's support), their raw
    logits, and a drafted token anywhere in the vocabulary."""
    rows = []
    for _ in range(count):
        z = rng.normal(scale=2.0, size=VOCAB)
        rows.append((process(z, TOP4), z, int(rng.integers(VOCAB))))
    return rows


@pytest.mark.parametrize("spec", list(STAND_INS), ids=[name for name, _ in STAND_INS])
def test_each_rule_runs_on_one_hot_q_as_documented(spec):
    """Acceptance = the documented function of p alone; the residual after a rejection is p without x, renormalised
    (typical, and mars where it relaxes: p itself; they do not take the draft out)."""
    rule = make(*spec, temperature=0.8)
    checked_outside = 0
    for p, z, x in random_rows(np.random.default_rng(3), 400):
        q = np.eye(VOCAB)[x]
        decision = rule.decide(p, q, x, logits_p=z)
        assert decision.accept_prob == pytest.approx(STAND_INS[spec](p, x, z), abs=1e-12)
        if decision.accept_prob < 1:
            target = residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res
            expected = p.copy()
            if not FROM_P.get(spec[0], lambda p, z: False)(p, z) and p[x] < 1:
                expected[x] = 0.0
            np.testing.assert_allclose(target / target.sum(), expected / expected.sum(), atol=1e-12)
        checked_outside += p[x] == 0
    assert checked_outside > 50


@pytest.mark.parametrize("sampling", [DENSE, TOP4], ids=["dense", "top4"])
def test_ensemble_on_one_hot_q_emits_its_mixture_with_the_copy(sampling):
    """The stand-in's law, by Monte Carlo: the first token follows w·p + (1 − w)·δ_x, not p — with top-k 4 the
    drafted 2 is a token p rules out, emitted one time in five."""
    w, drafter = 0.8, FixedDrafter((2, 5))
    p = p_after(PROMPT[-1], sampling)
    mixture = w * p + (1 - w) * np.eye(VOCAB)[2]
    counts = np.bincount(bulk_pairs(drafter, sampling, rule=make("ensemble", w))[:, 0], minlength=VOCAB)
    assert tv(counts, mixture) < tv_bound(mixture, BULK) and tv(counts, p) > 5 * tv_bound(p, BULK)
    assert (p[2] == 0) == (sampling is TOP4)


def test_casc_opt_on_one_hot_q_would_trust_every_draft_which_is_why_it_is_refused():
    """max q = 1 always beats max p − α·TV at α >= 0: every draft passes, tokens the verifier rules out included."""
    rows = random_rows(np.random.default_rng(4), 200)
    assert sum(p[x] == 0 for p, _, x in rows) > 20
    for knob in (0.0, 0.05):
        rule = make("casc-opt", knob)
        assert all(rule.decide(p, np.eye(VOCAB)[x], x).accept_prob == 1.0 for p, _, x in rows)


@pytest.mark.parametrize("name", sorted(RULES))
def test_check_request_refuses_exactly_the_rules_that_declare_it_in_one_line(name):
    rule = make(name, PAPER_GRID[name][0])
    config = GenerationConfig()
    for drafter in (CopyDrafter(), NgramDrafter()):
        if rule.needs_draft_logits:
            with pytest.raises(UserError) as refused:
                check_request(fake(TABLE), PROMPT, config, drafter, rule)
            message = str(refused.value)
            assert "\n" not in message and f"'{name}'" in message and f"'{drafter.traits.kind}'" in message
        else:
            assert check_request(fake(TABLE), PROMPT, config, drafter, rule) is rule
    assert check_request(fake(TABLE), PROMPT, config, ClaimingDrafter(), rule) is rule  # a drafter with q: any rule


@pytest.mark.model
@pytest.mark.parametrize("spec", ["casc-opt:0", "scd:0.5"])
def test_generate_refuses_a_rule_that_needs_q_with_ngram_in_one_line(capsys, test_model_path, spec):
    code = main(["generate", "hi", "--verifier", str(test_model_path), "--draft-kind", "ngram", "--rule", spec,
                 "--threads", "1", "--max-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"rule '{spec.split(':')[0]}'" in err and "--draft-kind ngram" in err  # refused before any model loads


# -- 3. the drift signals show the light-drafter degeneration -------------------------------------------------------
def repetitive_table() -> np.ndarray:
    """An 8-token verifier for a task whose prompt repeats the cycle 0 1 … 7: it finds the cycle's next token
    plausible but unlikely (4th of its top 4) after even tokens, and rules it out (below its top 4) after odd ones."""
    table = np.random.default_rng(7).normal(size=(8, 8))
    for t in range(8):
        successor = (t + 1) % 8
        others = np.sort(np.delete(table[t], successor))[::-1]
        table[t, successor] = others[-1] - 1.0 if t % 2 else (others[2] + others[3]) / 2
    return table


def drift_records(table: np.ndarray, rule: Rule | None) -> list[dict]:
    """Eval-style records (whole rows, every token's log p(x)) of 8 prompts × 6 seeds, 64 tokens, n-gram drafts."""
    records = []
    sampling = SamplingParams(0.8, 4, 1.0)
    for problem in range(8):
        prompt = [(problem + i) % 8 for i in range(24)]
        for seed in range(100 * problem, 100 * problem + 6):  # no seed shared between problems: they stay independent
            config = GenerationConfig(draft_max=3 if rule else 0, max_tokens=64, sampling=sampling, seed=seed,
                                      dense_rows=True, logprobs=True)
            *_, finished = generate(fake(table), prompt, config, drafter=NgramDrafter() if rule else None, rule=rule)
            metrics = finished.metrics
            records.append({"problem_id": f"p{problem}", "seed": seed, "output_tokens": metrics.output_tokens,
                            "acceptance": metrics.accepted / max(metrics.drafted, 1),
                            **record_signals(finished.token_ids, finished.verifier_logprobs, finished.verifier_probs)})
    return records


def test_drift_signals_show_relaxed_rules_copying_an_ngram_draft():
    """Against strict with the same n-gram drafter (paired per problem, 95% t intervals): mentored (α = 0.95) passes
    nearly every copied token and loses verifier log-probability; ensemble (w = 0.8) copies tokens the verifier's
    sampling could never produce. Strict itself stays where the verifier alone is."""
    table = repetitive_table()
    alone, strict = drift_records(table, None), drift_records(table, make("strict"))
    mentored, ensemble = drift_records(table, make("mentored", 0.95)), drift_records(table, make("ensemble", 0.8))
    against_alone = signals(strict, alone)
    assert abs(against_alone["verifier_logprob"].delta.mean) < 0.1
    assert all(r["out_of_support_rate"] == 0 for r in strict + mentored)  # both keep p's support by construction
    copying = signals(mentored, strict)
    assert np.mean([r["acceptance"] for r in mentored]) > 2 * np.mean([r["acceptance"] for r in strict])
    assert copying["verifier_logprob"].delta.high < -0.05
    mixing = signals(ensemble, strict)
    assert mixing["out_of_support_rate"].value > 0.005 and mixing["out_of_support_rate"].delta.low > 0
    assert mixing["verifier_logprob"].delta.high < 0
