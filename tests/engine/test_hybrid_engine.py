"""The engine on hybrid (recurrent + attention) verifiers and MTP heads, on tiny random GGUFs written at test time.

Tolerance: the same tokens decoded in batches of other shapes run other kernels (a k-row matmul is not k one-row
matmuls), so their logits agree up to float rounding only. Measured on the tiny qwen35 (logits of size ~3, CPU,
AVX-512 build), a rolled-back verifier against the kept prefix decoded without drafts, 200 comparisons (25 random
prompts x 4 acceptance depths x 2 ways of decoding the prefix): median 3.6e-7, 99th percentile 4.1e-5, max 9.6e-5;
half of them bit-identical. ``TOL`` = 1e-3 leaves 10x room for other CPUs' kernels and nothing like what a wrong
state does: a stale recurrent snapshot moves the logits by ~3. Where batch shapes agree the tests demand bit
identity.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from relaxtui.engine.api import SeqDecode
from relaxtui.engine.capacity import capacity, kv_bytes_per_token, recurrent_bytes_per_sequence
from relaxtui.engine.gguf_check import check_loadable, mtp_layers
from relaxtui.engine.llama import LlamaModel
from relaxtui.engine.memory import RollbackError
from relaxtui.engine.mtp import MtpHead, llama_ext
from relaxtui.errors import UserError
from tests.support.tiny_models import write_qwen35

TOL = 1e-3
PROMPTS = ("The quick brown fox jumps over", "Once upon a time there was", "What is twelve times seven?",
           "Write a haiku about the sea.")
pytestmark = pytest.mark.model


def greedy_alone(path, prompt: list[int], n: int) -> list[int]:
    """The verifier alone, one token per decode: the output strict speculation must reproduce."""
    with LlamaModel(path, n_ctx=256) as model:
        logits, out = model.decode(0, prompt, [-1])[0], []
        for _ in range(n):
            out.append(int(np.argmax(logits)))
            logits = model.decode(0, out[-1:], [0])[0]
    return out


def speculate(verifier: LlamaModel, prompts: list[list[int]], rounds: int, draft) -> list[list[int]]:
    """Strict greedy speculation by hand, every sequence in one verifier batch per round: verify [last, drafts],
    keep the drafts the verifier's argmax agrees with, emit its next token, roll back the rest."""
    for seq, prompt in enumerate(prompts):
        verifier.decode(seq, prompt[:-1])
    lasts, outs = [p[-1] for p in prompts], [[] for _ in prompts]
    for _ in range(rounds):
        drafts = draft([(seq, lasts[seq]) for seq in range(len(prompts))], outs)
        starts = [len(verifier.tokens_of(seq)) for seq in range(len(prompts))]
        logits = verifier.decode_many([SeqDecode(seq, [lasts[seq], *d], range(len(d) + 1))
                                       for seq, d in enumerate(drafts)])
        for seq, (d, rows) in enumerate(zip(drafts, logits, strict=True)):
            kept = next((i for i, token in enumerate(d) if token != int(np.argmax(rows[i]))), len(d))
            lasts[seq] = int(np.argmax(rows[kept]))
            outs[seq] += [*d[:kept], lasts[seq]]
            assert verifier.can_rollback(seq, starts[seq] + kept + 1)
            verifier.rollback(seq, starts[seq] + kept + 1)
    return outs


def tokens(path, *texts: str) -> list[list[int]]:
    with LlamaModel(path, n_ctx=64) as model:
        return [model.tokenize(text) for text in texts]


