"""Property-based fuzzing of what the hub (or whatever HF_ENDPOINT names) may answer, and of our records on disk.

Why: the listing and the file headers are input from a server we do not control. Whatever it answers, ``pull``
and ``resolve_hub_name`` end in a verified link or in one :class:`UserError`, with ``ggml_models/`` untouched
on error and nothing written outside the library's cache; a damaged record never stops ``models list``.

In-process against the local fake hub (tests/support/fake_hub.py) with the real huggingface_hub client: the library's
cache and token paths are pointed into a fresh temporary folder for every example (they are module constants it
reads at call time), so no example sees another's downloads. No sleeps, no timing: ``deadline=None``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxtui.errors import UserError
from relaxtui.models.hub import find_pulled, parse_ref, pull, read_records, resolve_hub_name
from relaxtui.models.store import list_models
from tests.support.fake_hub import Answer, FakeHub, FakeRepo
from tests.support.gguf_files import TINY

REPO, FILE = "acme/fuzz-GGUF", "fuzz-Q4_K_M.gguf"
COMMIT = FakeRepo({}).sha
SHA256 = hashlib.sha256(TINY).hexdigest()
BLOB = hashlib.sha1(b"blob %d\0" % len(TINY) + TINY, usedforsecurity=False).hexdigest()
README = b"# fuzz\n"
VALID = {"id": REPO, "sha": COMMIT, "private": False, "lastModified": "2025-01-01T00:00:00.000Z", "siblings": [
    {"rfilename": FILE, "size": len(TINY), "blobId": BLOB, "lfs": {"size": len(TINY), "sha256": SHA256,
                                                                     "pointerSize": 134}},
    {"rfilename": "README.md", "size": len(README), "blobId": "1" * 40}]}


def fuzz(examples: int) -> settings:
    """Machine speed never matters (no deadline); no example database is written into the repository."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# values a hostile hub would try, mixed into the random ones
NASTY = ["../../x.gguf", "../../../../etc/x-Q4_K_M.gguf", "/etc/x.gguf", "a\\..\\x.gguf", "a\0b.gguf", "a\nb.gguf",
         "C:x.gguf", "a//b.gguf", "./x.gguf", "", ".", "..", "x" * 300 + ".gguf", -1, 2**64, 10**30, 1.5, True,
         "12", "0" * 63, "g" * 64, "0" * 40, SHA256.upper(), None, [], {}, [FILE], {"sha256": SHA256}]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(NASTY),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16)
KEYS = ["id", "sha", "siblings", "rfilename", "size", "blobId", "lfs", "sha256", "pointerSize", "private"]
hub_shaped = st.recursive(  # objects with the listing's own keys, so the fuzz reaches the deeper checks
    json_values, lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=20)
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
HEADER_VALUES = ["../evil", "..", ".", "", "/etc/evil", "a/b", 'W/"../../evil"', f'"{SHA256}"', COMMIT, "abc",
                 "a\\b", "ok-1.2_3", "-5", "99999999999999999999", "gzip", "deflate", "bytes 0-1/2"]
header_value = st.none() | st.sampled_from(HEADER_VALUES) | header_text
HEADER_NAMES = ["ETag", "X-Linked-Etag", "X-Repo-Commit", "X-Linked-Size", "Content-Type", "Content-Encoding",
                "X-Error-Code", "X-Error-Message", "Accept-Ranges", "Content-Range"]
ERROR_CODES = ["RepoNotFound", "GatedRepo", "RevisionNotFound", "EntryNotFound", "Weird", ""]
# not 1xx (an interim answer), and not the codes huggingface_hub retries with real back-off sleeps on a download
FILE_STATUSES = [200, 200, 201, 204, 206, 301, 302, 304, 400, 401, 403, 404, 409, 410, 416, 418, 501, 505]
INFO_STATUSES = [*FILE_STATUSES, 429, 500, 502, 503, 504]


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    disable_progress_bars()
    with FakeHub() as server:
        yield server
    enable_progress_bars()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hub-fuzz")


def tree(folder: Path) -> dict[str, str]:
    """Every entry under a folder: link target, content hash or "dir"."""
    return {str(path.relative_to(folder)): str(path.readlink()) if path.is_symlink()
            else hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            for path in sorted(folder.rglob("*"))}


@contextmanager
def sandbox(hub: FakeHub, root: Path, repo: FakeRepo) -> Iterator[Path]:
    """A fresh ggml_models/ (with a file of the user's) and library cache, three folders below a root that
    must hold nothing else afterwards: an answer that leads a write up and out of the cache is caught."""
    from huggingface_hub import constants

    hub.add(REPO, repo)
    with tempfile.TemporaryDirectory(dir=root) as tmp, pytest.MonkeyPatch.context() as patch:
        top = Path(tmp)
        work = top / "a" / "b" / "c"
        models = work / "models"
        models.mkdir(parents=True)
        (models / "mine.gguf").write_bytes(b"the user's own file")
        patch.setenv("HF_ENDPOINT", hub.url)
        patch.setenv("RELAXTUI_MODELS", str(models))
        patch.delenv("HF_TOKEN", raising=False)
        patch.setattr(constants, "HF_HUB_CACHE", str(work / "hf" / "hub"))
        patch.setattr(constants, "HF_TOKEN_PATH", str(work / "hf" / "token"))
        patch.setattr(constants, "HF_STORED_TOKENS_PATH", str(work / "hf" / "stored_tokens"))
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        try:
            yield models
        finally:
            outside = {name for name in tree(top) if not name.startswith(("a/b/c/hf/", "a/b/c/models/"))}
            assert outside <= {"a", "a/b", "a/b/c", "a/b/c/hf", "a/b/c/models"}, outside


