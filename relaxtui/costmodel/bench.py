"""`relaxtui bench`: this machine's costs, then the wall-clock against the predicted speed-up per draft length.

Protocol: for each prompt of each pass, calibrate (every part of a round timed with the loop's own code,
`calibrate`), then run the verifier alone and strict speculative decoding at N = 1..N_max on that prompt
(greedy by default, so every run writes the same text), so drift in machine speed hits every config and the
calibration alike; costs are the median over all calibrations. Predicted speed-up prices each run's own
rounds (their draft lengths, fully accepted rounds, tokens) with the calibrated costs — times of the runs
never enter the prediction, only their counters — and bench reports how far that lands from the wall-clock
ratio. Every run is also checked against the others (`timing.check_runs`): one whose wall time is far off what its
own rounds price at is re-run, and an N still off is flagged unstable and never marked best. Compute only: the CLI
renders.
"""

from __future__ import annotations

import resource
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace

from relaxtui.costmodel.calibrate import LoopCosts, calibrate, typical_context
from relaxtui.costmodel.measure import verify_curve
from relaxtui.costmodel.pricing import (
    BreakEven,
    Generation,
    priced_ms,
    priced_speedup,
    rounds_break_even,
    rounds_of_metrics,
)
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.costmodel.timing import UNSTABLE_ADVICE, check_runs, wall_vs_predicted_problem
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafting import Drafter
from relaxtui.decoding.events import Finished, Metrics
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.engine.llama import LlamaModel
from relaxtui.progress import OnStep, StepCounter, no_steps


@dataclass(frozen=True)
class BenchRun:
    n: int
    tokens_per_s: float
    speedup: float  # wall-clock: pooled tokens/s over the verifier alone's, same prompts and seeds, this run
    predicted_speedup: float  # the calibrated costs pricing this run's own rounds
    acceptance_rate: float
    mean_accepted_length: float
    break_even_steps: float  # a round of this run in verifier steps here, at the widths its rounds verified: the
    # mean accepted length it needs (``runs_break_even``)
    python_share: float
    output_tokens: int
    host_ms_per_round: float = 0.0  # the loop's own time outside llama.cpp per round (both models' calls excluded)
    copied_bytes_per_round: float = 0.0  # logits/hidden bytes both models copied out of llama.cpp per round
    proxy_speedup: dict[str, float] = field(default_factory=dict)  # profile name -> proxy speed-up
    whole_rows: dict[str, float] | None = None  # --rows both: this N again on whole rows, interleaved (tokens_per_s,
    # host_ms_per_round, copied_bytes_per_round)
    best: bool = False
    # the runs' self-check (`costmodel.timing`): each run's wall time over its own rounds priced by the
    # calibration; a run far off the others is re-run, and left out (the N flagged) if it stays off
    stable: bool = True
    unstable_reason: str | None = None
    spread: float = 0.0  # (max - min) / median of this N's kept runs' wall-over-priced ratios
    reruns: int = 0
    dropped: int = 0  # runs left out of the pooled tokens/s
    break_even_most: float | None = None  # tokens its rounds could yield at most, on average (None: N + 1 each)
    draft_widths: tuple[int, int] | None = None  # (fewest, most) drafts its rounds verified (None: N each)

    @property
    def wall_clock_speedup(self) -> float:
        """``speedup`` by its name in bench's text and JSON: this run's wall clock, against the verifier alone."""
        return self.speedup

    @property
    def break_even(self) -> BreakEven:
        """The mean accepted length this run's rounds need to match the verifier alone here, or that none can
        (above what they can yield)."""
        return BreakEven(self.n, self.break_even_steps, most=self.break_even_most, widths=self.draft_widths)

    @property
    def prediction_error(self) -> float:
        return self.predicted_speedup - self.speedup


