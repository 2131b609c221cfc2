#!/usr/bin/env python3
"""Drive the chat app on real models and save SVG screenshots (strict, a relaxed rule, the inspector).

Usage: .venv/bin/python scripts/screenshots.py [OUT_DIR] [--verifier V --drafter D]
Defaults to the embedded pair and docs/screenshots/.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path

from relaxtui.decoding.events import Verdict
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.session import ModelOptions
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, LlamaChatEngine

PROMPT = "Write a Python function that returns the n-th prime number."


async def wait_until(pilot, condition, seconds: float = 600) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.1)):
        if condition():
            return
        await pilot.pause(0.1)
    raise TimeoutError("the app did not get there in time")


async def main(out: Path, verifier: str, drafter: str, size: tuple[int, int]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    engine = LlamaChatEngine(ModelOptions(verifier, drafter, ctx_size=2048))
    settings = ChatSettings(rule="strict", drafter=drafter, max_tokens=96, seed=1)
    app = RelaxApp(engine, settings)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.ready)
        for name, rule_settings in (("chat-strict", settings),
                                    ("chat-cactus", replace(settings, rule="cactus", knob=1.0))):
            app.settings = rule_settings
            await pilot.click("#prompt")
            await pilot.press(*PROMPT, "enter")
            await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
            await pilot.pause(0.3)
            app.save_screenshot(str(out / f"{name}.svg"))
            print(f"{name}: {app.last_metrics.output_tokens} tokens, acceptance {app.last_metrics.acceptance_rate:.2f}")
            if name == "chat-strict":
                app.action_new_chat()
                app.last_metrics = None
        rejected = [i for i, e in enumerate(app.events) if e.verdict is Verdict.RESAMPLED]
        if rejected:
            app.select(rejected[len(rejected) // 2])
            await pilot.pause(0.3)
            app.save_screenshot(str(out / "inspector-rejected.svg"))
            print("inspector-rejected: token", app.selected)
    engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER)
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER)
    parser.add_argument("--width", type=int, default=110)
    parser.add_argument("--height", type=int, default=34)
    options = parser.parse_args()
    asyncio.run(main(options.out, options.verifier, options.drafter, (options.width, options.height)))
