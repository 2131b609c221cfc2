"""A run folder is outside input too: damaged manifests and result lines, same-name model files, refused runs.

Fuzzing (hypothesis) feeds random and mutated bytes to the manifest and results readers: nothing but the
project's own UserError may come out, and every non-blank line is either a record or counted as skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxtui.cli import main
from relaxtui.engine.gguf import FINGERPRINT_SAMPLE_BYTES, model_fingerprint, read_header
from relaxtui.errors import UserError
from relaxtui.evals.run.contenthash import content_sha256
from relaxtui.evals.run.identity import MODELS, RunIdentity, same_file
from relaxtui.evals.run.results import TORN, ResultsStore, load_records, read_manifest, record_problem
from tests.support.cli import fails_with
from tests.support.eval_runs import record

FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)
GOOD = record("c1", "strict", 3, "p1", 0, True)
MANIFEST = {"task": "aime", "verifier": "v.gguf", "drafter": "d.gguf", "temperature": 0.6}


def mutations() -> st.SearchStrategy[object]:
    """A valid record with one field dropped or replaced by any JSON value (the classes a damaged line has)."""
    def mutate(key: str, value: object, drop: bool) -> object:
        changed = dict(GOOD)
        if drop:
            changed.pop(key)
        else:
            changed[key] = value
        return changed
    return st.builds(mutate, st.sampled_from(sorted(GOOD)), JSON, st.booleans())


@FUZZ
@given(lines=st.lists(st.binary(max_size=40) | JSON.map(json.dumps).map(str.encode)
                      | mutations().map(json.dumps).map(str.encode), max_size=6), torn=st.booleans())
def test_results_reader_skips_and_counts_whatever_a_line_holds(tmp_path_factory, lines, torn):
    store = ResultsStore(tmp_path_factory.mktemp("run"))
    data = b"\n".join(line.replace(b"\n", b" ") for line in lines) + (b"" if torn else b"\n")
    store.path.write_bytes(data)
    read = store.read()
    assert len(read.records) + sum(read.skipped.values()) == sum(1 for line in data.split(b"\n") if line.strip())
    assert all(record_problem(r) is None for r in read.records)
    summary = read.skipped_line(store.path)
    assert (summary is None) == (not read.skipped)


@FUZZ
@given(content=st.binary(max_size=64) | JSON.map(json.dumps).map(str.encode)
       | st.dictionaries(st.sampled_from(["task", "verifier", "drafter", "temperature", "parallel", MODELS]), JSON)
       .map(json.dumps).map(str.encode))
def test_manifest_reader_raises_only_user_errors(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("run")
    (folder / "manifest.json").write_bytes(content)
    try:
        manifest = read_manifest(folder)
    except UserError as exc:
        assert "\n" not in str(exc) and "manifest.json" in str(exc)
        return
    assert isinstance(manifest, dict)
    try:  # resuming against it: refused or accepted, never a traceback
        ResultsStore(folder).check(RunIdentity(MANIFEST, {"v.gguf": "1:aa"}))
    except UserError:
        pass


@FUZZ
@given(content=st.binary(max_size=64) | JSON.map(json.dumps).map(str.encode), rows=st.lists(mutations(), max_size=3))
def test_report_on_a_damaged_folder_is_a_table_or_one_line(tmp_path_factory, capsys, content, rows):
    folder = tmp_path_factory.mktemp("run")
    (folder / "manifest.json").write_bytes(content)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [GOOD, *rows]))
    code = main(["eval", "report", str(folder)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert err.count("relaxtui: error:") == 1


def test_deep_nesting_and_huge_numbers_are_skipped_lines(tmp_path):
    store = ResultsStore(tmp_path)
    store.path.write_bytes(b"[" * 100_000 + b"\n" + b'{"seed": 1' + b"0" * 5000 + b"}\n"
                           + b'{"config_id": "\xff"}\n' + json.dumps(GOOD).encode() + b"\n")
    read = store.read()
    assert read.records == [GOOD]
    assert read.skipped == {"not JSON": 2, "not UTF-8": 1}


def test_a_manifest_of_the_wrong_type_is_one_line(capsys, tmp_path):
    (tmp_path / "manifest.json").write_text("[1, 2]")
    fails_with(capsys, ["eval", "report", str(tmp_path)], "must hold a JSON object (got list)")
    (tmp_path / "manifest.json").write_text(json.dumps({**MANIFEST, "parallel": "16"}))
    fails_with(capsys, ["eval", "report", str(tmp_path)], "field 'parallel' must be a whole number (got '16')")
    (tmp_path / "manifest.json").write_bytes(b'{"task": "\xff"}')
    fails_with(capsys, ["eval", "report", str(tmp_path)], "is not UTF-8")


def test_report_counts_a_torn_last_line_and_other_skipped_lines(capsys, tmp_path):
    store = ResultsStore(tmp_path)
    store.open_run(RunIdentity(MANIFEST))
    store.append(GOOD)
    store.append(record("c0", None, 0, "p1", 0, True))
    with store.path.open("a") as stream:
        stream.write('"just a string"\n{"config_id": "torn')
    assert main(["eval", "report", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "results.jsonl: skipped 2 lines (" in err and f"1 {TORN}" in err and "1 not a JSON object" in err, err
    folder = load_records(tmp_path)
    assert len(folder.records) == 2 and folder.settings[MODELS] == {}


def test_resume_cuts_the_torn_line_and_says_so(tmp_path):
    store = ResultsStore(tmp_path)
    store.open_run(RunIdentity(MANIFEST))
    store.append(GOOD)
    with store.path.open("a") as stream:
        stream.write('{"config_id": "to')
    said = store.open_run(RunIdentity(MANIFEST))
    assert said is not None and TORN in said
    assert store.path.read_text() == json.dumps(GOOD) + "\n"


def test_another_file_under_the_same_name_is_refused_naming_both(tmp_path):
    store = ResultsStore(tmp_path)
    store.open_run(RunIdentity(MANIFEST, {"v.gguf": "100:aaaa"}))
    with pytest.raises(UserError, match=r"another file named v.gguf \(fingerprint 100:aaaa, this one 100:bbbb\)"):
        store.check(RunIdentity(MANIFEST, {"v.gguf": "100:bbbb"}))
    # a driver that does not hold the file (Ray) keeps what the folder recorded
    assert store.check(RunIdentity(MANIFEST)).models == {"v.gguf": "100:aaaa"}
    # the same file resumes; a folder from before fingerprints records them now
    assert store.check(RunIdentity(MANIFEST, {"v.gguf": "100:aaaa"})).models == {"v.gguf": "100:aaaa"}
    legacy = ResultsStore(tmp_path / "legacy")
    legacy.directory.mkdir()
    (legacy.directory / "manifest.json").write_text(json.dumps(MANIFEST))
    assert legacy.check(RunIdentity(MANIFEST, {"v.gguf": "1:cc"})).models == {"v.gguf": "1:cc"}


def test_config_ids_do_not_depend_on_fingerprints():
    """Folders from before fingerprints keep their config ids, so their records still resume."""
    from relaxtui.evals.run.results import GridPoint

    point = GridPoint("strict", None, 3)
    assert RunIdentity(MANIFEST).config_id(point) == RunIdentity(MANIFEST, {"v.gguf": "1:aa"}).config_id(point)
    assert RunIdentity(MANIFEST).config_id(point) != RunIdentity({**MANIFEST, "top_k": 1}).config_id(point)


def folder_state(path):
    return None if not path.exists() else sorted((p.name, p.read_bytes()) for p in path.iterdir())


@pytest.mark.model
def test_a_refused_run_leaves_the_folder_as_it_was(capsys, tmp_path, test_model_path):
    base = ["eval", "aime", "--limit", "1", "--max-tokens", "4", "--drafter", str(test_model_path),
            "--verifier", str(test_model_path), "--threads", "1"]
    out = tmp_path / "out"
    fails_with(capsys, [*base, "--out", str(out), "--parallel", "100000"], "--parallel 100000")
    assert not out.exists()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(test_model_path.read_bytes()[:4096])
    fails_with(capsys, [*base[:-4], "--verifier", str(broken), "--out", str(out)], "broken.gguf")
    assert not out.exists()
    assert main([*base, "--out", str(out)]) == 0  # a real run, then a refused other run leaves it untouched
    capsys.readouterr()
    before = folder_state(out)
    fails_with(capsys, [*base, "--out", str(out), "--parallel", "2"], "holds results of another run")
    assert folder_state(out) == before


def run_on_a_copy(capsys, tmp_path, test_model_path) -> tuple[Path, list[str]]:
    """A real one-problem eval on a copy of the test model (model.gguf), for tests that then change the copy."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(test_model_path, model)
    argv = ["eval", "aime", "--limit", "1", "--max-tokens", "4", "--verifier", str(model), "--drafter", str(model),
            "--threads", "1", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    capsys.readouterr()
    return model, argv


def flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.model
def test_a_different_model_file_under_the_recorded_name_is_refused(capsys, tmp_path, test_model_path):
    model, argv = run_on_a_copy(capsys, tmp_path, test_model_path)
    flip_byte(model, model.read_bytes().index(b"general.name") + 40)  # the header: another file, same name, size
    before = folder_state(tmp_path / "out")
    fails_with(capsys, argv, "another file named model.gguf")
    assert folder_state(tmp_path / "out") == before


@pytest.mark.model
def test_a_tensor_byte_changed_between_the_sampled_blocks_is_another_file(capsys, tmp_path, test_model_path):
    """The sampled fingerprint reads 16 blocks of the tensor data: a byte between two of them passed unseen."""
    model, argv = run_on_a_copy(capsys, tmp_path, test_model_path)
    sampled = model_fingerprint(model)
    flip_byte(model, read_header(model).data_offset + FINGERPRINT_SAMPLE_BYTES + 4096)  # past the first block
    assert model_fingerprint(model) == sampled  # the hole: the sampled fingerprint cannot see it
    fails_with(capsys, argv, "another file named model.gguf")


def test_a_fingerprint_from_before_the_full_hash_is_held_to_what_it_recorded():
    current = "100:aaaa sha256:" + "1" * 64
    assert same_file(current, current) and same_file("100:aaaa", current)  # an older folder resumes
    assert not same_file("100:bbbb", current) and not same_file("100:aaaa sha256:" + "2" * 64, current)


def test_the_full_hash_is_read_once_per_version_of_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"x" * 5000)
    assert content_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    real = hashlib.sha256
    monkeypatch.setattr("relaxtui.evals.run.contenthash.hashlib.sha256", lambda *a: pytest.fail("hashed again"))
    assert content_sha256(model) == real(model.read_bytes()).hexdigest()  # from the cache
    monkeypatch.undo()
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    stat = model.stat()
    model.write_bytes(b"GGUF" + b"y" * 5000)  # same size, new content: a new version, hashed anew
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a tick later, on any kernel's clock
    assert content_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    (tmp_path / "cache" / "content-sha256.json").write_text("{not json")  # a damaged cache is rebuilt
    assert content_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()