# -- (d) the tiny GGUFs and the header checks ------------------------------------------------------------------
def test_tiny_models_pass_the_header_checks_and_say_their_mtp_layers(tiny, tmp_path):
    for path in (tiny.qwen35, tiny.mtp_only, tiny.dense):
        check_loadable(path)
    assert [mtp_layers(p) for p in (tiny.qwen35, tiny.mtp_only, tiny.dense)] == [1, 1, 0]
    with LlamaModel(tiny.qwen35, n_ctx=64) as hybrid, LlamaModel(tiny.dense, n_ctx=64) as dense:
        assert hybrid.is_recurrent and not dense.is_recurrent and dense.rollback_limit is None
        assert [hybrid.token_text(t) for t in range(hybrid.n_vocab)] == [dense.token_text(t) for t in
                                                                        range(dense.n_vocab)]
        assert hybrid.tokenize("<|im_start|>user\nhi<|im_end|>") == dense.tokenize("<|im_start|>user\nhi<|im_end|>")
    broken = [("qwen35.nextn_predict_layers", 6, "nextn_predict_layers 6 exceeds block_count 5"),
              ("qwen35.full_attention_interval", 0, "full_attention_interval is 0"),  # SIGFPE in llama.cpp
              ("qwen35.ssm.inner_size", 48, "inner_size 48 is not")]  # GGML_ASSERT in llama.cpp
    for key, value, message in broken:
        path = write_qwen35(tmp_path / "broken.gguf", metadata={key: value})
        for attempt in (check_loadable, lambda p: LlamaModel(p, n_ctx=64)):
            with pytest.raises(UserError, match=message) as error:
                attempt(path)
            assert "\n" not in str(error.value)


def test_the_hybrid_models_memory_is_sized_from_its_header(tiny):
    """KV cache for the full-attention layer only (1 of the 4 trunk layers; the MTP layer's lives in the head's
    context) and the recurrent state of the 3 gated-delta-net layers in 1 + 16 copies: 287232 bytes per
    sequence, what llama.cpp allocates for this model (its log: "RS buffer size = 0.55 MiB" for 2 sequences)."""
    assert kv_bytes_per_token(tiny.qwen35) == 1 * 2 * (16 + 16) * 2  # layers x KV heads x (k + v) x f16
    per_layer = ((4 - 1) * (64 + 2 * 2 * 16) + 16 * 64) * 4  # conv state + SSM state, f32
    assert recurrent_bytes_per_sequence(tiny.qwen35) == 3 * per_layer * 17 == 287232
    assert recurrent_bytes_per_sequence(tiny.qwen35, 3) == 3 * per_layer * 4
    assert recurrent_bytes_per_sequence(tiny.dense) == 0
    room = capacity([tiny.qwen35], 256, available=10 << 20, rollback_depth=3)
    assert room.bytes_per_sequence == 256 * 128 + 3 * per_layer * 4


# -- (a) rollback on the hybrid verifier, exactly ---------------------------------------------------------------
def next_logits(path, prompt: list[int], verify: list[int], keep: int, after: int) -> np.ndarray:
    """Decode prompt[:-1], verify [prompt[-1], *verify], keep `keep` of those drafts, then decode `after`."""
    with LlamaModel(path, n_ctx=256) as model:
        model.decode(0, prompt[:-1])
        model.decode(0, [prompt[-1], *verify], range(len(verify) + 1))
        model.rollback(0, len(prompt) + keep)
        assert list(model.tokens_of(0)) == [*prompt, *verify[:keep]]
        return model.decode(0, [after], [0])[0]


def straight(path, tokens_: list[int], split: int) -> np.ndarray:
    """The kept prefix decoded without any draft: tokens_[:split] in one batch, the rest one at a time."""
    with LlamaModel(path, n_ctx=256) as model:
        model.decode(0, tokens_[:split])
        for token in tokens_[split:-1]:
            model.decode(0, [token])
        return model.decode(0, tokens_[-1:], [0])[0]


