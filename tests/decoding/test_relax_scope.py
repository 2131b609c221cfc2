"""--relax-scope on a fake model that thinks (tests/support/thinking.py): the relaxed rule judges only the rounds
whose context is inside its scope, strict's every other, a round never straddles a tag, and the answer's law under
``thinking`` is strict's given the reasoning. The wiring of a look-ahead rule's window and of ``check_draft_max``
into the round is here too."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from relaxtui.checks import BadValue
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished, TokenEvent, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.model_drafter import ModelDrafter
from relaxtui.decoding.sampling import softmax
from relaxtui.decoding.thinking import ScopeTracker, scope_tracker
from relaxtui.engine.thinking import Thinking, ThinkTags
from relaxtui.rules import make, split_spec
from tests.support.markov import GREEDY, PLAIN
from tests.support.thinking import (
    ANSWER_PROMPT,
    CLOSE,
    NEWLINE,
    OPEN,
    THINKING_PROMPT,
    VOCAB,
    inside_before,
    think_fake,
    think_pair,
    two_step_after,
)

TAGS = ThinkTags(OPEN, CLOSE)


def run(verifier, prompt, config, drafter, rule):
    events = list(generate(verifier, prompt, config, drafter=drafter, rule=rule))
    assert isinstance(events[-1], Finished)
    return [e for e in events if isinstance(e, TokenEvent)], events[-1]


# -- the tracker ------------------------------------------------------------------------------------------------
def test_the_prompt_says_where_a_generation_starts():
    tracker = ScopeTracker(TAGS, relax_inside=True)
    assert tracker.inside_after(THINKING_PROMPT, False)  # a template that opens <think> in the prompt
    assert not tracker.inside_after(ANSWER_PROMPT, False)  # thinking off: an empty block closed in the prompt
    assert not tracker.inside_after([0, 1, 2], False)  # no tag: outside
    assert tracker.inside_after([0, 1], True)  # no tag among new tokens: as it was
    assert not tracker.inside_after([OPEN, 0, CLOSE, OPEN, 1, CLOSE, 2], False)  # the last tag says


def test_a_draft_is_cut_after_its_first_tag():
    tracker = ScopeTracker(TAGS, relax_inside=False)
    assert tracker.cut([0, 1, CLOSE, 2, OPEN]) == 3
    assert tracker.cut([OPEN, 1]) == 1
    assert tracker.cut([0, 1, 2]) == 3
    assert tracker.cut([]) == 0


def test_which_rounds_relax():
    assert ScopeTracker(TAGS, relax_inside=True).relaxes(True)
    assert not ScopeTracker(TAGS, relax_inside=True).relaxes(False)
    assert ScopeTracker(TAGS, relax_inside=False).relaxes(False)
    assert scope_tracker("all", Thinking(None, "no")) is None  # nothing tracked, nothing asked of the verifier


# -- what the rounds judge by -----------------------------------------------------------------------------------
def judged_runs(scope: str, rule_spec: str, prompt: list[int], runs: int, sampling=PLAIN, max_tokens: int = 14,
                tables: tuple[np.ndarray, np.ndarray] | None = None):
    """(inside before each token, the token's event) over ``runs`` seeded generations (of ``think_pair``, or of a
    verifier and a drafter over ``tables``); also checks that every round's drafted positions share one context
    state (a round never straddles a tag)."""
    if tables is None:
        verifier, drafter, _, _ = think_pair()
    else:
        verifier, drafter = think_fake(tables[0]), ModelDrafter(think_fake(tables[1]), VOCAB)
    rule = make(*split_spec(rule_spec), temperature=sampling.temperature)
    judged = []
    for seed in range(runs):
        config = GenerationConfig(draft_max=3, max_tokens=max_tokens, sampling=sampling, seed=seed, relax_scope=scope)
        events, _ = run(verifier, prompt, config, drafter, rule)
        states = inside_before(prompt, [e.token_id for e in events])
        rounds: dict[int, set[bool]] = {}
        for state, event in zip(states, events, strict=True):
            judged.append((state, event))
            if event.verdict in (Verdict.ACCEPTED, Verdict.RESAMPLED):
                rounds.setdefault(event.round.index, set()).add(state)
        if scope != "all":  # (scope all drafts across tags, as it always did)
            assert all(len(states) == 1 for states in rounds.values()), "a round straddled a thinking tag"
    return judged


def drafted(judged, inside: bool):
    return [e for state, e in judged if state == inside and e.verdict in (Verdict.ACCEPTED, Verdict.RESAMPLED)]


@pytest.mark.parametrize(("scope", "relaxed_inside"), [("thinking", True), ("answer", False)])
def test_the_rule_judges_only_inside_its_scope(scope, relaxed_inside):
    """ensemble:0 accepts every draft (π = q); strict's π is p and it rejects some. In scope every drafted verdict
    is the rule's (π(x) = q(x), accepted with probability 1), out of scope strict's (π(x) = p(x), and rejections
    happen)."""
    judged = judged_runs(scope, "ensemble:0", THINKING_PROMPT, runs=60)
    relaxed, strict = drafted(judged, relaxed_inside), drafted(judged, not relaxed_inside)
    assert len(relaxed) > 40 and len(strict) > 40  # both sides seen often
    assert all(e.verdict is Verdict.ACCEPTED and e.accept_prob == 1.0 and e.pi_x == e.q_x for e in relaxed)
    assert all(e.pi_x == e.p_x for e in strict)
    assert any(e.verdict is Verdict.RESAMPLED for e in strict)
    accepted = [e for e in strict if e.verdict is Verdict.ACCEPTED]
    assert all(e.accept_prob == pytest.approx(min(1.0, e.p_x / e.q_x)) for e in accepted)  # strict's chance


def test_scope_all_relaxes_everywhere():
    """The guard on the test above: without a scope the rule's verdicts are on both sides."""
    judged = judged_runs("all", "ensemble:0", THINKING_PROMPT, runs=30)
    for inside in (True, False):
        assert all(e.verdict is Verdict.ACCEPTED and e.pi_x == e.q_x for e in drafted(judged, inside))


