"""`relaxtui bench --parallel`: throughput with K sequences per context, the verifier alone and strict speculation.

Protocol: for each pass, for each K, for each mode, K sequences (the bench prompts in turn, seeds seed+i) run
to ``max_tokens`` through the batched loop, so machine drift hits every K and mode alike. ``tokens_per_s`` is
output tokens summed over the K sequences over the decode wall time (prefill, done per sequence as a slot
fills, is left out, as in docs/metrics.md); ``per_sequence_tokens_per_s`` is what each sequence saw (mean of its own
rate). On a CPU one batch of 8 rows costs ~4 single steps (docs/architecture.md#many-sequences), so batching sequences
pays where drafting often does not: the verify batch is already wide, and drafts make it wider still. Compute only: the
CLI renders.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Metrics
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.api import Model

MODES = ("no-spec", "strict")


@dataclass(frozen=True)
class ParallelRun:
    k: int
    mode: str  # "no-spec" (the verifier alone) or "strict"
    draft_max: int
    tokens_per_s: float  # summed over the K sequences
    per_sequence_tokens_per_s: float
    output_tokens: int
    acceptance_rate: float
    speedup_vs_k1: float = 0.0  # tokens_per_s over the same mode's at K = 1
    spec_vs_no_spec: float = 0.0  # strict tokens_per_s over the verifier alone's at the same K (strict rows)


def _one(verifier: Model, drafter: Drafter | None, prompts: Sequence[Sequence[int]], k: int, mode: str,
         draft_max: int, max_tokens: int, sampling: SamplingParams, seed: int) -> tuple[float, list[Metrics]]:
    """Run K sequences at once; (decode wall seconds, each sequence's metrics)."""
    strict = mode == "strict"
    jobs = [Job(prompts[i % len(prompts)], GenerationConfig(draft_max=draft_max if strict else 0,
                                                            max_tokens=max_tokens, sampling=sampling, seed=seed + i,
                                                            learn=False),  # measured cold, as bench's runs
                speculative=strict) for i in range(k)]
    started = time.perf_counter()
    metrics = [finished.metrics for _, finished in generate_many(verifier, jobs, drafter=drafter)]
    return time.perf_counter() - started - sum(m.prefill_s for m in metrics), metrics


def run_parallel_bench(verifier: Model, drafter: Drafter | None, prompts: Sequence[Sequence[int]], *,
                       ks: Sequence[int], draft_max: int, max_tokens: int = 96, sampling: SamplingParams | None = None,
                       seed: int = 0, passes: int = 2,
                       progress: Callable[[str], None] = lambda _: None) -> list[ParallelRun]:
    sampling = sampling or SamplingParams(temperature=0.0)
    modes = MODES if drafter is not None else MODES[:1]
    progress("warm-up")
    _one(verifier, drafter, prompts, 1, modes[-1], draft_max, 8, sampling, seed)
    seconds: dict[tuple[int, str], float] = {}
    collected: dict[tuple[int, str], list[Metrics]] = {}
    for pass_index in range(passes):
        for k in ks:
            for mode in modes:
                progress(f"pass {pass_index + 1}/{passes}: K={k} {mode}")
                wall, metrics = _one(verifier, drafter, prompts, k, mode, draft_max, max_tokens, sampling, seed)
                seconds[(k, mode)] = seconds.get((k, mode), 0.0) + wall
                collected.setdefault((k, mode), []).extend(metrics)
    runs = []
    for (k, mode), metrics in collected.items():
        tokens = sum(m.output_tokens for m in metrics)
        drafted = sum(m.drafted for m in metrics)
        runs.append(ParallelRun(
            k, mode, draft_max if mode == "strict" else 0, tokens / seconds[(k, mode)] if seconds[(k, mode)] else 0.0,
            statistics.fmean(m.tokens_per_s for m in metrics), tokens,
            sum(m.accepted for m in metrics) / drafted if drafted else 0.0))
    return _relative(sorted(runs, key=lambda r: (r.k, MODES.index(r.mode))))


def _relative(runs: list[ParallelRun]) -> list[ParallelRun]:
    """Fill each run's ratios against the same mode at the smallest K and against the verifier alone."""
    by_key = {(r.k, r.mode): r for r in runs}
    smallest = min(r.k for r in runs)
    out = []
    for r in runs:
        base = by_key[(smallest, r.mode)].tokens_per_s
        alone = by_key[(r.k, "no-spec")].tokens_per_s
        out.append(replace(r, speedup_vs_k1=r.tokens_per_s / base if base else 0.0,
                           spec_vs_no_spec=r.tokens_per_s / alone if alone and r.mode == "strict" else 0.0))
    return out
