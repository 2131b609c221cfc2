"""Recorded rounds (decoding/round_rows.py, costmodel/replay_rows.py): opt-in and free when off, bounded, the same in
both loops, written beside an eval run's results before each line, never recomputed on resume, read back as outside
bytes."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from relaxtui.costmodel.replay import RecordedRun, replay
from relaxtui.costmodel.replay_rows import ROWS_DIR, pack, read_rows, recorded_run, rows_path, unpack
from relaxtui.decoding import round as steps
from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.round_rows import K_MAX, POSITION_BYTES
from relaxtui.decoding.sampling import SamplingParams, softmax
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.run.units import ROWS_FIELD
from relaxtui.evals.tasks import get
from relaxtui.rules import make
from tests.support.eval_runs import DIGITS, PLAN

WIDE = 100  # a vocabulary wider than K_MAX
TARGET = np.random.default_rng(5).normal(size=(WIDE, WIDE))
DRAFT = TARGET + np.random.default_rng(6).normal(scale=0.5, size=(WIDE, WIDE))
PLAIN = SamplingParams(1.0, 0, 1.0)
BOUNDED = SamplingParams(0.8, 8, 0.95)


def finished(config: GenerationConfig, n_seq: int = 1) -> Finished:
    verifier = FakeBackend(markov_logits(TARGET), WIDE, n_seq=n_seq)
    drafter = ModelDrafter(FakeBackend(markov_logits(DRAFT), WIDE, n_seq=n_seq), WIDE)
    if n_seq == 1:
        last = list(generate(verifier, [0], config, drafter=drafter))[-1]
        assert isinstance(last, Finished)
        return last
    return next(done for _, done in generate_many(verifier, [Job([0], config)], drafter=drafter))


def test_off_by_default_and_nothing_runs_for_it(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("recorded a round with record_rows off")

    monkeypatch.setattr(steps, "record_round", refuse)
    assert GenerationConfig().record_rows is False
    for n_seq in (1, 2):
        assert finished(GenerationConfig(draft_max=3, max_tokens=20, sampling=PLAIN), n_seq).round_rows == ()
    with pytest.raises(AssertionError, match="recorded a round"):  # (the patch is where the loop calls it)
        finished(GenerationConfig(draft_max=3, max_tokens=20, sampling=PLAIN, record_rows=True))


def test_both_loops_record_the_same_rounds():
    config = GenerationConfig(draft_max=3, max_tokens=24, sampling=BOUNDED, seed=4, record_rows=True)
    one, batched = finished(config), finished(config, n_seq=2)
    assert one.token_ids == batched.token_ids
    assert [r.tokens for r in one.round_rows] == [r.tokens for r in batched.round_rows]
    assert [r.n_accepted for r in one.round_rows] == [r.n_accepted for r in batched.round_rows]
    assert [r.index for r in one.round_rows] == list(range(one.metrics.rounds))
    assert sum(r.n_accepted for r in one.round_rows) == one.metrics.accepted


def test_rows_are_bounded_and_the_drafted_tokens_probabilities_exact():
    """No top-k over 100 tokens: each row keeps its 32 likeliest entries and the mass left out, while p(x) and q(x)
    are the exact processed probabilities; bounded sampling keeps the whole support and drops nothing."""
    done = finished(GenerationConfig(draft_max=4, max_tokens=32, sampling=PLAIN, seed=1, record_rows=True))
    drafted = [r for r in done.round_rows if r.tokens]
    assert drafted
    for rows in drafted:
        for side in (rows.p, rows.q):
            assert side.ids.shape == (len(rows.tokens), K_MAX) and side.probs.dtype == np.float32
            assert not side.ids.flags.writeable and not side.at_x.flags.writeable
            assert np.all(side.rest > 0.01)
            assert np.allclose(side.probs.sum(axis=1) + side.rest, 1.0, atol=1e-5)
            assert np.all(np.diff(side.probs, axis=1) <= 0)  # likeliest first
            in_memory = side.ids.nbytes + side.probs.nbytes + side.rest.nbytes + side.at_x.nbytes
            assert in_memory <= len(rows.tokens) * POSITION_BYTES / 2
        for i, x in enumerate(rows.tokens[1:], start=1):  # (a Markov row: the previous draft's)
            assert rows.p.at_x[i] == pytest.approx(softmax(TARGET[rows.tokens[i - 1]])[x], rel=1e-6)
            assert rows.q.at_x[i] == pytest.approx(softmax(DRAFT[rows.tokens[i - 1]])[x], rel=1e-6)
    bounded = finished(GenerationConfig(draft_max=4, max_tokens=32, sampling=BOUNDED, seed=1, record_rows=True))
    for rows in bounded.round_rows:
        assert rows.p.ids.shape[1] <= 8 and not rows.p.rest.any() and not rows.q.rest.any()
    packed = pack(done.round_rows, _meta())
    assert len(packed) <= POSITION_BYTES * sum(len(r.tokens) for r in drafted) + 4096  # npz overhead


def _meta(**changes) -> dict:
    return {"problem_id": "p", "seed": 0, "draft_max": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "finish_reason": "max_tokens", "config_id": "abc", **changes}


def test_a_rows_file_reads_back_as_it_was_written():
    done = finished(GenerationConfig(draft_max=4, max_tokens=32, sampling=PLAIN, seed=2, record_rows=True))
    meta, rounds = unpack(pack(done.round_rows, _meta()))
    assert meta["problem_id"] == "p" and len(rounds) == len(done.round_rows)
    for read, kept in zip(rounds, done.round_rows, strict=True):
        assert (read.index, read.tokens, read.n_accepted, read.has_distribution) == \
            (kept.index, kept.tokens, kept.n_accepted, kept.has_distribution)
        for a, b in ((read.p, kept.p), (read.q, kept.q)):
            width = b.ids.shape[1]
            assert np.array_equal(a.ids[:, :width], b.ids) and np.array_equal(a.probs[:, :width], b.probs)
            assert np.array_equal(a.at_x, b.at_x) and np.array_equal(a.rest, b.rest)
    run = recorded_run(meta, rounds)
    again = RecordedRun(done.round_rows, PLAIN, 4)
    mentored = make("mentored", 0.7)
    assert replay([run], mentored).rounds == replay([again], mentored).rounds


# -- the eval run writes them ---------------------------------------------------------------------------------------
def digit_backend(seed: int, n_seq: int = 1) -> FakeBackend:
    table = np.random.default_rng(seed).normal(size=(10, 10))
    return FakeBackend(lambda ctx: table[ctx[-1]], 10, pieces=DIGITS, n_seq=n_seq)


def eval_run(tmp_path, plan, *, n_seq=1, should_stop=lambda: False, written=None):
    store = ResultsStore(tmp_path / "run")
    run_eval(get("aime"), get("aime").load()[:3], plan, RunIdentity({"task": "aime", "note": "fake"}), store,
             digit_backend(1, n_seq), ModelDrafter(digit_backend(2, n_seq), 10), lambda s: [len(s.id) % 10],
             on_sample=written.append if written is not None else lambda _: None, should_stop=should_stop)
    return store


@pytest.mark.parametrize("n_seq", [1, 2], ids=["sequential", "parallel"])
def test_an_eval_run_writes_each_speculative_units_rows_beside_its_record(tmp_path, n_seq):
    plan = replace(PLAN, record_rows=True, max_tokens=12)
    store = eval_run(tmp_path, plan, n_seq=n_seq)
    records = list(store.records())
    assert records and not any(ROWS_FIELD in r for r in records)  # never in a result line
    for record in records:
        path = rows_path(store.directory, record["config_id"], record["problem_id"], record["seed"])
        assert path.exists() == (record["config"]["rule"] is not None), record["config"]["label"]
    read = read_rows(store.directory)
    assert not read.skipped
    speculative = {r["config_id"] for r in records if r["config"]["rule"] is not None}
    assert set(read.runs) == speculative
    for config_id, runs in read.runs.items():
        mine = {(r["problem_id"], r["seed"]): r for r in records if r["config_id"] == config_id}
        for run in runs:
            record = mine[(run.problem_id, run.seed)]
            assert sum(r.n_accepted for r in run.rounds) == record["accepted"]
            assert [len(r.tokens) for r in run.rounds] == record["draft_lengths"]
            assert run.draft_max == 2 and run.sampling == plan.sampling


def test_no_rows_unless_the_plan_asks(tmp_path):
    store = eval_run(tmp_path, replace(PLAN, max_tokens=8))
    assert not (store.directory / ROWS_DIR).exists()


def test_a_resumed_run_never_recomputes_a_finished_units_rows(tmp_path):
    plan = replace(PLAN, record_rows=True, max_tokens=8)
    written: list = []
    store = eval_run(tmp_path, plan, should_stop=lambda: len(written) >= 7, written=written)
    first = {path: path.stat().st_mtime_ns for path in (store.directory / ROWS_DIR).rglob("*.npz")}
    recorded_keys = [(r["config_id"], r["problem_id"], r["seed"]) for r in store.records()
                     if r["config"]["rule"] is not None]
    assert len(first) == len(recorded_keys)  # a line, its rows: and no rows without a line
    for path in first:
        os.utime(path, ns=(1, 1))  # a rewrite would change it
    eval_run(tmp_path, plan)
    after = {path: path.stat().st_mtime_ns for path in (store.directory / ROWS_DIR).rglob("*.npz")}
    assert all(after[path] == 1 for path in first)
    assert len(after) == sum(1 for r in store.records() if r["config"]["rule"] is not None)


def test_damaged_rows_files_are_skipped_and_counted(tmp_path):
    store = eval_run(tmp_path, replace(PLAN, record_rows=True, max_tokens=8))
    paths = sorted((store.directory / ROWS_DIR).rglob("*.npz"))
    assert len(paths) >= 4
    paths[0].write_bytes(b"not a zip")
    paths[1].write_bytes(paths[1].read_bytes()[:100])  # torn
    done = finished(GenerationConfig(draft_max=3, max_tokens=12, sampling=PLAIN, record_rows=True))
    paths[2].write_bytes(pack(done.round_rows, _meta(temperature="hot")))
    bad = unpack(pack(done.round_rows, _meta()))  # a NaN where a probability is
    rows = bad[1][0]
    probs = np.array(rows.p.probs)
    probs[0, 0] = np.nan
    paths[3].write_bytes(pack([replace(rows, p=replace(rows.p, probs=probs)), *bad[1][1:]], _meta()))
    read = read_rows(store.directory)
    assert sum(read.skipped.values()) == 4, read.skipped
    assert sum(len(runs) for runs in read.runs.values()) == len(paths) - 4
    assert set(read.skipped) == {"not a .npz file", "its header's 'temperature' is missing or wrong",
                                 "a probability or an id is out of range"}