def test_a_closed_block_in_the_prompt_starts_outside():
    """Thinking off (the template closes an empty block in the prompt): under ``thinking`` every round before the
    model reopens a block is strict's."""
    judged = judged_runs("thinking", "ensemble:0", ANSWER_PROMPT, runs=20, max_tokens=6)
    outside = drafted(judged, False)
    assert outside and all(e.pi_x == e.p_x for e in outside)


def runner_up_tables() -> tuple[np.ndarray, np.ndarray]:
    """Greedy: the verifier's chain <think> a b </think> c d <think> …, each row's runner-up 1.5 nats below its top
    (p(runner-up) = 0.22 p(top)); the drafter proposes the runner-up after a (</think>: inside the block) and after
    c (<think>: outside it), the verifier's top everywhere else."""
    chain = {OPEN: 0, 0: 1, 1: CLOSE, CLOSE: 2, 2: 3, 3: OPEN, NEWLINE: OPEN}
    runner = {0: CLOSE, 2: OPEN}
    target = np.full((VOCAB, VOCAB), -3.0)
    for here, after in chain.items():
        target[here, after] = 3.0
        target[here, runner.get(here, (after + 1) % VOCAB)] = 1.5
    draft = target.copy()
    for here, other in runner.items():
        draft[here, [chain[here], other]] = draft[here, [other, chain[here]]]
    return target, draft


@pytest.mark.parametrize(("scope", "relaxed_inside"), [("thinking", True), ("answer", False)])
def test_greedy_relaxation_stays_in_scope(scope, relaxed_inside):
    """topk-ratio keeps its relaxation at temperature 0 (a draft among the top 3 with p >= r p(top) is kept): in
    scope it keeps the runner-up drafts; out of scope every token a drafted position emits is the verifier's argmax,
    as strict's greedy rounds emit."""
    tables = runner_up_tables()
    target = tables[0]
    judged = judged_runs(scope, "topk-ratio:0.05", THINKING_PROMPT, runs=1, sampling=GREEDY, max_tokens=30,
                         tables=tables)
    relaxed, strict = drafted(judged, relaxed_inside), drafted(judged, not relaxed_inside)
    assert any(("relaxed", 1.0) in e.statistic for e in relaxed)
    assert strict and all(("relaxed", 1.0) not in e.statistic for e in strict)
    states_and_tokens = [(state, e) for state, e in judged]
    for (_, before), (state, event) in zip(states_and_tokens, states_and_tokens[1:], strict=False):
        if state != relaxed_inside and event.verdict in (Verdict.ACCEPTED, Verdict.RESAMPLED):
            assert event.token_id == int(np.argmax(target[before.token_id]))


