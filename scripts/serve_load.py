#!/usr/bin/env python3
"""Load test: `relaxtui serve` against `llama-server` on the same models, slots and settings (loopback only).

Every server variant (relaxtui or llama-server; strict N=3 or the verifier alone) is started on a free loopback
port, waited for and warmed up; then each concurrency level runs on each variant in turn (interleaved, so drift
in the machine's speed hits all alike): C clients, each sending its share of the level's requests one after
another (streamed, greedy). Measured: aggregate output tokens/s (all tokens over the level's wall time) and time
to first token. Bounded: every level sends a fixed number of requests with a fixed token budget, every request
has a deadline, and the servers are stopped at the end. Prints a table (--json FILE writes the raw numbers).

    nice -n 10 .venv/bin/python scripts/serve_load.py --llama-server ~/.cache/relaxtui-anchor/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERIFIER = "ggml_models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"  # the embedded pair
DRAFTER = "ggml_models/qwen2.5-coder-0.5b-instruct-q4_0.gguf"
PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses a linked list.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that merges two sorted lists.",
    "Write a Python function that counts the vowels in a string.",
    "Write a Python function that flattens a nested list.",
    "Write a Python function that computes the GCD of two integers.",
    "Write a Python function that checks whether a string is a palindrome.",
]
REQUEST_TIMEOUT_S = 600.0
START_TIMEOUT_S = 300.0


@dataclass
class Sample:
    start: float
    first: float | None
    end: float
    tokens: int
    draft_n: int
    draft_accepted: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(variant: str, port: int, args: argparse.Namespace) -> list[str]:
    spec = variant.endswith("strict3")
    if variant.startswith("relaxtui"):
        return [str(ROOT / ".venv/bin/relaxtui"), "serve", "--port", str(port), "-m", args.verifier,
                "--drafter", args.drafter if spec else "none", "--draft-max", "3" if spec else "0", "--parallel",
                str(args.parallel), "-c", str(args.ctx), "-t", str(args.threads), "--temperature", "0"]
    cmd = [args.llama_server, "-m", args.verifier, "--port", str(port), "--host", "127.0.0.1",
           "-np", str(args.parallel), "-c", str(args.ctx * args.parallel), "-t", str(args.threads),
           "-tb", str(args.threads), "--temp", "0",
           "--jinja"]  # the GGUF's own chat template, as relaxtui renders it (same prompt tokens)
    if spec:
        cmd += ["-md", args.drafter, "--spec-type", "draft-simple", "--spec-draft-n-max", "3",
                "--spec-draft-n-min", "0", "--draft-p-min", "0", "-td", str(args.threads)]
    return cmd


def request(port: int, prompt: str, max_tokens: int) -> Sample:
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    start = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    first, tokens, draft_n, accepted = None, 0, 0, 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
            first = time.perf_counter()
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        timings = chunk.get("timings") or {}
        draft_n = timings.get("draft_n", draft_n)
        accepted = timings.get("draft_n_accepted", accepted)
        tokens = tokens or timings.get("predicted_n", 0)
    connection.close()
    return Sample(start, first, time.perf_counter(), tokens, draft_n, accepted)


def level(port: int, clients: int, total: int, max_tokens: int, tag: str = "") -> list[Sample]:
    """``clients`` threads share ``total`` requests (prompts in turn), each thread one request at a time. Every
    prompt starts with its own number (``tag``.i: the same for every server at one level and round, new at the
    next), so no server finds a whole earlier prompt in its cache: both keep only what prompts share (the chat
    template's system prompt), as a real mix of requests would."""
    samples: list[Sample] = []
    errors: list[str] = []
    lock = threading.Lock()
    queue = list(range(total))

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            try:
                sample = request(port, f"(request {tag}.{i}) {PROMPTS[i % len(PROMPTS)]}", max_tokens)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                with lock:
                    errors.append(str(exc))
                continue
            with lock:
                samples.append(sample)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        print(f"  {len(errors)} request(s) failed: {errors[0][:200]}", file=sys.stderr)
    return samples


def wait_ready(process: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not become ready in time")


def start(variant: str, args: argparse.Namespace) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = open(f"/tmp/serve_load-{variant}.log", "w")  # noqa: SIM115 - the process owns it until it exits
    process = subprocess.Popen(command(variant, port, args), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return process, port


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def measure(variant: str, port: int, clients: int, args: argparse.Namespace, tag: str) -> dict[str, float] | None:
    total = max(clients * args.requests_per_client, args.min_requests)
    samples = level(port, clients, total, args.max_tokens, tag)
    if not samples:
        return None
    wall = max(s.end for s in samples) - min(s.start for s in samples)
    ttft = sorted((s.first or s.end) - s.start for s in samples)
    r = {"tokens_per_s": sum(s.tokens for s in samples) / wall, "requests": len(samples),
         "tokens": sum(s.tokens for s in samples), "wall_s": wall, "ttft_p50": statistics.median(ttft),
         "ttft_p95": ttft[min(len(ttft) - 1, round(0.95 * (len(ttft) - 1)))],
         "draft_n": sum(s.draft_n for s in samples), "draft_accepted": sum(s.draft_accepted for s in samples),
         "ttft": ttft}
    print(f"{variant:17s} C={clients}: {r['tokens_per_s']:6.2f} tok/s  TTFT p50 {r['ttft_p50']:.2f} s  "
          f"p95 {r['ttft_p95']:.2f} s  draft_n {r['draft_n']} accepted {r['draft_accepted']}", flush=True)
    return r


def run_all(variants: list[str], args: argparse.Namespace) -> dict[str, dict[int, dict[str, float]]]:
    """Every server up at once (idle ones cost no CPU), then each level measured on each server in turn, ``--rounds``
    times (the order of the variants reversed every other round), so a machine that speeds up or slows down
    mid-run hits every variant alike. A cell sums its rounds: tokens over wall time, TTFT over all requests."""
    servers = {}
    try:
        for variant in variants:
            servers[variant] = start(variant, args)
        for process, port in servers.values():
            wait_ready(process, port)
            request(port, PROMPTS[0], 8)  # warm-up
        runs: dict[str, dict[int, list[dict[str, float]]]] = {v: {} for v in variants}
        for round_ in range(args.rounds):
            for clients in args.clients:
                for variant in variants if round_ % 2 == 0 else variants[::-1]:
                    result = measure(variant, servers[variant][1], clients, args, f"{round_ + 1}.{clients}")
                    if result is not None:
                        runs[variant].setdefault(clients, []).append(result)
        return {v: {c: _combined(rs) for c, rs in by.items()} for v, by in runs.items()}
    finally:
        for process, _ in servers.values():
            stop(process)


def _combined(results: list[dict[str, float]]) -> dict[str, float]:
    ttft = sorted(t for r in results for t in r["ttft"])
    tokens, wall = sum(r["tokens"] for r in results), sum(r["wall_s"] for r in results)
    return {"tokens_per_s": tokens / wall, "tokens": tokens, "wall_s": wall,
            "requests": sum(r["requests"] for r in results), "ttft_p50": statistics.median(ttft),
            "ttft_p95": ttft[min(len(ttft) - 1, round(0.95 * (len(ttft) - 1)))],
            "draft_n": sum(r["draft_n"] for r in results), "draft_accepted": sum(r["draft_accepted"] for r in results),
            "rounds": [r["tokens_per_s"] for r in results]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", default=os.path.expanduser("~/.cache/relaxtui-anchor/build/bin/llama-server"))
    parser.add_argument("--verifier", default=VERIFIER, help="verifier GGUF (both servers)")
    parser.add_argument("--drafter", default=DRAFTER, help="drafter GGUF (both servers, strict3 variants)")
    parser.add_argument("--rounds", type=int, default=1, help="sweeps over the levels, variants alternating")
    parser.add_argument("--variants", default="relaxtui-strict3,llama-strict3,relaxtui-ar,llama-ar")
    parser.add_argument("--clients", default="1,4,8", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests-per-client", type=int, default=1)
    parser.add_argument("--min-requests", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=8, help="slots of both servers")
    parser.add_argument("--ctx", type=int, default=1024, help="context per slot")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="write the raw numbers here")
    args = parser.parse_args()
    table = run_all(args.variants.split(","), args)
    print("\n| mode | clients | relaxtui tok/s | llama-server tok/s | ratio | TTFT p50 r/l (s) | TTFT p95 r/l (s) |")
    print("|---|---|---|---|---|---|---|")
    for mode in ("strict3", "ar"):
        ours, theirs = table.get(f"relaxtui-{mode}", {}), table.get(f"llama-{mode}", {})
        for clients in args.clients:
            a, b = ours.get(clients), theirs.get(clients)
            if not a or not b:
                continue
            print(f"| {mode} | {clients} | {a['tokens_per_s']:.2f} | {b['tokens_per_s']:.2f} | "
                  f"{a['tokens_per_s'] / b['tokens_per_s']:.2f} | {a['ttft_p50']:.2f} / {b['ttft_p50']:.2f} | "
                  f"{a['ttft_p95']:.2f} / {b['ttft_p95']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items()}, "results": table},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
