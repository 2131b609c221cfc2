"""The batched loop (many sequences per context) on the fake backend: the same law and the same tokens as the
one-sequence loop, one verifier batch per round, and sequences that never touch each other's caches."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import SeqDecode
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import UserError
from relaxtui.rules import make
from tests.support.markov import GREEDY, PLAIN, VOCAB, assert_two_step_law, cycle_table


def multi(table: np.ndarray, n_seq: int, **kwargs) -> FakeBackend:
    return FakeBackend(markov_logits(table), table.shape[1], n_seq=n_seq, **kwargs)


def run_many(verifier, jobs, drafter=None, **kwargs) -> dict[object, Finished]:
    return {job.tag: finished for job, finished in generate_many(verifier, jobs, drafter=drafter, **kwargs)}


def run_one(table, draft_table, job: Job) -> Finished:
    drafter = ModelDrafter(multi(draft_table, 1), VOCAB) if job.speculative else None
    *_, finished = generate(multi(table, 1), job.prompt, job.config, drafter=drafter, rule=job.rule)
    return finished


# -- the same tokens as K = 1 (the fake has no batched numerics, so agreement must be exact) ----------------------
@pytest.mark.parametrize("rule,knob", [("strict", None), ("cactus", 1.0), ("mentored", 0.7)])
@pytest.mark.parametrize("k", [2, 4])
def test_every_sequence_matches_its_one_sequence_run(markov_pair, rule, knob, k):
    target, draft = markov_pair
    jobs = [Job([i % VOCAB, (i * 2) % VOCAB], GenerationConfig(draft_max=1 + i % 3, max_tokens=12 + i,
                                                               sampling=PLAIN, seed=i),
                make(rule, knob) if i % 4 else None, speculative=i % 4 != 0, tag=i) for i in range(9)]
    results = run_many(multi(target, k), jobs, ModelDrafter(multi(draft, k), VOCAB))
    assert sorted(results) == list(range(9))
    for job in jobs:
        alone, batched = run_one(target, draft, job), results[job.tag]
        assert batched.token_ids == alone.token_ids
        assert batched.text == alone.text
        for name in ("rounds", "drafted", "accepted", "draft_lengths", "per_position_reached",
                     "per_position_accepted", "full_accept_rounds", "extra_draft_steps", "finish_reason"):
            assert getattr(batched.metrics, name) == getattr(alone.metrics, name), name


def test_strict_parallel_loop_emits_the_verifier_distribution(markov_pair):
    """Monte Carlo through the parallel loop (K = 8): the joint law of the first two emitted tokens matches the
    verifier's. Tolerance as in test_loop_fake: every cell within 5 standard errors plus 0.002."""
    target, draft = markov_pair
    runs = 3000
    jobs = (Job([0], GenerationConfig(draft_max=1, max_tokens=2, sampling=PLAIN, seed=seed), tag=seed)
            for seed in range(runs))
    counts = Counter(finished.token_ids[:2] for finished in
                     run_many(multi(target, 8), jobs, ModelDrafter(multi(draft, 8), VOCAB)).values())
    assert_two_step_law(counts, target, runs)


# -- batches ----------------------------------------------------------------------------------------------------
def test_one_verifier_batch_per_round_holds_every_live_sequence():
    verifier = multi(cycle_table(), 3)
    drafter = ModelDrafter(multi(cycle_table(), 3), VOCAB)
    jobs = [Job([i], GenerationConfig(draft_max=2, max_tokens=6, sampling=GREEDY), tag=i) for i in range(3)]
    run_many(verifier, jobs, drafter)
    # every draft is accepted: each round is one batch of three [last, x1, x2] blocks, two rounds per sequence
    assert verifier.batches == [((0, 3), (1, 3), (2, 3))] * 2
    # the drafter: one batch per draft step across the sequences (sync of `last` plus the next token)
    assert drafter.model.batches[:2] == [((0, 1), (1, 1), (2, 1)), ((0, 1), (1, 1), (2, 1))]


