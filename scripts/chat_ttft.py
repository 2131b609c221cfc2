"""Time to first token across the turns of one conversation, with and without chat KV reuse (issue 9).

Two chat engines on the same pair of files: one as the chat runs it (both models keep the cached prefix
across turns, ``reuse="longest"``), one that re-prefills the whole conversation every turn. Each turn, the
reusing engine writes the full reply (which becomes the conversation's history); the other one is timed to
its first token on the same conversation. Usage: .venv/bin/python scripts/chat_ttft.py [--turns 5]
"""

from __future__ import annotations

import argparse
import time

from relaxtui.decoding.events import Finished
from relaxtui.session import ModelOptions
from relaxtui.text import Message
from relaxtui.tui.engine import ChatSettings, LlamaChatEngine

QUESTIONS = (
    "Write a Python function that checks whether a number is prime.",
    "Now make it faster for large inputs.",
    "Add type hints and a docstring.",
    "Write three pytest tests for it.",
    "Explain the time complexity in two sentences.",
)


def first_token_seconds(engine: LlamaChatEngine, conversation: list[Message], settings: ChatSettings,
                        *, full: bool) -> tuple[float, str, int]:
    """Seconds to the first token; with ``full`` the reply is written to the end (and returned)."""
    started = time.perf_counter()
    first = None
    emitted = [0]

    def stop() -> bool:
        return not full and emitted[0] > 0

    text, decoded = "", -1
    for event in engine.stream(conversation, settings, stop):
        if isinstance(event, Finished):
            text, decoded = event.text, event.metrics.prefill_decoded
            break
        emitted[0] += 1
        if first is None:
            first = time.perf_counter() - started
    return first or float("nan"), text, decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    options = ModelOptions()
    reusing, fresh = LlamaChatEngine(options), LlamaChatEngine(options)
    for engine in (reusing, fresh):
        engine.load(lambda _: None)
        engine.load_drafter(lambda _: None)
    settings = ChatSettings(drafter=options.drafter or "none", max_tokens=args.max_tokens, seed=1)
    conversation: list[Message] = []
    print(f"{'turn':>4} {'prompt':>7} {'decoded':>8} {'TTFT reuse':>11} {'decoded':>8} {'TTFT no reuse':>14}")
    try:
        for turn, question in enumerate(QUESTIONS[: args.turns], start=1):
            conversation.append(Message("user", question))
            prompt = len(reusing.prompt_tokens(conversation, False))
            ttft_reuse, reply, decoded_reuse = first_token_seconds(reusing, conversation, settings, full=True)
            fresh.verifier.reset()  # what every turn costs without reuse: the whole conversation again
            fresh.drafter.model.reset()
            ttft_fresh, _, decoded_fresh = first_token_seconds(fresh, conversation, settings, full=False)
            conversation.append(Message("assistant", reply))
            print(f"{turn:>4} {prompt:>7} {decoded_reuse:>8} {ttft_reuse:>10.3f}s {decoded_fresh:>8} "
                  f"{ttft_fresh:>13.3f}s")
    finally:
        reusing.close()
        fresh.close()


if __name__ == "__main__":
    main()