@pytest.mark.parametrize("keep", [0, 1, 2, 3])
def test_after_a_rejected_draft_the_hybrid_verifier_continues_as_if_it_never_saw_it(tiny, keep):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[0])
    drafts, others, after = [11, 12, 13], [21, 22, 23], 99
    kept = [*prompt, *drafts[:keep], after]
    rolled = next_logits(tiny.qwen35, prompt, drafts, keep, after)
    # the same batch shapes with other rejected drafts: bit for bit (the state does not remember them)
    if keep < 3:
        other = next_logits(tiny.qwen35, prompt, [*drafts[:keep], *others[keep:]], keep, after)
        assert np.array_equal(rolled, other)
    # the kept prefix without drafts (one batch; or the prompt, then token by token): float rounding only
    gaps = [float(np.abs(rolled - straight(tiny.qwen35, kept, split)).max())
            for split in (len(kept) - 1, len(prompt) - 1)]
    print(f"keep {keep}: max |logit difference| vs the straight decode {max(gaps):.2e}")
    assert max(gaps) <= TOL


def test_four_sequences_roll_back_one_by_one_and_neighbours_stay_bit_identical(tiny):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    drafts = [[11, 12, 13], [21, 22, 23, 24], [31, 32], [41, 42, 43]]
    keeps = [3, 0, 1, 2]  # sequence 0 keeps everything, 1 rejects all, 2 and 3 some

    def run(rollback: set[int]) -> list[np.ndarray]:
        with LlamaModel(tiny.qwen35, n_ctx=128, n_seq=4) as model:
            for seq, prompt in enumerate(prompts):
                model.decode(seq, prompt[:-1])
            model.decode_many([SeqDecode(seq, [p[-1], *d], range(len(d) + 1))
                               for seq, (p, d) in enumerate(zip(prompts, drafts, strict=True))])
            for seq in rollback:
                model.rollback(seq, len(prompts[seq]) + keeps[seq])
            return model.decode_many([SeqDecode(seq, [99], [0]) for seq in range(4)])

    rolled, unrolled = run({1, 2, 3}), run(set())
    assert np.array_equal(rolled[0], unrolled[0])  # the neighbour that kept its drafts
    for seq in (1, 2, 3):
        alone = straight(tiny.qwen35, [*prompts[seq], *drafts[seq][:keeps[seq]], 99], len(prompts[seq]) - 1)
        assert np.abs(rolled[seq] - alone).max() <= TOL, seq
    rolled_one = run({1})  # one sequence rolled back: every other one bit-identical
    for seq in (0, 2, 3):
        assert np.array_equal(rolled_one[seq], unrolled[seq])


def test_strict_greedy_with_drafts_right_and_wrong_gives_the_verifier_alone_tokens(tiny):
    """Drafts taken from the verifier's own output, a third of them corrupted: every acceptance depth, rollbacks
    of every length, four sequences in one context — and the output is the verifier alone's, token for token."""
    prompts = tokens(tiny.qwen35, *PROMPTS)
    reference = [greedy_alone(tiny.qwen35, p, 40) for p in prompts]
    rng = np.random.default_rng(0)

    def oracle(items, outs):
        drafts = []
        for seq, _ in items:
            right = reference[seq][len(outs[seq]):len(outs[seq]) + 4]
            drafts.append([int(rng.integers(0, 400)) if rng.random() < 0.3 else t for t in right])
        return drafts

    for n_seq in (1, 4):
        with LlamaModel(tiny.qwen35, n_ctx=256, n_seq=n_seq, rollback_depth=4) as verifier:
            outs = speculate(verifier, prompts[:n_seq], 8, oracle)
        for seq, out in enumerate(outs):
            assert out == reference[seq][:len(out)], (n_seq, seq)


