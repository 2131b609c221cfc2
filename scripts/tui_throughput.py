"""Decoding speed in the chat TUI against headless generation, same prompt, seed and settings (issue 9).

Interleaved passes, so machine drift hits both alike: (1) the loop run headless on a loaded pair, as
`relaxtui generate` runs it; (2) the real chat app on the same pair of files, either driven by Pilot in
Textual's headless mode (`--mode pilot`) or as `relaxtui chat` in a real terminal inside tmux
(`--mode tmux`, reading the tokens/s that the app prints in its status line). Prints each pass and the ratio
of medians. Usage: .venv/bin/python scripts/tui_throughput.py [--mode pilot|tmux] [--passes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.engine.text import Message
from relaxtui.session import ModelOptions, chat_template, conversation_tokens, load_pair
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, LlamaChatEngine

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring and tests."
ROOT = Path(__file__).resolve().parents[1]


def headless(pair, settings: ChatSettings) -> float:  # type: ignore[no-untyped-def]
    rule, config = settings.validated()
    tokens = conversation_tokens(pair.verifier, chat_template(pair.verifier), [Message("user", PROMPT)])
    for event in generate(pair.verifier, tokens, config, drafter=pair.drafter, rule=rule):
        if isinstance(event, Finished):
            return event.metrics.tokens_per_s
    raise RuntimeError("no Finished event")


async def in_app(options: ModelOptions, settings: ChatSettings) -> float:
    engine = LlamaChatEngine(options)
    app = RelaxApp(engine, settings)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.ready:
                await pilot.pause(0.05)
            await pilot.click("#prompt")
            await pilot.press(*PROMPT, "enter")
            while app.generating or app.last_metrics is None:
                await pilot.pause(0.05)
            return app.last_metrics.tokens_per_s
    finally:
        engine.close()


def in_terminal(settings: ChatSettings) -> float:
    """`relaxtui chat` in a real (tmux) terminal; the status line reports the reply's tokens/s."""
    session = "relaxtui-throughput"
    command = (f"{sys.executable} -m relaxtui.cli chat --seed {settings.seed} --draft-max {settings.draft_max} "
               f"--max-tokens {settings.max_tokens} --temperature {settings.temperature}")
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True,
                   cwd=ROOT)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    try:
        deadline = time.monotonic() + 300
        while "message the verifier" not in screen():
            if time.monotonic() > deadline:
                raise RuntimeError("the chat did not become ready")
            time.sleep(0.5)
        subprocess.run(["tmux", "send-keys", "-t", session, "-l", PROMPT], check=True)
        subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)
        while not (match := re.search(r"(\d+) tokens, ([\d.]+) tok/s", screen())):
            if time.monotonic() > deadline:
                raise RuntimeError("the reply did not finish")
            time.sleep(0.5)
        return float(match.group(2))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["pilot", "tmux"], default="pilot")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    if args.mode == "tmux" and not shutil.which("tmux"):
        sys.exit("tmux is not installed (apt-get install tmux)")
    options = ModelOptions()
    settings = ChatSettings(rule="strict", draft_max=3, max_tokens=args.max_tokens, seed=1,
                            drafter=options.drafter or "none")
    pair = load_pair(options)
    rows = []
    try:
        headless(pair, settings)  # warm-up
        for index in range(args.passes):
            plain = headless(pair, settings)
            tui = asyncio.run(in_app(options, settings)) if args.mode == "pilot" else in_terminal(settings)
            rows.append((plain, tui))
            print(f"pass {index + 1}: headless {plain:6.2f} tok/s   TUI ({args.mode}) {tui:6.2f} tok/s   "
                  f"ratio {tui / plain:.3f}", flush=True)
    finally:
        pair.close()
    plain, tui = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(f"median: headless {plain:.2f} tok/s, TUI {tui:.2f} tok/s, TUI/headless = {tui / plain:.3f}")


if __name__ == "__main__":
    main()
