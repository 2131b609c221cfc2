"""Candidate rows from the engine (issue 21): the verifier and a model drafter hand the loop each row's top k
logits (``TopLogits``, llama.cpp's backend sampling; the fake computes the same in numpy) instead of whole rows.

Same numbers as whole rows (processed p and q, every rule's decisions, greedy's argmax and log p(x)), the same
tokens from the same seeds through both loops, whole rows for a rule that declares it needs them or a backend that
cannot hand candidates, and, on a real model, llama.cpp's candidates against its own whole rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from relaxtui.decoding.acceptance import Acceptance, accept_draft, row_spec
from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.draft_steps import drafter_rows
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.drafting import Draft, DraftRequest
from relaxtui.decoding.events import Finished, TokenEvent
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, candidates, process, sample
from relaxtui.engine.api import RowSpec, TopLogits, top_of
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.rules import PAPER_GRID, make
from tests.support.markov import VOCAB, fake, random_table
from tests.support.rule_checks import SUPPORT_RULES, Spy, rows
from tests.support.tolerances import TOLERANCE

TOP_K = [SamplingParams(0.6, 20, 0.95), SamplingParams(1.0, 8, 1.0), SamplingParams(1.3, 50, 0.5)]


@pytest.mark.parametrize("sampling", TOP_K)
@pytest.mark.parametrize("seed", range(15))
def test_the_top_k_of_a_row_processes_to_the_whole_rows_distribution(sampling, seed):
    logits = rows(seed, 1, 3000)[0]
    top = top_of(logits, RowSpec(sampling.top_k, normaliser=True))
    assert len(top.ids) == sampling.top_k
    assert np.allclose(process(top, sampling), process(logits, sampling), rtol=0, atol=TOLERANCE)
    found, reference = candidates(top, sampling), candidates(logits, sampling)
    assert np.array_equal(found.ids, reference.ids) and np.allclose(found.probs, reference.probs, atol=TOLERANCE)
    reference_lse = np.log(np.exp(logits.astype(np.float64) - logits.max()).sum()) + logits.max()
    inside, outside = int(top.ids[0]), int(np.argmin(logits))
    assert top.log_prob(inside) == pytest.approx(logits[inside] - reference_lse, abs=TOLERANCE)
    assert top.log_prob(outside) is None  # outside the top k: unknown, never guessed
    assert top_of(logits, RowSpec(sampling.top_k)).log_prob(inside) is None  # no normaliser asked for


def test_a_row_with_fewer_candidates_than_top_k_is_refused():
    top = top_of(rows(0, 1, 500)[0], RowSpec(8))
    with pytest.raises(ValueError, match="candidates"):
        candidates(top, SamplingParams(0.6, 20, 1.0))
    with pytest.raises(ValueError, match="candidates"):
        candidates(top, SamplingParams(0.6, 0, 0.9))  # top-p alone needs the whole row


@pytest.mark.parametrize("name,knob", SUPPORT_RULES)
def test_every_rule_decides_the_same_on_the_engines_candidates(name, knob):
    """120 rounds per rule: verifier rows handed as their top k give the tokens, verdicts and numbers of whole rows
    (1e-6) from the same generator."""
    for seed in range(120):
        sampling = TOP_K[seed % len(TOP_K)]
        rule = make(name, knob, temperature=sampling.temperature)
        n = 1 + seed % 4
        target = rows(seed, n + 1, 2000)
        q_logits = 0.6 * target[:n] + 0.4 * rows(seed + 10_000, n, 2000)
        q = np.stack([process(row, sampling) for row in q_logits])
        rng = np.random.default_rng(seed)
        tokens = [sample(row, rng) for row in q]
        spec = row_spec(rule, sampling, 2000)
        assert spec == RowSpec(sampling.top_k)
        top = [top_of(row, RowSpec(spec.k, normaliser=True)) for row in target]
        engine = accept_draft(Draft(tokens, q, None), top, Acceptance(rule, sampling), np.random.default_rng(seed))
        whole = accept_draft(Draft(tokens, q, q_logits), target, Acceptance(rule, sampling, dense=True),
                             np.random.default_rng(seed))
        assert [(e.token_id, e.verdict, e.rejected_token) for e in engine] == \
               [(e.token_id, e.verdict, e.rejected_token) for e in whole]
        for a, b in zip(engine, whole, strict=True):
            for field in ("p_x", "q_x", "pi_x", "accept_prob"):
                x, y = getattr(a, field), getattr(b, field)
                assert (x is None) == (y is None) and (x is None or abs(x - y) <= TOLERANCE), (field, x, y)
            assert a.logp_x is None or abs(a.logp_x - b.logp_x) <= TOLERANCE  # None: a token outside the top k


@pytest.mark.parametrize("normaliser", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_greedy_takes_the_engines_argmax(seed, normaliser):
    """Greedy on the argmax alone (k = 1): the same tokens and verdicts; p(x) and log p(x) at T=1 from the
    normaliser when it was asked for, else the processed p(x) (1) and no log p(x)."""
    greedy = SamplingParams(0.0, 0, 1.0)
    target = rows(seed, 4, 3000)
    tokens = [int(np.argmax(target[0])), int(np.argmax(target[1])), seed]  # accepted, accepted, likely rejected
    q = np.stack([process(row, greedy) for row in target[:3]])
    top = [top_of(row, RowSpec(1, normaliser)) for row in target]
    engine = accept_draft(Draft(tokens, q, None), top, Acceptance(make("strict"), greedy), np.random.default_rng(0))
    whole = accept_draft(Draft(tokens, q, None), target, Acceptance(make("strict"), greedy), np.random.default_rng(0))
    assert [(e.token_id, e.verdict) for e in engine] == [(e.token_id, e.verdict) for e in whole]
    for a, b in zip(engine, whole, strict=True):
        if normaliser:
            assert a.p_x == pytest.approx(b.p_x, abs=TOLERANCE) and a.logp_x == pytest.approx(b.logp_x, abs=TOLERANCE)
        else:
            assert a.p_x == 1.0 and a.logp_x is None


def _run(verifier, drafter, rule, config, prompt=(1, 2)):
    events = list(generate(verifier, list(prompt), config, drafter=drafter, rule=rule))
    assert isinstance(events[-1], Finished)
    return [(e.token_id, e.verdict, e.logp_x) for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("name,knob,temperature", [(n, k, t) for n, k in SUPPORT_RULES if k == PAPER_GRID[n][0]
                                                   for t in (0.0, 0.8) if t or make(n, k).greedy_ok])
def test_the_loop_runs_on_candidate_rows_and_emits_what_whole_rows_do(name, knob, temperature):
    """Markov fakes, a model drafter, 30 seeds: the loop asks both models for candidate rows (the fake hands
    ``TopLogits``), and emits the tokens and verdicts of a run on whole rows — and their log-probabilities where
    asked for (strict, greedy: every token inside the top k); a relaxed rule asked for them runs on whole rows."""
    sampling = SamplingParams(temperature, 4, 0.9)
    rule = make(name, knob, temperature=temperature or 1.0)
    # a rule that relaxes at greedy (fly) may keep a token outside the top k, and reads the normaliser anyway
    relaxes_greedy = temperature == 0 and rule.greedy_top() > 0
    logprobs = not relaxes_greedy and (temperature == 0 or not rule.may_leave_support)
    target_table, draft_table = random_table(1), random_table(1) + random_table(2, scale=1.0)
    for seed in range(30):
        runs = []
        for dense in (False, True):
            verifier, draft_model = fake(target_table), fake(draft_table)
            config = GenerationConfig(draft_max=3, max_tokens=12, sampling=sampling, seed=seed, dense_rows=dense,
                                      logprobs=logprobs)
            runs.append(_run(verifier, ModelDrafter(draft_model, VOCAB), rule, config))
            assert bool(verifier.handed_candidates) != dense and bool(draft_model.handed_candidates) != dense
        assert [t[:2] for t in runs[0]] == [t[:2] for t in runs[1]]
        if logprobs:
            assert all(abs(a[2] - b[2]) <= TOLERANCE for a, b in zip(*runs, strict=True))
        elif not relaxes_greedy:
            assert all(a[2] is None for a in runs[0]) and all(b[2] is not None for b in runs[1])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_draft_p_min_stops_drafts_where_whole_rows_do(temperature):
    """--draft-p-min reads the drafter's top probability: from the engine's argmax and normaliser at greedy, from q
    on candidates when sampling; the drafts stop where they stop on whole rows (and some do stop, some go on)."""
    sampling = SamplingParams(temperature, 4, 0.9)
    target_table, draft_table = random_table(1), random_table(1) + random_table(2, scale=1.0)
    drafted = {0.0: 0, 0.5: 0}
    for seed in range(12):
        for p_min in drafted:
            runs = []
            for dense in (False, True):
                verifier, draft_model = fake(target_table), fake(draft_table)
                config = GenerationConfig(draft_max=4, max_tokens=12, sampling=sampling, seed=seed, dense_rows=dense)
                drafter = ModelDrafter(draft_model, VOCAB, p_min=p_min)
                events = list(generate(verifier, [1, 2], config, drafter=drafter))
                shown = [(e.token_id, e.verdict, e.draft_position) for e in events[:-1]]
                runs.append((shown, events[-1].metrics.drafted))
                assert bool(draft_model.handed_candidates) != dense
            assert runs[0] == runs[1]
            drafted[p_min] += runs[0][1]
    assert 0 < drafted[0.5] < drafted[0.0]  # the threshold cut some drafts short, not all


@pytest.mark.parametrize("name,knob", [(n, k) for n, k in SUPPORT_RULES if make(n, k).may_leave_support][:4])
def test_a_relaxed_rule_asked_for_log_probabilities_runs_on_whole_rows(name, knob):
    """A relaxed rule may emit a token p gives no mass, outside the top k: with log p(x) asked for, whole rows, so
    every token has one."""
    verifier = fake(random_table(1))
    config = GenerationConfig(draft_max=3, max_tokens=12, sampling=SamplingParams(0.8, 4, 0.9), seed=2,
                              logprobs=True)
    tokens = _run(verifier, ModelDrafter(fake(random_table(2)), VOCAB), make(name, knob, temperature=0.8), config)
    assert not verifier.handed_candidates and all(t[2] is not None for t in tokens)


def test_the_batched_loop_runs_on_candidate_rows_too():
    """Three jobs in one batch, each with its own seed: the same tokens on candidate rows as on whole rows."""
    target_table, draft_table = random_table(3), random_table(3) + random_table(4, scale=1.0)
    outputs = []
    for dense in (False, True):
        verifier, draft_model = fake(target_table, n_seq=3), fake(draft_table, n_seq=3)
        jobs = [Job([1, 2 + i], GenerationConfig(draft_max=3, max_tokens=10, sampling=SamplingParams(0.8, 4, 0.9),
                                                 seed=i, dense_rows=dense)) for i in range(3)]
        finished = [e for _, e in generate_many(verifier, jobs, drafter=ModelDrafter(draft_model, VOCAB))
                    if isinstance(e, Finished)]
        assert len(finished) == 3 and bool(verifier.handed_candidates) != dense
        outputs.append(sorted(f.token_ids for f in finished))
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("name", [n for n in PAPER_GRID if make(n, PAPER_GRID[n][0]).needs_logits])
def test_a_rule_that_reads_logits_gets_whole_rows_from_both_models(name):
    rule = make(name, PAPER_GRID[name][0], temperature=0.8)
    assert rule.needs_logits and row_spec(rule, SamplingParams(0.8, 4, 0.9), VOCAB) is None
    verifier, draft_model = fake(random_table(1)), fake(random_table(2))
    config = GenerationConfig(draft_max=3, max_tokens=6, sampling=SamplingParams(0.8, 4, 0.9), seed=1)
    _run(verifier, ModelDrafter(draft_model, VOCAB), rule, config)
    assert not verifier.handed_candidates and not draft_model.handed_candidates


def test_a_spy_that_declares_whole_rows_is_handed_logits_through_the_loop():
    spy = Spy(needs_logits=True)
    _run(fake(random_table(1)), ModelDrafter(fake(random_table(2)), VOCAB), spy,
         GenerationConfig(draft_max=2, max_tokens=6, sampling=SamplingParams(0.8, 4, 0.9), seed=0))
    assert spy.seen and all(length == VOCAB and has_logits for length, has_logits in spy.seen)


def test_a_backend_that_cannot_hand_candidates_keeps_whole_rows():
    verifier = fake(random_table(1))
    verifier.candidate_rows = False
    config = GenerationConfig(draft_max=2, max_tokens=8, sampling=SamplingParams(0.8, 4, 0.9), seed=3)
    reference = _run(fake(random_table(1)), None, make("strict"), replace(config, dense_rows=True))
    assert _run(verifier, None, make("strict"), config) == reference  # whole rows, log p(x) and all
    assert not verifier.handed_candidates


def test_which_rows_each_side_asks_for():
    strict = make("strict")
    assert row_spec(strict, SamplingParams(0.6, 20, 0.95), 1000) == RowSpec(20, False)
    assert row_spec(strict, SamplingParams(0.6, 20, 0.95), 1000, logprobs=True) == RowSpec(20, True)
    assert row_spec(strict, SamplingParams(0.0, 0, 1.0), 1000) == RowSpec(1, False)
    assert row_spec(strict, SamplingParams(0.0, 0, 1.0), 1000, alternatives=5) == RowSpec(5, True)
    assert row_spec(strict, SamplingParams(0.7, 0, 0.9), 1000) is None  # top-p alone: whole rows
    assert row_spec(strict, SamplingParams(0.7, 0, 1.0), 1000) is None  # nothing bounds the support
    assert row_spec(strict, SamplingParams(0.6, 20, 0.95), 1000, dense=True) is None
    request = DraftRequest(0, [1], 3, SamplingParams(0.0, 0, 1.0), np.random.default_rng(0))
    assert drafter_rows(request, 0.0, 1000, 1000) == RowSpec(1, False)
    assert drafter_rows(request, 0.5, 1000, 1000) == RowSpec(1, True)  # --draft-p-min reads the raw top probability
    assert drafter_rows(replace(request, alternatives=5), 0.0, 1000, 1000) == RowSpec(5, True)  # q(x) shown at T=1
    assert drafter_rows(request, 0.0, 1000, 1064) == RowSpec(65, False)  # 64 padding ids may outrank the argmax
    assert drafter_rows(request, 0.5, 1000, 1064) is None  # a normaliser over the padding would be wrong
    sampled = DraftRequest(0, [1], 3, SamplingParams(0.6, 20, 0.95), np.random.default_rng(0))
    assert drafter_rows(sampled, 0.0, 1000, 1000) == RowSpec(20)
    assert drafter_rows(sampled, 0.0, 1000, 1010) == RowSpec(30)
    assert drafter_rows(replace(sampled, whole_rows=True), 0.0, 1000, 1000) is None


@pytest.mark.model
@pytest.mark.parametrize("spec", [RowSpec(20, True), RowSpec(1, False), RowSpec(64, True)])
def test_llama_cpp_hands_the_top_k_of_its_own_whole_rows(test_model_path, spec):
    """SmolLM2 through llama.cpp's backend sampling: each row's candidates are its whole row's top k, bit for bit,
    the normaliser matches a float64 one from the whole row, repeated rows come back in the order asked for, and a
    round copies a few hundred bytes per row instead of the vocabulary."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=256, n_threads=1) as model:
        tokens = model.tokenize("The sea is calm tonight, and")
        whole = model.decode(0, tokens, logits_rows=range(len(tokens) - 4, len(tokens)))
        model.rollback(0, len(tokens) - 4)
        assert model.set_candidates(0, spec)
        before = model.copied_bytes
        top = model.decode(0, tokens[-4:], logits_rows=[0, 1, 2, 3, 3])
        assert model.copied_bytes - before <= 4 * spec.k * 12
        for row, found in zip([*whole, whole[3]], top, strict=True):
            assert isinstance(found, TopLogits) and len(found.ids) == spec.k
            order = np.argsort(-row, kind="stable")[: spec.k]
            assert set(found.ids.tolist()) == set(order.tolist()) or row[order[-1]] == np.sort(found.logits)[0]
            assert np.array_equal(found.logits, row[found.ids])
            if spec.normaliser:
                reference = row.astype(np.float64)
                lse = reference.max() + np.log(np.exp(reference - reference.max()).sum())
                assert found.log_norm == pytest.approx(lse, abs=1e-5)
            else:
                assert found.log_norm is None
        model.rollback(0, len(tokens) - 4)
        gapped = model.decode(0, tokens[-4:], logits_rows=[0, 2, 3])  # outputs not one stride apart: row by row
        for row, found in zip([whole[0], whole[2], whole[3]], gapped, strict=True):
            assert np.array_equal(found.logits, row[found.ids]) and len(found.ids) == spec.k
        model.rollback(0, len(tokens) - 4)
        assert model.set_candidates(0, None)  # whole rows again
        assert np.array_equal(model.decode(0, tokens[-4:], logits_rows=[3])[0], whole[3])


