"""Where a round's host time goes (issue 45, item 7): the loop's own time outside llama.cpp, per step of the round.

    .venv/bin/python scripts/host_phases.py [--temperature 0.8] [--draft-max 3] [--repeats 3]

Runs the embedded pair on the built-in bench prompts through ``decoding.loop.generate`` and times each step the loop
calls (plan, draft, the verify decode, accept, observe, commit), less the time llama.cpp spent inside it (both models'
``decode_seconds``). The total is ``Metrics.host_ms_per_round`` (what ``bench --json`` reports); the steps show which
one to make cheaper.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from relaxtui.commands.bench_prompts import BENCH_PROMPTS
from relaxtui.decoding import loop
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.session import ModelOptions, chat_template, conversation_tokens, load_pair
from relaxtui.text import Message


def timed(obj: Any, name: str, key: str, llama: Callable[[], float], totals: dict[str, list[float]]) -> None:
    """Wrap ``obj.name`` to add (seconds, llama.cpp seconds, calls) under ``key``."""
    inner = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        llama_before, started = llama(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            row = totals.setdefault(key, [0.0, 0.0, 0.0])
            row[0] += time.perf_counter() - started
            row[1] += llama() - llama_before
            row[2] += 1
    setattr(obj, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--draft-max", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    pair = load_pair(ModelOptions(threads=args.threads))
    verifier, drafter = pair.verifier, pair.drafter
    models = [verifier, *(m for m in [getattr(drafter, "model", None)] if m is not None)]

    def llama() -> float:
        return sum(model.decode_seconds for model in models)

    totals: dict[str, list[float]] = {}
    for name in ("plan", "draft_all", "accept", "observe", "commit"):
        timed(loop.steps, name, name, llama, totals)
    timed(verifier, "decode_rows", "verify", llama, totals)
    config = GenerationConfig(draft_max=args.draft_max, max_tokens=128,
                              sampling=SamplingParams(temperature=args.temperature), seed=1)
    template = chat_template(verifier)
    rounds, host = 0, 0.0
    try:
        for _ in range(args.repeats):
            for text in BENCH_PROMPTS[:2]:
                prompt = conversation_tokens(verifier, template, [Message("user", text)])
                for event in loop.generate(verifier, prompt, config, drafter=drafter):
                    if isinstance(event, Finished):
                        rounds += event.metrics.rounds
                        host += event.metrics.decode_s - event.metrics.llama_s
    finally:
        pair.close()
    print(f"N={args.draft_max} T={args.temperature}: {rounds} rounds, host {1e3 * host / rounds:.3f} ms per round")
    for key, (seconds, llama_seconds, calls) in totals.items():
        print(f"  {key:10} {int(calls):5d} calls  host {1e3 * (seconds - llama_seconds) / rounds:.3f} ms per round"
              f"  (llama.cpp {1e3 * llama_seconds / rounds:.2f} ms)")


if __name__ == "__main__":
    main()
