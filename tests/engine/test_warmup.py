"""The engine's warm-up at load (``LlamaModel(warmup=True)``, the default): one throwaway block as wide as the
widest verify announced, decoded and forgotten, so that llama.cpp's first-use costs land at load and not in a
generation's first verify. It must leave nothing behind: a warmed model decodes exactly as a cold one, from position
0, and counts no time or bytes."""

from __future__ import annotations

import numpy as np
import pytest

from relaxtui.engine.api import RowSpec
from relaxtui.engine.llama import LlamaModel
from relaxtui.errors import UserError

pytestmark = pytest.mark.model


@pytest.mark.parametrize("which", ["transformer", "hybrid", "hybrid with MTP"])
def test_a_warmed_up_model_decodes_bit_identically_to_a_cold_one(which, tiny, test_model_path):
    path = test_model_path if which == "transformer" else tiny.qwen35
    options = {"mtp": True} if which == "hybrid with MTP" else {}
    with LlamaModel(path, n_ctx=256, warmup=False, rollback_depth=8, **options) as cold, \
            LlamaModel(path, n_ctx=256, warmup=True, rollback_depth=8, **options) as warm:
        assert (cold.warmed_rows, warm.warmed_rows) == (0, 9)  # as wide as a verify of N = 8
        assert list(warm.tokens_of(0)) == [] and warm.decode_seconds == 0 and warm.copied_bytes == 0
        prompt = [(7 * i + 3) % cold.n_vocab for i in range(12)]
        # the same batch shapes on both sides: the same kernels, so bit identity (a stale warm-up block in the
        # cache, or a recurrent state it left, moves every row)
        rows = [model.decode(0, prompt, range(len(prompt))) for model in (cold, warm)]
        assert np.array_equal(rows[0], rows[1])
        # a generation's first verify: a block as wide as the warm-up's, on candidate rows where the engine has them
        block = [int(np.argmax(rows[0][-1])), *prompt[:8]]
        for model in (cold, warm):
            model.set_candidates(0, RowSpec(4))
        verified = [model.decode_rows([0], [block])[0] for model in (cold, warm)]
        assert [(sorted(np.asarray(r.ids).tolist()), r.argmax()) for r in verified[0]] == \
            [(sorted(np.asarray(r.ids).tolist()), r.argmax()) for r in verified[1]]
        assert list(warm.tokens_of(0)) == prompt + block


def test_a_batch_narrower_than_the_announced_verify_warms_what_fits_and_still_starts_at_position_0(test_model_path):
    with LlamaModel(test_model_path, n_ctx=16, n_batch=4, rollback_depth=8, warmup=True) as model:
        assert model.warmed_rows == 4
        out = model.decode(0, [1, 2, 3, 4, 5, 6], [-1])
        assert out.shape == (1, model.n_vocab) and np.isfinite(out).all()
        assert list(model.tokens_of(0)) == [1, 2, 3, 4, 5, 6]


def test_relaxtui_warmup_0_skips_it_and_a_bad_value_is_one_line_before_anything_loads(monkeypatch, test_model_path,
                                                                                       tmp_path):
    monkeypatch.setenv("RELAXTUI_WARMUP", "0")
    with LlamaModel(test_model_path, n_ctx=64) as model:
        assert model.warmed_rows == 0
    monkeypatch.setenv("RELAXTUI_WARMUP", "1")
    with LlamaModel(test_model_path, n_ctx=64, rollback_depth=0) as model:
        assert model.warmed_rows == 2  # the narrowest block, llama.cpp's (BOS, EOS)
    monkeypatch.setenv("RELAXTUI_WARMUP", "yes")
    with pytest.raises(UserError, match="^RELAXTUI_WARMUP must be 0 or 1, not yes$"):
        LlamaModel(tmp_path / "absent.gguf")  # the variable is read first: not "no such file"


def test_a_model_loaded_unwarmed_warms_later_with_the_same_block_once_and_not_under_relaxtui_warmup_0(
        monkeypatch, test_model_path):
    """chat loads its verifier unwarmed (its message box takes input sooner) and warms it on the model thread next:
    the block it would have warmed at load, once, leaving nothing behind."""
    monkeypatch.delenv("RELAXTUI_WARMUP", raising=False)
    with LlamaModel(test_model_path, n_ctx=256, warmup=False, rollback_depth=8) as later, \
            LlamaModel(test_model_path, n_ctx=256, warmup=True, rollback_depth=8) as warm:
        assert later.warmed_rows == 0
        blocks: list[int] = []
        real = later._warm_up
        monkeypatch.setattr(later, "_warm_up", lambda rows: (blocks.append(rows), real(rows)))
        later.warm_up()
        later.warm_up()  # once: a second call decodes nothing
        assert blocks == [9] and later.warmed_rows == warm.warmed_rows == 9
        assert list(later.tokens_of(0)) == [] and later.decode_seconds == 0
        prompt = [(5 * i + 1) % later.n_vocab for i in range(10)]
        assert np.array_equal(later.decode(0, prompt, range(len(prompt))), warm.decode(0, prompt, range(len(prompt))))
    monkeypatch.setenv("RELAXTUI_WARMUP", "0")
    with LlamaModel(test_model_path, n_ctx=64, warmup=False) as model:
        model.warm_up()
        assert model.warmed_rows == 0