@pytest.mark.parametrize("name,knob", [(n, k) for n, knobs in PAPER_GRID.items() for k in knobs
                                       if not make(n, k).may_leave_support])
def test_a_rule_that_declares_it_stays_in_ps_support_does(name, knob):
    """The declaration that lets log p(x) come from candidate rows: 40 seeds × two samplings of whole-row runs,
    no emitted token outside the processed p's support (whose log p(x) would be outside the top k)."""
    from relaxtui.evals.analysis.drift import record_signals

    outside = 0.0
    for seed in range(40):
        for sampling in (SamplingParams(1.0, 3, 1.0), SamplingParams(0.7, 4, 0.8)):
            config = GenerationConfig(draft_max=3, max_tokens=30, sampling=sampling, seed=seed, dense_rows=True)
            events = list(generate(fake(random_table(1, scale=2.0)), [0], config,
                                   drafter=ModelDrafter(fake(random_table(2, scale=2.0)), VOCAB),
                                   rule=make(name, knob, temperature=sampling.temperature)))
            done = events[-1]
            signals = record_signals(done.token_ids, done.verifier_logprobs, done.verifier_probs)
            outside += signals["out_of_support_rate"]
    assert outside == 0.0


@pytest.mark.parametrize("stop_early", [False, True])
def test_the_verifier_hands_whole_rows_again_after_a_generation(stop_early):
    """Candidate rows are one generation's choice: when it ends — or its caller stops reading it — the next user of
    the model (a calibration, a caller decoding by hand) gets whole rows."""
    verifier = fake(random_table(1))
    config = GenerationConfig(draft_max=2, max_tokens=10, sampling=SamplingParams(0.8, 4, 0.9), seed=0)
    events = generate(verifier, [1, 2], config, drafter=ModelDrafter(fake(random_table(2)), VOCAB))
    if stop_early:
        next(e for e in events if isinstance(e, TokenEvent))
        assert verifier.candidates  # mid-generation: candidate rows
        events.close()
    else:
        list(events)
    assert verifier.handed_candidates and not verifier.candidates
    assert isinstance(verifier.decode(0, [3], logits_rows=[0]), np.ndarray)