def attempt(hub: FakeHub, root: Path, repo: FakeRepo, how: str = "pull") -> str:
    """Pull through the fake hub: a verified link of the served file, or one UserError with nothing changed."""
    with sandbox(hub, root, repo) as models:
        before = tree(models)
        try:
            if how == "pull":
                path = pull(parse_ref(REPO), say=lambda line: None).path
            elif how == "revision":
                path = pull(parse_ref(f"{REPO}:Q4_K_M", "main"), say=lambda line: None).path
            else:
                path = resolve_hub_name(f"hf:{REPO}:{FILE}")
        except UserError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)
            assert tree(models) == before
            return "error"
        assert path.parent == models and path.read_bytes() == TINY and find_pulled(parse_ref(REPO)) == path
        assert path.resolve().is_relative_to(models.parent / "hf" / "hub")
        return "pulled"


def served(info: Answer | None = None, **kwargs: Any) -> FakeRepo:
    return FakeRepo({FILE: TINY, "README.md": README}, info_answer=info, **kwargs)


# -- the listing -------------------------------------------------------------------------------------------------------
@fuzz(200)
@given(status=st.sampled_from(INFO_STATUSES), body=st.binary(max_size=300),
       code=st.sampled_from(ERROR_CODES), how=st.sampled_from(["pull", "revision", "resolve"]))
def test_any_bytes_as_the_listing_end_in_one_user_error(hub, root, status, body, code, how):
    headers = {"X-Error-Code": code, "X-Error-Message": "no"} if code else {}
    assert attempt(hub, root, served(Answer(status, body, headers)), how) == "error"


@fuzz(400)
@given(value=hub_shaped, status=st.sampled_from([200, 200, 200, 404]))
def test_any_json_as_the_listing_end_in_one_user_error(hub, root, value, status):
    answer = Answer(status, json.dumps(value).encode(), {"Content-Type": "application/json"})
    assert attempt(hub, root, served(answer)) == "error"


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*path, index))


@st.composite
def mutated_listings(draw: st.DrawFn) -> bytes:
    """The valid listing with one to three fields replaced, deleted or added."""
    doc: Any = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_places(doc))))
        value = copy.deepcopy(draw(json_values))  # NASTY holds lists and dicts: mutating them changed later draws
        if not path:
            doc = value
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        operation = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if operation == "replace":
            parent[path[-1]] = value
        elif operation == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS))] = value
        else:
            parent.append(value)
    return json.dumps(doc).encode()


@fuzz(600)
@given(body=mutated_listings())
def test_a_mutated_listing_pulls_the_verified_file_or_is_one_user_error(hub, root, body):
    attempt(hub, root, served(Answer(200, body, {"Content-Type": "application/json"})))


def test_the_valid_listing_pulls(hub, root):
    assert attempt(hub, root, served(Answer(200, json.dumps(VALID).encode()))) == "pulled"
    assert attempt(hub, root, served()) == "pulled"  # the fake's own listing


# -- the file's answers ------------------------------------------------------------------------------------------------
headers_st = st.dictionaries(st.sampled_from(HEADER_NAMES), header_value, max_size=4)


@fuzz(250)
@given(headers=headers_st)
def test_changed_headers_on_the_file_pull_the_verified_file_or_are_one_user_error(hub, root, headers):
    attempt(hub, root, served(file_headers={FILE: headers}))


@fuzz(200)
@given(status=st.sampled_from(FILE_STATUSES), headers=headers_st,
       body=st.binary(max_size=200) | st.just(TINY) | st.just(TINY[:1000]))
def test_any_answer_for_the_file_pulls_the_verified_file_or_is_one_user_error(hub, root, status, headers, body):
    canned = {name: value for name, value in headers.items() if value is not None}
    attempt(hub, root, served(file_answers={FILE: Answer(status, body, canned)}))


# -- hand-written cases, each once -------------------------------------------------------------------------------------
def listing(siblings: Any = None, **fields: Any) -> Answer:
    value = {**VALID, **fields}
    if siblings is not None:
        value["siblings"] = siblings
    return Answer(200, json.dumps(value).encode(), {"Content-Type": "application/json"})


def sibling(**fields: Any) -> dict[str, Any]:
    return {**VALID["siblings"][0], **fields}


