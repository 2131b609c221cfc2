"""The speculative loop: one verifier batch per round, emitting immutable events (docs/method.md, Algorithm 2).

It reads like llama.cpp's speculative-simple: draft → verify [last, x_1..x_N] in one batch → accept →
commit counters → trim the verifier's KV cache → stop check; each step is one call into ``round`` (shared with
the batched loop), which keeps the invariant: the last emitted token is *separate*, not in the verifier's cache
until the next verify batch decodes it. Without a drafter (or N = 0) every round is a one-token batch: the
autoregressive baseline runs the same code, so baseline and speculative numbers are comparable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from relaxtui.decoding import round as steps
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafting import Drafter
from relaxtui.decoding.events import Event, RoundTiming
from relaxtui.engine.api import Model
from relaxtui.errors import ContextFull
from relaxtui.rules import Rule

__all__ = ["generate"]


def generate(verifier: Model, prompt: Sequence[int], config: GenerationConfig, *,
             drafter: Drafter | None = None, rule: Rule | None = None,
             should_stop: Callable[[], bool] = lambda: False,
             clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Yield a TokenEvent per emitted token, then one Finished with the docs/metrics.md metrics.

    ``should_stop`` is polled once per round (the TUI's stop button, Ctrl-C); ``clock`` is the timer behind
    every timing (a fake clock makes timings deterministic for snapshots)."""
    slot = steps.open_slot(verifier, 0, prompt, config, rule, drafter, should_stop=should_stop, clock=clock)
    try:
        yield from _rounds(slot, verifier, drafter, config, should_stop, clock)
    finally:  # also when the caller stops iterating early
        steps.whole_rows_again(slot)


def _rounds(slot: steps.Slot, verifier: Model, drafter: Drafter | None, config: GenerationConfig,
            should_stop: Callable[[], bool], clock: Callable[[], float]) -> Iterator[Event]:
    slot.started = clock()
    while slot.finish is None:
        if should_stop():
            slot.finish = "stopped"
            break
        if not steps.plan(slot):  # room and N
            break
        round_llama = steps.llama_seconds(verifier, drafter)
        t0 = clock()
        steps.draft_all([slot])  # 1. draft
        t1 = clock()
        try:  # 2. verify: one batch [last, x_1..x_N]
            target_logits = verifier.decode_rows([slot.seq], [slot.verify_tokens])[0]  # every token's row
        except ContextFull:
            slot.finish = "context"
            break
        t2 = clock()
        emitted = steps.accept(slot, target_logits)  # 3. accept, 5. trim the cache
        t3 = clock()
        timing = RoundTiming(slot.counters.rounds, len(slot.draft_tokens), len(emitted) - 1, t1 - t0, t2 - t1,
                             t3 - t2, steps.llama_seconds(verifier, drafter) - round_llama)
        steps.observe(slot, timing)  # 4. commit counters
        for index, item, text in steps.commit(slot, emitted):  # 6. emit, stop check
            yield steps.token_event(index, item, text, timing, config.top_alternatives, logp=slot.logprobs[index])
    yield steps.finished(slot, clock)

