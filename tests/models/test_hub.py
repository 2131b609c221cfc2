"""`models pull`, `hf:` names and the hub benchmarks, through the real huggingface_hub and datasets clients.

Nothing is monkeypatched: a local fake hub (tests/support/fake_hub.py) speaks the hub's endpoints, and the CLI runs in a
subprocess with ``HF_ENDPOINT`` at that server and ``HF_HOME`` / ``RELAXTUI_MODELS`` in a temporary folder (the
clients read them at import). Every failure must be one line, exit code 2, with ggml_models/ untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from relaxtui.errors import UserError
from relaxtui.evals.tasks.hub import SCRIPT_DATASETS
from relaxtui.models.hub import HubRef, choose_files, parse_ref
from relaxtui.models.registry import SMOLLM2
from tests.support.fake_hub import SMOLLM2_FILE, SMOLLM2_REPO, TOKEN, Answer, FakeHub, FakeRepo, smollm2_repo
from tests.support.gguf_files import TINY, tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
COMMIT = FakeRepo({}).sha
TINY8 = tiny_gguf(5)
# huggingface_hub writes what it received in 10 MiB chunks, so a resume starts at a multiple of 10 MiB
CHUNK = 10 * 2**20
LARGE = TINY + b"\1" * (3 * CHUNK)


@pytest.fixture
def hub():
    with FakeHub() as server:
        server.add("acme/tiny-GGUF", FakeRepo({"tiny-Q4_K_M.gguf": TINY, "tiny-Q8_0.gguf": TINY8,
                                               "README.md": b"# tiny\n"}))
        server.add("acme/flaky-GGUF", FakeRepo({"flaky-Q4_K_M.gguf": LARGE},
                                               drop_first_get={"flaky-Q4_K_M.gguf": 2 * CHUNK + 12345}))
        server.add("acme/bad-GGUF", FakeRepo({"bad-Q4_K_M.gguf": TINY}, wrong_sha256={"bad-Q4_K_M.gguf"}))
        server.add("acme/gated-GGUF", FakeRepo({"gated-Q4_K_M.gguf": TINY}, gated=True))
        server.add("acme/html-GGUF", FakeRepo({"page-Q4_K_M.gguf": b"<html>rate limited</html>"}))
        yield server


@pytest.fixture
def env(tmp_path, hub):
    """A clean environment: no token, our hub, our caches; plus a file of the user's in ggml_models/."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    environ.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), RELAXTUI_MODELS=str(tmp_path / "models"),
                   RELAXTUI_CACHE=str(tmp_path / "cache"), HF_HUB_DISABLE_TELEMETRY="1")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.gguf").write_bytes(b"the user's own file")
    return environ


