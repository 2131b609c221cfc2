"""`relaxtui serve` for tests: on the fake pair in this process (uvicorn in a thread on a free loopback port) or as a
subprocess, and the clients that talk to it (the official ``openai`` client, raw HTTP)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import openai
import uvicorn

from relaxtui.commands.serve import bind
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.options import Speculative
from relaxtui.serve.app import ServeSettings, build_app
from relaxtui.serve.pair import FakeServedPair
from relaxtui.serve.policy import Policy
from relaxtui.serve.protocol import DRAFT_KINDS, Defaults
from relaxtui.serve.scheduler import Scheduler

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0)
WAIT_S = 60.0  # upper bound on any wait; the fake answers in milliseconds
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running(pair: FakeServedPair | None = None, *, parallel: int = 2, keys: tuple[str, ...] = (),
            max_queue: int = 64, timeout_s: float = 600.0, load=None, sampling: SamplingParams = GREEDY,
            policy: Policy | None = None):
    """A server on a free loopback port in this process; yields (base URL, scheduler)."""
    pair = pair or FakeServedPair(parallel)
    scheduler = Scheduler(load or (lambda: pair), max_queue=max_queue)
    defaults = Defaults(Speculative("strict", None, 3, "model"), sampling, 0, None, None, DRAFT_KINDS,
                        policy or Policy())
    app = build_app(scheduler, ServeSettings(defaults, keys, timeout_s=timeout_s, drain_s=5.0))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    if load is None:
        scheduler.ready.wait(WAIT_S)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", scheduler
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=WAIT_S)


def raw(url: str, method: str, path: str, body: bytes | str | dict | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, payload


# `relaxtui serve --fake` whose fake verifier sleeps DELAY s a row (argv[1]): replies too slow to end within a drain
SLOW_FAKE = """import sys
import relaxtui.serve.pair as pair
delay, base = float(sys.argv.pop(1)), pair.FakeServedPair
pair.FakeServedPair = lambda n, **options: base(n, delay_s=delay, **options)
from relaxtui.serve.scheduler import STOP_GRACE_S
from relaxtui.cli import main
sys.exit(main(sys.argv[1:]))
"""


@contextmanager
def serve_process(*args: str, fake_delay_s: float | None = None):
    """`relaxtui serve ... --port 0` as a subprocess; yields (base URL, process) once it prints its line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = ["-m", "relaxtui.cli"] if fake_delay_s is None else ["-c", SLOW_FAKE, str(fake_delay_s)]
    process = subprocess.Popen([sys.executable, *command, "serve", "--port", "0", *args], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()  # blocks until the line, or EOF if it died
        assert line.startswith("listening on http://127.0.0.1:"), (line, process.stderr.read())
        yield line.split()[-1], process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
        process.stdout.close()
        process.stderr.close()
