"""A tiny local stand-in for the Hugging Face hub, so `models pull` and the hub datasets are tested offline.

Why: the real ``huggingface_hub`` client (and ``datasets`` on top of it) must be exercised without the network
and without monkeypatching. Point ``HF_ENDPOINT`` at :attr:`FakeHub.url` and the client talks to this server.
It speaks the endpoints those clients use: HEAD/GET ``/{repo}/resolve/{rev}/{file}`` (``X-Repo-Commit``,
``ETag``, ``X-Linked-Size``, ``Range``), ``/api/{models|datasets}/{repo}[/revision/{rev}]`` (``?blobs=true``
adds sizes and LFS sha256), ``/api/.../tree/{rev}[/{path}]`` and ``POST /api/.../paths-info/{rev}``, with the
hub's ``X-Error-Code`` errors (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo). It never sends xet
headers, so the client downloads over plain HTTP. A repo can also be told to answer its model-info or a file's
requests with any status, headers and body (:class:`Answer`), so tests can play a hostile or broken hub.

Run it by hand for a demo: ``python -m tests.support.fake_hub [--smollm2 PATH]`` prints the ``HF_ENDPOINT`` to use.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "hf_relaxtui_fake_token"
SMOLLM2_REPO = "relaxtui-test/SmolLM2-135M-Instruct-GGUF"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_COMMIT_DATE = "2025-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class Answer:
    """A canned reply in place of the fake's own: any status (200-599), headers and body; the connection closes
    after it, so a reply that breaks HTTP's rules cannot confuse the next request on the same connection."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeRepo:
    """One repository: files (bytes or a path on disk), plus knobs for the failure modes tests need."""

    files: dict[str, bytes | Path]
    repo_type: str = "model"
    gated: bool = False
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    wrong_sha256: set[str] = field(default_factory=set)  # advertise a sha256 that the content does not have
    drop_first_get: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before the line drops
    info_answer: Answer | None = None  # replaces the /api/models/REPO[/revision/REV] reply
    file_answers: dict[str, Answer] = field(default_factory=dict)  # file -> replaces its HEAD/GET replies
    file_headers: dict[str, dict[str, str | None]] = field(default_factory=dict)  # file -> headers set (None: dropped)

    def size(self, name: str) -> int:
        content = self.files[name]
        return content.stat().st_size if isinstance(content, Path) else len(content)

    def open(self, name: str) -> BinaryIO:
        content = self.files[name]
        return content.open("rb") if isinstance(content, Path) else io.BytesIO(content)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorized: bool


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-answer (as one that refuses a header does) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class FakeHub:
    """The server, its repositories and a log of the requests it answered."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.repos: dict[tuple[str, str], FakeRepo] = {}
        self.requests: list[Request] = []
        self._hashes: dict[tuple[int, str], tuple[str, str]] = {}
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo_id: str, repo: FakeRepo) -> FakeRepo:
        self.repos[(repo.repo_type, repo_id)] = repo
        return repo

    def start(self) -> FakeHub:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hashes(self, repo: FakeRepo, name: str) -> tuple[str, str]:
        """(sha256, git blob sha1) of a file's content, computed once."""
        key = (id(repo), name)
        if key not in self._hashes:
            sha256, git = hashlib.sha256(), hashlib.sha1(f"blob {repo.size(name)}\0".encode())
            with repo.open(name) as stream:
                while block := stream.read(1 << 20):
                    sha256.update(block)
                    git.update(block)
            self._hashes[key] = (sha256.hexdigest(), git.hexdigest())
        return self._hashes[key]

    def advertised_sha256(self, repo: FakeRepo, name: str) -> str:
        sha256 = self.hashes(repo, name)[0]
        return sha256[::-1] if name in repo.wrong_sha256 else sha256

    def entry(self, repo: FakeRepo, name: str) -> dict[str, object]:
        """A tree / paths-info entry: every file is stored as LFS, like GGUFs on the hub."""
        size = repo.size(name)
        return {"type": "file", "path": name, "size": size, "oid": self.hashes(repo, name)[1],
                "lfs": {"oid": self.advertised_sha256(repo, name), "size": size, "pointerSize": 134},
                "lastCommit": {"id": repo.sha, "title": "upload", "date": _COMMIT_DATE}}


