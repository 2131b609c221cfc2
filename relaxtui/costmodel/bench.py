"""`relaxtui bench`: this machine's costs, then measured against predicted speed-up per draft length.

Protocol: for each prompt of each pass, calibrate (every part of a round timed with the loop's own code,
`calibrate`), then run the verifier alone and strict speculative decoding at N = 1..N_max on that prompt
(greedy by default, so every run writes the same text), so drift in machine speed hits every config and the
calibration alike; costs are the median over all calibrations. Predicted speed-up prices each run's own
rounds (their draft lengths, fully accepted rounds, tokens) with the calibrated costs — times of the runs
never enter the prediction, only their counters — and bench reports how far that lands from the measured
ratio. Compute only: the CLI renders.
"""

from __future__ import annotations

import resource
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from relaxtui.costmodel.calibrate import LoopCosts, calibrate, typical_context
from relaxtui.costmodel.measure import verify_curve
from relaxtui.costmodel.profiles import CostProfile, proxy_speedup
from relaxtui.decoding.drafters import Drafter, ModelDrafter
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
    speedup: float  # measured: pooled tokens/s over the verifier alone's, same prompts and seeds
    predicted_speedup: float  # the calibrated costs pricing this run's own rounds
    acceptance_rate: float
    mean_accepted_length: float
    break_even_length: float  # the mean accepted length this N needs to match the verifier alone here
    python_share: float
    output_tokens: int
    proxy_speedup: dict[str, float] = field(default_factory=dict)  # profile name -> proxy speed-up
    best: bool = False

    @property
    def prediction_error(self) -> float:
        return self.predicted_speedup - self.speedup


@dataclass(frozen=True)
class BenchResult:
    verifier_step_s: float  # raw decode of one token (SPEC §3's c_rel and v(k))
    drafter_step_s: float
    c_rel: float
    v: list[float]
    costs: dict[str, object]  # the calibrated LoopCosts (median over passes)
    baseline_tokens_per_s: float
    baseline_python_share: float
    runs: list[BenchRun]
    peak_rss_mb: float
    drafter_kind: str
    settings: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def best(self) -> BenchRun:
        return next(run for run in self.runs if run.best)


def peak_rss_mb() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


def _run_one(verifier: LlamaModel, prompt: Sequence[int], config: GenerationConfig,
             drafter: Drafter | None) -> Metrics:
    for event in generate(verifier, prompt, config, drafter=drafter):
        if isinstance(event, Finished):
            return event.metrics
    raise RuntimeError("the loop ended without a Finished event")


def median_costs(samples: Sequence[LoopCosts]) -> LoopCosts:
    """Element-wise median over the passes' calibrations."""
    def med(values: Sequence[float]) -> float:
        return statistics.median(values)

    return LoopCosts(
        verify_s=tuple(med(c.verify_s[i] for c in samples) for i in range(len(samples[0].verify_s))),
        draft_s=tuple(med(c.draft_s[i] for c in samples) for i in range(len(samples[0].draft_s))),
        resync_extra_s=med([c.resync_extra_s for c in samples]), emit_s=med([c.emit_s for c in samples]),
        verifier_decode_s=med([c.verifier_decode_s for c in samples]),
        drafter_decode_s=med([c.drafter_decode_s for c in samples]))


def predicted_seconds(costs: LoopCosts, runs: Sequence[Metrics]) -> float:
    """Decode time the calibrated costs give these runs' rounds: every round's draft and verify block, the
    re-syncs after fully accepted rounds, extra drafter steps, and each emitted token."""
    return sum(sum(costs.round_s(k) for k in m.draft_lengths) + m.full_accept_rounds * costs.resync_extra_s
               + m.extra_draft_steps * costs.draft_step_s + m.output_tokens * costs.emit_s for m in runs)


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
              passes: int = 2, profiles: Sequence[CostProfile] = (),
              progress: Callable[[str], None] = lambda _: None) -> BenchResult:
    sampling = sampling or SamplingParams(temperature=0.0)
    model_drafter = drafter if isinstance(drafter, ModelDrafter) else None
    progress("timing the raw verify-cost curve v(k)")
    curve = verify_curve(verifier, n_max + 1, repeats=max(3, repeats // 2))
    progress("warm-up")
    _run_one(verifier, prompts[0], GenerationConfig(draft_max=0, max_tokens=8, sampling=sampling), None)
    lengths = range(0, n_max + 1)
    collected: dict[int, list[Metrics]] = {n: [] for n in lengths}
    calibrations = []
    for pass_index in range(passes):
        for prompt_index, prompt in enumerate(prompts):
            progress(f"pass {pass_index + 1}/{passes}, prompt {prompt_index + 1}/{len(prompts)}: calibrating, "
                     f"then N=0..{n_max}")
            calibrations.append(calibrate(verifier, model_drafter, max_block=n_max + 1, sampling=sampling,
                                          context=typical_context(prompt, max_tokens), repeats=repeats,
                                          seed=seed + pass_index))
            for n in lengths:
                config = GenerationConfig(draft_max=n, max_tokens=max_tokens, sampling=sampling, seed=seed)
                collected[n].append(_run_one(verifier, prompt, config, drafter if n else None))
    costs = median_costs(calibrations)
    base_tps, _, _, base_share, _ = _pooled(collected[0])
    base_predicted = sum(m.output_tokens for m in collected[0]) / predicted_seconds(costs, collected[0])
    machine = costs.profile("this machine", verifier=verifier.path.name, drafter=getattr(drafter, "kind", "?"),
                            hardware="this machine")
    runs = []
    for n in range(1, n_max + 1):
        tps, acceptance, mean_length, share, tokens = _pooled(collected[n])
        predicted_tps = tokens / predicted_seconds(costs, collected[n])
        proxies = {p.name: proxy_speedup(p, tokens, [k for m in collected[n] for k in m.draft_lengths],
                                         extra_draft_steps=sum(m.extra_draft_steps for m in collected[n]),
                                         full_rounds=sum(m.full_accept_rounds for m in collected[n]))
                   for p in profiles}
        runs.append(BenchRun(n, tps, tps / base_tps if base_tps else 0.0, predicted_tps / base_predicted,
                             acceptance, mean_length, machine.break_even_length(n), share, tokens, proxies))
    best = max(runs, key=lambda r: r.speedup)
    runs = [BenchRun(**{**asdict(r), "best": r is best}) for r in runs]
    return BenchResult(costs.verifier_decode_s, costs.drafter_decode_s, costs.c_rel, curve, asdict(costs),
                       base_tps, base_share, runs, peak_rss_mb(), getattr(drafter, "kind", "model"),
                       {"prompts": len(prompts), "passes": passes, "max_tokens": max_tokens,
                        "temperature": sampling.temperature, "seed": seed})
