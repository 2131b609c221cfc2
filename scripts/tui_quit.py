"""How long the chat takes to quit in the middle of a reply on the real pair (issue 9: within 1 s).

Drives the real app with Pilot: send a long prompt, wait until the reply streams for a few seconds, press
ctrl+q, and time until the app has exited *and* the models are freed (the app stops the reply, waits for
its worker, then the caller closes the engine). Also checks that no decoding thread is left running.
Usage: .venv/bin/python scripts/tui_quit.py [--repeats 3] [--after 8]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

from relaxtui.session import ModelOptions
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, LlamaChatEngine

PROMPT = "Write a long, detailed tutorial on Python decorators with many examples."


async def quit_during_reply(after_s: float) -> tuple[float, float, int]:
    options = ModelOptions()
    engine = LlamaChatEngine(options)
    app = RelaxApp(engine, ChatSettings(drafter=options.drafter or "none", max_tokens=2048, seed=1))
    async with app.run_test(size=(120, 40)) as pilot:
        while not app.ready:
            await asyncio.sleep(0.2)
        await pilot.click("#prompt")
        await pilot.press(*PROMPT, "enter")
        while not app.events:
            await asyncio.sleep(0.1)
        await asyncio.sleep(after_s)
        tokens = len(app.events)
        started = time.perf_counter()
        await pilot.press("ctrl+q")
    exited = time.perf_counter() - started
    engine.close()
    freed = time.perf_counter() - started
    assert app.generating, "the reply ended before quit: raise --after or the prompt's length"
    return exited, freed, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--after", type=float, default=8.0, help="seconds of streaming before ctrl+q")
    args = parser.parse_args()
    for index in range(args.repeats):
        exited, freed, tokens = asyncio.run(quit_during_reply(args.after))
        decoding = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
        print(f"run {index + 1}: ctrl+q after {tokens} tokens: app exited in {exited:.2f} s, models freed in "
              f"{freed:.2f} s; threads left: {decoding or 'none'}", flush=True)


if __name__ == "__main__":
    main()