def test_a_dense_drafter_that_is_always_rejected_leaves_the_hybrid_output_unchanged(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[1])
    with LlamaModel(tiny.qwen35, n_ctx=256) as verifier, LlamaModel(tiny.dense, n_ctx=256) as drafter:
        drafter.decode(0, prompt[:-1])
        proposed = accepted = 0

        def dense(items, outs):
            nonlocal proposed
            (_, last), = items
            drafter.rollback(0, len(prompt) - 1 + sum(len(o) for o in outs))  # the drafter re-syncs with the output
            tail = [*prompt, *outs[0]][len(drafter.tokens_of(0)):]
            logits, draft = drafter.decode(0, tail, [-1])[0], []
            for _ in range(3):
                draft.append(int(np.argmax(logits)))
                logits = drafter.decode(0, draft[-1:], [0])[0]
            proposed += 3
            return [draft]

        (out,) = speculate(verifier, [prompt], 10, dense)
    accepted = len(out) - 10
    print(f"dense drafter: {proposed} drafted, {accepted} accepted")
    assert out == greedy_alone(tiny.qwen35, prompt, len(out))


# -- (b) what cannot be rolled back is refused ---------------------------------------------------------------------
def test_a_hybrid_model_without_snapshots_is_refused_before_decoding(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[0])
    with LlamaModel(tiny.qwen35, n_ctx=64, rollback_depth=0) as model:
        assert model.rollback_limit == 0
        with pytest.raises(UserError, match="cannot roll back a rejected draft") as error:
            model.require_rollback(1)
        assert "\n" not in str(error.value)
        model.require_rollback(0)  # the verifier alone needs nothing
        model.decode(0, prompt[:-1])
        model.decode(0, [prompt[-1], 11, 12], range(3))
        assert not model.can_rollback(0, len(prompt))
        with pytest.raises(RollbackError, match="keeps no recurrent-state snapshots"):
            model.rollback(0, len(prompt))
        assert len(model.tokens_of(0)) == len(prompt) + 2  # untouched: the state still matches the tokens
        model.rollback(0, 0)  # emptying a sequence always works
        assert len(model.tokens_of(0)) == 0
    with LlamaModel(tiny.qwen35, n_ctx=64, rollback_depth=3) as model:
        model.require_rollback(3)
        with pytest.raises(UserError, match="drafts of 4 tokens need 4"):
            model.require_rollback(4)
    with LlamaModel(tiny.qwen35, n_ctx=16) as model:  # 16 snapshots asked, the context holds 15 drafts
        assert model.rollback_limit == 15
        with pytest.raises(UserError, match="^ctx_size 16 is too small for drafts of 16 tokens"):
            model.require_rollback(16)


def test_rollbacks_past_the_snapshots_are_refused_not_silently_wrong(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[2])
    with LlamaModel(tiny.qwen35, n_ctx=128) as model:
        model.decode(0, prompt)
        model.decode(0, [11])  # one token: its snapshots go back 0 tokens
        model.decode(0, [12, 13, 14], range(3))  # three tokens: 2 back at most, once
        assert [model.can_rollback(0, len(prompt) + k) for k in (1, 2, 3)] == [False, True, True]
        with pytest.raises(RollbackError, match="can go back 2 tokens"):
            model.rollback(0, len(prompt) + 1)
        model.rollback(0, len(prompt) + 3)
        with pytest.raises(RollbackError, match="pending"):  # a second one before the next decode
            model.rollback(0, len(prompt) + 2)
    # what the refused rollback would have done: llama.cpp accepts it and restores a stale snapshot
    with LlamaModel(tiny.qwen35, n_ctx=128) as model:
        model.decode(0, prompt)
        model.decode(0, [12, 13, 14])
        from llama_cpp import llama_memory_seq_rm
        assert llama_memory_seq_rm(model._memory, 0, len(prompt), -1)  # 3 back after a 3-token decode: "ok"
        del model._seqs[0][len(prompt):]
        stale = model.decode(0, [99], [0])[0]
    assert np.abs(stale - straight(tiny.qwen35, [*prompt, 99], len(prompt))).max() > 100 * TOL