def test_a_sequence_rejected_at_its_first_draft_leaves_its_neighbours_caches_alone():
    """Sequence 0 ends on token 2, where the drafter says 4 and the verifier 3: rejected at draft 1. Its
    neighbours' drafts are all accepted in the same batch; their caches and tokens are those of a lone run."""
    table, draft_table = cycle_table(), cycle_table(mistake_after=2)
    verifier = multi(table, 3)
    drafter = ModelDrafter(multi(draft_table, 3), VOCAB)
    config = GenerationConfig(draft_max=3, max_tokens=4, sampling=GREEDY)
    jobs = [Job([0, 1, 2], config, tag=0), Job([3], config, tag=1), Job([4, 5], config, tag=2)]
    results = run_many(verifier, jobs, drafter)
    assert results[0].metrics.draft_lengths[0] == 3 and results[0].token_ids[0] == 3  # x1 = 4 rejected, 3 resampled
    assert results[0].metrics.per_position_accepted[0] < results[0].metrics.per_position_reached[0]
    assert ((0, 4), (1, 4), (2, 4)) in verifier.batches  # all three verified in one batch
    for job in jobs:
        assert results[job.tag].token_ids == run_one(table, draft_table, job).token_ids
        context = [*job.prompt, *results[job.tag].token_ids]
        assert list(verifier.tokens_of(job.tag)) == context[:-1]  # everything but `last`, nothing else


def test_rollback_of_one_sequence_touches_no_other():
    backend = multi(cycle_table(), 2)
    backend.decode_many([backend_item(0, [1, 2, 3, 4]), backend_item(1, [5, 0, 1])])
    backend.rollback(0, 1)
    assert backend.tokens_of(0) == [1] and backend.tokens_of(1) == [5, 0, 1]
    backend.clear(1)
    assert backend.tokens_of(0) == [1] and backend.tokens_of(1) == []


def backend_item(seq, tokens):
    from relaxtui.engine.api import SeqDecode

    return SeqDecode(seq, tokens, [-1])


# -- drafters without a model, stopping, bad input ------------------------------------------------------------------
def test_ngram_drafter_runs_per_sequence():
    prompt = [1, 2, 3, 1, 2]
    jobs = [Job(prompt, GenerationConfig(draft_max=2, max_tokens=8, sampling=GREEDY, seed=i), tag=i)
            for i in range(3)]
    results = run_many(multi(cycle_table(), 2), jobs, NgramDrafter())
    *_, alone = generate(multi(cycle_table(), 1), prompt, jobs[0].config, drafter=NgramDrafter())
    assert all(f.token_ids == alone.token_ids for f in results.values())
    assert all(f.metrics.drafted == alone.metrics.drafted > 0 for f in results.values())


def test_stop_request_ends_every_live_sequence_and_starts_no_more():
    polls = iter([False, False, True] + [True] * 100)
    jobs = [Job([i], GenerationConfig(draft_max=0, max_tokens=50, sampling=GREEDY), tag=i) for i in range(5)]
    results = run_many(multi(cycle_table(), 2), jobs, should_stop=polls.__next__)
    assert sorted(results) == [0, 1]
    assert {f.metrics.finish_reason for f in results.values()} == {"stopped"}


def test_drafter_with_fewer_sequences_than_the_verifier_is_refused():
    with pytest.raises(UserError, match="^parallel must be the same for both models"):
        list(generate_many(multi(cycle_table(), 4), [], drafter=ModelDrafter(multi(cycle_table(), 2), VOCAB)))


def test_end_of_generation_and_context_limits_per_sequence():
    table = cycle_table()
    config = GenerationConfig(draft_max=2, max_tokens=40, sampling=GREEDY)
    jobs = [Job([0], config, tag="eog"), Job([4, 5, 0], config, tag="long")]
    verifier = FakeBackend(markov_logits(table), VOCAB, n_seq=2, eog=3)
    results = run_many(verifier, jobs, ModelDrafter(multi(table, 2), VOCAB))
    assert results["eog"].token_ids == (1, 2) and results["eog"].metrics.finish_reason == "eog"
    assert results["long"].token_ids == (1, 2) and results["long"].metrics.finish_reason == "eog"
    jobs = [Job([0], config, tag="short"), Job([4, 5, 0], config, tag="ctx")]
    results = run_many(multi(table, 2, n_ctx=10), jobs, ModelDrafter(multi(table, 2, n_ctx=10), VOCAB))
    assert {f.metrics.finish_reason for f in results.values()} == {"context"}
    for job in jobs:
        *_, alone = generate(multi(table, 1, n_ctx=10), job.prompt, config,
                             drafter=ModelDrafter(multi(table, 1, n_ctx=10), VOCAB))
        assert results[job.tag].token_ids == alone.token_ids and alone.metrics.finish_reason == "context"