@dataclass(frozen=True)
class BenchResult:
    verifier_step_s: float  # raw decode of one token (docs/metrics.md's c_rel and v(k))
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
    baseline_stable: bool = True  # the verifier-alone runs passed the self-check (every ratio rests on them)
    baseline_unstable_reason: str | None = None
    best_note: str | None = None  # why no N, or not every N, could be marked best
    baseline_host_ms_per_round: float = 0.0  # the verifier alone: a round is one token
    baseline_copied_bytes_per_round: float = 0.0
    baseline_whole_rows: dict[str, float] | None = None

    def as_dict(self) -> dict[str, object]:
        """asdict, plus issue 18's names: ``wall_clock_speedup`` and ``priced_speedup`` per run (the older
        ``speedup`` and ``proxy_speedup`` stay, for scripts written against them) and ``best_n``."""
        data = asdict(self)
        for run, bench_run in zip(data["runs"], self.runs, strict=True):
            run["wall_clock_speedup"], run["priced_speedup"] = run["speedup"], dict(run["proxy_speedup"])
            # null where no acceptance rate makes its rounds pay here: N drafts yield at most N + 1 tokens a round
            run["break_even_length"] = bench_run.break_even.length
        best = self.best
        data["best_n"] = best.n if best is not None else None
        data["baseline"] = {"n": 0, "tokens_per_s": self.baseline_tokens_per_s,
                            "python_share": self.baseline_python_share,
                            "host_ms_per_round": self.baseline_host_ms_per_round,
                            "copied_bytes_per_round": self.baseline_copied_bytes_per_round,
                            "whole_rows": self.baseline_whole_rows}
        return data

    @property
    def best(self) -> BenchRun | None:
        """The N marked best; None when every N (or the verifier alone) was unstable."""
        return next((run for run in self.runs if run.best), None)


def peak_rss_mb() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


def _run_one(verifier: LlamaModel, prompt: Sequence[int], config: GenerationConfig,
             drafter: Drafter | None) -> Metrics:
    """One generation, measured cold: its output is not handed to the drafter (``learn`` off), so a drafter that
    learns from earlier outputs (suffix, ngram-mod, ngram-cache) never drafts one N's run from another's output of
    the same prompt."""
    for event in generate(verifier, prompt, replace(config, learn=False), drafter=drafter):
        if isinstance(event, Finished):
            return event.metrics
    raise RuntimeError("the loop ended without a Finished event")


def median_costs(samples: Sequence[LoopCosts]) -> LoopCosts:
    """Element-wise median over the passes' calibrations."""
    def med(values: Iterable[float]) -> float:
        return statistics.median(values)

    return LoopCosts(
        verify_s=tuple(med(c.verify_s[i] for c in samples) for i in range(len(samples[0].verify_s))),
        draft_s=tuple(med(c.draft_s[i] for c in samples) for i in range(len(samples[0].draft_s))),
        resync_extra_s=med([c.resync_extra_s for c in samples]), emit_s=med([c.emit_s for c in samples]),
        verifier_decode_s=med([c.verifier_decode_s for c in samples]),
        drafter_decode_s=med([c.drafter_decode_s for c in samples]),
        spread=max(c.spread for c in samples), stable=all(c.stable for c in samples),
        unstable_reason=next((c.unstable_reason for c in samples if not c.stable), None))


def predicted_seconds(costs: LoopCosts, runs: Sequence[Metrics]) -> float:
    """Decode time this machine's profile gives these runs' rounds (`pricing.priced_ms`): every round's draft and
    verify block, the re-syncs after fully accepted rounds, extra drafter steps, and each emitted token."""
    return priced_ms(costs.profile(), rounds_of_metrics(runs)) / 1e3


def price_runs(machine: CostProfile, profiles: Sequence[CostProfile],
               runs: Sequence[Metrics]) -> tuple[float, dict[str, float]]:
    """One N's runs priced as every face prices them (`pricing`): predicted (this machine's calibrated profile),
    and one priced speed-up per --profile."""
    rounds = rounds_of_metrics(runs)
    return priced_speedup(machine, rounds), {p.name: priced_speedup(p, rounds) for p in profiles}