def run(environ: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relaxtui.cli", *args], env=environ, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def run_python(environ: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def store_state(environ: dict[str, str]) -> dict[str, str]:
    """Every entry under ggml_models/ (records included): link target or content hash."""
    folder = Path(environ["RELAXTUI_MODELS"])
    return {str(path.relative_to(folder)): str(path.readlink()) if path.is_symlink()
            else hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            for path in sorted(folder.rglob("*"))}


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("relaxtui: error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


# -- pull -----------------------------------------------------------------------------------------------------------
def test_pull_resolves_a_quant_tag_verifies_and_links_with_a_record(env, hub):
    result = run(env, "models", "pull", "acme/tiny-GGUF:q4_k_m")
    assert result.returncode == 0, result.stderr
    link = Path(env["RELAXTUI_MODELS"]) / "tiny-Q4_K_M.gguf"
    assert link.is_symlink() and link.resolve().is_relative_to(Path(env["HF_HOME"]).resolve())
    assert link.read_bytes() == TINY
    record = json.loads((link.parent / ".hub" / "tiny-Q4_K_M.gguf.json").read_text())
    assert (record["repo"], record["file"], record["revision"]) == ("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", COMMIT)
    assert record["sha256"] == hashlib.sha256(TINY).hexdigest() and record["size"] == len(TINY)

    listing = run(env, "models", "list").stdout
    assert any(line.startswith("tiny-Q4_K_M.gguf") and "hf:acme/tiny-GGUF@0123456" in line
               for line in listing.splitlines()), listing

    again = run(env, "models", "pull", "acme/tiny-GGUF:Q4_K_M")  # same commit: nothing downloaded again
    assert again.returncode == 0 and "present" in again.stdout
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("/tiny-Q4_K_M.gguf")]
    assert len(gets) == 1


def test_a_name_taken_by_the_users_own_file_is_left_alone(env):
    mine = Path(env["RELAXTUI_MODELS"]) / "tiny-Q4_K_M.gguf"
    mine.write_bytes(b"not from the hub")
    result = run(env, "models", "pull", "acme/tiny-GGUF:Q4_K_M")
    assert result.returncode == 0, result.stderr
    assert mine.read_bytes() == b"not from the hub" and not mine.is_symlink()
    assert (mine.parent / "acme_tiny-GGUF_tiny-Q4_K_M.gguf").read_bytes() == TINY


def test_a_dropped_download_resumes_with_a_range_request(env, hub):
    result = run(env, "models", "pull", "acme/flaky-GGUF")
    assert result.returncode == 0, result.stderr
    ranges = [r.range for r in hub.requests if r.method == "GET" and r.path.endswith("/flaky-Q4_K_M.gguf")]
    assert ranges == [None, f"bytes={2 * CHUNK}-"]
    assert "Trying to resume download" in result.stderr
    assert (Path(env["RELAXTUI_MODELS"]) / "flaky-Q4_K_M.gguf").read_bytes() == LARGE


def test_checksum_mismatch_removes_the_download_and_touches_nothing(env, hub):
    before = store_state(env)
    result = run(env, "models", "pull", "acme/bad-GGUF:Q4_K_M")
    assert_one_line_error(result, "checksum mismatch", hashlib.sha256(TINY).hexdigest(), "removed")
    assert store_state(env) == before
    blobs = Path(env["HF_HOME"]) / "hub" / "models--acme--bad-GGUF" / "blobs"
    assert not [path for path in blobs.iterdir() if path.is_file()]


@pytest.mark.parametrize("token_from", ["HF_TOKEN", "token file"])
def test_gated_repo_needs_a_token_from_the_usual_places(env, hub, token_from):
    before = store_state(env)
    assert_one_line_error(run(env, "models", "pull", "acme/gated-GGUF"), "gated", "hf auth login", "HF_TOKEN")
    assert store_state(env) == before
    if token_from == "HF_TOKEN":
        env["HF_TOKEN"] = TOKEN
    else:  # where `hf auth login` saves it
        Path(env["HF_HOME"]).mkdir(exist_ok=True)
        (Path(env["HF_HOME"]) / "token").write_text(TOKEN)
    result = run(env, "models", "pull", "acme/gated-GGUF")
    assert result.returncode == 0, result.stderr
    assert [r.authorized for r in hub.requests if r.path.endswith("/gated-Q4_K_M.gguf")][-1]


@pytest.mark.parametrize("args,fragments", [
    (["acme/nothere"], ["no model repo acme/nothere on the Hugging Face hub", "HF_TOKEN"]),
    (["acme/tiny-GGUF:other.gguf"], ["has no file other.gguf; its GGUF files: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"]),
    (["acme/tiny-GGUF:Q5_K_M"], ["no GGUF matching Q5_K_M", "there are: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"]),
    (["acme/tiny-GGUF", "--revision", "v9"], ["acme/tiny-GGUF has no revision 'v9'"]),
    (["acme/html-GGUF"], ["acme/html-GGUF/page-Q4_K_M.gguf is not a GGUF model file (bad magic); nothing was linked"]),
    (["no repo here"], ["not a hub model name"]),
])
def test_bad_pulls_are_one_line_and_touch_nothing(env, args, fragments):
    before = store_state(env)
    assert_one_line_error(run(env, "models", "pull", *args), *fragments)
    assert store_state(env) == before


def _listing(**sibling: object) -> Answer:
    """The hub's listing of a one-file repo, with fields of that file replaced."""
    entry = {"rfilename": "x-Q4_K_M.gguf", "size": len(TINY), "blobId": "0" * 40,
             "lfs": {"size": len(TINY), "sha256": hashlib.sha256(TINY).hexdigest(), "pointerSize": 134}, **sibling}
    return Answer(200, json.dumps({"id": "acme/x-GGUF", "sha": COMMIT, "siblings": [entry]}).encode())


@pytest.mark.parametrize("repo,fragments", [
    (FakeRepo({"x-Q4_K_M.gguf": TINY}, info_answer=Answer(200, b"<html>hi</html>")),
     ["answer for acme/x-GGUF is not JSON"]),  # was json.decoder.JSONDecodeError
    (FakeRepo({"x-Q4_K_M.gguf": TINY}, info_answer=_listing(size="12")),
     ["listing of acme/x-GGUF is malformed: the size of x-Q4_K_M.gguf is '12', not a byte count"]),  # TypeError
    (FakeRepo({"x-Q4_K_M.gguf": TINY}, info_answer=_listing(lfs={"size": 1, "sha256": "xyz"})),
     ["the sha256 of x-Q4_K_M.gguf is 'xyz', not 64 hex digits"]),
    (FakeRepo({"x-Q4_K_M.gguf": TINY}, info_answer=_listing(rfilename="../../etc/x-Q4_K_M.gguf")),
     ["file name '../../etc/x-Q4_K_M.gguf' has an empty, '.' or '..' part"]),  # was the library's ValueError
    (FakeRepo({"x-Q4_K_M.gguf": TINY}, file_headers={"x-Q4_K_M.gguf": {"ETag": '"../../../../evil"',
                                                                        "X-Linked-Etag": None}}),
     ["ETag header", "acme/x-GGUF", "not a plain name"]),  # was a blob written outside the cache, and exit 0
])
def test_a_hostile_hub_is_one_line_and_writes_nothing_outside_the_cache(env, hub, tmp_path, repo, fragments):
    hub.add("acme/x-GGUF", repo)
    before = store_state(env)
    assert_one_line_error(run(env, "models", "pull", "acme/x-GGUF"), *fragments)
    assert store_state(env) == before
    assert {path.name for path in tmp_path.iterdir()} <= {"hf", "models"}  # hf/: the library's cache, if any
    assert not [path for path in tmp_path.rglob("*evil*")]


def test_models_list_skips_a_damaged_record_with_one_warning(env):
    pulled = run(env, "models", "pull", "acme/tiny-GGUF:Q4_K_M")
    assert pulled.returncode == 0, pulled.stderr
    records = Path(env["RELAXTUI_MODELS"]) / ".hub"
    (records / "tiny-Q4_K_M.gguf.json").write_bytes(b'{"repo": 5, "file": "\xff')  # not UTF-8, not JSON
    (records / "mine.gguf.json").write_text(json.dumps({"repo": ["x"], "file": 1, "revision": None, "size": "1",
                                                        "sha256": 2}))
    listing = run(env, "models", "list")
    assert listing.returncode == 0, listing.stderr
    assert "tiny-Q4_K_M.gguf" in listing.stdout
    warnings = listing.stderr.splitlines()
    assert len(warnings) == 2 and all("ignoring the damaged hub record" in line for line in warnings), warnings


def test_a_fifo_in_the_records_folder_is_skipped_not_waited_on(env):
    records = Path(env["RELAXTUI_MODELS"]) / ".hub"
    records.mkdir()
    os.mkfifo(records / "mine.gguf.json")  # open() would block until a writer came
    listing = run(env, "models", "list", timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "ignoring the damaged hub record" in listing.stderr and "not a regular file (a FIFO)" in listing.stderr


def test_an_unreachable_hub_is_one_line_saying_how_to_use_a_local_file(env):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{probe.getsockname()[1]}"
    before = store_state(env)
    assert_one_line_error(run(env, "models", "pull", "acme/tiny-GGUF"), "the Hugging Face hub is unreachable",
                          "pass its path (--verifier /path/model.gguf)")
    assert store_state(env) == before


HUB_TASK = """name = "hubbed"
version = 1
[data]
hub = "org/name"
split = "test"
id = "id"
[prompt]
template = "{q}"
[answer]
kind = "exact"
gold = "a"
"""


def closed_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nobody listens there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_hub_dataset_with_the_hub_down_is_one_line_naming_the_host_setting_and_offline_mode(env, tmp_path):
    """datasets retried a refused HEAD five times (1+2+4+8+8 s) and logged each try: 24 s and 12 lines, then ours."""
    (tmp_path / "task.toml").write_text(HUB_TASK)
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{closed_port()}"
    result = run(env, "tasks", "check", str(tmp_path / "task.toml"))
    assert_one_line_error(result, f"the Hugging Face hub is unreachable (HF_ENDPOINT={env['HF_ENDPOINT']})",
                          "set HF_HUB_OFFLINE=1")
    assert "Retrying" not in result.stderr


def test_a_hub_that_accepts_but_never_answers_gets_one_bounded_probe_not_retries(env, tmp_path):
    """A silent hub costs one probe (its timeout, a few seconds), never the client's own timeouts times retries."""
    (tmp_path / "task.toml").write_text(HUB_TASK)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        silent.settimeout(0.2)
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{silent.getsockname()[1]}"
        for args in (("tasks", "check", str(tmp_path / "task.toml")), ("models", "pull", "acme/tiny-GGUF")):
            held = []
            with subprocess.Popen([sys.executable, "-m", "relaxtui.cli", *args], env=env, cwd=ROOT, text=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as child:
                while child.poll() is None:
                    try:
                        held.append(silent.accept()[0])  # accepted and never answered
                    except TimeoutError:
                        pass
                stderr = child.stderr.read()
            for connection in held:
                connection.close()
            assert child.returncode == 2 and stderr.count("\n") == 1 and "unreachable" in stderr, stderr
            assert len(held) == 1, f"{args[0]}: {len(held)} connections, one probe expected"


@pytest.mark.model
def test_hf_names_pull_smollm2_on_first_use_then_resolve_offline(env, hub, test_model_path):
    hub.add(SMOLLM2_REPO, smollm2_repo(test_model_path))
    generate = ["generate", "Say hi.", "-n", "4", "--temperature", "0", "--color", "never"]
    first = run(env, *generate, "-m", f"hf:{SMOLLM2_REPO}:Q4_1", "-md", f"hf:{SMOLLM2_REPO}")
    assert first.returncode == 0, first.stderr
    assert "pulling" in first.stderr and "acceptance rate" in first.stderr  # generate: stats on stderr
    record = json.loads((Path(env["RELAXTUI_MODELS"]) / ".hub" / f"{SMOLLM2_FILE}.json").read_text())
    assert record["sha256"] == SMOLLM2.sha256  # the hub's file is the one relaxtui pins

    hub.stop()  # from here on there is no hub
    offline = run(env, *generate, "-m", f"hf:{SMOLLM2_REPO}:{SMOLLM2_FILE}", "-md", "none")
    assert offline.returncode == 0, offline.stderr
    assert "pulling" not in offline.stderr
    assert_one_line_error(run(env, "models", "pull", f"{SMOLLM2_REPO}:Q4_1"), "unreachable",
                          f"the earlier pull is still linked as {SMOLLM2_FILE}")


# -- choosing files (no network) -------------------------------------------------------------------------------------
SPLIT = ["Q8_0/a-Q8_0-00001-of-00002.gguf", "Q8_0/a-Q8_0-00002-of-00002.gguf"]
FILES = ["README.md", "a-Q4_K.gguf", "a-Q4_K_M.gguf", "a-Q4_K_S.gguf", "mmproj-a-F16.gguf", "a-F16.gguf", *SPLIT]


@pytest.mark.parametrize("selector,expected", [
    ("Q4_K", ["a-Q4_K.gguf"]), ("q4_k_m", ["a-Q4_K_M.gguf"]), ("F16", ["a-F16.gguf"]), (None, ["a-Q4_K_M.gguf"]),
    ("Q8_0", SPLIT), ("a-Q8_0-00002-of-00002.gguf", SPLIT), ("a-Q4_K_S.gguf", ["a-Q4_K_S.gguf"]),
])
def test_quant_tags_and_file_names_pick_the_file(selector, expected):
    assert choose_files(HubRef("acme/a-GGUF", selector), FILES) == expected


@pytest.mark.parametrize("files,selector,message", [
    (["x.Q4_K_M.gguf", "y.Q4_K_M.gguf"], "Q4_K_M", "several GGUFs for Q4_K_M: x.Q4_K_M.gguf, y.Q4_K_M.gguf"),
    (["a-00001-of-00003.gguf", "a-00002-of-00003.gguf"], None, "has 2 of 3 parts"),
    (["model.safetensors", "config.json"], None, "has no GGUF files (it has: config.json, model.safetensors)"),
    (["a-Q8_0.gguf", "a-Q6_K.gguf"], None, "no GGUF matching Q4_K_M; pick one with hf:REPO:QUANT"),
])
def test_unusable_choices_say_what_the_repo_has(files, selector, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        choose_files(HubRef("acme/a-GGUF", selector), files)


def test_hub_names_parse():
    assert parse_ref("hf:acme/x-GGUF:Q4_K_M") == HubRef("acme/x-GGUF", "Q4_K_M")
    assert parse_ref("acme/x-GGUF", "v2") == HubRef("acme/x-GGUF", None, "v2")
    for bad in ("hf:acme", "hf:../x:Q4", "hf:acme/x/y"):
        with pytest.raises(UserError, match="not a hub model name"):
            parse_ref(bad)


# -- benchmarks through the hub ---------------------------------------------------------------------------------------
GPQA_README = b"""---
configs:
- config_name: gpqa_diamond
  data_files: gpqa_diamond.csv
- config_name: gpqa_main
  data_files: gpqa_main.csv
---
# GPQA (a two-question stand-in)
"""
GPQA_CSV = (b'Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n'
            b'rec1,"What is 2+2?",4,3,5,"six, maybe"\nrec2,"Multi\nline?",yes,no,maybe,never\n')
LOAD = ("import json, sys\nfrom relaxtui.errors import UserError\nfrom relaxtui.evals.tasks import get\n"
        "try:\n    samples = get({task!r}).load()\nexcept UserError as exc:\n    sys.exit(f'error: {{exc}}')\n"
        "print(json.dumps([[s.id, s.gold, s.messages[-1].content] for s in samples]))\n")


def test_gpqa_loads_through_datasets_from_the_hub_then_from_its_cache(env, hub):
    hub.add("Idavidrein/gpqa", FakeRepo({"README.md": GPQA_README, "gpqa_diamond.csv": GPQA_CSV,
                                          "gpqa_main.csv": b"Question\nnot this one\n"}, "dataset", gated=True))
    no_token = run_python(env, LOAD.format(task="gpqa"))
    assert no_token.returncode == 1 and "gated" in no_token.stderr and "HF_TOKEN" in no_token.stderr
    env["HF_TOKEN"] = TOKEN
    result = run_python(env, LOAD.format(task="gpqa"))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row[0] for row in rows] == ["rec1", "rec2"] and all(row[1] in "ABCD" for row in rows)
    assert "six, maybe" in rows[0][2] and "Multi\nline?" in rows[1][2]
    assert any(r.path.endswith("/gpqa_diamond.csv") for r in hub.requests)

    hub.stop()
    offline = run_python({**env, "HF_HUB_OFFLINE": "1"}, LOAD.format(task="gpqa"))
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout) == rows
    down = run_python(env, LOAD.format(task="gpqa"))  # no HF_HUB_OFFLINE: the probe fails, the cache answers
    assert down.returncode == 0 and json.loads(down.stdout) == rows, down.stderr
    assert "Retrying" not in down.stderr


def lcb_row(number: int) -> bytes:
    tests = json.dumps([{"input": "1\n", "output": f"{number}\n", "testtype": "stdin"}])
    row = {"question_id": f"q{number}", "question_title": f"problem {number}", "question_content": f"Print {number}.",
           "starter_code": "", "public_test_cases": tests, "private_test_cases": "[]", "metadata": "{}",
           "platform": "atcoder", "contest_date": "2025-01-01T00:00:00", "difficulty": "easy"}
    return (json.dumps(row) + "\n").encode()


def test_livecodebench_script_repo_loads_its_release_files_through_the_hub_then_offline(env, hub):
    files = {"code_generation_lite.py": b"raise RuntimeError('datasets >= 4 runs no loading scripts')\n",
             "README.md": b"# LiveCodeBench (stand-in)\n"}
    names = SCRIPT_DATASETS["livecodebench/code_generation_lite"][1]["release_v6"]
    files.update({name: lcb_row(number) for number, name in enumerate(names, start=1)})
    hub.add("livecodebench/code_generation_lite", FakeRepo(files, "dataset"))
    result = run_python(env, LOAD.format(task="lcb"))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    # v6 is the 175 problems new in release 6 (test6.jsonl), as the paper's reproduction uses, not the cumulative set
    assert [row[0] for row in rows] == ["q6"] and names[-1] == "test6.jsonl"
    assert not any(r.path.endswith(".py") for r in hub.requests)

    hub.stop()  # no HF_HUB_OFFLINE: the library falls back to its cache at once
    offline = run_python(env, LOAD.format(task="lcb"))
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout) == rows


def test_livecodebench_release_tags_follow_its_loading_script():
    keyword, releases = SCRIPT_DATASETS["livecodebench/code_generation_lite"]
    assert keyword == "version_tag"
    assert releases["release_v6"] == ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                                      "test6.jsonl")
    assert releases["release_v1"] == ("test.jsonl",) and releases["v6"] == ("test6.jsonl",)
    assert releases["v5_v6"] == ("test5.jsonl", "test6.jsonl") and releases["release_latest"] == releases["release_v6"]
