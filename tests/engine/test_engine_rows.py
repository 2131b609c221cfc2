"""The engine's two decode paths hand the same rows (issue 21): ``decode_rows`` (every decode of a round: the verify
batch and each draft step, by the path that touches least after a decode) against ``decode_many`` (any rows, any
chunking); a batch longer than n_batch splits with its rows; token pieces are remembered per special flag."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.engine.api import RowSpec, SeqDecode, TopLogits


def _same(found: object, expected: object) -> None:
    """Rows of one decode shape, bit for bit: whole rows as arrays, candidate rows as their ids, logits, normaliser."""
    if isinstance(expected, np.ndarray):
        assert isinstance(found, np.ndarray) and np.array_equal(found, expected)
        return
    assert len(found) == len(expected)  # type: ignore[arg-type]
    for mine, theirs in zip(found, expected, strict=True):  # type: ignore[call-overload]
        assert isinstance(mine, TopLogits) and isinstance(theirs, TopLogits)
        assert np.array_equal(mine.ids, theirs.ids) and np.array_equal(mine.logits, theirs.logits)
        assert mine.log_norm == theirs.log_norm and mine.vocab_size == theirs.vocab_size


@pytest.mark.model
@pytest.mark.parametrize("spec", [None, RowSpec(1), RowSpec(20, True)])
@pytest.mark.parametrize("last", [False, True])
def test_decode_rows_hands_what_decode_many_hands(test_model_path, spec, last):
    """SmolLM2: a verify-like block and a one-token step, every row or the last only, whole or candidate rows: the
    same rows, the same cached tokens and the same bytes copied as ``decode_many`` asked for those rows."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=256, n_threads=1) as model:
        tokens = model.tokenize("def add(a, b):\n    return a + b\n\nprint(add(2,")
        model.decode(0, tokens[:-5])
        assert model.set_candidates(0, spec) or spec is None
        for block in (tokens[-5:], tokens[-5:-4]):
            start = len(model.tokens_of(0))
            copied = model.copied_bytes
            found = model.decode_rows([0], [block], last=last)[0]
            found_bytes, cached = model.copied_bytes - copied, list(model.tokens_of(0))
            model.rollback(0, start)
            copied = model.copied_bytes
            rows = [-1] if last else range(len(block))
            expected = model.decode_many([SeqDecode(0, block, rows)])[0]
            _same(found, expected)
            assert len(found) == (1 if last else len(block))
            assert model.copied_bytes - copied == found_bytes > 0 and list(model.tokens_of(0)) == cached
            model.rollback(0, start)
            if not last:  # the loop's verify batch asks decode() for range(len(block)): decode_rows' path
                _same(model.decode(0, block, logits_rows=range(len(block))), expected)
                model.rollback(0, start)


@pytest.mark.model
def test_decode_rows_on_several_sequences(test_model_path):
    """Two sequences of one context in one batch (each at its own positions): the rows ``decode_many`` hands."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=128, n_seq=2, n_threads=1) as model:
        a, b = model.tokenize("The cat sat on"), model.tokenize("Two plus two is")
        model.decode_many([SeqDecode(0, a[:-2]), SeqDecode(1, b[:-3])])
        found = model.decode_rows([0, 1], [a[-2:], b[-3:]])
        model.rollback(0, len(a) - 2)
        model.rollback(1, len(b) - 3)
        expected = model.decode_many([SeqDecode(0, a[-2:], range(2)), SeqDecode(1, b[-3:], range(3))])
        for mine, theirs in zip(found, expected, strict=True):
            _same(mine, theirs)
        assert list(model.tokens_of(0)) == a and list(model.tokens_of(1)) == b


@pytest.mark.model
@pytest.mark.parametrize("spec", [None, RowSpec(8)])
def test_a_batch_longer_than_n_batch_splits_with_its_rows(test_model_path, spec):
    """With n_batch 16, one call of 40 tokens asking rows on both sides of each chunk boundary hands the rows that
    three calls of one chunk each hand (the same micro-batches), in the order asked; ``decode_rows`` over n_batch
    takes the same path."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=128, n_batch=16, n_threads=1) as model:
        assert model.n_batch == 16
        tokens = (model.tokenize("Once upon a time, in a small village by the sea, there lived an old fisherman "
                                 "who every morning rowed out past the rocks") * 2)[:40]
        assert len(tokens) == 40
        model.set_candidates(0, spec)
        asked = [39, 0, 15, 16, 31, 32]
        together = model.decode_many([SeqDecode(0, tokens, asked)])[0]
        model.rollback(0, 0)
        chunks = [model.decode(0, tokens[:16], [0, 15]), model.decode(0, tokens[16:32], [0, 15]),
                  model.decode(0, tokens[32:], [7])]
        model.rollback(0, 32)
        chunks.append(model.decode(0, tokens[32:], [0]))  # the third chunk again, for row 32
        by_row = {0: chunks[0][0], 15: chunks[0][1], 16: chunks[1][0], 31: chunks[1][1], 39: chunks[2][0],
                  32: chunks[3][0]}
        for row, found in zip(asked, together, strict=True):
            _same([found] if spec else found, [by_row[row]] if spec else by_row[row])
        model.rollback(0, 0)
        every = model.decode_rows([0], [tokens[:20]])[0]  # over n_batch: the general path, chunked
        model.rollback(0, 0)
        _same(every, model.decode_many([SeqDecode(0, tokens[:20], range(20))])[0])


