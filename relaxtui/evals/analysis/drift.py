"""Label-free drift signals: how far a config's outputs moved from what the verifier itself would write.

A relaxed rule's first symptom is drift, and most real tasks have no gold answer to show it. Every emitted token
sat in a verify batch, so the verifier's distribution at its position is known with no extra decode; per record:

- ``verifier_logprob``: the mean log-probability of the emitted tokens under the verifier at temperature 1
  (its raw logits row), nats per token;
- ``verifier_logprob_processed``: the same under the processed sampling distribution (temperature, top-k,
  top-p), over the tokens inside its support (0 at greedy, whose processed distribution is the argmax);
- ``out_of_support_rate``: the share of emitted tokens that distribution gives probability 0, i.e. the verifier's
  own sampling could never have produced them (0 under strict by construction; also under mentored and cactus,
  whose targets scale p and so keep its support; positive for mixtures such as ensemble);
- ``repetition_rate``: the share of the output its longest repetition loop covers (``degeneracy``);
- ``length_ratio``: output length against the reference's, pair by pair (the report's only pairwise signal).

Per config each is compared with the config's reference (strict at the same N, else the verifier alone) on the
(problem, seed) pairs both ran, as Δaccuracy is: a paired 95% t interval over per-problem mean differences
(``stats``). The length ratio is a geometric mean of per-pair ratios; its delta is the ratio minus 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relaxtui.evals.analysis.degeneracy import repetition_rate
from relaxtui.evals.analysis.stats import (
    MIN_INTERVAL_PROBLEMS,
    MeanInterval,
    PairKey,
    geometric_mean_ratio,
    paired_difference,
    says_nothing,
)

RECORD_SIGNALS = ("verifier_logprob", "verifier_logprob_processed", "out_of_support_rate", "repetition_rate")
SIGNALS = (*RECORD_SIGNALS, "length_ratio")  # the report's objects (the contract: every one but _processed)


def _mean(values: Sequence[float]) -> float | None:
    """The mean, or None when there is none or it is not a finite number (a record holds finite numbers only)."""
    if not values:
        return None
    mean = sum(values) / len(values)
    return mean if math.isfinite(mean) else None


def record_signals(token_ids: Sequence[int], logprobs: Sequence[float | None] | None,
                   probs: Sequence[float] | None) -> dict[str, float | None]:
    """The per-record signals from what the loop reported per emitted token: the temperature-1 log-probability
    (None where that path had no row) and the processed probability p(x). None when not available."""
    in_support = [p for p in probs if p > 0] if probs else []
    # why the type: ignore below: ``complete`` holds only for a non-empty list of numbers (a run without log-probs
    # records None)
    complete = bool(logprobs) and all(value is not None for value in logprobs)  # type: ignore[union-attr]
    return {
        "verifier_logprob": _mean(logprobs) if complete else None,  # type: ignore[arg-type]
        "verifier_logprob_processed": _mean([math.log(p) for p in in_support]),
        "out_of_support_rate": 1 - len(in_support) / len(probs) if probs else None,
        "repetition_rate": repetition_rate(token_ids) if token_ids else None,
    }


@dataclass(frozen=True)
class Signal:
    """One drift signal of one config: its own mean, and its paired difference against the reference."""

    value: float | None  # mean over problems (length_ratio: the geometric mean ratio against the reference)
    delta: MeanInterval | None  # config − reference (length_ratio: ratio − 1), paired over problems
    pairs: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON twin of the drift table's cells: bounds null where the table shows n/a."""
        interval = self.delta
        bounded = interval is not None and not says_nothing(interval)
        return {"value": _finite(self.value), "delta": None if interval is None else _finite(interval.mean),
                # why the type: ignore below: ``bounded`` is true only when ``interval`` is set
                "ci_low": _finite(interval.low) if bounded else None,  # type: ignore[union-attr]
                "ci_high": _finite(interval.high) if bounded else None, "pairs": self.pairs}  # type: ignore[union-attr]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def pairs_with(records: Sequence[dict[str, Any]], name: str) -> dict[PairKey, float]:
    """{(problem, seed): value} for the records that carry a number for ``name`` (older records do not)."""
    found = {}
    for record in records:
        value = record.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            found[(str(record["problem_id"]), int(record["seed"]))] = float(value)
    return found


def _problem_mean(values: dict[PairKey, float]) -> float | None:
    by_problem: dict[str, list[float]] = {}
    for (problem, _), value in values.items():
        by_problem.setdefault(problem, []).append(value)
    return _mean([sum(v) / len(v) for v in by_problem.values()])