def test_greedy_rule_check_applies_to_each_job():
    job = Job([0], GenerationConfig(sampling=SamplingParams(temperature=0.0)), make("rfuzzy", 0.1))
    with pytest.raises(UserError, match="cannot run greedy"):
        list(generate_many(multi(cycle_table(), 2), [job], drafter=ModelDrafter(multi(cycle_table(), 2), VOCAB)))


def test_a_prompt_another_sequence_holds_is_copied_not_prefilled(markov_pair):
    """Three configs of one problem start side by side: the first prefills the prompt on both models, the other
    two copy it from that sequence (no prefill batch of theirs), and every output is its one-sequence run's."""
    target, draft = markov_pair
    prompt = [1, 2, 3, 4, 5]
    jobs = [Job(prompt, GenerationConfig(draft_max=n, max_tokens=6, sampling=PLAIN, seed=7), make("strict", None),
                speculative=n > 0, tag=n) for n in (0, 2, 3)]
    verifier, drafter = multi(target, 3), ModelDrafter(multi(draft, 3), VOCAB)
    results = run_many(verifier, jobs, drafter)
    assert verifier.shared == [(0, 1, 4), (0, 2, 4)]  # the prompt but its last token, from sequence 0
    assert drafter.model.shared == [(1, 2, 4)]  # the no-spec job (sequence 0) never drafts: sequence 1 prefilled
    # slots fill before the first round: one prefill batch, then rounds holding all three sequences
    assert verifier.batches[0] == ((0, 4),) and [seq for seq, _ in verifier.batches[1]] == [0, 1, 2]
    for job in jobs:
        assert results[job.tag].token_ids == run_one(target, draft, job).token_ids


def test_no_copy_from_a_sequence_whose_cache_only_starts_like_the_prompt(markov_pair):
    target, _ = markov_pair
    verifier = multi(target, 2)
    jobs = [Job([1, 2, 3], GenerationConfig(max_tokens=3, sampling=GREEDY), speculative=False, tag=0),
            Job([1, 2, 4, 5], GenerationConfig(max_tokens=3, sampling=GREEDY), speculative=False, tag=1)]
    run_many(verifier, jobs)
    assert verifier.shared == []  # [1, 2] is shared but [1, 2, 4] is not held anywhere: a full prefill


# -- bench --parallel on the fake -----------------------------------------------------------------------------------
def test_parallel_bench_reports_every_k_and_mode_with_summed_throughput():
    from relaxtui.costmodel.parallel_bench import run_parallel_bench

    verifier, drafter = multi(cycle_table(), 4), ModelDrafter(multi(cycle_table(), 4), VOCAB)
    runs = run_parallel_bench(verifier, drafter, [[0], [3, 4]], ks=[1, 2, 4], draft_max=2, max_tokens=5, passes=2)
    assert [(r.k, r.mode, r.draft_max) for r in runs] == [(k, m, 2 if m == "strict" else 0) for k in (1, 2, 4)
                                                          for m in ("no-spec", "strict")]
    for r in runs:
        assert r.output_tokens == 2 * 5 * r.k and r.tokens_per_s > 0 and r.per_sequence_tokens_per_s > 0
    assert runs[0].speedup_vs_k1 == 1.0 and runs[1].spec_vs_no_spec > 0 and runs[1].acceptance_rate == 1.0



def test_parallel_bench_table_names_the_k_its_ratios_are_against():
    """Ratios divide by the smallest K run; the table says which K that is (not "K=1" when 1 was not run)."""
    from relaxtui.commands.bench import render_parallel
    from relaxtui.costmodel.parallel_bench import ParallelRun, _relative

    runs = _relative([ParallelRun(k, "no-spec", 0, rate, rate / k, 10, 0.0) for k, rate in ((2, 10.0), (4, 15.0))])
    table = render_parallel(runs, {"passes": 1})
    assert runs[1].speedup_vs_k1 == 1.5 and "vs K=2" in table and "vs K=1" not in table
    assert "best K for the verifier alone: K=4, 1.50x its K=2 throughput" in table

