"""`relaxtui bench`: measure this machine's cost model, then measured vs modelled speed-up per draft length.

Protocol: warm up, time single steps of both models (c_rel) and the verify-cost curve v(k); run the verifier
alone and strict speculative decoding at N = 1..N_max on the same prompts and seeds (greedy by default, so
every run writes the same text and tokens/s compare like for like), interleaved over several passes so drift
in machine speed hits every config alike; report side by side. Compute only: the CLI renders the result.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from relaxtui.costmodel.measure import step_time, verify_curve
from relaxtui.costmodel.model import predicted_speedup
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Finished, Metrics
from relaxtui.decoding.loop import GenerationConfig, generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.llama import LlamaModel

# The embedded pair are code models, so the built-in prompts are code tasks first; bring your own with
# `--prompt` (acceptance, and so speed-up, depends on the task: measure on yours).
BENCH_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and type hints.",
    "Write a Python class for a bank account with deposit, withdraw and balance methods.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in a short paragraph why the sky is blue.",
)


@dataclass(frozen=True)
class BenchRun:
    n: int
    tokens_per_s: float
    speedup: float
    predicted_speedup: float
    acceptance_rate: float
    mean_accepted_length: float
    python_share: float
    output_tokens: int
    best: bool = False


@dataclass(frozen=True)
class BenchResult:
    verifier_step_s: float
    drafter_step_s: float
    c_rel: float
    v: list[float]
    baseline_tokens_per_s: float
    baseline_python_share: float
    runs: list[BenchRun]
    peak_rss_mb: float
    drafter_kind: str
    settings: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def peak_rss_mb() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


def _run_one(verifier: LlamaModel, prompt: Sequence[int], config: GenerationConfig,
             drafter: Drafter | None) -> Metrics:
    for event in generate(verifier, prompt, config, drafter=drafter):
        if isinstance(event, Finished):
            return event.metrics
    raise RuntimeError("the loop ended without a Finished event")


def _pooled(metrics: list[Metrics]) -> tuple[float, float, float, float, int]:
    """tokens/s, acceptance rate, mean accepted length, python share, tokens — pooled over prompts."""
    tokens = sum(m.output_tokens for m in metrics)
    decode = sum(m.decode_s for m in metrics)
    drafted, accepted = sum(m.drafted for m in metrics), sum(m.accepted for m in metrics)
    rounds = sum(m.rounds for m in metrics)
    llama = sum(m.llama_s for m in metrics)
    return (tokens / decode if decode else 0.0, accepted / drafted if drafted else 0.0,
            1 + accepted / rounds if rounds else 1.0, max(0.0, 1 - llama / decode) if decode else 0.0, tokens)


def run_bench(verifier: LlamaModel, drafter: Drafter, prompts: Sequence[Sequence[int]], *, n_max: int = 5,
              max_tokens: int = 96, sampling: SamplingParams | None = None, seed: int = 0, repeats: int = 8,
              passes: int = 2, progress: Callable[[str], None] = lambda _: None) -> BenchResult:
    sampling = sampling or SamplingParams(temperature=0.0)
    progress("timing single steps and the verify-cost curve")
    verifier_step = step_time(verifier, repeats=repeats)
    draft_model = getattr(drafter, "model", None)
    drafter_step = step_time(draft_model, repeats=repeats) if draft_model is not None else 0.0
    curve = verify_curve(verifier, n_max + 1, repeats=max(3, repeats // 2))
    c_rel = drafter_step / verifier_step
    progress("warm-up")
    _run_one(verifier, prompts[0], GenerationConfig(draft_max=0, max_tokens=8, sampling=sampling), None)
    # Interleave: every pass runs the verifier alone and each N on every prompt, so a machine that speeds up
    # or slows down during the bench shifts all configs alike and the ratios stay fair.
    lengths = range(0, n_max + 1)
    collected: dict[int, list[Metrics]] = {n: [] for n in lengths}
    for pass_index in range(passes):
        for prompt_index, prompt in enumerate(prompts):
            progress(f"pass {pass_index + 1}/{passes}, prompt {prompt_index + 1}/{len(prompts)}: N=0..{n_max}")
            for n in lengths:
                config = GenerationConfig(draft_max=n, max_tokens=max_tokens, sampling=sampling, seed=seed)
                collected[n].append(_run_one(verifier, prompt, config, drafter if n else None))
    base_tps, _, _, base_share, _ = _pooled(collected[0])
    runs = []
    for n in range(1, n_max + 1):
        tps, acceptance, mean_length, share, tokens = _pooled(collected[n])
        runs.append(BenchRun(n, tps, tps / base_tps if base_tps else 0.0,
                             predicted_speedup(mean_length - 1, n, c_rel, curve), acceptance, mean_length, share,
                             tokens))
    best = max(runs, key=lambda r: r.speedup)
    runs = [BenchRun(**{**asdict(r), "best": r is best}) for r in runs]
    return BenchResult(verifier_step, drafter_step, c_rel, curve, base_tps, base_share, runs, peak_rss_mb(),
                       getattr(drafter, "kind", "model"),
                       {"prompts": len(prompts), "passes": passes, "max_tokens": max_tokens,
                        "temperature": sampling.temperature, "seed": seed})