# -- the answer's law -------------------------------------------------------------------------------------------
def answer_counts(scope: str, runs: int) -> tuple[Counter, int]:
    """How often each pair of tokens followed the first </think> (generations whose reasoning closed early enough
    to leave two answer tokens: decided by the reasoning alone, so the answer's law is not biased by it)."""
    verifier, drafter, _, _ = think_pair()
    rule = make("ensemble", 0.0)
    counts, kept = Counter(), 0
    for seed in range(runs):
        config = GenerationConfig(draft_max=3, max_tokens=12, sampling=PLAIN, seed=seed, relax_scope=scope)
        tokens = [e.token_id for e in run(verifier, THINKING_PROMPT, config, drafter, rule)[0]]
        if CLOSE in tokens[:-2]:
            at = tokens.index(CLOSE)
            counts[(tokens[at + 1], tokens[at + 2])] += 1
            kept += 1
    return counts, kept


def deviation(counts: Counter, kept: int, expected: np.ndarray) -> tuple[float, np.ndarray]:
    observed = np.zeros_like(expected)
    for (a, b), c in counts.items():
        observed[a, b] = c / kept
    tolerance = 5 * np.sqrt(expected * (1 - expected) / kept) + 0.002
    return float(np.abs(observed - expected).max()), np.abs(observed - expected) - tolerance


def test_the_answer_is_stricts_given_the_reasoning():
    """Monte Carlo: under --relax-scope thinking with ensemble:0 (every draft accepted inside the block), the two
    answer tokens after </think> follow the verifier's exact two-step law from </think> (the verifier is first-order
    Markov, so that is strict's law given any reasoning). Tolerance: every one of the 49 cells within 5 standard
    errors (sqrt(p(1-p)/n)) plus 0.002. The same count under scope all (the rule relaxing the answer too) misses
    the law by more than that: the check can fail."""
    target, _ = think_pair()[2:]
    expected = two_step_after(target, CLOSE)
    counts, kept = answer_counts("thinking", runs=2500)
    assert kept > 2000
    worst, over = deviation(counts, kept, expected)
    assert np.all(over <= 0), worst
    relaxed_counts, relaxed_kept = answer_counts("all", runs=1500)
    assert np.any(deviation(relaxed_counts, relaxed_kept, expected)[1] > 0)


# -- a round never straddles a tag ------------------------------------------------------------------------------
def chain_tables() -> np.ndarray:
    """A greedy chain <think> -> a -> </think> -> b -> c -> d -> a … that both models follow."""
    table = np.full((VOCAB, VOCAB), -6.0)
    for here, after in ((OPEN, 0), (0, CLOSE), (CLOSE, 1), (1, 2), (2, 3), (3, 0), (6, OPEN)):
        table[here, after] = 6.0
    return table


@pytest.mark.parametrize(("scope", "first_batch"), [("thinking", 3), ("all", 4)])
def test_a_draft_ends_at_a_tag(scope, first_batch):
    """Drafts [a, </think>, b] from inside the block: scoped, the round verifies [last, a, </think>] and counts the
    drafter's step past the tag as an extra draft step; scope all verifies all three."""
    verifier, draft_model = think_fake(chain_tables()), think_fake(chain_tables())
    config = GenerationConfig(draft_max=3, max_tokens=6, sampling=GREEDY, relax_scope=scope)
    events, finished = run(verifier, THINKING_PROMPT, config, ModelDrafter(draft_model, VOCAB), make("ensemble", 0.5))
    assert [e.token_id for e in events] == [0, CLOSE, 1, 2, 3, 0]
    assert verifier.decode_calls[1] == first_batch  # (the first call is the prompt's prefill)
    assert finished.metrics.extra_draft_steps == (1 if scope == "thinking" else 0)


# -- refusals -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("pieces", "template", "missing"), [
    ((b" a", b" b", b" c", b" d", b"<think", b"</think>", b"\n"), "<think>", "tokenizer has no single <think> token"),
    (None, None, "chat template never marks one (it writes no <think>)"),
])
def test_a_verifier_without_a_thinking_block_refuses_a_scope(pieces, template, missing):
    target, _ = think_pair()[2:]
    kwargs = {"pieces": pieces} if pieces else {}
    verifier = think_fake(target, template=template, **kwargs)
    drafter = ModelDrafter(think_fake(target, template=template, **kwargs), VOCAB)
    for scope in ("thinking", "answer"):
        config = GenerationConfig(draft_max=2, max_tokens=3, sampling=PLAIN, relax_scope=scope)
        with pytest.raises(BadValue) as caught:
            run(verifier, THINKING_PROMPT, config, drafter, make("ensemble", 0.5))
        assert caught.value.name == "relax_scope"
        assert str(caught.value) == (f"relax_scope {scope!r} needs a thinking block, and the verifier's {missing}: "
                                     "only 'all' runs with this verifier")
    run(verifier, THINKING_PROMPT, GenerationConfig(draft_max=2, max_tokens=3, sampling=PLAIN), drafter,
        make("ensemble", 0.5))  # scope all runs


