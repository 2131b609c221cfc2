"""How long chat and serve take to be usable (issue 45, item 8), cold (an empty cache: nothing measured yet) and warm.

    .venv/bin/python scripts/start_times.py [--fake] [--runs 2]

chat: a child process starts the app headless (Textual's ``run_test``) and prints the seconds from its own start to the
moment the message box takes input (the verifier is loaded; the parent also says, on stderr, when the drafter has
loaded: a message sent before that waits for it). serve: ``relaxtui serve`` until its "listening on" line. A cold start
uses a new cache folder; the warm one reuses it after the cold one's background measurements have ended (serve: its log
says the prices and the profile are kept; chat: the child waits for them before it exits).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def chat_child(fake: bool, started: float, settle: bool) -> None:
    """In the child: the app until it takes input (printed), then, with ``settle``, until its background ends."""
    from relaxtui.session import ModelOptions
    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import ChatEngine, FakeChatEngine, LlamaChatEngine

    engine: ChatEngine = FakeChatEngine(delay_s=0.005) if fake else LlamaChatEngine(ModelOptions())

    async def run() -> None:
        app = RelaxApp(engine)
        async with app.run_test(size=(100, 32)) as pilot:
            while not app.takes_input:
                await pilot.pause(0.01)
            print(f"ready {time.time() - started:.2f}", flush=True)
            while not app.ready:
                await pilot.pause(0.01)
            print(f"loaded {time.time() - started:.2f}", flush=True)
            while settle and engine.pair is not None and engine.pair.background.pending:
                await pilot.pause(0.2)
            print(f"settled {time.time() - started:.2f}", flush=True)

    asyncio.run(run())
    engine.close()


def chat_start(fake: bool, cache: Path, settle: bool) -> tuple[float, float]:
    env = {**os.environ, "RELAXTUI_CACHE": str(cache)}
    started = time.time()
    out = subprocess.run([PYTHON, __file__, "--chat-child", "fake" if fake else "embedded", str(started),
                          "settle" if settle else "-"], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    found = dict(line.split() for line in out.stdout.splitlines() if line.startswith(("ready", "loaded", "settled")))
    print(f"  chat: takes input at {found['ready']} s, the drafter loaded at {found['loaded']} s", file=sys.stderr)
    return float(found["ready"]), float(found["settled"])


def serve_start(fake: bool, cache: Path, settle: bool) -> tuple[float, float]:
    """(seconds to "listening on", seconds until its background measurements were kept, or the first figure)."""
    env = {**os.environ, "RELAXTUI_CACHE": str(cache)}
    started = time.monotonic()
    command = [str(Path(PYTHON).parent / "relaxtui"), "serve", "--port", "0", *(["--fake"] if fake else [])]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    ready = settled = None
    try:
        while ready is None:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"serve ended: {process.stderr.read()[-2000:]}")
            if "listening on" in line:
                ready = time.monotonic() - started
        settled = ready
        if settle and not fake:
            want = {"verify prices measured", "pricing responses with this machine's profile"}  # (kept or not)
            while want:
                line = process.stderr.readline()
                if not line:
                    break
                want = {w for w in want if w not in line}
            settled = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
    return ready, settled


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--chat-child":
        chat_child(sys.argv[2] == "fake", float(sys.argv[3]), sys.argv[4] == "settle")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="the fake pair (no weights)")
    parser.add_argument("--faces", nargs="+", default=["chat", "serve"])
    args = parser.parse_args()
    for face in args.faces:
        with tempfile.TemporaryDirectory() as cache:
            start = chat_start if face == "chat" else serve_start
            cold, settled = start(args.fake, Path(cache), True)
            warm, _ = start(args.fake, Path(cache), False)
            print(f"{face:>5} {'fake' if args.fake else 'embedded':>8}: cold {cold:5.2f} s to ready (background done "
                  f"at {settled:5.2f} s), warm {warm:5.2f} s; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
