"""Driving the chat app with Textual's Pilot: the terminal size the tests use, waits that end on a condition (never
on the machine's speed), and sending one prompt."""

from __future__ import annotations

import time

from relaxtui.tui.app import RelaxApp

SIZE = (100, 32)
DEADLINE_S = 120.0  # generous: a loaded 2-core machine is slow, but a real hang still fails


async def wait_until(pilot, condition, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``condition`` between event-loop turns until it holds; fail only after a generous deadline, so
    the outcome never depends on how fast the machine is."""
    ends = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > ends:
            raise AssertionError(f"condition not reached within {deadline_s:.0f} s")
        await pilot.pause(0.01)


async def send(pilot, app: RelaxApp, text: str = "hello") -> None:
    await wait_until(pilot, lambda: app.ready)
    await pilot.click("#prompt")
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