def runs_break_even(machine: CostProfile, n: int, runs: Sequence[Generation]) -> BreakEven:
    """The mean accepted length one N's runs needed to match the verifier alone here: their rounds priced at the
    widths they verified (a priced cut, or a drafter with nothing to propose, verifies fewer than N), as their
    predicted speed-up prices them — so a run below it is predicted below 1.0x."""
    return rounds_break_even(machine, rounds_of_metrics(runs), n)


def host_costs(metrics: list[Metrics]) -> tuple[float, float]:
    """(ms outside llama.cpp per round, bytes copied out of llama.cpp per round), pooled over the runs."""
    rounds = sum(m.rounds for m in metrics)
    if not rounds:
        return 0.0, 0.0
    host = sum(max(0.0, m.decode_s - m.llama_s) for m in metrics)
    return 1e3 * host / rounds, sum(m.copied_bytes for m in metrics) / rounds


def rows_summary(metrics: list[Metrics]) -> dict[str, float] | None:
    """tokens/s and host costs of runs on whole rows, beside the same runs on the engine's candidate rows."""
    if not metrics:
        return None
    host_ms, copied = host_costs(metrics)
    return {"tokens_per_s": _pooled(metrics)[0], "host_ms_per_round": host_ms, "copied_bytes_per_round": copied}