def test_checkpoints_roll_back_deeper_than_the_snapshots_for_verifiers_and_hybrid_drafters(tiny):
    """A hybrid drafter decodes its drafts one at a time (its snapshots go back 0 tokens) and a verifier with one
    snapshot verifies four drafts: both restore a checkpoint and decode the kept tokens again where the snapshots
    do not reach — and the output is still the verifier alone's. The drafter is the verifier's own weights with a
    third of its picks corrupted (fed back to it), so every acceptance depth occurs."""
    (prompt,) = tokens(tiny.qwen35, PROMPTS[2])
    reference = greedy_alone(tiny.qwen35, prompt, 60)
    rng, out, paths = np.random.default_rng(3), [], {"snapshot": 0, "checkpoint": 0}
    with LlamaModel(tiny.qwen35, n_ctx=256, rollback_depth=1) as verifier, \
            LlamaModel(tiny.qwen35, n_ctx=256) as drafter:
        verifier.decode(0, prompt[:-1])
        drafter.decode(0, prompt[:-1])
        last = prompt[-1]
        for _ in range(12):
            n, saved_v, saved_d = len(verifier.tokens_of(0)), verifier.checkpoint(0), drafter.checkpoint(0)
            drafts, token = [], last
            for _ in range(4):
                pick = int(np.argmax(drafter.decode(0, [token], [0])[0]))
                drafts.append(token := (pick + 1 + int(rng.integers(300))) % 400 if rng.random() < 0.3 else pick)
            rows = verifier.decode(0, [last, *drafts], range(5))
            kept = next((i for i, t in enumerate(drafts) if t != int(np.argmax(rows[i]))), 4)
            if verifier.can_rollback(0, n + 1 + kept):
                verifier.rollback(0, n + 1 + kept)
                paths["snapshot"] += 1
            else:
                verifier.restore(saved_v)
                verifier.decode(0, [last, *drafts[:kept]])
                paths["checkpoint"] += 1
            assert drafter.can_rollback(0, n + 1 + kept) == (kept >= 3)  # only "nothing to remove" works
            drafter.restore(saved_d)
            drafter.decode(0, [last, *drafts[:kept]])
            last = int(np.argmax(rows[kept]))
            out += [*drafts[:kept], last]
    assert out == reference[:len(out)]
    assert paths["snapshot"] and paths["checkpoint"], paths
    with LlamaModel(tiny.dense, n_ctx=64) as dense:  # a KV cache needs no saved state: restoring trims it
        dense.decode(0, prompt)
        saved = dense.checkpoint(0)
        dense.decode(0, [5, 6, 7])
        dense.restore(saved)
        assert saved.state == b"" and list(dense.tokens_of(0)) == prompt


def test_prompt_copies_on_a_hybrid_model_copy_whole_sequences_or_refuse(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[3])
    with LlamaModel(tiny.qwen35, n_ctx=128, n_seq=3) as model:
        model.decode(0, prompt[:-1])
        assert not model.can_share_prefix(0, 1, len(prompt) - 2)  # a prefix: the state has moved past it
        with pytest.raises(RollbackError, match="whole sequence"):
            model.share_prefix(0, 1, len(prompt) - 2)
        model.decode(2, [5, 6, 7])
        model.decode(2, [8, 9])
        model.rollback(2, 4)  # sequence 2 has a removal pending: the copy must not inherit it
        model.share_prefix(0, 1, len(prompt) - 1)
        model.share_prefix(0, 2, len(prompt) - 1)
        assert not model.can_rollback(0, len(prompt) - 2)  # the copies share the state until they decode
        copies = [model.decode(seq, [prompt[-1], 40], [0, 1]) for seq in (1, 2)]
        original = model.decode(0, [prompt[-1], 40], [0, 1])
        for copied in copies:
            assert np.array_equal(copied, original)
        model.rollback(0, len(prompt))
        assert not model.can_share_prefix(0, 1, len(prompt))  # its rollback is pending


