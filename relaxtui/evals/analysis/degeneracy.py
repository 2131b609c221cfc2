"""Flagging degenerate outputs: a repetition loop that fills the tail of the answer (docs/metrics.md).

Relaxed rules with weak drafters fall into loops ("the the the", a repeated line); the flag lets the eval
runner report how often. An output is degenerate when its tail is periodic — some n-gram of period p ≤
``max_period`` repeats at least ``min_repeats`` times and covers at least ``min_tail_fraction`` of it.
``repetition_rate`` is the same measure as a number: the share of the output its longest such tail covers
(a label-free drift signal, compared pair by pair in the report; the flag fires from 0.2 on, in outputs of 24
tokens or more).
"""

from __future__ import annotations

from collections.abc import Sequence


def periodic_tail(tokens: Sequence[int], period: int) -> int:
    """Length of the longest suffix of ``tokens`` with the given period."""
    count = 0
    for index in range(len(tokens) - 1, period - 1, -1):
        if tokens[index] != tokens[index - period]:
            break
        count += 1
    return count + period if count else 0


def is_degenerate(tokens: Sequence[int], *, max_period: int = 64, min_repeats: int = 3,
                  min_tail_fraction: float = 0.2, min_tokens: int = 24) -> bool:
    if len(tokens) < min_tokens:
        return False
    for period in range(1, min(max_period, len(tokens) // min_repeats) + 1):
        tail = periodic_tail(tokens, period)
        if tail >= min_repeats * period and tail >= min_tail_fraction * len(tokens) and tail >= min_tokens:
            return True
    return False


def repetition_rate(tokens: Sequence[int], *, max_period: int = 64, min_repeats: int = 3) -> float:
    """Share of the output covered by its longest periodic tail that repeats at least ``min_repeats`` times
    (0.0 when none does, or the output is empty)."""
    longest = 0
    for period in range(1, min(max_period, len(tokens) // min_repeats) + 1):
        tail = periodic_tail(tokens, period)
        if tail >= min_repeats * period:
            longest = max(longest, tail)
    return longest / len(tokens) if tokens else 0.0
