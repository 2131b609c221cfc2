"""Decoding speed in the chat TUI against headless generation, same prompt, seed and settings (issue 9).

Interleaved passes, so machine drift hits both alike. `--mode pilot`: one chat engine (one loaded pair) runs
(1) headless — its event stream consumed in a plain loop, as `relaxtui generate` does — and (2) inside the
real chat app driven by Pilot in Textual's headless mode. `--mode tmux`: `relaxtui generate` and `relaxtui chat` as
separate processes, each in a real terminal (a tmux pane), read off the screen: generate's stats block and
the chat's status line. Prints each pass and the ratio of medians.
Usage: .venv/bin/python scripts/tui_throughput.py [--mode pilot|tmux] [--passes 3]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from relaxtui.decoding.events import Finished
from relaxtui.session import ModelOptions
from relaxtui.text import Message
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, LlamaChatEngine

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring and tests."
ROOT = Path(__file__).resolve().parents[1]


def headless(engine: LlamaChatEngine, settings: ChatSettings) -> float:
    """The engine's event stream consumed by a plain loop: what `relaxtui generate` does with it. Both caches
    start empty, as they do in the app (its load-time timings reset them)."""
    engine.verifier.reset()
    if engine.drafter is not None and getattr(engine.drafter, "model", None) is not None:
        engine.drafter.model.reset()
    for event in engine.stream([Message("user", PROMPT)], settings, lambda: False):
        if isinstance(event, Finished):
            return event.metrics.tokens_per_s
    raise RuntimeError("no Finished event")


async def in_app(engine: LlamaChatEngine, settings: ChatSettings, model_thread: ThreadPoolExecutor) -> float:
    app = RelaxApp(engine, settings, model_thread=model_thread)
    async with app.run_test(size=(120, 40)) as pilot:
        # poll with plain sleeps: Pilot.pause() makes every widget process a callback, which would load the UI
        # thread far more than a user does
        while not app.ready:
            await asyncio.sleep(0.2)
        await pilot.click("#prompt")
        await pilot.press(*PROMPT, "enter")
        while app.generating or app.last_metrics is None:
            await asyncio.sleep(0.2)
        return app.last_metrics.tokens_per_s


def in_tmux(command: str, ready: str | None, result: str) -> float:
    """Run ``command`` in a real terminal (a tmux pane, 120x40); type the prompt once ``ready`` shows (for the
    chat), then read the tokens/s that ``result`` (a regex with one group) finds on the screen."""
    session = "relaxtui-throughput"
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", f"{command}; sleep 600"],
                   check=True, cwd=ROOT)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-S", "-200", "-t", session], capture_output=True,
                              text=True).stdout

    try:
        deadline = time.monotonic() + 300
        if ready is not None:
            while ready not in screen():
                if time.monotonic() > deadline:
                    raise RuntimeError("the chat did not become ready")
                time.sleep(0.5)
            subprocess.run(["tmux", "send-keys", "-t", session, "-l", PROMPT], check=True)
            subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)
        while not (match := re.search(result, screen())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no result on the screen of: {command}")
            time.sleep(0.5)
        return float(match.group(1))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def terminal_pass(settings: ChatSettings, chat_first: bool) -> tuple[float, float]:
    """`relaxtui generate` and `relaxtui chat`, each its own process in the same kind of terminal."""
    options = (f"--seed {settings.seed} --draft-max {settings.draft_max} --max-tokens {settings.max_tokens} "
               f"--temperature {settings.temperature}")
    cli = f"{sys.executable} -m relaxtui.cli"

    def plain() -> float:
        return in_tmux(f"{cli} generate '{PROMPT}' {options}", None, r"decode\s+[\d.]+ s, ([\d.]+) tokens/s")

    def tui() -> float:
        return in_tmux(f"{cli} chat {options}", "message the verifier", r"\d+ tokens, ([\d.]+) tok/s")

    if chat_first:
        chat = tui()
        return plain(), chat
    first = plain()
    return first, tui()


async def run_passes(engine: LlamaChatEngine, settings: ChatSettings,
                     args: argparse.Namespace) -> list[tuple[float, float]]:
    """Headless and in-app on one model thread, as the app runs its models: llama.cpp's OpenMP team belongs
    to the calling thread, and a second team on the same cores would slow both down."""
    model_thread = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    rows = []
    try:
        await loop.run_in_executor(model_thread, engine.load, lambda _: None)
        await loop.run_in_executor(model_thread, engine.load_drafter, lambda _: None)
        await loop.run_in_executor(model_thread, headless, engine, settings)  # warm-up
        for index in range(args.passes):  # alternate which runs first: the second of two runs tends to be slower
            if index % 2 == 0:
                plain = await loop.run_in_executor(model_thread, headless, engine, settings)
                tui = await in_app(engine, settings, model_thread)
            else:
                tui = await in_app(engine, settings, model_thread)
                plain = await loop.run_in_executor(model_thread, headless, engine, settings)
            rows.append((plain, tui))
            report(index, plain, tui, args.mode)
    finally:
        await loop.run_in_executor(model_thread, engine.close)
    return rows


def report(index: int, plain: float, tui: float, mode: str) -> None:
    print(f"pass {index + 1}: headless {plain:6.2f} tok/s   TUI ({mode}) {tui:6.2f} tok/s   ratio {tui / plain:.3f}",
          flush=True)


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
    if args.mode == "pilot":
        rows = asyncio.run(run_passes(LlamaChatEngine(options), settings, args))
    else:
        rows = []
        for index in range(args.passes):  # alternate which runs first
            rows.append(terminal_pass(settings, chat_first=index % 2 == 1))
            report(index, *rows[-1], args.mode)
    plain, tui = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(f"median: headless {plain:.2f} tok/s, TUI {tui:.2f} tok/s, TUI/headless = {tui / plain:.3f}")


if __name__ == "__main__":
    main()