def test_tune_refuses_what_eval_refuses_before_loading(capsys, tmp_path):
    out = tmp_path / "tune"
    missing = ["--verifier", str(tmp_path / "nope.gguf"), "--out", str(out)]
    fails_with(capsys, ["tune", "aime", "--rule", "mentored", "--alpha", "2", *missing], "out of range for 'mentored'")
    fails_with(capsys, ["tune", "aime", "--rule", "nope", *missing], "unknown rule 'nope'")
    fails_with(capsys, ["tune", "aime", "--max-drop", "nan", *missing], "--max-drop")
    fails_with(capsys, ["tune", "aime", "--rule", "fly:0.3:6", "--draft-max", "2", "3", *missing],
               "--draft-max must be above the window of rule 'fly', W=6 (got 3)")  # FLy's N before anything loads
    fails_with(capsys, ["eval", "aime", "--rule", "fly", "--draft-max", "1", "2", *missing],
               "--draft-max must be at least 2 for rule 'fly' (got 1)")
    fails_with(capsys, ["tune", "aime", "--confidence", "0.5", *missing], "--confidence must be in (0.5, 1)")  # was a
    # traceback from the race's own check
    fails_with(capsys, ["tune", "aime", "--profile", "nope", *missing], "nope")
    fails_with(capsys, ["tune", "aime", *missing], "nope.gguf")  # the model is checked before the folder
    assert not out.exists()