# -- (c) the MTP head ----------------------------------------------------------------------------------------------
def reference_mtp(path, history: list[int], last: int, second: int) -> tuple[np.ndarray, np.ndarray]:
    """An independent computation of the head's first two draft rows, straight from llama.cpp's driver
    (common_speculative_impl_draft_mtp): the verifier decodes `history` in one batch; a fresh MTP context decodes
    the pairs (x_p, h_{p-1}) of the history (h_{-1} = 0), then (last, h_{n-1}) -> q1, then (second, the head's
    own hidden row of that step) -> q2."""
    import llama_cpp as ll
    with LlamaModel(path, n_ctx=256, mtp=True) as target:
        target.decode(0, history)
        h = target.hidden.rows(0, -1, len(history))
        params = ll.llama_context_default_params()
        params.ctx_type, params.n_ctx, params.n_batch, params.n_ubatch = ll.LLAMA_CONTEXT_TYPE_MTP, 256, 256, 256
        ctx = ll.llama_init_from_model(target._model, params)
        llama_ext.llama_set_embeddings_nextn(ctx, True, True)
        batch = ll.llama_batch_ext_init(ctx)

        def process(rows):
            ll.llama_batch_ext_clear(batch)
            for token, pos, row, out in rows:
                idx = ll.llama_batch_ext_add_token(batch, 0, token)
                row = np.ascontiguousarray(row, dtype=np.float32)
                ll.llama_batch_ext_set_pos(batch, idx, ctypes.byref(ll.llama_pos(pos)))
                ll.llama_batch_ext_set_embd_token(batch, idx, ll.llama_embd(
                    row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.size))
                ll.llama_batch_ext_set_output_logits(batch, idx, out)
            assert ll.llama_process(ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
            if not rows[-1][-1]:
                return None, None
            i = len(rows) - 1
            return (np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, i), shape=(target.n_vocab,)).copy(),
                    np.ctypeslib.as_array(llama_ext.llama_get_embeddings_nextn_ith(ctx, i),
                                          shape=(target.n_embd,)).copy())

        try:
            process([(t, p, h[p], False) for p, t in enumerate(history)])
            q1, h1 = process([(last, len(history), h[-1], True)])
            q2, _ = process([(second, len(history) + 1, h1, True)])
        finally:
            ll.llama_batch_ext_free(batch)
            ll.llama_free(ctx)
    return q1, q2


def test_the_mtp_head_matches_llama_cpps_driver_and_is_deterministic(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[0])
    runs = []
    for path in (None, tiny.mtp_only, None):  # its own MTP layer, the MTP-only GGUF, again
        with LlamaModel(tiny.qwen35, n_ctx=256, mtp=True) as verifier, MtpHead(verifier, path) as head:
            verifier.decode(0, prompt[:-1])
            (first, q), = head.propose([(0, prompt[-1])], 3)
            # the verifier rejects the drafts after the first, then the head drafts from there
            verifier.decode(0, [prompt[-1], *first], range(4))
            verifier.rollback(0, len(prompt) + 1)
            (second, q_after), = head.propose([(0, 77)], 2)
            runs.append((first, q, second, q_after, [*prompt, first[0]]))
    assert all(run[0] == runs[0][0] and run[2] == runs[0][2] for run in runs)
    for run in runs[1:]:  # bit for bit: the same computation, from either GGUF
        assert np.array_equal(run[1], runs[0][1]) and np.array_equal(run[3], runs[0][3])
    first, q, second, q_after, history = runs[0]
    gaps = []
    for ours, (ref1, ref2) in ((q, reference_mtp(tiny.qwen35, prompt[:-1], prompt[-1], first[0])),
                               (q_after, reference_mtp(tiny.qwen35, history, 77, second[0]))):
        gaps += [float(np.abs(ours[0] - ref1).max()), float(np.abs(ours[1] - ref2).max())]
    print(f"MTP head vs llama.cpp's driver, steps 1 and 2: max |logit difference| {max(gaps):.2e}")
    assert max(gaps) <= TOL


