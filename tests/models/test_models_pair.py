"""`models pair` and `models suggest`: which models can draft for a verifier, held to the loop's vocabulary rules,
with a measured c_rel; and the known drafter repos per family, named without any download."""

from __future__ import annotations

import re
import shutil

import pytest

from relaxtui.cli import main
from relaxtui.models.pairing import family_of, installed_candidates, pair
from relaxtui.models.registry import DRAFTER
from relaxtui.models.store import models_dir
from tests.support.gguf_files import gguf_bytes


@pytest.mark.embedded
def test_pair_on_the_embedded_verifier_accepts_both_qwen_drafters_and_rejects_smollm2(
        capsys, embedded_paths, test_model_path):
    verifier, q4_0_drafter = embedded_paths
    drafter = models_dir() / DRAFTER.file_name
    assert main(["models", "pair", str(verifier), str(drafter), str(q4_0_drafter), str(test_model_path),
                 "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    table, _, rejected = out.partition("cannot draft for this verifier:")
    rows = re.findall(r"^(\S+\.gguf)\s+\d+ M\s+\S+\s+([\d.]+)\s+±\d+%", table, flags=re.MULTILINE)
    assert {name for name, _ in rows} == {drafter.name, q4_0_drafter.name}, out
    costs = [float(c_rel) for _, c_rel in rows]
    # cheapest first; no bound on the values: they are timings, and a loaded machine can make any of them large
    # stable rows first, cheapest first within each group; the recommendation is the first stable one, if any
    stable = [float(c_rel) for name, c_rel in rows if not re.search(rf"^{re.escape(name)}.*unstable", table, re.M)]
    assert stable == sorted(stable) and all(c > 0.0 for c in costs), out
    assert f"--drafter {rows[0][0]}" in table if stable else "No recommendation" in table
    assert re.search(rf"{re.escape(test_model_path.name)}: vocabularies differ: .* has 151936 tokens, .* 49152 "
                     r"\(more than 128 apart\)", rejected), out


@pytest.mark.model
def test_pair_measures_a_compatible_copy_and_rejects_others_from_the_header(tmp_path, test_model_path):
    twin = tmp_path / "twin.gguf"
    shutil.copyfile(test_model_path, twin)
    other = tmp_path / "other-vocab.gguf"  # never loaded: the header pre-check rejects it
    other.write_bytes(gguf_bytes({"general.architecture": "llama"}, vocab=3))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 a zip, not a model")
    verifier_step, results = pair(test_model_path, [junk, other, twin, test_model_path], n_ctx=64, repeats=2)
    assert verifier_step is not None and verifier_step > 0
    assert [c.path.name for c in results] == ["twin.gguf", "junk.gguf", "other-vocab.gguf"]  # itself is skipped
    twin_result, junk_result, other_result = results
    assert twin_result.reason is None and twin_result.c_rel > 0  # a timing: no bound a loaded machine might break
    assert twin_result.spread is not None and isinstance(twin_result.stable, bool)
    assert "bad magic" in junk_result.reason
    assert other_result.reason.endswith("has 49152 tokens, other-vocab.gguf 3 (more than 128 apart)")


def test_pair_with_nothing_to_check_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    (tmp_path / "only.gguf").write_bytes(gguf_bytes({"general.architecture": "llama"}))
    assert main(["models", "pair", "only.gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no candidate drafters" in err
    assert main(["models", "pair", "absent.gguf"]) == 2
    assert "model file not found: absent.gguf" in capsys.readouterr().err


def test_split_models_are_candidates_once(tmp_path):
    for name in ("a-00001-of-00002.gguf", "a-00002-of-00002.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    assert [path.name for path in installed_candidates(tmp_path)] == ["a-00001-of-00002.gguf", "b.gguf"]


@pytest.mark.parametrize("description,family", [
    ("qwen3 Qwen3 32B Qwen3 Qwen3-32B-Q4_K_M.gguf", "Qwen3"),
    ("qwen2 Qwen2.5 Coder 1.5B Instruct qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Qwen2.5-Coder"),
    ("Qwen/Qwen2.5-14B-Instruct-GGUF", "Qwen2.5"),
    ("llama Meta Llama 3.1 8B Instruct", "Llama 3.x"),
    ("gemma3 gemma-3-27b-it", "Gemma 3"),
    ("llama SmolLM2 135M Instruct", None),
])
def test_families_are_recognised(description, family):
    found = family_of(description)
    assert (found.name if found else None) == family


def test_suggest_names_hub_drafters_without_downloading(capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: any request would fail
    assert main(["models", "suggest", "hf:Qwen/Qwen3-32B-GGUF:Q4_K_M"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Qwen3 drafters on the hub")
    assert "hf:Qwen/Qwen3-0.6B-GGUF:Q8_0" in out and "relaxtui models pull Qwen/Qwen3-0.6B-GGUF:Q8_0" in out
    assert main(["models", "suggest", "acme/unknown-model"]) == 0
    assert "no known drafters for acme/unknown-model" in capsys.readouterr().out


def test_suggest_reads_an_installed_verifiers_header(capsys, embedded_paths):
    assert main(["models", "suggest", embedded_paths[0].name]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Qwen2.5-Coder drafters") and "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M" in out