def test_time_the_caller_spends_between_results_is_not_decode_time(markov_pair):
    """Scoring and writing a finished record happen while the other sequences wait: their decode time must not
    grow by it (a fake clock that only the caller advances, by 100 s per result)."""
    target, draft = markov_pair
    now = [0.0]
    jobs = [Job([i, i + 1], GenerationConfig(draft_max=2, max_tokens=4 + 3 * i, sampling=PLAIN, seed=i), tag=i)
            for i in range(3)]
    seen = []
    for _, finished in generate_many(multi(target, 3), jobs, drafter=ModelDrafter(multi(draft, 3), VOCAB),
                                     clock=lambda: now[0]):
        seen.append(finished.metrics.decode_s)
        now[0] += 100.0  # the caller's work
    assert len(seen) == 3 and seen == [0.0, 0.0, 0.0]


# -- stream_many: jobs taken while it runs, every event, per-job stop and drafter ------------------------------------
class Source:
    """A job source that records how it was asked (block only when nothing is live)."""

    def __init__(self, jobs):
        self.jobs, self.asked = list(jobs), []

    def take(self, *, block):
        self.asked.append(block)
        return self.jobs.pop(0) if self.jobs else None


def test_stream_many_yields_each_jobs_events_as_the_one_sequence_loop_does(markov_pair):
    from relaxtui.decoding.batched import stream_many
    from relaxtui.decoding.events import TokenEvent

    target, draft = markov_pair
    jobs = [Job([i, 1], GenerationConfig(draft_max=2, max_tokens=7 + i, sampling=PLAIN, seed=i, top_alternatives=2),
                make("cactus", 1.0), tag=i) for i in range(5)]
    source = Source(jobs)
    events: dict[int, list] = {}
    for job, event in stream_many(multi(target, 2), source, drafter=ModelDrafter(multi(draft, 2), VOCAB)):
        events.setdefault(job.tag, []).append(event)
    assert source.asked[0] is True and source.asked[1] is False  # it waits for a job only when none is live
    for job in jobs:
        lone = list(generate(multi(target, 1), job.prompt, job.config, drafter=ModelDrafter(multi(draft, 1), VOCAB),
                             rule=job.rule))
        mine = events[job.tag]
        assert isinstance(mine[-1], Finished) and mine[-1].token_ids == lone[-1].token_ids
        assert [(e.index, e.token_id, e.verdict, e.top_p) for e in mine[:-1] if isinstance(e, TokenEvent)] == [
            (e.index, e.token_id, e.verdict, e.top_p) for e in lone[:-1]]


def test_a_jobs_own_stop_ends_it_alone_and_its_slot_takes_the_next(markov_pair):
    from relaxtui.decoding.batched import stream_many

    target, draft = markov_pair
    polls = iter([False, True] + [True] * 100)
    config = GenerationConfig(draft_max=2, max_tokens=10, sampling=PLAIN)
    jobs = [Job([0], config, tag="gone", should_stop=polls.__next__), Job([1], config, tag="a"),
            Job([2], config, tag="b")]
    finished = {job.tag: e for job, e in stream_many(multi(target, 2), Source(jobs),
                                                      drafter=ModelDrafter(multi(draft, 2), VOCAB))
                if isinstance(e, Finished)}
    assert finished["gone"].metrics.finish_reason == "stopped" and finished["gone"].metrics.rounds == 1
    assert finished["a"].metrics.finish_reason == finished["b"].metrics.finish_reason == "max_tokens"


def test_a_job_may_draft_with_another_drafter_than_the_loops(markov_pair):
    target, draft = markov_pair
    prompt = [1, 2, 3, 1, 2]
    config = GenerationConfig(draft_max=2, max_tokens=8, sampling=GREEDY)
    lookup = NgramDrafter()
    jobs = [Job(prompt, config, tag="ngram", drafter=lookup), Job(prompt, config, tag="model")]
    results = run_many(multi(target, 2), jobs, ModelDrafter(multi(draft, 2), VOCAB))
    *_, alone = generate(multi(target, 1), prompt, config, drafter=NgramDrafter())
    assert results["ngram"].token_ids == alone.token_ids
    assert results["ngram"].metrics.draft_lengths == alone.metrics.draft_lengths
    assert results["model"].token_ids == run_one(target, draft, jobs[1]).token_ids