def _folders(names: Iterator[str] | list[str]) -> set[str]:
    return {"/".join(name.split("/")[:i]) for name in names for i in range(1, name.count("/") + 1)}


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

        # -- plumbing ----------------------------------------------------------------------------------------
        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {hub.token}"

        def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _canned(self, answer: Answer) -> None:
            self.close_connection = True
            self.send_response(answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in ("content-length", "connection"):
                    self.send_header(key, value)
            self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.body)

        def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
            headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
            self._reply(status, json.dumps({"error": message}).encode(), {**headers, **(extra or {})})

        def _json(self, value: object) -> None:
            self._reply(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

        def _repo(self, repo_type: str, repo_id: str, revision: str | None) -> FakeRepo | None:
            """The repository if this request may see it at this revision; else the error is sent."""
            repo = hub.repos.get((repo_type, repo_id))
            if repo is None:
                self._error(401 if not self._authorized() else 404, "RepoNotFound", "Repository not found")
                return None
            if repo.gated and not self._authorized():
                self._error(401, "GatedRepo", f"Access to {repo_type} {repo_id} is restricted. You must have "
                                              "access to it and be authenticated to access it. Please log in.")
                return None
            if revision not in (None, "main", repo.sha):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return repo

        # -- routes ------------------------------------------------------------------------------------------
        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self._route()

        def do_GET(self) -> None:  # noqa: N802
            self._route()

        def do_POST(self) -> None:  # noqa: N802
            self._route()

        def _route(self) -> None:
            url = urlsplit(self.path)
            hub.requests.append(Request(self.command, url.path, self.headers.get("Range"), self._authorized()))
            query = parse_qs(url.query)
            parts = [unquote(part) for part in url.path.strip("/").split("/")]
            if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in ("models", "datasets"):
                self._api(parts[1][:-1], f"{parts[2]}/{parts[3]}", parts[4:], query)
                return
            repo_type = "model"
            if parts[:1] == ["datasets"]:
                repo_type, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(repo_type, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
                return
            self._error(404, "NotFound", f"the fake hub does not serve {url.path}")

        def _api(self, repo_type: str, repo_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
            revision = rest[1] if len(rest) >= 2 else None
            repo = self._repo(repo_type, repo_id, revision)
            if repo is None:
                return
            if (not rest or rest[0] == "revision") and repo.info_answer is not None:
                self._canned(repo.info_answer)
            elif not rest or rest[0] == "revision":
                siblings = []
                for name in sorted(repo.files):
                    sibling: dict[str, object] = {"rfilename": name}
                    if query.get("blobs") == ["True"] or query.get("blobs") == ["true"]:
                        entry = hub.entry(repo, name)
                        sibling.update(size=entry["size"], blobId=entry["oid"], lfs={
                            "size": entry["size"], "sha256": hub.advertised_sha256(repo, name), "pointerSize": 134})
                    siblings.append(sibling)
                self._json({"id": repo_id, "sha": repo.sha, "private": False, "gated": "auto" if repo.gated else False,
                            "disabled": False, "lastModified": _COMMIT_DATE, "tags": [], "siblings": siblings})
            elif rest[0] == "tree":
                self._tree(repo, "/".join(rest[2:]), query.get("recursive", ["false"])[0].lower() == "true")
            elif rest[0] == "paths-info" and self.command == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                folders = _folders(list(repo.files))
                entries: list[object] = []
                for path in form.get("paths", []):
                    if path in repo.files:
                        entries.append(hub.entry(repo, path))
                    elif path in folders:
                        entries.append({"type": "directory", "path": path, "oid": "0" * 40})
                self._json(entries)
            else:
                self._error(404, "NotFound", "unknown api route")

        def _tree(self, repo: FakeRepo, folder: str, recursive: bool) -> None:
            prefix = f"{folder}/" if folder else ""
            folders = _folders(list(repo.files))
            if folder and folder not in folders:
                self._error(404, "EntryNotFound", f"{folder} does not exist")
                return
            entries: list[object] = []
            for path in sorted(folders):
                if path.startswith(prefix) and (recursive or "/" not in path[len(prefix):]):
                    entries.append({"type": "directory", "path": path, "oid": "0" * 40})
            for name in sorted(repo.files):
                if name.startswith(prefix) and (recursive or "/" not in name[len(prefix):]):
                    entries.append(hub.entry(repo, name))
            self._json(entries)

        def _resolve(self, repo_type: str, repo_id: str, revision: str, name: str) -> None:
            repo = self._repo(repo_type, repo_id, revision)
            if repo is None:
                return
            if name in repo.file_answers:
                self._canned(repo.file_answers[name])
                return
            if name not in repo.files:
                self._error(404, "EntryNotFound", f"{name} does not exist", {"X-Repo-Commit": repo.sha})
                return
            size = repo.size(name)
            sha256 = hub.advertised_sha256(repo, name)
            headers: dict[str, str | None] = {
                "X-Repo-Commit": repo.sha, "ETag": f'"{sha256}"', "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(size), "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            start, status = 0, 200
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match and self.command == "GET":
                start, status = int(match.group(1)), 206
                headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
            headers.update(repo.file_headers.get(name, {}))
            self.send_response(status)
            for key, value in headers.items():
                if value is not None:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(size - start))
            self.end_headers()
            if self.command == "HEAD":
                return
            cut = repo.drop_first_get.pop(name, None) if start == 0 else None
            with repo.open(name) as stream:
                stream.seek(start)
                sent = 0
                while block := stream.read(1 << 16):
                    if cut is not None and sent + len(block) >= cut:
                        self.wfile.write(block[: cut - sent])
                        self.wfile.flush()
                        time.sleep(0.05)
                        self.connection.shutdown(socket.SHUT_RDWR)  # the line drops mid-body
                        self.close_connection = True
                        return
                    self.wfile.write(block)
                    sent += len(block)

    return Handler


def smollm2_repo(path: Path) -> FakeRepo:
    """The SmolLM2 test model as a GGUF repo, with a README like the real ones."""
    return FakeRepo({SMOLLM2_FILE: path, "README.md": b"# SmolLM2-135M-Instruct GGUF (relaxtui fake hub)\n",
                     ".gitattributes": b"*.gguf filter=lfs diff=lfs merge=lfs -text\n"})


def main() -> None:  # pragma: no cover - a demo helper
    parser = argparse.ArgumentParser(description="serve a fake Hugging Face hub on 127.0.0.1")
    parser.add_argument("--smollm2", type=Path, default=None, help="the SmolLM2 GGUF to serve")
    parser.add_argument("--gated", action="store_true", help="make the SmolLM2 repo gated (token: " + TOKEN + ")")
    args = parser.parse_args()
    hub = FakeHub()
    if args.smollm2:
        repo = hub.add(SMOLLM2_REPO, smollm2_repo(args.smollm2))
        repo.gated = args.gated
    hub.start()
    print(f"HF_ENDPOINT={hub.url}  (repo {SMOLLM2_REPO}; token {TOKEN}); ctrl-c stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