ROWS = ("candidates", "whole", "both")  # --rows: the engine's candidate rows where they apply, whole rows, or both


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
              passes: int = 2, profiles: Sequence[CostProfile] = (), rows: str = "candidates",
              progress: OnStep = no_steps) -> BenchResult:
    """``rows``: "candidates" (the engine hands the top k where the sampling and rule allow: the loop's default),
    "whole" (every row whole, the reference), or "both" (each N run on each, interleaved: the side-by-side).
    A ``drafter`` whose drafts are cut by price (its traits say so: docs/method.md#priced-drafts) cuts them at every
    N, each N then the longest draft a round may verify.
    ``progress`` gets each step as it starts (the curve, the warm-up, every calibration and run, every re-run)."""
    sampling = sampling or SamplingParams(temperature=0.0)
    whole_rows = rows == "whole"
    per_prompt = 1 + (n_max + 1) * (2 if rows == "both" else 1)  # a calibration, then every N (on each row kind)
    steps = StepCounter(2 + passes * len(prompts) * per_prompt, progress)
    steps.start("timing the raw verify-cost curve v(k)")
    curve = verify_curve(verifier, n_max + 1, repeats=max(3, repeats // 2))
    policy = drafter.traits.cut or "none"
    steps.start("warm-up")
    _run_one(verifier, prompts[0], GenerationConfig(draft_max=0, max_tokens=8, sampling=sampling), None)
    _run_one(verifier, prompts[0], GenerationConfig(draft_max=min(2, n_max), max_tokens=8, sampling=sampling),
             drafter)  # the drafter's pages and buffers too: the first pass over a model pays the page cache
    lengths = range(0, n_max + 1)
    collected: dict[int, list[Metrics]] = {n: [] for n in lengths}
    whole: dict[int, list[Metrics]] = {n: [] for n in lengths}  # --rows both: the same runs on whole rows
    calibrations = []
    for pass_index in range(passes):
        for prompt_index, prompt in enumerate(prompts):
            where = f"pass {pass_index + 1}/{passes}, prompt {prompt_index + 1}/{len(prompts)}"
            steps.start(f"{where}: calibrating")
            calibrations.append(calibrate(verifier, drafter, max_block=n_max + 1, sampling=sampling,
                                          context=typical_context(prompt, max_tokens), repeats=repeats,
                                          seed=seed + pass_index, whole_rows=whole_rows))
            for n in lengths:
                config = GenerationConfig(draft_max=n, max_tokens=max_tokens, sampling=sampling, seed=seed,
                                          dense_rows=whole_rows)
                steps.start(f"{where}: {f'N={n}' if n else 'verifier alone'}")
                collected[n].append(_run_one(verifier, prompt, config, drafter if n else None))
                if rows == "both":
                    steps.start(f"{where}: {f'N={n}' if n else 'verifier alone'} on whole rows")
                    reference = replace(config, dense_rows=True)
                    whole[n].append(_run_one(verifier, prompt, reference, drafter if n else None))
    costs = median_costs(calibrations)

    def rerun(n: int, index: int) -> Metrics:
        steps.add(1)
        steps.start(f"re-running {f'N={n}' if n else 'the verifier alone'}, prompt {index % len(prompts) + 1} "
                    "(its time was off the others')")
        config = GenerationConfig(draft_max=n, max_tokens=max_tokens, sampling=sampling, seed=seed,
                                  dense_rows=whole_rows)
        return _run_one(verifier, prompts[index % len(prompts)], config, drafter if n else None)

    check = check_runs(collected, lambda runs: predicted_seconds(costs, runs), rerun, steps.say)
    steps.finish()
    kept = {n: check.kept(n, collected[n]) for n in lengths}
    base_tps, _, _, base_share, _ = _pooled(kept[0])
    machine = costs.profile("this-machine", verifier=verifier.path.name, drafter=drafter.traits.kind,
                            hardware="this machine")
    runs = []
    for n in range(1, n_max + 1):
        tps, acceptance, mean_length, share, tokens = _pooled(kept[n])
        predicted, proxies = price_runs(machine, profiles, kept[n])
        wall = tps / base_tps if base_tps else 0.0
        reason = check.reasons.get(n) or wall_vs_predicted_problem(wall, predicted)
        host_ms, copied = host_costs(kept[n])
        even = runs_break_even(machine, n, kept[n])
        runs.append(BenchRun(n, tps, wall, predicted, acceptance, mean_length, even.steps, share,
                             tokens, host_ms, copied, proxies, rows_summary(whole[n]), stable=reason is None,
                             unstable_reason=reason,
                             spread=check.spreads.get(n, 0.0), reruns=check.reruns.get(n, 0),
                             dropped=len(collected[n]) - len(kept[n]), break_even_most=even.most,
                             draft_widths=even.widths))
    base_reason = check.reasons.get(0)
    runs, best_note = mark_best(runs, base_reason)
    return BenchResult(costs.verifier_decode_s, costs.drafter_decode_s, costs.c_rel, curve, asdict(costs),
                       base_tps, base_share, runs, peak_rss_mb(), drafter.traits.kind,
                       {"prompts": len(prompts), "passes": passes, "max_tokens": max_tokens,
                        "temperature": sampling.temperature, "seed": seed, "rows": rows,
                        "draft_cut": policy},
                       baseline_stable=base_reason is None, baseline_unstable_reason=base_reason, best_note=best_note,
                       baseline_host_ms_per_round=host_costs(kept[0])[0],
                       baseline_copied_bytes_per_round=host_costs(kept[0])[1],
                       baseline_whole_rows=rows_summary(whole[0]))


def mark_best(runs: Sequence[BenchRun], baseline_reason: str | None = None) -> tuple[list[BenchRun], str | None]:
    """Mark the stable N with the highest wall-clock speed-up, and say why any N could not be considered. No N is
    marked when the verifier-alone runs were unstable: every ratio rests on them."""
    eligible = [r for r in runs if r.stable] if baseline_reason is None else []
    best = max(eligible, key=lambda r: r.speedup) if eligible else None
    marked = [replace(r, best=r is best) for r in runs]
    if baseline_reason is not None:
        return marked, (f"no N marked best: the verifier-alone runs were unstable ({baseline_reason}); "
                        f"{UNSTABLE_ADVICE}")
    left_out = [r for r in runs if not r.stable]
    if not left_out:
        return marked, None
    names = ", ".join(f"N={r.n}" for r in left_out)
    if best is None:
        return marked, f"no N marked best: every N was unstable ({names}); {UNSTABLE_ADVICE}"
    return marked, f"not considered for best, unstable: {names} ({UNSTABLE_ADVICE})"