def test_chunks_split_a_part_with_its_rows():
    """The chunking rule alone: 12 and 5 tokens in batches of 8 — each piece's rows shifted to the piece, its first
    output slot carried on, and nothing but the tokens decides the boundaries."""
    from relaxtui.engine.batching import _chunks

    out_a, out_b = object(), object()
    parts = [(0, list(range(100, 112)), 3, [0, 7, 8, 11], 0, out_a), (1, [200, 201, 202, 203, 204], 0, [4], 0, out_b)]
    chunks = _chunks(parts, 8)  # type: ignore[arg-type]
    assert [[(seq, tokens, start, rows, slot) for seq, tokens, start, rows, slot, _ in chunk] for chunk in chunks] == [
        [(0, list(range(100, 108)), 3, [0, 7], 0)],
        [(0, list(range(108, 112)), 11, [0, 3], 2), (1, [200, 201, 202, 203], 0, [], 0)],
        [(1, [204], 4, [0], 0)],
    ]
    assert chunks[1][1][5] is out_b and _chunks(parts[1:], 8) == [parts[1:]] and _chunks([], 8) == []


@pytest.mark.model
def test_token_pieces_are_remembered_per_special_flag(test_model_path):
    """A special token renders as its text only when asked (``special=True``); asking again hands the same bytes
    without llama.cpp, for each flag apart."""
    from relaxtui.engine.llama import LlamaModel

    with LlamaModel(test_model_path, n_ctx=64, n_threads=1) as model:
        eos = model.eos
        shown, hidden = model.token_piece(eos, special=True), model.token_piece(eos)
        assert shown and shown != hidden
        assert model.token_piece(eos, special=True) is shown and model.token_piece(eos) is hidden
        word = model.tokenize("hello", add_special=False)[0]
        assert model.token_piece(word) == model.token_piece(word, special=True) == b"hello"
        assert model.is_eog(eos) and not model.is_eog(word) and model.is_eog(eos)


@pytest.mark.model
@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (0.6, 20, 0.95)])
def test_smollm2_emits_the_same_tokens_on_candidate_and_whole_rows(test_model_path, temperature, top_k, top_p):
    """SmolLM2 drafting for itself through the loop, greedy and with the paper's sampling: candidate rows (the lean
    reads, the draw from pre-drawn uniforms, the pointwise test) give the tokens and verdicts of whole rows. (A
    model drafting for itself is accepted nearly always: the next test takes the rejections.)"""
    from relaxtui.decoding.config import GenerationConfig
    from relaxtui.decoding.drafters import ModelDrafter
    from relaxtui.decoding.events import TokenEvent
    from relaxtui.decoding.loop import generate
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.engine.llama import LlamaModel

    sampling = SamplingParams(temperature, top_k, top_p)
    with LlamaModel(test_model_path, n_ctx=256, n_threads=1) as verifier, \
            LlamaModel(test_model_path, n_ctx=256, n_threads=1) as draft_model:
        prompt = verifier.tokenize("A short poem about the sea:\n")
        runs = []
        for dense in (False, True, False):
            config = GenerationConfig(draft_max=3, max_tokens=32, sampling=sampling, seed=3, dense_rows=dense)
            events = list(generate(verifier, prompt, config, drafter=ModelDrafter(draft_model, verifier.n_vocab)))
            runs.append([(e.token_id, e.verdict, e.draft_position) for e in events if isinstance(e, TokenEvent)])
        assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 32
        assert any(verdict.value == "accepted" for _, verdict, _ in runs[0])


@pytest.mark.model
@pytest.mark.parametrize("rule_spec", ["strict", "cactus:1.5", "typical:0.3"])
def test_a_disagreeing_real_pair_emits_the_same_on_candidate_and_whole_rows(tiny, rule_spec):
    """Two tiny dense Qwen3s, the drafter the verifier without its last layer (drafts often rejected, often
    accepted), through the real engine with the paper's sampling: candidate rows give whole rows' tokens and
    verdicts, rejections and their residual draws included, for a pointwise rule, a relaxed pointwise rule and one
    that reads whole supports."""
    from relaxtui.decoding.config import GenerationConfig
    from relaxtui.decoding.drafters import ModelDrafter
    from relaxtui.decoding.events import TokenEvent
    from relaxtui.decoding.loop import generate
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.rules import make, split_spec
    from tests.support.tiny_models import write_dense

    drafter_path = write_dense(tiny.dense.with_name("tiny-qwen3-dense-1-layer.gguf"), n_layer=1)  # its first layer
    runs = []
    with LlamaModel(tiny.dense, n_ctx=256, n_threads=1) as verifier, \
            LlamaModel(drafter_path, n_ctx=256, n_threads=1) as draft_model:
        for dense in (False, True):
            config = GenerationConfig(draft_max=3, max_tokens=40, sampling=SamplingParams(0.6, 20, 0.95), seed=4,
                                      dense_rows=dense)
            rule = make(*split_spec(rule_spec, None), temperature=0.6)
            events = list(generate(verifier, [5, 17, 42, 7, 99, 3], config, rule=rule,
                                   drafter=ModelDrafter(draft_model, verifier.n_vocab)))
            runs.append([(e.token_id, e.verdict.value, e.rejected_token) for e in events if isinstance(e, TokenEvent)])
    assert runs[0] == runs[1] and len(runs[0]) == 40
    verdicts = {verdict for _, verdict, _ in runs[0]}
    assert {"accepted", "resampled"} <= verdicts, verdicts
