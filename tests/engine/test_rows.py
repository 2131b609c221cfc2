"""One row interface for both kinds (issue 32): a whole row and its top answer the same questions with the same
numbers, whole rows are views of the engine's block (never copies), the acceptance step attaches the rows behind
a token only when asked, and nothing outside ``engine/rows.py`` asks which kind of row it holds."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from relaxtui.decoding.acceptance import Acceptance, accept_draft
from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Verdict, likeliest
from relaxtui.decoding.sampling import SamplingParams, process
from relaxtui.engine.api import RowSpec, WholeRow, WholeRows, as_row, as_rows, top_of
from relaxtui.errors import NumericsError
from relaxtui.rules import make

TOLERANCE = 1e-6
PACKAGE = Path(__file__).resolve().parents[2] / "relaxtui"


def logits(seed: int, vocab: int = 3000) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=3.0, size=vocab).astype(np.float32)


@pytest.mark.parametrize("seed", range(10))
def test_a_whole_row_and_its_top_answer_alike(seed):
    row = logits(seed)
    whole, top = WholeRow(row), top_of(row, RowSpec(40, normaliser=True))
    reference = row.astype(np.float64)
    lse = reference.max() + np.log(np.exp(reference - reference.max()).sum())
    assert whole.vocab_size == top.vocab_size == 3000 and whole.complete and not top.complete
    assert whole.argmax() == top.argmax() == int(np.argmax(row))
    assert whole.log_norm == pytest.approx(lse, abs=TOLERANCE) and top.log_norm == pytest.approx(lse, abs=TOLERANCE)
    inside = whole.argmax()
    assert whole.log_prob(inside) == pytest.approx(top.log_prob(inside), abs=TOLERANCE)
    assert top.log_prob(int(np.argmin(row))) is None and whole.log_prob(int(np.argmin(row))) < -5
    assert whole.top_prob() == pytest.approx(top.top_prob(), abs=TOLERANCE)
    for sampling in (SamplingParams(0.6, 20, 0.95), SamplingParams(1.3, 40, 1.0)):
        ids_w, probs_w = whole.kept(sampling.temperature, sampling.top_k, sampling.top_p)
        ids_t, probs_t = top.kept(sampling.temperature, sampling.top_k, sampling.top_p)
        assert list(ids_w) == list(ids_t) and np.all(np.diff(ids_w) > 0)  # the same ids, ascending
        assert np.allclose(probs_w, probs_t, rtol=0, atol=TOLERANCE) and sum(probs_t) == pytest.approx(1.0)
    p_whole, ids_whole = whole.shown()
    p_top, ids_top = top.shown()
    assert ids_whole is None and np.allclose(p_whole[ids_top], p_top, rtol=0, atol=TOLERANCE)
    assert np.array_equal(whole.vocab_logits(), row) and top.vocab_logits() is None


def test_a_top_without_its_normaliser_shows_nothing_and_guesses_nothing():
    top = top_of(logits(0), RowSpec(1))
    assert top.log_norm is None and top.log_prob(top.argmax()) is None and top.shown() == (None, None)
    with pytest.raises(ValueError, match="normaliser"):
        top.top_prob()


def test_a_complete_top_is_the_whole_row():
    row = logits(1, vocab=12)
    top = top_of(row, RowSpec(12))
    assert top.complete and np.array_equal(top.vocab_logits(), row)
    sampling = SamplingParams(0.8, 0, 0.9)  # top-p alone: fine on a row that holds every id
    assert np.allclose(process(top, sampling), process(row, sampling), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("make_row", [WholeRow, lambda r: top_of(r, RowSpec(3)), lambda r: top_of(r, RowSpec(1))])
def test_a_non_finite_maximum_raises_from_either_kind(make_row):
    row = logits(2, vocab=10)
    row[4] = np.nan if make_row is WholeRow else np.inf
    with pytest.raises(NumericsError, match="non-finite"):
        make_row(row).argmax()


def test_fitting_either_kind_to_a_padded_vocabulary():
    row = logits(3, vocab=10)
    padded = WholeRow(row).fitted(14)
    assert padded.vocab_size == 14 and np.all(np.isneginf(padded.logits[10:])) and padded.argmax() == np.argmax(row)
    assert WholeRow(row).fitted(8).vocab_size == 8
    cut = top_of(row, RowSpec(10)).fitted(8)
    assert cut.vocab_size == 8 and set(cut.ids.tolist()) == set(range(8))


def test_whole_rows_are_views_of_the_block():
    block = np.random.default_rng(4).normal(size=(4, 50)).astype(np.float32)
    rows = as_rows(block)
    assert isinstance(rows, WholeRows) and rows.block is block and len(rows) == 4
    assert all(np.shares_memory(row.logits, block) for row in rows)
    assert np.shares_memory(rows[1].logits, block) and rows[-1].argmax() == int(np.argmax(block[-1]))
    tail = rows[1:]
    assert isinstance(tail, WholeRows) and np.shares_memory(tail.block, block) and len(tail) == 3
    assert np.shares_memory(np.asarray(rows[2]), block)  # numpy sees the engine's array itself


def test_rows_that_are_rows_already_pass_through():
    tops = [top_of(logits(5), RowSpec(4)) for _ in range(3)]
    assert as_rows(tops) is tops and as_rows([]) == []
    whole = WholeRow(logits(6))
    assert as_row(whole) is whole and as_row(tops[0]) is tops[0]
    wrapped = as_rows([logits(7), logits(8)])
    assert [type(row) for row in wrapped] == [WholeRow, WholeRow]


def round_of(seed: int, sampling: SamplingParams) -> tuple[Draft, np.ndarray]:
    target = np.random.default_rng(seed).normal(scale=2.0, size=(4, 300)).astype(np.float32)
    draft_logits = target[:3] + np.random.default_rng(seed + 1).normal(size=(3, 300)).astype(np.float32)
    q = np.stack([process(row, sampling) for row in draft_logits])
    tokens = [int(np.argmax(row)) for row in q]
    return Draft(tokens, q, draft_logits), target


@pytest.mark.parametrize("sampling", [SamplingParams(0.0, 0, 1.0), SamplingParams(0.8, 10, 0.9),
                                      SamplingParams(0.8, 0, 1.0)], ids=["greedy", "support", "dense"])
def test_the_rows_behind_a_token_come_only_when_asked(sampling):
    """Every path: ``show`` attaches them (p's likeliest alternatives as the shown distribution gives them), and
    without it the same tokens and numbers come with nothing attached."""
    for seed in range(20):
        draft, target = round_of(seed, sampling)
        rule = make("strict")
        plain = accept_draft(draft, target, Acceptance(rule, sampling), np.random.default_rng(seed))
        shown = accept_draft(draft, target, Acceptance(rule, sampling, show=True), np.random.default_rng(seed))
        assert [(e.token_id, e.verdict, e.p_x, e.logp_x) for e in plain] == \
               [(e.token_id, e.verdict, e.p_x, e.logp_x) for e in shown]
        assert all(e.shown is None for e in plain) and all(e.shown is not None for e in shown)
        for item in shown:
            alternatives = item.shown.top_p(3)
            assert 0 < len(alternatives) <= 3 and [p for _, p in alternatives] == sorted(
                [p for _, p in alternatives], reverse=True)
            if sampling.greedy:  # the T=1 distribution: its likeliest is the emitted argmax
                assert alternatives[0][0] == item.token_id and alternatives[0][1] == pytest.approx(item.p_x)


def test_a_verifier_only_step_takes_no_draft():
    target = logits(9, vocab=50)[None]
    for sampling in (SamplingParams(0.0), SamplingParams(0.7, 5, 1.0), SamplingParams(0.7, 0, 1.0)):
        emitted = accept_draft(None, target, Acceptance(make("strict"), sampling), np.random.default_rng(0))
        assert len(emitted) == 1 and emitted[0].verdict is Verdict.VERIFIER and emitted[0].draft_position == 0
        assert process(target[0], sampling)[emitted[0].token_id] > 0


def test_likeliest_reads_ids_or_the_vocabulary():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    assert likeliest(probs, 2) == ((2, 0.6), (3, 0.3))
    assert likeliest([0.5, 0.2, 0.3], 2, [7, 40, 90]) == ((7, 0.5), (90, 0.3))
    assert likeliest(None, 3) == () and likeliest(probs, 0) == ()


ROW_KINDS = {"TopLogits", "WholeRow", "WholeRows"}
LEFT = {"decoding/draft_steps.py": 1}  # fit_vocab: goes once the drafters fit rows (``Row.fitted``), not arrays


def test_nothing_outside_the_row_module_asks_which_kind_of_row_it_holds():
    """isinstance on a row kind, or on a row-named value against np.ndarray, anywhere in the package but
    engine/rows.py (the one adapter, ``as_row``/``as_rows``)."""
    found: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "engine/rows.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                    and len(node.args) == 2):
                continue
            subject, kind = ast.unparse(node.args[0]), ast.unparse(node.args[1])
            if any(k in kind for k in ROW_KINDS) or ("ndarray" in kind and ("logit" in subject or "row" in subject)):
                found[name] = found.get(name, 0) + 1
    assert found == {k: v for k, v in LEFT.items() if k in found}, found
    assert set(found) <= set(LEFT)
