"""Models from the Hugging Face hub: ``hf:REPO[:QUANT | :FILE]`` names, pulled and linked into ``ggml_models/``.

Why through ``huggingface_hub``: its cache is where llama.cpp users already keep GGUFs (``llama-server -hf``),
and it brings the token from the usual places, a progress bar, and a Range request that resumes a dropped
download. What it does not do, we add: pick the file for a quant tag, check size and sha256 against the hub's
file metadata before trusting the file, refuse what is not GGUF, and record where each linked file came from
(``ggml_models/.hub/NAME.json``), so ``models list`` can say so and an ``hf:`` name resolves offline later.
Whatever the hub answers is checked before use (hub_answers.py), and so is a record when read (hub_records.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxtui import envvars
from relaxtui.engine.gguf import read_header
from relaxtui.errors import UserError
from relaxtui.models.hub_answers import (
    REPO_ID,
    FileMeta,
    fetch_listing,
    first_line,
    install_header_check,
    raised_by_hub_client,
    show,
)
from relaxtui.models.hub_reach import http_errors, quiet_hub_logging, reachable, transport_errors
from relaxtui.models.hub_records import hub_source as hub_source  # re-exported: store.py imports it from here
from relaxtui.models.hub_records import read_records, records_dir
from relaxtui.models.store import models_dir

PREFIX = "hf:"
DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's `-hf` picks when a repo has several GGUFs
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class HubRef:
    """What the user asked for: a repo, optionally a quant tag or a file in it, optionally a revision."""

    repo: str
    selector: str | None = None
    revision: str | None = None

    @property
    def names_file(self) -> bool:
        return self.selector is not None and self.selector.lower().endswith(".gguf")

    def __str__(self) -> str:
        return f"{PREFIX}{self.repo}" + (f":{self.selector}" if self.selector else "")


@dataclass(frozen=True)
class Pulled:
    path: Path  # the link in ggml_models/ (the first part of a split model)
    record: dict[str, Any]
    action: str  # "pulled" or "present"


def is_hub_name(name: object) -> bool:
    return str(name).startswith(PREFIX)


def parse_ref(text: str, revision: str | None = None) -> HubRef:
    """``[hf:]OWNER/REPO[:QUANT | :FILE.gguf]`` -> HubRef; anything else is one clear line."""
    body = text[len(PREFIX):] if text.startswith(PREFIX) else text
    repo, _, selector = body.partition(":")
    if not REPO_ID.fullmatch(repo) or ".." in repo:
        raise UserError(f"not a hub model name: {text!r} (expected hf:OWNER/REPO[:QUANT | :FILE.gguf], "
                        "e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)")
    if revision is not None and (not revision or not revision.isprintable() or any(c.isspace() for c in revision)
                                 or "\\" in revision or ".." in revision or revision.startswith(("/", "-"))):
        raise UserError(f"not a revision: {show(revision)} (a branch, tag or commit id, e.g. main)")
    return HubRef(repo, selector or None, revision)


def hub_endpoint() -> str:
    """``HF_ENDPOINT``, checked, read at call time (the library reads it once, at import)."""
    return envvars.hub_endpoint()


def hub_token() -> str | None:
    """HF_TOKEN, else the token `hf auth login` saved (huggingface_hub's own lookup). HF_ENDPOINT is checked
    first: the library parses it at import, and a bad port there is a ValueError from deep in its imports."""
    hub_endpoint()
    from huggingface_hub import get_token

    return get_token()


def unreachable(hint: str = "") -> str:
    """The one line for a hub that cannot be reached: the host setting it tried, and how to stop trying."""
    return (f"the Hugging Face hub is unreachable (HF_ENDPOINT={hub_endpoint()}); {hint or 'check the network'}; "
            "set HF_HUB_OFFLINE=1 to use only what is cached")


# what huggingface_hub and its HTTP library raise on an answer they cannot parse (not always their own classes)
_PARSE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, OverflowError)


@contextlib.contextmanager
def hub_errors(repo: str, *, token: str | None, repo_type: str = "model", revision: str | None = None,
               offline_hint: str = "", access_hint: str = "") -> Iterator[None]:
    """Turn huggingface_hub's exceptions into one line that says what to do, including those it raises on an
    answer it cannot parse (and the header check's, which refuses ones it would turn into unsafe paths)."""
    page = f"{hub_endpoint()}/{'datasets/' if repo_type == 'dataset' else ''}{repo}"  # before the import: see hub_token
    from huggingface_hub import errors as hf

    install_header_check()
    try:
        yield
    except hf.GatedRepoError:
        if token:
            raise UserError(f"{repo} is gated and your token has no access to it: request access at {page}, "
                            "then try again") from None
        raise UserError(access_hint or f"{repo} is gated on the Hugging Face hub and no token was found: accept "
                        f"its terms at {page}, then run `hf auth login` or set HF_TOKEN") from None
    except hf.RepositoryNotFoundError:
        private = "" if token else " (if it is private: run `hf auth login` or set HF_TOKEN)"
        raise UserError(f"no {repo_type} repo {repo} on the Hugging Face hub{private}") from None
    except hf.RevisionNotFoundError:
        raise UserError(f"{repo} has no revision {revision or 'main'!r}") from None
    except hf.RemoteEntryNotFoundError as exc:
        raise UserError(f"{repo} has no such file: {show(exc.response.url.path.rsplit('/', 1)[-1])}") from None
    except (hf.LocalEntryNotFoundError,) + transport_errors() as exc:
        cause = exc.__cause__ or exc.__context__  # the library says "not in the cache" for a HEAD that failed
        if isinstance(cause, hf.FileMetadataError):  # answered, but not like a hub
            raise UserError(f"the answer for a file of {repo} lacks the headers a Hugging Face hub sends "
                            f"(X-Repo-Commit, ETag); is HF_ENDPOINT ({hub_endpoint()}) a hub?") from None
        if isinstance(cause, hf.HfHubHTTPError) and cause.response is not None:
            raise UserError(f"the Hugging Face hub answered HTTP {cause.response.status_code} for "
                            f"{show(cause.response.url.path, 200)}") from None
        raise UserError(unreachable(offline_hint)) from None
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise UserError(f"the Hugging Face hub answered HTTP {status} for {repo}") from None
    except OSError as exc:  # the library's size consistency check, a full disk, ...
        raise UserError(f"download from {repo} failed: {first_line(exc)}") from None
    except http_errors("DecodingError", "TooManyRedirects", "InvalidURL") as exc:
        raise UserError(f"the Hugging Face hub's answer for {repo} could not be read: {first_line(exc)}") from None
    except _PARSE_ERRORS as exc:
        if not raised_by_hub_client(exc):
            raise
        raise UserError(f"the Hugging Face hub's answer for {repo} could not be read ({type(exc).__name__}: "
                        f"{first_line(exc)}); nothing was linked") from None


# -- choosing the file ---------------------------------------------------------------------------------------------
def _quant_pattern(tag: str) -> re.Pattern[str]:
    """Q4_K matches ``x.Q4_K.gguf`` or ``x-q4_k-00001-of-00002.gguf`` but not ``x-Q4_K_M.gguf``."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9_])", re.IGNORECASE)


def _model_key(name: str) -> str:
    """Parts of one split GGUF share a key; any other file is its own key."""
    split = _SPLIT.match(name)
    return split.group("stem") if split else name


def _group(names: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        groups.setdefault(_model_key(name), []).append(name)
    return groups


def _listing(names: list[str], limit: int = 12) -> str:
    shown = [Path(name).name for name in sorted(names)][:limit]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(shown) + more


def choose_files(ref: HubRef, files: list[str]) -> list[str]:
    """The file (or the parts of a split file) that ``ref`` names, or a line listing what the repo has."""
    ggufs = [name for name in files if name.lower().endswith(".gguf") and "mmproj" not in Path(name).name.lower()]
    if not ggufs:
        raise UserError(f"{ref.repo} has no GGUF files (it has: {_listing(files) or 'nothing'}); relaxtui runs GGUF "
                        "models, usually in a repo whose name ends in -GGUF")
    if ref.names_file:
        assert ref.selector is not None
        matches = [name for name in ggufs if ref.selector in (name, Path(name).name)]
        if not matches:
            raise UserError(f"{ref.repo} has no file {ref.selector}; its GGUF files: {_listing(ggufs)}")
        matches = _group(ggufs)[_model_key(matches[0])]
    else:
        groups = _group(ggufs)
        if ref.selector is None and len(groups) == 1:
            matches = next(iter(groups.values()))
        else:
            tag = ref.selector or DEFAULT_QUANT
            matches = [name for name in ggufs if _quant_pattern(tag).search(name)]
            if not matches:
                pick = "pick one with hf:REPO:QUANT or hf:REPO:FILE" if ref.selector is None else "pick another"
                raise UserError(f"{ref.repo} has no GGUF matching {tag}; {pick} — there are: {_listing(ggufs)}")
    groups = _group(matches)
    if len(groups) > 1:
        raise UserError(f"{ref.repo} has several GGUFs for {ref.selector or DEFAULT_QUANT}: {_listing(matches)}; "
                        f"name one: hf:{ref.repo}:FILE")
    parts = next(iter(groups.values()))
    split = _SPLIT.match(parts[0])
    if split and len(parts) != int(split.group("count")):
        raise UserError(f"{ref.repo}: split model {Path(parts[0]).name} has {len(parts)} of "
                        f"{int(split.group('count'))} parts on the hub")
    return parts


# -- verifying ------------------------------------------------------------------------------------------------------
def file_hashes(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) in one pass: LFS files are checked by the first, small files by the second."""
    size = path.stat().st_size
    sha256, git = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as stream:
        while block := stream.read(_CHUNK):
            sha256.update(block)
            git.update(block)
    return sha256.hexdigest(), git.hexdigest()


def _discard(pointer: Path) -> None:
    """Remove a bad download from the library's cache (blob and snapshot link), so a retry fetches it anew."""
    blob = pointer.resolve()
    blob.unlink(missing_ok=True)
    pointer.unlink(missing_ok=True)


def verify(pointer: Path, meta: FileMeta, where: str, known_sha256: str | None = None) -> str:
    """Check a downloaded file against the hub's metadata; a mismatch removes it. Returns its sha256."""
    blob = pointer.resolve()
    size = blob.stat().st_size
    if meta.size is not None and size != meta.size:
        _discard(pointer)
        raise UserError(f"size mismatch for {where}: the hub says {meta.size} bytes, the download has {size}; "
                        "the downloaded file was removed, pull again")
    if known_sha256 is not None and known_sha256 == meta.sha256:
        return known_sha256  # verified before and unchanged since (same blob, size and mtime)
    sha256, git = file_hashes(blob)
    expected, actual = (meta.sha256, sha256) if meta.sha256 else (meta.blob_id, git)
    if expected is not None and expected != actual:
        _discard(pointer)
        raise UserError(f"checksum mismatch for {where}: the hub says {expected}, the download is {actual}; "
                        "the downloaded file was removed, pull again")
    return sha256


# -- linking (records: hub_records.py) ----------------------------------------------------------------------------
def _ours(link: Path, record: dict[str, Any] | None, repo: str, file: str) -> bool:
    """A name in ggml_models/ we may (re)point: absent, or our own link for this same repo file."""
    if not os.path.lexists(link):
        return True
    return link.is_symlink() and record is not None and record["repo"] == repo and record["file"] == file


def _link_names(ref: HubRef, parts: list[str], records: dict[str, dict[str, Any]]) -> list[str]:
    """File names as on the hub; if one is taken by another file, prefix all with the repo (owner_repo_NAME)."""
    store = models_dir()
    for prefix in ("", ref.repo.replace("/", "_") + "_"):
        names = [prefix + Path(part).name for part in parts]
        if all(_ours(store / name, records.get(name), ref.repo, part) for name, part in zip(names, parts, strict=True)):
            return names
    raise UserError(f"{store / Path(parts[0]).name} already exists and is not this hub file; move it away to pull "
                    f"{ref}")


def _known_sha256(blob: Path, records: dict[str, dict[str, Any]]) -> str | None:
    stat = blob.stat()
    for record in records.values():
        if record.get("blob") == str(blob) and record.get("mtime") == int(stat.st_mtime) \
                and record.get("size") == stat.st_size:
            return str(record["sha256"])
    return None


# -- pulling and resolving ------------------------------------------------------------------------------------------
OFFLINE_HINT = ("download the GGUF another way and pass its path (--verifier /path/model.gguf), or copy it into "
                "ggml_models/")


def pull(ref: HubRef, *, say: Callable[[str], None] = print) -> Pulled:
    """Resolve ``ref`` on the hub, download through the library's cache, verify, and link into ggml_models/."""
    endpoint, token = hub_endpoint(), hub_token()  # the endpoint first: see hub_token
    from huggingface_hub import hf_hub_download, is_offline_mode

    earlier = find_pulled(ref)
    offline = OFFLINE_HINT + (f" (the earlier pull is still linked as {earlier.name})" if earlier else "")
    guard = functools.partial(hub_errors, ref.repo, token=token, revision=ref.revision, offline_hint=offline)
    quiet_hub_logging()
    if not is_offline_mode() and not reachable(endpoint):  # bounded: a hub that never answers costs seconds
        raise UserError(unreachable(offline))
    with guard():
        listing = fetch_listing(ref.repo, ref.revision, token, endpoint)
    metas = listing.files
    parts = choose_files(ref, list(metas))
    commit = listing.commit or ref.revision or "main"
    total = sum(metas[part].size or 0 for part in parts)
    say(f"{ref.repo}@{commit[:10]}: {', '.join(parts)} ({total / 2**20:.0f} MiB)")
    records = read_records()
    verified: list[tuple[str, Path, str]] = []
    for part in parts:  # download and check every part before anything in ggml_models/ changes
        with guard():
            pointer = Path(hf_hub_download(ref.repo, part, revision=commit, token=token, endpoint=endpoint))
        known = _known_sha256(pointer.resolve(), records)
        if known is None:
            say(f"verifying size and sha256 of {Path(part).name}")
        sha256 = verify(pointer, metas[part], f"{ref.repo}/{part}@{commit[:10]}", known)
        try:
            read_header(pointer)
        except UserError as exc:  # "not a GGUF model file (bad magic): PATH" -> the part before the path
            raise UserError(f"{ref.repo}/{part} is {str(exc).rsplit(': ', 1)[0]}; nothing was linked") from None
        verified.append((part, pointer, sha256))
    names = _link_names(ref, parts, records)
    try:
        action, record = _link(ref, commit, endpoint, names, verified)
    except OSError as exc:  # a read-only or full ggml_models/, a name the file system refuses
        raise UserError(f"could not link {ref} into {models_dir()}: {first_line(exc)}") from None
    return Pulled(models_dir() / names[0], record, action)


def _link(ref: HubRef, commit: str, endpoint: str, names: list[str],
          verified: list[tuple[str, Path, str]]) -> tuple[str, dict[str, Any]]:
    """Point each name in ggml_models/ at its verified file and write its record. Returns "pulled" if any link
    changed (else "present") and the first part's record."""
    store, action, first = models_dir(), "present", None
    records_dir().mkdir(parents=True, exist_ok=True)
    for name, (part, pointer, sha256) in zip(names, verified, strict=True):
        link, blob = store / name, pointer.resolve()
        if not (link.is_symlink() and link.resolve() == blob):
            link.unlink(missing_ok=True)
            link.symlink_to(pointer)
            action = "pulled"
        record = {"repo": ref.repo, "file": part, "revision": commit, "requested": str(ref),
                  "requested_revision": ref.revision or "main", "size": blob.stat().st_size, "sha256": sha256,
                  "endpoint": endpoint, "blob": str(blob), "mtime": int(blob.stat().st_mtime),
                  "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": names}
        (records_dir() / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        first = first or record
    assert first is not None  # choose_files never returns no parts
    return action, first


def _record_matches(ref: HubRef, record: dict[str, Any]) -> bool:
    if record["repo"].lower() != ref.repo.lower():
        return False
    if ref.revision and ref.revision != record.get("requested_revision") \
            and not str(record["revision"]).startswith(ref.revision):
        return False
    split = _SPLIT.match(str(record["file"]))
    if split and int(split.group("index")) != 1:
        return False
    if ref.names_file:
        return ref.selector in (record["file"], Path(record["file"]).name)
    return ref.selector is None or bool(_quant_pattern(ref.selector).search(record["file"]))


def find_pulled(ref: HubRef) -> Path | None:
    """The linked file an earlier pull made for this name, if it is still there: no network needed."""
    store = models_dir()
    found = []
    for name, record in read_records().items():
        link = store / name
        if _record_matches(ref, record) and link.is_file() and link.stat().st_size == record["size"]:
            found.append((record.get("requested") != str(ref), name, link))
    found.sort()
    if len(found) == 1 or (found and not found[0][0]):
        return found[0][2]
    return None


def resolve_hub_name(text: str) -> Path:
    """``hf:REPO[:QUANT | :FILE]`` -> a path in ggml_models/: the earlier pull, else pull now."""
    ref = parse_ref(text)
    local = find_pulled(ref)
    if local is not None:
        return local
    return pull(ref, say=lambda line: print(f"relaxtui: pulling {line}", file=sys.stderr, flush=True)).path
