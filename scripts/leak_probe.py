#!/usr/bin/env python3
"""Does one API key's text reach another's reply? The leak probe of docs/serve.md#several-tenants on real models.

Starts ``relaxtui serve`` (loopback, two keys, a learning drafter, drafts never cut) three times — per-key scopes
(the default), ``--share-learning``, and a fresh server — and on each: key A asks the model to repeat a made-up code
word (``WORD-DDDD-TAIL``); key B then sends a prompt that leads into it ("Here is the code word: WORD-") with the most
lenient rule (``ensemble:0``: every drafted token is kept), the same seed and temperature on every server. Prints
what B's reply held and its verdicts. B's reply should equal the fresh server's under per-key scopes, and hold A's
digits under ``--share-learning``.

    .venv/bin/python scripts/leak_probe.py [--verifier smollm2-135m-instruct-q4_1.gguf] [--kind suffix]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = "ZEBRA-4817-QUILL"
KEYS = ("key-a", "key-b")


def post(url: str, key: str, body: dict, path: str = "/v1/chat/completions") -> dict:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=300)
    connection.request("POST", path, body=json.dumps(body),
                       headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    response = connection.getresponse()
    payload = json.loads(response.read())
    connection.close()
    if response.status != 200:
        raise SystemExit(f"{response.status}: {payload}")
    return payload


def server(verifier: str, kind: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "relaxtui.cli", "serve", "--port", "0", "--verifier", verifier,
               "--draft-kind", kind, "--draft-cut", "none", "--profile", "memory-bound", "--threads", "2",
               *(arg for key in KEYS for arg in ("--api-key", key)), *extra]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return process, line.split()[-1]


def probe(verifier: str, kind: str, label: str, *extra: str, with_a: bool = True) -> dict:
    process, url = server(verifier, kind, *extra)
    try:
        sampling = {"temperature": 0.7, "top_p": 0.95, "top_k": 20, "seed": 5, "max_tokens": 24}
        said = ""
        if with_a:
            said = post(url, "key-a", {"messages": [{"role": "user", "content": f"Repeat exactly: {SECRET}"}],
                                       **sampling, "speculative": {"draft_kind": kind}})["choices"][0]["message"]
            said = said["content"]
        reply = post(url, "key-b", {"prompt": "Here is the code word: ZEBRA-", **sampling, "verdicts": True,
                                    "speculative": {"rule": "ensemble:0", "draft_kind": kind, "draft_max": 4}},
                     "/v1/completions")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    choice = reply["choices"][0]
    tokens = choice["relaxtui"]["tokens"]
    return {"server": label, "text": choice["text"], "a": said,
            "drafted": "".join(t["text"] for t in tokens if t["verdict"] == "accepted"),
            "verdicts": " ".join(t["verdict"][0] for t in tokens), "leak": "4817" in choice["text"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verifier", default="smollm2-135m-instruct-q4_1.gguf")
    parser.add_argument("--kind", default="suffix", help="a learning drafter: suffix, ngram-cache, ngram-mod")
    args = parser.parse_args()
    rows = [probe(args.verifier, args.kind, "per-key scopes (default)"),
            probe(args.verifier, args.kind, "--share-learning", "--share-learning"),
            probe(args.verifier, args.kind, "fresh server (B alone)", with_a=False)]
    print(f"A's reply: {rows[0]['a']!r}\n")
    for row in rows:
        print(f"{row['server']:<26} leak={row['leak']!s:<5} B's reply: {row['text']!r}")
        print(f"{'':<26} accepted drafts: {row['drafted']!r}  verdicts: {row['verdicts']}")
    scoped, shared, fresh = rows
    print(f"\nper-key reply equals the fresh server's: {scoped['text'] == fresh['text']}; "
          f"--share-learning leaks A's digits: {shared['leak']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
