"""What the Hugging Face hub says, and what we wrote down about it, checked before anything acts on it.

Why: ``HF_ENDPOINT`` may name any server, and any server may answer anything. huggingface_hub parses a model's
listing with ``ModelInfo(**json)``: a body that is not JSON is a JSONDecodeError, a JSON list a TypeError,
a sibling that is a string a TypeError, ``lfs`` without ``sha256`` a KeyError, a bad ``lastModified`` a
ValueError — and the fields we rely on are passed through unchecked (a size ``"12"``, a sha256 ``"xyz"``, a
file name ``../../etc/x.gguf``). Its download joins the ``ETag`` and ``X-Repo-Commit`` headers into cache paths
unchecked: an ETag ``../../../x`` put the download outside the cache. So we read the listing ourselves and check
every field we use, and a response hook refuses unsafe headers before the library sees them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote

from relaxtui.errors import UserError

COMMIT = re.compile(r"[0-9a-f]{40}")
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # OWNER/NAME, as parse_ref accepts it
SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_BLOB_ID = re.compile(r"[0-9a-fA-F]{40}")
_PATH_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,255}", re.ASCII)  # an ETag or commit id the library uses as a path part
MAX_SIZE = 2**50  # 1 PiB: no GGUF is larger; a bigger "size" is a broken answer (and overflows a float)
MAX_LISTING = 64 << 20  # a listing of every file of a large repo is a few MB


@dataclass(frozen=True)
class FileMeta:
    """The hub's word on one file: its size and hashes (sha256 for LFS files, the git blob id for all)."""

    size: int | None
    sha256: str | None
    blob_id: str | None


@dataclass(frozen=True)
class Listing:
    """The part of a model's listing we use: the commit it describes and its files."""

    commit: str | None
    files: dict[str, FileMeta]


def show(value: object, limit: int = 60) -> str:
    """A value from outside, quoted, cut short and on one line (repr escapes newlines and control characters)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one line, cut short."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    return lines[0] if len(lines[0]) <= limit else lines[0][:limit] + "..."


def name_problem(name: str) -> str | None:
    """Why a file name from the hub cannot be used as a path inside a folder, or None if it can."""
    if not name:
        return "is empty"
    if len(name) > 1000:
        return "is longer than 1000 characters"
    if not name.isprintable():
        return "contains a control or invisible character"
    if "\\" in name:
        return "contains a backslash"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "is an absolute path"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' part (it would leave its folder)"
    if any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in parts):
        return "has a part longer than 255 bytes"
    return None


# -- the listing ----------------------------------------------------------------------------------------------------
def fetch_listing(repo: str, revision: str | None, token: str | None, endpoint: str) -> Listing:
    """GET ``/api/models/REPO[/revision/REV]?blobs=true`` through huggingface_hub's session (its auth, headers and
    HTTP errors), at most :data:`MAX_LISTING` bytes, then :func:`parse_listing`."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = f"{endpoint}/api/models/{repo}" + (f"/revision/{quote(revision, safe='')}" if revision else "")
    body = bytearray()
    with get_session().stream("GET", url, headers=build_hf_headers(token=token), params={"blobs": True},
                              timeout=constants.HF_HUB_ETAG_TIMEOUT) as response:  # the library's metadata bound
        hf_raise_for_status(response)
        for block in response.iter_bytes():
            body += block
            if len(body) > MAX_LISTING:
                raise UserError(f"the Hugging Face hub's listing of {repo} is larger than {MAX_LISTING >> 20} MiB; "
                                "that is not a listing, nothing was downloaded")
    return parse_listing(repo, bytes(body))


def _malformed(repo: str, what: str) -> UserError:
    return UserError(f"the Hugging Face hub's listing of {repo} is malformed: {what}; nothing was downloaded")