def _shown(events):
    return [(e.token_id, e.p_x, e.q_x, e.top_p, e.top_q) for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("alternatives", [0, 3])
def test_greedy_shows_what_whole_rows_show(alternatives):
    """Greedy with a model drafter: with alternatives shown (the TUI) both models add the normaliser and p(x), q(x)
    and the top alternatives of p and q are the whole rows' at T=1; without, the processed one-hots' (1 for the
    argmax) — never a number from a different distribution."""
    target_table, draft_table = random_table(5, scale=2.0), random_table(5, scale=2.0) + random_table(6)
    config = GenerationConfig(draft_max=3, max_tokens=16, sampling=SamplingParams(0.0, 0, 1.0), seed=0,
                              top_alternatives=alternatives)
    runs = []
    for dense in (False, True):
        verifier, draft_model = fake(target_table), fake(draft_table)
        runs.append(_shown(generate(verifier, [1, 2], replace(config, dense_rows=dense),
                                    drafter=ModelDrafter(draft_model, VOCAB))))
        assert bool(verifier.handed_candidates) != dense
    assert [t[0] for t in runs[0]] == [t[0] for t in runs[1]]
    for candidate, whole in zip(*runs, strict=True):
        if alternatives:
            assert candidate[1] == pytest.approx(whole[1], abs=TOLERANCE)
            assert (candidate[2] is None) == (whole[2] is None)
            assert candidate[2] is None or candidate[2] == pytest.approx(whole[2], abs=TOLERANCE)
            for ours, theirs in ((candidate[3], whole[3]), (candidate[4], whole[4])):
                assert [t for t, _ in ours] == [t for t, _ in theirs]
                assert np.allclose([v for _, v in ours], [v for _, v in theirs], atol=TOLERANCE)
        else:
            assert candidate[1] == 1.0 and candidate[2] in (None, 0.0, 1.0)


def test_a_drafter_with_padding_ids_past_the_verifiers_vocabulary_drafts_the_same():
    """A drafter vocabulary 4 ids longer than the verifier's, its padding ids ranked first: asked for k + 4
    candidates, the cut row still holds the top k, and the run matches whole rows."""
    target_table = random_table(7)
    draft_table = np.concatenate([random_table(8), np.full((VOCAB, 4), 9.0)], axis=1)  # pads outrank every token
    draft_table = np.concatenate([draft_table, np.zeros((4, VOCAB + 4))])  # rows for the padding ids (never drafted)
    runs = []
    for dense in (False, True):
        draft_model = FakeBackend(markov_logits(draft_table), VOCAB + 4)
        for sampling in (SamplingParams(0.8, 3, 1.0), SamplingParams(0.0, 0, 1.0)):
            config = GenerationConfig(draft_max=3, max_tokens=12, sampling=sampling, seed=4, dense_rows=dense)
            runs.append(_run(fake(target_table), ModelDrafter(draft_model, VOCAB), make("strict"), config))
        assert bool(draft_model.handed_candidates) != dense
    assert [t[:2] for t in runs[0] + runs[1]] == [t[:2] for t in runs[2] + runs[3]]


def test_releasing_a_drafter_sequence_hands_its_rows_whole_again():
    draft_model = fake(random_table(2))
    drafter = ModelDrafter(draft_model, VOCAB)
    drafter.draft([DraftRequest(0, [1, 2], 2, SamplingParams(0.8, 4, 0.9), np.random.default_rng(0))])
    assert draft_model.candidates
    drafter.release(0)
    assert not draft_model.candidates


@pytest.mark.model
@pytest.mark.parametrize("draft_kind", ["model", "mtp"])
def test_a_hybrid_verifier_on_candidate_rows_emits_what_whole_rows_do(tiny, draft_kind):
    """The tiny Qwen3.5 (recurrent layers beside attention: llama.cpp splits its batches the equal way even for one
    sequence, and rolls back through snapshots), drafted for by the dense tiny Qwen3 or by its own MTP head:
    greedy and sampled, candidate rows give the tokens and verdicts of whole rows, and copy far fewer bytes."""
    from relaxtui.decoding.drafters import DrafterOptions, make_drafter
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.session import GGUF

    prompt = [5, 17, 42, 7, 99, 3]
    for sampling in (SamplingParams(0.0, 0, 1.0), SamplingParams(0.8, 8, 0.95)):
        runs, copied = [], []
        for dense in (False, True):
            with LlamaModel(tiny.qwen35, n_ctx=256, mtp=draft_kind == "mtp") as verifier:
                options = (DrafterOptions(kind="model", model=tiny.dense, n_ctx=256) if draft_kind == "model"
                           else DrafterOptions(kind="mtp"))
                drafter = make_drafter(options, verifier, GGUF)
                try:
                    config = GenerationConfig(draft_max=3, max_tokens=24, sampling=sampling, seed=2, dense_rows=dense)
                    events = list(generate(verifier, prompt, config, drafter=drafter))
                finally:
                    drafter.close()
                assert isinstance(events[-1], Finished) and events[-1].metrics.drafted > 0
                runs.append([(e.token_id, e.verdict) for e in events if isinstance(e, TokenEvent)])
                copied.append(verifier.copied_bytes)
        assert runs[0] == runs[1] and len(runs[0]) == 24
        assert copied[0] < copied[1] / 4
