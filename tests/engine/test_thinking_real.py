"""--relax-scope on the real engine path: tiny Qwen3-style GGUFs written at test time (tests/support/tiny_models.py)
whose tokenizer has Qwen3's <think> and </think> tokens and whose chat template thinks. The tags are found from the
tokenizer, a template that never thinks is refused, the prompt says where a generation starts, and a short
generation runs under each scope with the rule judging only its side."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaxtui.checks import BadValue
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import ModelDrafter
from relaxtui.decoding.events import Finished, TokenEvent, Verdict
from relaxtui.decoding.loop import generate
from relaxtui.decoding.round import open_scope
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import ThinkTags
from relaxtui.engine.llama import LlamaModel
from relaxtui.rules import make
from relaxtui.session import prompt_tokens
from tests.support.thinking import inside_before
from tests.support.tiny_models import CHATML, QWEN3_THINKING, THINK_OPENED, thinking_vocabulary, write_dense

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)


@pytest.fixture(scope="module")
def thinking_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-thinking")
    return {name: write_dense(root / f"tiny-qwen3-{name}.gguf", thinking=template)
            for name, template in (("thinking", QWEN3_THINKING), ("opened", THINK_OPENED), ("chatml", CHATML))}


def tags() -> ThinkTags:
    vocab = thinking_vocabulary()
    return ThinkTags(vocab.id("<think>"), vocab.id("</think>"))


@pytest.mark.model
def test_the_tags_are_found_from_the_tokenizer(thinking_models):
    with LlamaModel(thinking_models["thinking"], n_ctx=128) as model:
        assert model.thinking.tags == tags()
        assert model.thinking.tags.open == model.n_vocab - 2  # (Qwen3's two added tokens, after the specials)


@pytest.mark.model
@pytest.mark.parametrize(("name", "missing"), [
    ("chatml", "the verifier's chat template never marks one (it writes no <think>)"),
    ("plain", "the verifier's tokenizer has no single <think> token"),
])
def test_a_scope_is_refused_without_a_thinking_block(thinking_models, tiny, name, missing):
    path = tiny.dense if name == "plain" else thinking_models[name]
    with LlamaModel(path, n_ctx=128) as model:
        assert model.thinking.tags is None and model.thinking.missing == missing
        config = GenerationConfig(draft_max=0, max_tokens=2, sampling=PLAIN, relax_scope="thinking")
        with pytest.raises(BadValue) as caught:
            list(generate(model, prompt_tokens(model, "hi"), config, rule=make("ensemble", 0.5)))
        assert str(caught.value) == (f"relax_scope 'thinking' needs a thinking block, and {missing}: only 'all' runs "
                                     "with this verifier")


@pytest.mark.model
def test_the_prompt_says_where_the_generation_starts(thinking_models):
    rule = make("ensemble", 0.5)
    config = GenerationConfig(relax_scope="thinking")
    with LlamaModel(thinking_models["thinking"], n_ctx=128) as qwen3, \
            LlamaModel(thinking_models["opened"], n_ctx=128) as opened:
        off = prompt_tokens(qwen3, "hi", thinking=False)
        assert off.count(tags().open) == 1 and off.index(tags().close) > off.index(tags().open)  # one token each
        assert open_scope(qwen3, off, config, rule)[1] is False  # thinking off: an empty block closed in the prompt
        assert open_scope(qwen3, prompt_tokens(qwen3, "hi", thinking=True), config, rule)[1] is False  # it opens it
        assert open_scope(opened, prompt_tokens(opened, "hi"), config, rule)[1] is True  # opened in the prompt
        assert open_scope(opened, prompt_tokens(opened, "hi"), config, make("strict")) == (None, False)


@pytest.mark.model
@pytest.mark.parametrize("scope", ["all", "thinking", "answer"])
def test_a_short_generation_runs_under_each_scope(thinking_models, scope):
    """The model drafts for itself (a second context of the same file) under ensemble:0 (π = q: every draft
    accepted where it relaxes); the prompt opens the block. Drafted verdicts in scope are the rule's, out of scope
    strict's (π(x) = p(x))."""
    path = thinking_models["opened"]
    with LlamaModel(path, n_ctx=256) as verifier, LlamaModel(path, n_ctx=256) as draft_model:
        prompt = prompt_tokens(verifier, "What is twelve times seven?")
        config = GenerationConfig(draft_max=3, max_tokens=24, sampling=PLAIN, seed=1, relax_scope=scope)
        events = list(generate(verifier, prompt, config, drafter=ModelDrafter(draft_model, verifier.n_vocab),
                               rule=make("ensemble", 0.0)))
    assert isinstance(events[-1], Finished) and events[-1].metrics.output_tokens > 0
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    states = inside_before(prompt, [e.token_id for e in tokens], (tags().open, tags().close))
    judged = [(inside, e) for inside, e in zip(states, tokens, strict=True)
              if e.verdict in (Verdict.ACCEPTED, Verdict.RESAMPLED)]
    assert len(judged) >= 6
    for inside, event in judged:
        relaxed = scope == "all" or (scope == "thinking") == inside
        assert (event.pi_x == event.q_x and event.verdict is Verdict.ACCEPTED) if relaxed else event.pi_x == event.p_x