def test_an_unknown_scope_is_one_line():
    with pytest.raises(BadValue, match=r"^relax_scope must be one of all, thinking, answer \(got 'reasoning'\)$"):
        GenerationConfig(relax_scope="reasoning")


# -- FLy's wiring -------------------------------------------------------------------------------------------------
def fly_tables() -> tuple[np.ndarray, np.ndarray]:
    """Greedy: the verifier's chain is t -> t+1 with a flat first row (top-3 entropy ~1 nat, above FLy's τ = 0.3);
    the drafter proposes 2 after 0 (a mismatch) and then follows the verifier's chain."""
    target = np.full((VOCAB, VOCAB), -6.0)
    for t in range(VOCAB):
        target[t, (t + 1) % VOCAB] = 6.0
    target[0] = [-6.0, 1.0, 0.9, 0.8, -6.0, -6.0, -6.0]
    draft = target.copy()
    draft[0] = -6.0
    draft[0, 2] = 6.0
    return target, draft


@pytest.mark.parametrize(("draft_max", "kept"), [(7, False), (3, True)])
def test_flys_window_comes_from_the_n_asked(draft_max, kept):
    """max_tokens 4 caps the first round at 3 drafts [2, 3, 4] (a mismatch, then two matches). The default window is
    min(6, N - 1) of the N asked: at N = 7 it is 6, past this round's drafts, so the mismatch is rejected (the
    verifier's 1); at N = 3 it is 2, both pass, and the draft is kept."""
    target, draft = fly_tables()
    verifier, draft_model = think_fake(target), think_fake(draft)
    config = GenerationConfig(draft_max=draft_max, max_tokens=4, sampling=GREEDY)
    events, _ = run(verifier, [0], config, ModelDrafter(draft_model, VOCAB), make("fly", temperature=0.0))
    assert events[0].round.n_drafted == 3
    assert events[0].token_id == (2 if kept else 1)
    assert events[0].verdict is (Verdict.ACCEPTED if kept else Verdict.RESAMPLED)


def test_fly_at_one_draft_is_refused_before_decoding():
    target, draft = fly_tables()
    verifier = think_fake(target)
    config = GenerationConfig(draft_max=1, max_tokens=4, sampling=GREEDY)
    with pytest.raises(BadValue, match=r"^draft_max must be at least 2 for rule 'fly' \(got 1\)"):
        run(verifier, [0], config, ModelDrafter(think_fake(draft), VOCAB), make("fly", temperature=0.0))
    assert verifier.decode_calls == []
    run(verifier, [0], config, None, make("fly", temperature=0.0))  # the verifier alone: no draft to judge


def test_the_answer_law_check_uses_a_drafter_far_from_the_verifier():
    """Guard on the Monte Carlo test: after </think> the drafter's law is far from the verifier's."""
    target, draft = think_pair()[2:]
    assert np.abs(softmax(target[CLOSE]) - softmax(draft[CLOSE])).max() > 0.2


def test_the_batched_loop_scopes_as_the_one_sequence_loop():
    """Each sequence of the batched loop keeps its own tracker: the same tokens as K = 1 from the same seeds."""
    from relaxtui.decoding.batched import Job, generate_many

    target, draft = think_pair()[2:]
    rule = make("ensemble", 0.0)
    configs = [GenerationConfig(draft_max=3, max_tokens=12, sampling=PLAIN, seed=seed, relax_scope=scope)
               for seed in range(4) for scope in ("thinking", "answer")]
    alone = [[e.token_id for e in run(think_fake(target), THINKING_PROMPT, config,
                                      ModelDrafter(think_fake(draft), VOCAB), rule)[0]] for config in configs]
    verifier = think_fake(target, n_seq=4)
    drafter = ModelDrafter(think_fake(draft, n_seq=4), VOCAB)
    jobs = [Job(THINKING_PROMPT, config, rule, tag=i) for i, config in enumerate(configs)]
    batched = {job.tag: list(finished.token_ids) for job, finished in generate_many(verifier, jobs, drafter=drafter)}
    assert [batched[i] for i in range(len(configs))] == alone
    assert alone[0] != alone[1]  # the two scopes differ (the check compares something)
