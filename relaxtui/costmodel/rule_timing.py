"""Time one draft position of every acceptance rule on a full-size vocabulary (issue: ≤ 2 ms on 152k).

The timed work is what the loop does per position once p and q exist: ``rule.decide`` plus the residual
that a rejection needs. Distributions are either *processed* (the paper's T=0.6, top-k 20, top-p 0.95:
sparse) or *dense* (no top-k/top-p), the worst case for rules that touch the whole vocabulary.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from relaxtui.decoding.sampling import SamplingParams, process
from relaxtui.rules import PAPER_GRID, make
from relaxtui.rules.base import residual

QWEN_VOCAB = 151_936


@dataclass(frozen=True)
class RuleTiming:
    rule: str
    knob: float | None
    dense: bool
    median_ms: float
    p90_ms: float


def time_rules(vocab: int = QWEN_VOCAB, repeats: int = 50, seed: int = 0) -> list[RuleTiming]:
    rng = np.random.default_rng(seed)
    logits_p = rng.normal(scale=3.0, size=vocab).astype(np.float32)
    logits_q = (logits_p + rng.normal(scale=1.0, size=vocab)).astype(np.float32)
    results = []
    for dense in (False, True):
        sampling = SamplingParams(0.6, 0, 1.0) if dense else SamplingParams(0.6, 20, 0.95)
        p, q = process(logits_p, sampling), process(logits_q, sampling)
        x = int(np.argmax(q))
        for name, knobs in PAPER_GRID.items():
            rule = make(name, knobs[0], temperature=sampling.temperature)
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                decision = rule.decide(p, q, x, logits_p=logits_p, logits_q=logits_q)
                residual(decision.pi_res, q)
                times.append((time.perf_counter() - started) * 1e3)
            times.sort()
            results.append(RuleTiming(name, knobs[0], dense, statistics.median(times),
                                      times[int(0.9 * (len(times) - 1))]))
    return results
