"""The eval runner with K sequences at once: the same records as one at a time, resumable, bad K refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from relaxtui.checks import BadValue
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.priced import PricedDrafter
from relaxtui.engine.capacity import capacity, check_parallel, kv_bytes_per_token
from relaxtui.engine.fake import FakeBackend
from relaxtui.errors import UserError
from relaxtui.evals.run.executors import ParallelExecutor
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import ResultsStore
from relaxtui.evals.run.runner import run_eval
from relaxtui.evals.tasks import get
from relaxtui.options import as_flag
from tests.support.cli import fails_with
from tests.support.eval_runs import DIGITS, PLAN
from tests.support.tiny_models import write_dense

SAME = ("task", "task_version", "problem_id", "config_id", "config", "seed", "repeat", "output", "parsed", "correct",
        "output_tokens", "prompt_tokens", "truncated", "finish_reason", "degenerate", "rounds", "drafted",
        "accepted", "draft_lengths", "extra_draft_steps", "full_accept_rounds", "per_position_reached",
        "per_position_accepted", "per_position_acceptance")


def digits(seed: int, n_seq: int) -> FakeBackend:
    table = np.random.default_rng(seed).normal(size=(10, 10))
    return FakeBackend(lambda ctx: table[ctx[-1]], 10, pieces=DIGITS, n_seq=n_seq)


def run(tmp_path, name, n_seq, should_stop=lambda: False, written=None):
    store = ResultsStore(tmp_path / name)
    run_eval(get("aime"), get("aime").load()[:3], PLAN, RunIdentity({"task": "aime", "note": "fake"}), store,
             digits(1, n_seq),
             ModelDrafter(digits(2, n_seq), 10), lambda sample: [len(sample.id) % 10],
             on_sample=written.append if written is not None else lambda _: None, should_stop=should_stop)
    return store


def keyed(store):
    return {(r["config_id"], r["problem_id"], r["seed"]): r for r in store.records()}


def test_parallel_records_equal_sequential_records(tmp_path):
    one, four = keyed(run(tmp_path, "one", 1)), keyed(run(tmp_path, "four", 4))
    assert len(one) == 18 and one.keys() == four.keys()
    for key, record in one.items():
        assert {f: four[key][f] for f in SAME} == {f: record[f] for f in SAME}
        assert set(four[key]) == set(record)  # the record format is unchanged


def test_parallel_run_resumes_with_nothing_lost_and_nothing_twice(tmp_path):
    written = []
    run(tmp_path, "run", 4, should_stop=lambda: len(written) >= 5, written=written)
    kept = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(kept) >= 5
    resumed = []
    store = run(tmp_path, "run", 4, written=resumed)
    assert len(kept) + len(resumed) == 18 and len(keyed(store)) == 18


def test_the_executor_is_chosen_by_the_context(tmp_path):
    from relaxtui.evals.run.executors import SequentialExecutor, local_executor

    assert isinstance(local_executor(digits(1, 1), None, list), SequentialExecutor)
    assert isinstance(local_executor(digits(1, 2), None, list), ParallelExecutor)


def test_capacity_names_the_largest_k_that_fits(test_model_path):
    room = capacity([test_model_path], 1024, available=test_model_path.stat().st_size + 2**30)
    assert room.bytes_per_sequence == 1024 * 23040  # SmolLM2: 30 layers x 3 KV heads x (64 + 64) x 2 bytes
    assert room.max_sequences == int(0.8 * 2**30) // room.bytes_per_sequence
    check_parallel(room.max_sequences, [test_model_path], 1024, available=test_model_path.stat().st_size + 2**30)
    with pytest.raises(UserError, match=f"holds at most {room.max_sequences} sequences of 1024 tokens"):
        check_parallel(room.max_sequences + 1, [test_model_path], 1024,
                       available=test_model_path.stat().st_size + 2**30)


def test_a_context_one_sequence_cannot_hold_is_refused_at_k_1_too(tmp_path, capsys):
    """K = 1 was never checked: a model trained for 2**30 tokens with --ctx-size 2**30 went to llama.cpp, which
    tried to allocate 128 GiB of KV cache. The engine caps a context at the trained length, and so does the check."""
    model = write_dense(tmp_path / "long.gguf", n_ctx_train=2**30)
    short = write_dense(tmp_path / "short.gguf")  # trained for 4096 tokens: any --ctx-size costs 4096 at most
    per_token = kv_bytes_per_token(model)
    assert per_token == 2 * 1 * (16 + 16) * 2  # 2 layers x 1 KV head x (K + V head dims) x f16
    spare = model.stat().st_size + 2**30
    fits = int(0.8 * 2**30) // per_token
    check_parallel(1, [model], fits, available=spare)
    with pytest.raises(UserError, match=rf"^ctx_size {2**30}: one sequence needs 131072 MiB .* at most {fits} fits"):
        check_parallel(1, [model], 2**30, available=spare)
    with pytest.raises(UserError, match=f"at most {fits} fits"):
        check_parallel(1, [model], fits + 1, available=spare)
    check_parallel(1, [short], 2**30, available=spare)
    assert capacity([short], 2**30, available=spare).bytes_per_sequence == 4096 * per_token
    fails_with(capsys, ["generate", "hi", "-m", str(model), "-md", "none", "--ctx-size", str(2**30)],
               f"--ctx-size {2**30}: one sequence needs")


@pytest.mark.parametrize("command", [["eval", "aime", "--limit", "1"], ["tune", "aime", "--limit", "1"]])
def test_parallel_zero_is_one_line(capsys, command):
    fails_with(capsys, [*command, "--parallel", "0"], "--parallel must be >= 1 (got 0)")


def test_parallel_beyond_the_context_is_one_line_with_the_largest_k(capsys, test_model_path, tmp_path):
    fails_with(capsys, ["eval", "aime", "--limit", "1", "-m", str(test_model_path), "--drafter", str(test_model_path),
                        "--no-spec", "--out", str(tmp_path / "x"), "--parallel", "100000"],
               "--parallel 100000: the context holds at most")
    with pytest.raises(BadValue) as refused:
        check_parallel(100000, [test_model_path], 64)
    assert refused.value.problem.endswith("; lower parallel or ctx_size")
    assert str(as_flag(refused.value)).endswith("; lower --parallel or --ctx-size")  # the command line's spelling


@pytest.mark.parametrize("n_seq", [1, 4])
def test_both_executors_run_a_drafter_cut_by_price_as_any_drafter(tmp_path, n_seq):
    """Priced drafting in eval: the pair hands the executors a drafter that cuts its own drafts (a PricedDrafter), and
    the cut is what every speculative unit runs with (each draft of 3 cut to at most 1); the verifier alone drafts
    nothing."""
    prices = (1.0, 1.1, 9.0, 9.0)
    store = ResultsStore(tmp_path / f"priced{n_seq}")
    drafter = PricedDrafter(ModelDrafter(digits(2, n_seq), 10), lambda: prices, 10)
    run_eval(get("aime"), get("aime").load()[:3], PLAN, RunIdentity({"task": "aime", "note": "priced"}), store,
             digits(1, n_seq), drafter, lambda sample: [len(sample.id) % 10])
    records = list(store.records())
    assert len(records) == 18
    assert all(max(r["draft_lengths"], default=0) <= 1 for r in records)
    assert any(max(r["draft_lengths"], default=0) == 1 for r in records if r["config"]["draft_max"] > 1)
