#!/usr/bin/env python3
"""Memory of a shared server's learned state as API keys grow (docs/serve.md#several-tenants).

Runs ``relaxtui serve --fake`` in this process with K keys; each key sends one request with each learning drafter
kind (suffix, ngram-cache, ngram-mod), then the process's resident memory is read. With ``--learning-scopes`` at its
default (16) the learned state stops growing past 16 keys; with a bound past the key count it grows by one instance
of each kind per key (ngram-mod's table alone is 16 MiB).

    .venv/bin/python scripts/tenant_memory.py [--keys 1 16 64 128] [--scopes 16 4096]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvicorn  # noqa: E402

from relaxtui.commands.serve import bind  # noqa: E402
from relaxtui.decoding.sampling import SamplingParams  # noqa: E402
from relaxtui.options import Speculative  # noqa: E402
from relaxtui.serve.app import ServeSettings, build_app  # noqa: E402
from relaxtui.serve.pair import FakeServedPair  # noqa: E402
from relaxtui.serve.policy import Policy  # noqa: E402
from relaxtui.serve.protocol import DRAFT_KINDS, Defaults  # noqa: E402
from relaxtui.serve.scheduler import Scheduler  # noqa: E402

KINDS = ("suffix", "ngram-cache", "ngram-mod")


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def post(port: int, key: str, body: dict) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.status == 200, response.status


def measure(keys: int, scopes: int) -> tuple[float, float, int]:
    """(RSS before, RSS after, scopes kept) for ``keys`` keys on a server keeping ``scopes`` scopes."""
    names = tuple(f"key-{i}" for i in range(keys))
    pair = FakeServedPair(1, max_scopes=scopes)
    scheduler = Scheduler(lambda: pair, max_queue=64)
    defaults = Defaults(Speculative("strict", None, 3, "model"), SamplingParams(1.0, 0, 1.0), 0, None, None,
                        DRAFT_KINDS, Policy(max_scopes=scopes))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(scheduler, ServeSettings(defaults, names)), log_level="warning",
                                           lifespan="on", log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    scheduler.ready.wait(60)
    port = sock.getsockname()[1]
    gc.collect()
    before = rss_mib()
    for i, key in enumerate(names):
        for kind in KINDS:
            post(port, key, {"prompt": [1, 2, 3, i % 16], "max_tokens": 64, "seed": i,
                             "speculative": {"draft_kind": kind}})
    gc.collect()
    after, kept = rss_mib(), pair.kinds.scopes
    server.should_exit = True
    thread.join(60)
    sock.close()
    return before, after, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--scopes", type=int, nargs="+", default=[16, 4096])
    args = parser.parse_args()
    print("| --learning-scopes | keys | scopes kept | learned state (RSS growth) |")
    print("|---:|---:|---:|---:|")
    for scopes in args.scopes:
        for keys in args.keys:
            before, after, kept = measure(keys, scopes)
            print(f"| {scopes} | {keys} | {kept} | {after - before:.0f} MiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