def test_a_job_stopped_before_its_prefill_reads_no_prompt_and_stops_no_other():
    """A job whose own stop request is already set when it takes a slot (a client gone while it waited) ends
    "stopped" without prefilling its prompt; the other jobs run to their end."""
    verifier = multi(cycle_table(), 2)
    config = GenerationConfig(draft_max=0, max_tokens=3, sampling=GREEDY)
    jobs = [Job([1, 2, 3, 4, 5], config, tag="gone", should_stop=lambda: True), Job([0], config, tag="kept"),
            Job([2], config, tag="next")]
    results = run_many(verifier, jobs)
    assert results["gone"].metrics.finish_reason == "stopped" and results["gone"].token_ids == ()
    assert (0, 4) not in [item for batch in verifier.batches for item in batch]  # its 4-token prefill never ran
    assert results["kept"].metrics.finish_reason == results["next"].metrics.finish_reason == "max_tokens"


# -- joining in the verify batch (the server's continuous batching) -------------------------------------------------
class Drip:
    """A source that hands out a job on every ``every``-th call that need not block: requests arriving while others
    run."""

    def __init__(self, jobs, every=3):
        self.jobs, self.every, self.calls = list(jobs), every, 0

    def take(self, *, block):
        self.calls += 1
        if self.jobs and (block or self.calls % self.every == 0):
            return self.jobs.pop(0)
        return None


def _joined(verifier, jobs, drafter, *, join_in_batch=True, every=3) -> dict[object, Finished]:
    from relaxtui.decoding.batched import stream_many

    return {job.tag: event for job, event in stream_many(verifier, Drip(jobs, every), drafter=drafter, tokens=False,
                                                          join_in_batch=join_in_batch)}


@pytest.mark.parametrize("rule,knob", [("strict", None), ("cactus", 1.0)])
def test_a_prompt_that_joins_in_the_verify_batch_changes_no_token(markov_pair, rule, knob):
    """Jobs arriving while others run send their prompts (of 1 to 9 tokens) in the running verify batches: every
    job's tokens and counters equal its one-sequence run's, its prefill counts every prompt token it decoded, and
    prompts that rode along leave no batch of their own (fewer verifier batches than prefilling each alone)."""
    target, draft = markov_pair
    jobs = [Job([(i + j) % VOCAB for j in range(1 + i)], GenerationConfig(draft_max=2, max_tokens=8 + i,
                                                                         sampling=PLAIN, seed=i),
                make(rule, knob), tag=i) for i in range(9)]
    riding, alone_each = multi(target, 3), multi(target, 3)
    results = _joined(riding, jobs, ModelDrafter(multi(draft, 3), VOCAB))
    _joined(alone_each, jobs, ModelDrafter(multi(draft, 3), VOCAB), join_in_batch=False)
    assert sorted(results) == list(range(9))
    for job in jobs:
        lone, mine = run_one(target, draft, job), results[job.tag]
        assert mine.token_ids == lone.token_ids
        for name in ("rounds", "drafted", "accepted", "draft_lengths", "per_position_accepted", "finish_reason"):
            assert getattr(mine.metrics, name) == getattr(lone.metrics, name), name
        assert mine.metrics.prefill_decoded == len(job.prompt) - 1 and mine.metrics.prefill_s >= 0
    assert len(riding.batches) < len(alone_each.batches)
    mixed = [b for b in riding.batches if any(n == 3 for _, n in b) and any(n > 3 or n < 3 for _, n in b)]
    assert mixed  # some batch held a verify block ([last, x1, x2]) next to a joining prompt


def test_choices_of_one_prompt_that_join_together_read_it_once(markov_pair):
    """Three choices of one prompt (n = 3) arriving together: one reads the prompt, the others copy it."""
    target, draft = markov_pair
    prompt = [1, 2, 3, 4, 5, 0, 1]
    jobs = [Job(prompt, GenerationConfig(draft_max=2, max_tokens=6, sampling=PLAIN, seed=i), tag=i)
            for i in range(3)]
    results = _joined(multi(target, 3), jobs, ModelDrafter(multi(draft, 3), VOCAB), every=1)
    assert sorted(r.metrics.prefill_decoded for r in results.values()) == [0, 0, len(prompt) - 1]
    for job in jobs:
        assert results[job.tag].token_ids == run_one(target, draft, job).token_ids