@pytest.mark.parametrize("answer,fragment", [
    (Answer(200, b"<html>rate limited</html>"), "is not JSON"),
    (Answer(200, b"[" * 100_000), "is not JSON"),  # json's RecursionError
    (Answer(200, b"\xff\xfe{}"), "is not JSON"),
    (Answer(200, b"[1, 2]"), "it is a list, not an object"),
    (listing(siblings=5), "siblings is a int, not a list"),
    (listing(siblings=[FILE]), "siblings[0] is 'fuzz-Q4_K_M.gguf', not an object"),
    (listing([sibling(rfilename=5)]), "rfilename is 5, not a file name"),
    (listing([sibling(size="12")]), "the size of fuzz-Q4_K_M.gguf is '12', not a byte count"),
    (listing([sibling(size=-1)]), "is -1, not a byte count"),
    (listing([sibling(size=10**400)]), "not a byte count"),
    (listing([sibling(lfs="abc")]), "the lfs of fuzz-Q4_K_M.gguf is 'abc', not an object"),
    (listing([sibling(lfs={"size": 1})]), "the sha256 of fuzz-Q4_K_M.gguf is None, not 64 hex digits"),
    (listing([sibling(lfs={"sha256": "xyz"})]), "is 'xyz', not 64 hex digits"),
    (listing([sibling(blobId=7)]), "the blobId of fuzz-Q4_K_M.gguf is 7"),
    (listing([sibling(size=5)]), "has two sizes"),
    (listing(sha="../../../x"), "sha is '../../../x', not a 40-digit commit id"),
    (listing([sibling(rfilename="../../etc/x-Q4_K_M.gguf")]), "'../../etc/x-Q4_K_M.gguf' has an empty, '.' or '..'"),
    (listing([sibling(rfilename="/etc/x-Q4_K_M.gguf")]), "is an absolute path"),
    (listing([sibling(rfilename="..\\x-Q4_K_M.gguf")]), "contains a backslash"),
    (listing([sibling(rfilename="a\0x-Q4_K_M.gguf")]), "contains a control or invisible character"),
    (listing([sibling(rfilename="a\nx-Q4_K_M.gguf")]), "contains a control or invisible character"),
    (listing([sibling(), sibling()]), "is listed twice"),
])
def test_malformed_listings_name_the_repo_and_the_field(hub, root, answer, fragment):
    with pytest.raises(UserError) as caught, sandbox(hub, root, served(answer)) as models:
        before = tree(models)
        try:
            pull(parse_ref(REPO), say=lambda line: None)
        finally:
            assert tree(models) == before
    assert REPO in str(caught.value) and fragment in str(caught.value), caught.value


@pytest.mark.parametrize("headers,fragment", [
    ({"ETag": '"../../../../../evil"', "X-Linked-Etag": None}, "ETag header"),  # wrote the blob outside the cache
    ({"X-Linked-Etag": 'W/"../../../evil"'}, "X-Linked-Etag header"),
    ({"ETag": '""', "X-Linked-Etag": None}, "ETag header"),  # the blob would be the blobs folder itself
    ({"X-Repo-Commit": "../../../../evil"}, "X-Repo-Commit header"),
    ({"X-Repo-Commit": None}, "lacks the headers a Hugging Face hub sends"),
])
def test_unsafe_file_headers_are_refused_before_the_library_makes_paths_of_them(hub, root, headers, fragment):
    with pytest.raises(UserError, match=fragment) as caught, sandbox(hub, root, served(file_headers={FILE: headers})):
        pull(parse_ref(REPO), say=lambda line: None)
    assert REPO in str(caught.value)


# -- our records on disk -----------------------------------------------------------------------------------------------
record_bytes = (st.binary(max_size=200) | json_values.map(lambda value: json.dumps(value).encode())
                | st.builds(lambda key, value: json.dumps({**GOOD_RECORD, key: value}).encode(),
                            st.sampled_from(["repo", "file", "revision", "size", "sha256", "parts", "requested",
                                             "requested_revision", "mtime", "blob"]), json_values))
GOOD_RECORD = {"repo": REPO, "file": FILE, "revision": COMMIT, "requested": f"hf:{REPO}", "requested_revision": "main",
               "size": len(TINY), "sha256": SHA256, "blob": "/nowhere", "mtime": 0, "parts": [FILE]}


@fuzz(300)
@given(content=record_bytes)
def test_a_damaged_record_never_stops_listing_or_resolving(hub, root, content):
    with sandbox(hub, root, served()) as models:
        (models / FILE).write_bytes(TINY)
        (models / ".hub").mkdir()
        (models / ".hub" / f"{FILE}.json").write_bytes(content)
        records = read_records()
        assert [info.path.name for info in list_models()] == [FILE]
        found = find_pulled(parse_ref(f"{REPO}:Q4_K_M"))
        assert found in (None, models / FILE)
        assert set(records) <= {FILE}


def test_a_damaged_record_is_skipped_with_one_warning(hub, root, capsys):
    with sandbox(hub, root, served()) as models:
        (models / FILE).write_bytes(TINY)
        (models / ".hub").mkdir()
        (models / ".hub" / f"{FILE}.json").write_bytes(json.dumps({**GOOD_RECORD, "repo": 5}).encode())
        assert read_records() == {} and read_records() == {}
        assert [info.source for info in list_models()] == ["local"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ignoring the damaged hub record" in err and "repo is 5, not a str" in err