def test_a_hostile_folder_cannot_write_through_links_or_forge_lines(capsys, tmp_path):
    """A run folder handed over by someone else: outputs planted as links to other files are replaced, never
    written through, and text from the manifest cannot add lines to the terminal or the Markdown."""
    folder = tmp_path / "run"
    victim = tmp_path / "victim.sh"
    victim.write_text("echo safe\n")
    ResultsStore(folder).open_run(RunIdentity({**MANIFEST, "verifier": "x\necho PWNED\n\x1b[31m"}))
    ResultsStore(folder).append(GOOD)
    for name in ("summary.md", "summary.csv", "pareto.png"):
        (folder / name).symlink_to(victim)
    assert main(["eval", "report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert victim.read_text() == "echo safe\n" and not (folder / "summary.md").is_symlink()
    assert "\necho PWNED" not in out and "\x1b[31m" not in out
    assert "\necho PWNED" not in (folder / "summary.md").read_text()


def test_a_fifo_or_device_in_a_run_folder_is_one_line_not_a_hang(capsys, tmp_path):
    import os

    ResultsStore(tmp_path).open_run(RunIdentity(MANIFEST))
    os.mkfifo(tmp_path / "results.jsonl")  # nobody writes it: a blocking read would hang forever
    fails_with(capsys, ["eval", "report", str(tmp_path)], "is not a regular file")
    (tmp_path / "results.jsonl").unlink()
    (tmp_path / "results.jsonl").symlink_to("/dev/zero")
    fails_with(capsys, ["eval", "report", str(tmp_path)], "is not a regular file")


def test_unstable_profile_timings_are_said_and_not_advice(capsys, run_folder_with_profile):
    folder, profile = run_folder_with_profile
    assert main(["eval", "report", str(folder)]) == 0
    assert "warning: profile this-machine: its timings stayed unstable" in capsys.readouterr().out
    from relaxtui.evals.analysis.report import summarise
    from relaxtui.evals.analysis.tune import recommend

    rows = [record("c0", None, 0, f"p{i}", 0, True) for i in range(6)]
    rows += [record("c1", "strict", 3, f"p{i}", 0, True) for i in range(6)]
    advice = recommend(summarise(rows, [profile]), max_drop=2.0, profile=profile)
    assert "not a recommendation" in advice.caveat


@pytest.fixture
def run_folder_with_profile(tmp_path):
    from dataclasses import replace

    from relaxtui.costmodel.profiles import CostProfile

    profile = replace(CostProfile("this-machine", "cpu", "v.gguf", "d.gguf", 10.0, 3.0, {1: 10.0, 4: 14.0}),
                      timing_spread=0.9, timing_stable=False)
    store = ResultsStore(tmp_path)
    store.open_run(RunIdentity(MANIFEST))
    store.append(GOOD)
    (tmp_path / "measured-profile.json").write_text(profile.to_json())
    return tmp_path, profile


def test_report_names_a_missing_this_machine_profile(capsys, tmp_path):
    ResultsStore(tmp_path).open_run(RunIdentity(MANIFEST))
    ResultsStore(tmp_path).append(GOOD)
    fails_with(capsys, ["eval", "report", str(tmp_path), "--profile", "this-machine"],
               "has no measured-profile.json")


@pytest.mark.model
def test_tune_checks_every_drafter_before_the_first_runs(capsys, tmp_path, test_model_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(test_model_path.read_bytes()[:4096])
    fails_with(capsys, ["tune", "aime", "--limit", "1", "--verifier", str(test_model_path), "--drafters",
                        str(test_model_path), str(broken), "--out", str(tmp_path / "tune")], "broken.gguf")
    assert not (tmp_path / "tune").exists()
