"""``--draft-kind mtp`` and hybrid verifiers through both loops, on the tiny random GGUFs written at test time.

Tolerance of the law test: the emitted pair (x_1, x_2) at T = 1 with top-k 3 has at most 9 outcomes; its exact
law under the verifier alone is computed from the verifier's logits, and the empirical law of ``SAMPLES`` MTP runs
must lie within total variation ``TV_TOL`` of it. An unbiased sampler's expected TV there is about 0.025 (sd ~0.01
per cell at 2000 draws); a rule that kept q's law instead of p's is off by far more on this random model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, process
from relaxtui.engine.llama import LlamaModel
from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, make
from relaxtui.session import ModelOptions, load_pair

pytestmark = pytest.mark.model
GREEDY = SamplingParams(0.0, 0, 1.0)
PROMPTS = ("The quick brown fox jumps over", "Once upon a time there was", "What is twelve times seven?",
           "Write a haiku about the sea.")
SAMPLES, TV_TOL = 2000, 0.06


def tokens(path, *texts: str) -> list[list[int]]:
    with LlamaModel(path, n_ctx=64) as model:
        return [model.tokenize(text) for text in texts]


def alone(path, prompt: list[int], n: int) -> list[int]:
    """The verifier alone through the loop (no drafter)."""
    with LlamaModel(path, n_ctx=256, rollback_depth=1) as model:
        *_, done = generate(model, prompt, GenerationConfig(draft_max=0, max_tokens=n, sampling=GREEDY))
    return list(done.token_ids)


class WrongDrafter(BaseDrafter):
    """Proposes, at every position, a token the verifier does not pick (the reference's token + 1): every draft is
    rejected at its first position, so every round rolls the hybrid verifier back by all of it."""

    traits = DrafterTraits("wrong", has_distribution=False)

    def __init__(self, reference: dict[int, tuple[int, list[int]]], vocab: int) -> None:
        self.reference, self.vocab = reference, vocab  # seq -> (prompt length, verifier-alone tokens)

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        return True

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        out = []
        for r in requests:
            start, ref = self.reference[r.seq]
            at = len(r.context) - start
            out.append(Draft([(ref[min(at + i, len(ref) - 1)] + 1) % self.vocab for i in range(r.n_max)], None, None))
        return out


@pytest.mark.parametrize("depth", [4, 1])  # 1: drafts of 3 reach past the snapshots, so checkpoints restore
def test_strict_greedy_with_always_rejected_drafts_gives_the_verifier_alone_tokens(tiny, depth):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    reference = [alone(tiny.qwen35, p, 24) for p in prompts]
    config = GenerationConfig(draft_max=3, max_tokens=24, sampling=GREEDY)
    with LlamaModel(tiny.qwen35, n_ctx=256, rollback_depth=depth) as verifier:  # K = 1
        drafter = WrongDrafter({0: (len(prompts[0]), reference[0])}, verifier.n_vocab)
        *_, done = generate(verifier, prompts[0], config, drafter=drafter)
    assert list(done.token_ids) == reference[0] and done.metrics.drafted > 0 and done.metrics.accepted == 0
    with LlamaModel(tiny.qwen35, n_ctx=256, n_seq=4, rollback_depth=depth) as verifier:  # K = 4
        drafter = WrongDrafter({s: (len(p), reference[s]) for s, p in enumerate(prompts)}, verifier.n_vocab)
        jobs = [Job(p, config, tag=s) for s, p in enumerate(prompts)]
        results = {job.tag: f for job, f in generate_many(verifier, jobs, drafter=drafter)}
    for seq in range(4):
        assert list(results[seq].token_ids) == reference[seq], seq
        assert results[seq].metrics.accepted == 0 < results[seq].metrics.drafted


def test_a_dense_drafter_on_the_hybrid_verifier_keeps_its_greedy_output(tiny):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    reference = [alone(tiny.qwen35, p, 24) for p in prompts]
    config = GenerationConfig(draft_max=4, max_tokens=24, sampling=GREEDY)
    for parallel in (1, 4):
        pair = load_pair(ModelOptions(str(tiny.qwen35), str(tiny.dense), ctx_size=256, parallel=parallel,
                                      rollback_depth=4))
        try:
            if parallel == 1:
                *_, done = generate(pair.verifier, prompts[0], config, drafter=pair.drafter)
                outs = {0: done}
            else:
                jobs = [Job(p, config, tag=s) for s, p in enumerate(prompts)]
                outs = {job.tag: f for job, f in generate_many(pair.verifier, jobs, drafter=pair.drafter)}
        finally:
            pair.close()
        for seq, done in outs.items():
            assert list(done.token_ids) == reference[seq], (parallel, seq)
            assert done.metrics.drafted > 0


def mtp_pair(tiny, parallel: int = 1, drafter: str = "mtp", **options) -> object:
    return load_pair(ModelOptions(str(tiny.qwen35), drafter, ctx_size=256, parallel=parallel, draft_kind="mtp",
                                  **options))


@pytest.mark.parametrize("drafter", ["mtp", "mtp_only"])
def test_greedy_mtp_output_equals_the_verifier_alone(tiny, drafter):
    prompts = tokens(tiny.qwen35, *PROMPTS)
    reference = [alone(tiny.qwen35, p, 24) for p in prompts]
    config = GenerationConfig(draft_max=3, max_tokens=24, sampling=GREEDY)
    name = "mtp" if drafter == "mtp" else str(tiny.mtp_only)
    pair = mtp_pair(tiny, drafter=name)
    try:
        assert pair.drafter.traits.kind == "mtp" and pair.drafter_name == pair.drafter.traits.label
        *_, done = generate(pair.verifier, prompts[0], config, drafter=pair.drafter)
    finally:
        pair.close()
    assert list(done.token_ids) == reference[0] and done.metrics.drafted > 0
    pair = mtp_pair(tiny, 4, drafter=name)
    try:
        jobs = [Job(p, config, tag=s) for s, p in enumerate(prompts)]
        outs = {job.tag: f for job, f in generate_many(pair.verifier, jobs, drafter=pair.drafter)}
    finally:
        pair.close()
    for seq in range(4):
        assert list(outs[seq].token_ids) == reference[seq], seq


def test_a_shared_prompt_on_the_hybrid_verifier_runs_like_its_source(tiny):
    """Four jobs on one prompt: the copies come from the sequence that prefilled it (the whole sequence, so the
    recurrent state can be shared), and every copy's greedy output is the verifier alone's."""
    (prompt,) = tokens(tiny.qwen35, PROMPTS[1])
    reference = alone(tiny.qwen35, prompt, 16)
    config = GenerationConfig(draft_max=3, max_tokens=16, sampling=GREEDY)
    pair = mtp_pair(tiny, 4)
    try:
        outs = [f for _, f in generate_many(pair.verifier, [Job(prompt, config, tag=s) for s in range(4)],
                                            drafter=pair.drafter)]
        decoded = [f.metrics.prefill_decoded for f in outs]
    finally:
        pair.close()
    assert all(list(f.token_ids) == reference for f in outs)
    assert sorted(decoded)[:3] == [0, 0, 0]  # copied, not prefilled again


def exact_pair_law(path, prompt: list[int], sampling: SamplingParams) -> dict[tuple[int, int], float]:
    """The law of the first two tokens the verifier alone emits."""
    law = {}
    with LlamaModel(path, n_ctx=64, rollback_depth=1) as model:
        p1 = process(model.decode(0, prompt, [-1])[0], sampling)
        saved = model.checkpoint(0)
        for a in np.flatnonzero(p1):
            model.restore(saved)
            p2 = process(model.decode(0, [int(a)], [0])[0], sampling)
            for b in np.flatnonzero(p2):
                law[(int(a), int(b))] = float(p1[a] * p2[b])
    return law


def test_strict_with_the_mtp_drafter_keeps_the_verifiers_law(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[0])
    sampling = SamplingParams(1.0, 3, 1.0)
    law = exact_pair_law(tiny.qwen35, prompt, sampling)
    config = GenerationConfig(draft_max=3, max_tokens=2, sampling=sampling)
    pair = mtp_pair(tiny, 8, rollback_depth=3)
    try:
        jobs = [Job(prompt, _seeded(config, seed), make("strict"), tag=seed) for seed in range(SAMPLES)]
        outs = [f for _, f in generate_many(pair.verifier, jobs, drafter=pair.drafter)]
    finally:
        pair.close()
    assert sum(f.metrics.drafted for f in outs) > SAMPLES // 2  # the MTP head drafted in these runs
    counts = Counter(tuple(f.token_ids[:2]) for f in outs)
    tv = 0.5 * sum(abs(counts.get(k, 0) / SAMPLES - law.get(k, 0.0)) for k in set(law) | set(counts))
    assert tv < TV_TOL, (tv, counts.most_common(5), sorted(law.items(), key=lambda kv: -kv[1])[:5])


def _seeded(config: GenerationConfig, seed: int) -> GenerationConfig:
    return replace(config, seed=seed)


RULES = [(name, knobs[0]) for name, knobs in PAPER_GRID.items()]


def test_every_rule_runs_with_the_mtp_drafter_through_both_loops(tiny):
    (prompt,) = tokens(tiny.qwen35, PROMPTS[2])
    sampling = SamplingParams(1.0, 20, 0.95)
    pair = mtp_pair(tiny, 2, rollback_depth=3)
    try:
        for name, knob in RULES:
            rule = make(name, knob)
            config = GenerationConfig(draft_max=3, max_tokens=12, sampling=sampling, seed=5, bonus="relaxed")
            *_, done = generate(pair.verifier, prompt, config, drafter=pair.drafter, rule=rule)
            assert done.metrics.output_tokens == 12 and done.metrics.drafted > 0, name
            jobs = [Job(prompt, _seeded(config, s), rule, tag=s) for s in range(2)]
            many = [f for _, f in generate_many(pair.verifier, jobs, drafter=pair.drafter)]
            assert all(f.metrics.output_tokens == 12 and f.metrics.drafted > 0 for f in many), name
    finally:
        pair.close()


def one_line(action, match: str) -> None:
    with pytest.raises(UserError, match=match) as error:
        action()
    assert "\n" not in str(error.value)


def test_bad_input_is_refused_in_one_line_before_decoding(tiny):
    one_line(lambda: load_pair(ModelOptions(str(tiny.dense), "mtp", ctx_size=64, draft_kind="mtp")),
             "has no MTP layers")
    one_line(lambda: load_pair(ModelOptions(str(tiny.qwen35), str(tiny.dense), ctx_size=64, draft_kind="mtp")),
             "has no MTP layers")
    one_line(lambda: load_pair(ModelOptions(str(tiny.qwen35), str(tiny.dense), ctx_size=16, rollback_depth=20)),
             "too small for drafts of 20 tokens")
    with LlamaModel(tiny.qwen35, n_ctx=64, rollback_depth=0) as model:  # a model that cannot roll back at all
        one_line(lambda: model.require_rollback(3), "cannot roll back a rejected draft")


def test_an_mtp_layer_of_another_architecture_is_refused(tiny, tmp_path, monkeypatch):
    """An MTP-only GGUF whose architecture differs from the verifier's: one line (the header is what differs)."""
    import relaxtui.engine.gguf_check as gguf_check
    real = gguf_check.check_loadable

    def other_arch(model):
        header = real(model)
        if str(getattr(model, "path", model)) != str(tiny.mtp_only):
            return header
        return replace(header, metadata={**header.metadata, "general.architecture": "qwen35moe",
                                         "qwen35moe.nextn_predict_layers": 1})
    monkeypatch.setattr(gguf_check, "check_loadable", other_arch)
    one_line(lambda: mtp_pair(tiny, drafter=str(tiny.mtp_only)), "are for qwen35moe")


def test_models_list_suggest_and_the_cli_know_mtp(tiny):
    import argparse

    from relaxtui.commands.common import add_draft_options, add_model_options, model_options
    from relaxtui.models.pairing import family_of
    from relaxtui.models.store import list_models

    layers = {info.path.name: info.mtp_layers for info in list_models(tiny.qwen35.parent)}
    assert layers[tiny.qwen35.name] == 1 and layers[tiny.mtp_only.name] == 1 and layers[tiny.dense.name] == 0
    family = family_of("qwen35 Qwen3.5-27B Qwen3.5 Qwen3.5-27B-Q4_K_M.gguf")
    assert family is not None and family.name == "Qwen3.5"
    assert all("Qwen3.5" in name for name, _ in family.drafters)
    assert family_of("qwen3 Qwen3-32B").name == "Qwen3"
    parser = argparse.ArgumentParser()
    add_model_options(parser)
    add_draft_options(parser)
    own = model_options(parser.parse_args(["--draft-kind", "mtp", "--verifier", str(tiny.qwen35)]))
    assert own.drafter == "mtp" and own.drafter_file is None and own.rollback_depth == 3
    separate = model_options(parser.parse_args(["--draft-kind", "mtp", "--drafter", str(tiny.mtp_only)]))
    assert separate.drafter_file == str(tiny.mtp_only)


def test_a_hybrid_drafter_runs_from_checkpoints_and_keeps_the_greedy_output(tiny):
    """The hybrid model drafting for itself (a model drafter on recurrent memory: each draft runs from a checkpoint
    restored after it), K = 1 and K = 2: its drafts are the verifier's own picks, so they are accepted."""
    prompts = tokens(tiny.qwen35, *PROMPTS[:2])
    reference = [alone(tiny.qwen35, p, 16) for p in prompts]
    config = GenerationConfig(draft_max=3, max_tokens=16, sampling=GREEDY)
    for parallel in (1, 2):
        pair = load_pair(ModelOptions(str(tiny.qwen35), str(tiny.qwen35), ctx_size=256, parallel=parallel,
                                      rollback_depth=3))
        try:
            jobs = [Job(p, config, tag=s) for s, p in enumerate(prompts[:parallel])]
            outs = {job.tag: f for job, f in generate_many(pair.verifier, jobs, drafter=pair.drafter)}
        finally:
            pair.close()
        for seq, done in outs.items():
            assert list(done.token_ids) == reference[seq], (parallel, seq)
            assert done.metrics.accepted > 0