def test_keeping_hidden_rows_for_the_head_leaves_the_verifiers_logits_bit_identical(tiny):
    out = []
    for mtp in (False, True):
        with LlamaModel(tiny.qwen35, n_ctx=128, mtp=mtp) as model:
            out.append(np.concatenate([model.decode(0, list(range(100, 110)), range(10)),
                                       model.decode(0, [5, 6], [0, 1])]))
            if mtp:  # the rows of the last decode (the verify batch), as far as it stays cached
                assert model.hidden_of(0).shape == (2, model.n_embd)
                model.rollback(0, 11)
                assert np.array_equal(model.hidden_of(0), model.hidden.rows(0, 10, 11))
    assert np.array_equal(out[0], out[1])


def test_greedy_mtp_drafts_under_strict_verification_keep_the_verifier_output(tiny):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    reference = [greedy_alone(tiny.qwen35, p, 30) for p in prompts]
    for n_seq in (1, 4):
        with LlamaModel(tiny.qwen35, n_ctx=256, n_seq=n_seq, mtp=True) as verifier, \
                MtpHead(verifier) as head:
            outs = speculate(verifier, prompts[:n_seq], 8,
                             lambda items, outs: [t for t, _ in head.propose(items, 3)])
            assert head.calls and head.rows and head.decode_seconds > 0
        for seq, out in enumerate(outs):
            assert out == reference[seq][:len(out)], (n_seq, seq)


def test_mtp_drafts_for_four_sequences_at_once_equal_each_alone(tiny):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    with LlamaModel(tiny.qwen35, n_ctx=128, n_seq=4, mtp=True) as verifier, MtpHead(verifier) as head:
        for seq, prompt in enumerate(prompts):
            verifier.decode(seq, prompt[:-1])
        together = head.propose([(seq, p[-1]) for seq, p in enumerate(prompts)], [3, 1, 2, 3])
    for seq, prompt in enumerate(prompts):
        with LlamaModel(tiny.qwen35, n_ctx=128, mtp=True) as verifier, MtpHead(verifier) as head:
            verifier.decode(0, prompt[:-1])
            (alone, q), = head.propose([(0, prompt[-1])], len(together[seq][0]))
        assert alone == together[seq][0]
        assert np.abs(q - together[seq][1]).max() <= TOL


def test_a_copied_prompt_drafts_like_its_source(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[1])
    with LlamaModel(tiny.qwen35, n_ctx=128, n_seq=2, mtp=True) as verifier, MtpHead(verifier) as head:
        verifier.decode(0, prompt[:-1])
        head.sync()  # the head consumed the prompt's hidden rows: the copy must carry its cache over
        verifier.share_prefix(0, 1, len(prompt) - 1)
        (a, qa), (b, qb) = head.propose([(0, prompt[-1]), (1, prompt[-1])], 3)
    assert a == b and np.array_equal(qa, qb)


def test_mtp_is_refused_in_one_line_where_it_cannot_run(tiny, tmp_path):
    def one_line(action, match):
        with pytest.raises(UserError, match=match) as error:
            action()
        assert "\n" not in str(error.value)

    one_line(lambda: LlamaModel(tiny.dense, n_ctx=64, mtp=True), "has no MTP layers")
    with LlamaModel(tiny.qwen35, n_ctx=64) as plain:
        one_line(lambda: MtpHead(plain), "loaded without its MTP layers")
    two = write_qwen35(tmp_path / "two-heads.gguf", mtp_layers=2)  # llama.cpp's qwen35 MTP graph asserts on 2
    with LlamaModel(two, n_ctx=64, mtp=True) as verifier:
        one_line(lambda: MtpHead(verifier), "has 2 MTP layers")
    with LlamaModel(tiny.qwen35, n_ctx=64, mtp=True) as verifier:
        one_line(lambda: MtpHead(verifier, tiny.dense), "has no MTP layers")
        with MtpHead(verifier):
            with pytest.raises(RuntimeError, match="already has an MTP head"):
                MtpHead(verifier)