def signals(rows: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]] | None) -> dict[str, Signal]:
    """Every drift signal of one config's records against its reference's (None: the config has no reference)."""
    result = {}
    for name in RECORD_SIGNALS:
        mine = pairs_with(rows, name)
        delta, pairs = None, 0
        if reference is not None:
            theirs = pairs_with(reference, name)
            difference = paired_difference(mine, theirs)
            pairs = difference.pairs
            delta = difference.interval if pairs else None
        result[name] = Signal(_problem_mean(mine), delta, pairs)
    if reference is None:
        result["length_ratio"] = Signal(None, None)
    else:
        mine, theirs = pairs_with(rows, "output_tokens"), pairs_with(reference, "output_tokens")
        ratio = geometric_mean_ratio(mine, theirs)
        shifted = MeanInterval(ratio.mean - 1, ratio.low - 1, ratio.high - 1, ratio.n, ratio.sd)
        shared = sum(1 for key in set(mine) & set(theirs) if mine[key] > 0 and theirs[key] > 0)
        result["length_ratio"] = Signal(ratio.mean, shifted if shared else None, shared)
    return result


# -- rendering ------------------------------------------------------------------------------------------------------
def _says_nothing(interval: MeanInterval, few: int) -> bool:
    """Too few problems or no spread: shown as n/a, as the accuracy intervals are."""
    return interval.n < few or math.isnan(interval.low) or not interval.sd > 0


def logprob_delta_text(signal: Signal) -> str:
    """Δlogp with its interval exactly as the drift table's cell shows it (tune's advice prints this)."""
    return _bounds(signal, 1.0, 3, few=MIN_INTERVAL_PROBLEMS)


def _bounds(signal: Signal, scale: float, digits: int, *, few: int) -> str:
    interval = signal.delta
    if interval is None:
        return "-"
    text = f"{scale * interval.mean:+.{digits}f}"
    if _says_nothing(interval, few):
        return text + " [n/a]"
    return text + f" [{scale * interval.low:+.{digits}f}, {scale * interval.high:+.{digits}f}]"


def _ratio(signal: Signal, *, few: int) -> str:
    interval = signal.delta
    if interval is None or signal.value is None:
        return "-"
    bounds = " [n/a]" if _says_nothing(interval, few) else f" [{interval.low + 1:.2f}, {interval.high + 1:.2f}]"
    return f"{signal.value:.2f}x{bounds}"


DRIFT_COLUMNS = ["config", "logp/tok", "Δlogp vs ref [95%]", "Δlogp proc.", "off-support", "Δoff-support",
                 "repetition", "Δrepetition", "len ratio vs ref [95%]"]


def drift_row(label: str, drift: dict[str, Signal], *, few: int) -> list[str]:
    """One row of the drift table (points ×100 for the rates, nats per token for log-probabilities)."""
    if not drift:
        return [label, *("-" for _ in DRIFT_COLUMNS[1:])]

    def value(name: str, scale: float = 1.0, digits: int = 3, unit: str = "") -> str:
        found = drift[name].value
        return "-" if found is None else f"{scale * found:.{digits}f}{unit}"

    return [label, value("verifier_logprob"), _bounds(drift["verifier_logprob"], 1.0, 3, few=few),
            _bounds(drift["verifier_logprob_processed"], 1.0, 3, few=few),
            value("out_of_support_rate", 100, 1, "%"), _bounds(drift["out_of_support_rate"], 100, 1, few=few),
            value("repetition_rate", 100, 1, "%"), _bounds(drift["repetition_rate"], 100, 1, few=few),
            _ratio(drift["length_ratio"], few=few)]


DRIFT_FOOTNOTE = (
    "drift (label-free, from the verify batches the loop already ran): logp/tok = the verifier's mean "
    "log-probability of the emitted tokens at temperature 1 (nats per token); Δlogp = that minus the reference's "
    "(strict at the same N, else the verifier alone) on shared pairs, paired 95% interval; Δlogp proc. = the same "
    "under the processed sampling distribution, over tokens in its support; off-support = emitted tokens that "
    "distribution gives probability 0 (the verifier's own sampling could never produce them: 0 under strict, "
    "mentored and cactus by construction); repetition = share of the output covered by its longest repetition "
    "loop; len ratio = geometric mean of per-pair output-length ratios against the reference; rates and their Δ "
    "in points.")