def _byte_count(value: object, where: str, repo: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SIZE:
        raise _malformed(repo, f"{where} is {show(value)}, not a byte count")
    return value


def parse_listing(repo: str, body: bytes) -> Listing:
    """The commit and files of a listing, every field we use checked: unknown or extra fields are ignored (the
    hub adds some now and then), a wrong one is one line naming it."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep, a number of 5000 digits
        raise UserError(f"the Hugging Face hub's answer for {repo} is not JSON (it starts {show(body[:40])}); "
                        "is HF_ENDPOINT a Hugging Face hub? nothing was downloaded") from None
    if not isinstance(data, dict):
        raise _malformed(repo, f"it is a {type(data).__name__}, not an object")
    commit = data.get("sha")
    if commit is not None and not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
        raise _malformed(repo, f"sha is {show(commit)}, not a 40-digit commit id")
    siblings = data.get("siblings")
    if siblings is None:
        siblings = []
    if not isinstance(siblings, list):
        raise _malformed(repo, f"siblings is a {type(siblings).__name__}, not a list")
    files: dict[str, FileMeta] = {}
    for index, sibling in enumerate(siblings):
        where = f"siblings[{index}]"
        if not isinstance(sibling, dict):
            raise _malformed(repo, f"{where} is {show(sibling)}, not an object")
        name = sibling.get("rfilename")
        if not isinstance(name, str):
            raise _malformed(repo, f"{where}.rfilename is {show(name)}, not a file name")
        problem = name_problem(name)
        if problem:
            raise _malformed(repo, f"file name {show(name)} {problem}")
        if name in files:
            raise _malformed(repo, f"file {show(name)} is listed twice")
        size = _byte_count(sibling.get("size"), f"the size of {name}", repo)
        blob_id = sibling.get("blobId")
        if blob_id is not None and not (isinstance(blob_id, str) and _BLOB_ID.fullmatch(blob_id)):
            raise _malformed(repo, f"the blobId of {name} is {show(blob_id)}, not a 40-digit git id")
        lfs, sha256 = sibling.get("lfs"), None
        if lfs is not None:
            if not isinstance(lfs, dict):
                raise _malformed(repo, f"the lfs of {name} is {show(lfs)}, not an object")
            sha256 = lfs.get("sha256")
            if not (isinstance(sha256, str) and SHA256.fullmatch(sha256)):
                raise _malformed(repo, f"the sha256 of {name} is {show(sha256)}, not 64 hex digits")
            lfs_size = _byte_count(lfs.get("size"), f"the lfs size of {name}", repo)
            if size is not None and lfs_size is not None and size != lfs_size:
                raise _malformed(repo, f"{name} has two sizes, {size} and {lfs_size}")
            size = size if size is not None else lfs_size
        files[name] = FileMeta(size, sha256.lower() if sha256 else None, blob_id.lower() if blob_id else None)
    return Listing(commit, files)


# -- headers the library turns into paths -----------------------------------------------------------------------------
class UnsafeAnswer(UserError):
    """A header huggingface_hub would use as a path part is not a plain name."""


def _check_headers(response: Any) -> None:
    """httpx response hook: X-Repo-Commit and the ETags become folder and file names in the library's cache."""
    headers = response.headers
    checks = [("X-Repo-Commit", headers.get("X-Repo-Commit")), ("X-Linked-Etag", headers.get("X-Linked-Etag"))]
    if response.request.method == "HEAD":  # the library takes a file's ETag from its HEAD answer only
        checks.append(("ETag", headers.get("ETag")))
    for header, value in checks:
        token = value.lstrip("W/").strip('"') if value is not None and header != "X-Repo-Commit" else value
        if token is not None and (not _PATH_TOKEN.fullmatch(token) or set(token) == {"."}):
            raise UnsafeAnswer(f"the hub's {header} header for {response.url.path} is {show(value)}, not a plain "
                               "name (huggingface_hub would make a path of it); nothing was downloaded")
    size = headers.get("X-Linked-Size")  # the library warns of a full disk for any huge number
    if size is not None and not (size.isascii() and size.isdigit() and int(size) <= MAX_SIZE):
        raise UnsafeAnswer(f"the hub's X-Linked-Size header for {response.url.path} is {show(size)}, not a byte "
                           "count; nothing was downloaded")


def install_header_check() -> None:
    """Add :func:`_check_headers` to huggingface_hub's shared client (again if the library made a new one)."""
    from huggingface_hub.utils import get_session

    hooks = get_session().event_hooks["response"]
    if _check_headers not in hooks:
        hooks.append(_check_headers)


def raised_by_hub_client(exc: BaseException) -> bool:
    """Whether an exception came out of huggingface_hub or its HTTP library (its parsing of an answer), as opposed
    to a bug of ours or an error of another library that merely called it."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.split(".")[0] in ("huggingface_hub", "httpx", "httpx2"):
            return True
        tb = tb.tb_next
    return False