def test_a_joining_job_whose_client_left_stops_alone(markov_pair):
    target, draft = markov_pair
    config = GenerationConfig(draft_max=2, max_tokens=5, sampling=PLAIN)
    jobs = [Job([1, 2, 3, 4], config, tag="kept"), Job([0, 1, 2, 3, 4, 5], config, tag="gone",
                                                      should_stop=lambda: True), Job([2], config, tag="next")]
    results = _joined(multi(target, 2), jobs, ModelDrafter(multi(draft, 2), VOCAB), every=1)
    assert results["gone"].metrics.finish_reason == "stopped" and results["gone"].token_ids == ()
    assert results["kept"].metrics.finish_reason == results["next"].metrics.finish_reason == "max_tokens"


def test_longest_reuse_copies_the_longest_common_prefix_another_sequence_holds(markov_pair):
    """A server's prompt cache ("longest"): a new prompt that shares its first tokens (a system prompt) with what
    another sequence holds copies those and decodes the rest; "exact" copies only a whole prompt."""
    from relaxtui.decoding.prefill import copy_cached_prompt, prefill

    target, _ = markov_pair
    verifier = multi(target, 3)
    verifier.decode_many([SeqDecode(1, [1, 2, 3, 4, 5]), SeqDecode(2, [1, 2, 0])])
    copy_cached_prompt(verifier, 0, [1, 2, 3, 4, 0, 1], "exact")
    assert verifier.shared == [] and list(verifier.tokens_of(0)) == []
    copy_cached_prompt(verifier, 0, [1, 2, 3, 4, 0, 1], "longest")
    assert verifier.shared == [(1, 0, 4)] and list(verifier.tokens_of(0)) == [1, 2, 3, 4]
    assert prefill(verifier, 0, [1, 2, 3, 4, 0, 1], reuse="longest") == (2, True)  # only the rest is decoded


def test_longest_reuse_on_the_joining_path_changes_no_token(markov_pair):
    """Jobs whose prompts share a prefix, joining while others run with reuse "longest": each decodes only what no
    sequence held, and the fake (no batched numerics) gives each its one-sequence tokens."""
    target, draft = markov_pair
    jobs = [Job([1, 2, 3, 4, i % VOCAB, 0], GenerationConfig(draft_max=2, max_tokens=6, sampling=PLAIN, seed=i,
                                                             reuse="longest"), tag=i) for i in range(6)]
    results = _joined(multi(target, 3), jobs, ModelDrafter(multi(draft, 3), VOCAB))
    assert sum(r.metrics.prefill_decoded for r in results.values()) < sum(len(j.prompt) - 1 for j in jobs)
    for job in jobs:
        assert results[job.tag].token_ids == run_one(target, draft, job).token_ids


@pytest.mark.parametrize("join_in_batch", [False, True])
def test_every_batch_lists_its_sequences_in_increasing_order(markov_pair, join_in_batch):
    """llama.cpp keeps one KV stream per sequence and puts only consecutive, increasing sequence ids in one
    micro-batch; jobs that end at different times hand their slots out of order, yet every verifier and drafter
    batch lists its sequences in increasing order, and a freed slot is refilled lowest id first."""
    target, draft = markov_pair
    jobs = [Job([i % VOCAB, 1], GenerationConfig(draft_max=2, max_tokens=3 + (7 * i) % 11, sampling=PLAIN, seed=i),
                tag=i) for i in range(14)]
    verifier, drafter = multi(target, 4), ModelDrafter(multi(draft, 4), VOCAB)
    results = _joined(verifier, jobs, drafter, join_in_batch=join_in_batch, every=2)
    assert sorted(results) == list(range(14))
    for batch in verifier.batches + drafter.model.batches:
        seqs = [seq for seq, _ in batch]
        assert seqs == sorted(seqs), batch
    for job in jobs:
        assert results[job.tag].token_ids == run_one(target, draft, job).token_ids
