"""`relaxtui bench`: this machine's costs, and the wall-clock against the predicted speed-up for N = 1..N_max."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from relaxtui.commands.bench_prompts import BENCH_PROMPTS, WORKLOADS, BenchPrompts, bench_prompts
from relaxtui.commands.common import INT32_MAX, int_option, model_options, sampling, utf8_path, utf8_text
from relaxtui.console import ProgressDisplay
from relaxtui.costmodel.bench import ROWS, BenchResult, BenchRun, run_bench
from relaxtui.costmodel.calibrate import LoopCosts
from relaxtui.costmodel.measure import hardware_description, printable
from relaxtui.costmodel.profiles import load_profile
from relaxtui.costmodel.timing import UNSTABLE_ADVICE
from relaxtui.decoding.config import GenerationConfig
from relaxtui.display import PREDICTED, WALL_CLOCK, priced_label
from relaxtui.engine.llama import LlamaModel
from relaxtui.errors import UserError
from relaxtui.evals.analysis.report import grid
from relaxtui.evals.analysis.tune_advice import wrapped
from relaxtui.options import DRAFT_CUT, DRAFT_MAX, MAX_TOKENS, SPECULATIVE_N
from relaxtui.progress import StepCounter
from relaxtui.session import chat_template, conversation_tokens, load_pair

if TYPE_CHECKING:
    from relaxtui.costmodel.parallel_bench import ParallelRun

MAX_PARALLEL_KS = 32  # `--parallel K,K,...` entries
MAX_REPEATS = 10_000  # --repeats and --passes: more is hours of timing, not a better estimate
MAX_PROMPTS = 10_000  # --prompts: the first K of the source (its own size is checked when it is read)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    DRAFT_MAX.add(parser, check=SPECULATIVE_N, default=5, extra=("--n-max",), metavar="N_MAX",
                  help="largest draft length N to run (N = 1..this)")
    MAX_TOKENS.add(parser, default=96, help="tokens generated per prompt and config")
    parser.add_argument("--prompts", type=int_option("--prompts", 1, MAX_PROMPTS), default=2,
                        help=f"how many prompts to run: the first K of the workload, the prompt file or the "
                             f"{len(BENCH_PROMPTS)} built-in ones")
    parser.add_argument("--prompt", type=utf8_text, action="append", default=[],
                        help="your own prompt (repeatable; default: the first --prompts built-in ones)")
    parser.add_argument("--workload", choices=WORKLOADS, default=None,
                        help="the prompts of a shipped workload instead: edit = code/JSON/YAML edits whose answer "
                             f"restates the prompt ({WORKLOADS['edit']})")
    parser.add_argument("--prompt-file", type=utf8_path, default=None, metavar="FILE",
                        help="prompts from a file instead: one a line, or a .jsonl of {\"prompt\": ...} objects")
    parser.add_argument("--repeats", type=int_option("--repeats", 1, MAX_REPEATS), default=8,
                        help="repeats of each step timing")
    parser.add_argument("--passes", type=int_option("--passes", 1, MAX_REPEATS), default=2,
                        help="interleaved passes over all configs")
    parser.add_argument("--profile", type=utf8_text, nargs="+", action="extend", default=[], metavar="NAME|FILE",
                        help="also price each N with these cost profiles (`relaxtui profiles list`)")
    parser.add_argument("--save-profile", type=utf8_path, default=None, metavar="FILE",
                        help="write this machine's cost profile (JSON) for `--profile` elsewhere")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rows", choices=ROWS, default="candidates",
                        help="logits rows the runs take out of llama.cpp: the engine's top-k candidates where the "
                             "sampling and rule allow (the default, what every face runs), whole rows, or both "
                             "side by side (each N run on each, interleaved)")
    parser.add_argument("--parallel", type=k_list, default=None, dest="parallel_ks", metavar="K,K,...",
                        help="instead: summed and per-sequence tokens/s with K sequences per context, the verifier "
                             "alone and strict at the best N (--ctx-size is per sequence)")
    DRAFT_CUT.add(parser, help="priced: each round verifies only the part of its draft that pays at this machine's "
                               "verify prices (measured once, cached), N being the longest; none: every draft whole; "
                               "auto: priced for a drafter that runs no model (docs/method.md#priced-drafts); "
                               "--parallel verifies drafts whole (priced is refused there)")
    parser.set_defaults(draft_p_min=0.0)


def k_list(text: str) -> list[int]:
    """``1,2,4,8``: sequence counts to bench, each in 1..INT32_MAX (the context's own limit is checked at load)."""
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:  # a word, or a number too long for int()
        ks = []
    if not ks or len(ks) > MAX_PARALLEL_KS or not all(1 <= k <= INT32_MAX for k in ks):
        shown = ascii(text if len(text) <= 40 else text[:40] + "...")
        raise argparse.ArgumentTypeError(f"invalid --parallel list: {shown} (e.g. 1,2,4,8: at most "
                                         f"{MAX_PARALLEL_KS} whole numbers >= 1)")
    return ks


def run(args: argparse.Namespace) -> int:
    if args.parallel_ks is not None:
        return run_parallel(args)
    source = prompt_source(args)  # a bad source: one line, before any model loads
    if args.max_tokens < 1 or args.repeats < 1 or args.passes < 1:
        raise UserError("--max-tokens, --repeats and --passes must be >= 1")
    if str(args.drafter).lower() == "none":
        raise UserError("bench compares drafting against the verifier alone: give a --drafter or a --draft-kind that "
                        "needs none (ngram-simple, suffix, …)")
    profiles = [load_profile(spec) for spec in args.profile]
    for profile in profiles:  # a profile that cannot price N_max fails now, not after the runs
        profile.round_cost_ms(args.draft_max)
    if args.save_profile is not None:
        check_writable(args.save_profile)
    options = model_options(args)
    params = sampling(args)
    pair = load_pair(options)
    try:
        assert pair.drafter is not None  # --drafter none was refused above
        prompts = tokens_of(pair.verifier, source)
        # a drafter the pair cuts by price (--draft-cut) reads the prices every face cuts drafts by: known before N=1
        pair.price_drafts(log=lambda line: print(line, file=sys.stderr, flush=True))
        with ProgressDisplay("bench", enabled=not args.json) as progress:  # a terminal's stderr only
            result = run_bench(pair.verifier, pair.drafter, prompts, n_max=args.draft_max, max_tokens=args.max_tokens,
                               sampling=params, seed=args.seed, repeats=args.repeats, passes=args.passes,
                               profiles=profiles, rows=args.rows, progress=progress.step)
    finally:
        pair.close()
    result = replace(result, settings={**result.settings, "prompts_from": source.source})
    drafter_name = pair.drafter_path.name if pair.drafter_path else result.drafter_kind
    if args.save_profile is not None:
        # why the type: ignore below: result.costs is asdict(LoopCosts), so its keys are LoopCosts' fields
        costs = LoopCosts(**result.costs)  # type: ignore[arg-type]
        profile = costs.profile(printable(platform.node()) or "this-machine",
                                verifier=printable(pair.name), drafter=printable(drafter_name),
                                hardware=hardware_description())
        try:
            args.save_profile.write_text(profile.to_json(), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"--save-profile: cannot write {args.save_profile} ({exc.strerror or exc})") from None
    print(json.dumps(result.as_dict()) if args.json else render(result, pair.name, drafter_name))
    if args.save_profile is not None and not args.json:
        print(f"wrote this machine's cost profile to {args.save_profile}")
        if not result.costs.get("stable", True):  # the file records it too (timing_stable, timing_spread)
            print(f"warning: its timings were unstable; {UNSTABLE_ADVICE} before pricing with it", file=sys.stderr)
    return 0


def prompt_source(args: argparse.Namespace) -> BenchPrompts:
    """The prompts the command line names: --prompt texts, --workload, --prompt-file or the built-in ones."""
    return bench_prompts(texts=args.prompt, workload=args.workload, prompt_file=args.prompt_file, count=args.prompts)


def tokens_of(verifier: LlamaModel, prompts: BenchPrompts) -> list[list[int]]:
    """Each conversation through the verifier's chat template, as every face renders a chat."""
    template = chat_template(verifier)
    return [conversation_tokens(verifier, template, messages) for messages in prompts.conversations]


def _whole_rows_lines(result: BenchResult) -> list[str]:
    """--rows both: each N on whole rows beside the same runs on the engine's candidate rows (one run, interleaved)."""
    pairs = [(0, result.baseline_tokens_per_s, result.baseline_host_ms_per_round,
              result.baseline_copied_bytes_per_round, result.baseline_whole_rows)]
    pairs += [(r.n, r.tokens_per_s, r.host_ms_per_round, r.copied_bytes_per_round, r.whole_rows) for r in result.runs]
    if any(whole is None for *_, whole in pairs):
        return []
    lines = ["", "candidate rows vs whole rows (the same runs on each, interleaved):",
             f"{'N':>3} {'tok/s':>7} {'whole':>7} {'ratio':>6} {'host ms':>7} {'whole':>7} {'KiB/rnd':>8} {'whole':>8}"]
    for n, tps, host, copied, whole in pairs:
        # why the type: ignore below: ``whole`` is a run record read back from JSON (typed object); --rows both always
        # writes these keys
        ratio = tps / whole["tokens_per_s"] if whole["tokens_per_s"] else 0.0  # type: ignore[index]
        lines.append(f"{n:>3} {tps:7.2f} {whole['tokens_per_s']:7.2f} {ratio:5.3f}x {host:7.2f} "  # type: ignore[index]
                     f"{whole['host_ms_per_round']:7.2f} {copied / 1024:8.2f} "  # type: ignore[index]
                     f"{whole['copied_bytes_per_round'] / 1024:8.1f}")  # type: ignore[index]
    return lines


def check_writable(path: Path) -> None:
    """Refuse a --save-profile path that cannot be written before the bench runs, not minutes after."""
    if not path.parent.is_dir():
        raise UserError(f"--save-profile: folder {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise UserError(f"--save-profile: {path} exists and is not a regular file")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise UserError(f"--save-profile: {path} is not writable")


def run_parallel(args: argparse.Namespace) -> int:
    """`bench --parallel K,K,...`: the same prompts with K sequences per context, interleaved over K and modes."""
    from dataclasses import asdict

    from relaxtui.commands.generate import auto_draft_length
    from relaxtui.costmodel.parallel_bench import run_parallel_bench
    from relaxtui.rules.strict import Strict

    ks = args.parallel_ks
    if not ks or any(k < 1 for k in ks):
        raise UserError(f"--parallel values must be >= 1 (got {','.join(map(str, ks)) or 'nothing'})")
    if args.max_tokens < 1 or args.passes < 1:
        raise UserError("--max-tokens and --passes must be >= 1")
    source = prompt_source(args)
    if args.profile or args.save_profile is not None:
        raise UserError("--profile and --save-profile go with the draft-length bench, not --parallel")
    if args.draft_cut == "priced":  # auto is the default: it leaves --parallel's drafts whole, as it says
        raise UserError("--draft-cut priced goes with the draft-length bench; --parallel verifies drafts whole")
    options = replace(model_options(args), parallel=max(ks), draft_cut="none")  # drafts verified whole
    params = sampling(args)
    pair = load_pair(options)
    display = ProgressDisplay("bench --parallel", enabled=not args.json)  # a terminal's stderr only
    try:
        prompts = tokens_of(pair.verifier, source)
        config = GenerationConfig(draft_max=args.draft_max, max_tokens=args.max_tokens, sampling=params, seed=args.seed)
        steps = StepCounter(2 + args.passes * len(set(ks)), display.step)  # run_parallel_bench: one step each line
        steps.start("choosing the best strict N for one sequence (calibration and a probe)")
        choice = auto_draft_length(pair, prompts[0], config, Strict())
        n = min(choice.best_speculative, args.draft_max) if choice is not None else 0
        steps.add(args.passes * len(set(ks)) if n else 0)  # strict beside the verifier alone at each K
        runs = run_parallel_bench(pair.verifier, pair.drafter if n else None, prompts, ks=sorted(set(ks)),
                                  draft_max=n, max_tokens=args.max_tokens, sampling=params, seed=args.seed,
                                  passes=args.passes, progress=steps.start)
        steps.finish()
    finally:
        display.close()
        pair.close()
    settings = {"prompts": len(prompts), "passes": args.passes, "max_tokens": args.max_tokens,
                "temperature": params.temperature, "seed": args.seed, "ctx_size": options.ctx_size,
                "verifier": pair.name,
                "drafter": pair.drafter_path.name if pair.drafter_path else options.draft_kind,
                "prompts_from": source.source}
    if args.json:
        print(json.dumps({"parallel": [asdict(r) for r in runs], "settings": settings}))
    else:
        print(render_parallel(runs, settings))
    return 0


def render_parallel(runs: list[ParallelRun], settings: dict[str, object]) -> str:
    base_k = min(r.k for r in runs)  # the ratios are against the smallest K run (K = 1 when it was asked for)
    lines = [f"{'K':>3} {'mode':>8} {'N':>2} {'tok/s (sum)':>11} {'per seq':>8} {'vs K=' + str(base_k):>7} "
             f"{'spec/alone':>10} {'accept':>7}"]
    for r in runs:
        spec = f"{r.spec_vs_no_spec:9.2f}x" if r.mode == "strict" else f"{'':>10}"
        accept = f"{r.acceptance_rate:7.3f}" if r.mode == "strict" else f"{'':>7}"
        lines.append(f"{r.k:>3} {r.mode:>8} {r.draft_max:>2} {r.tokens_per_s:11.2f} {r.per_sequence_tokens_per_s:8.2f} "
                     f"{r.speedup_vs_k1:6.2f}x {spec} {accept}")
    alone = [r for r in runs if r.mode == "no-spec"]
    best = max(alone, key=lambda r: r.tokens_per_s)
    lines += ["", f"best K for the verifier alone: K={best.k}, {best.speedup_vs_k1:.2f}x its K={base_k} throughput",
              "tok/s (sum) = output tokens of all K sequences over decode wall time; per seq = each sequence's own "
              "rate; spec/alone = strict over the verifier alone at the same K (below 1: speculation adds nothing "
              "at that K on this machine)", "(" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"]
    return "\n".join(lines)


def slower_line(result: BenchResult) -> str | None:
    """One line when speculation does not beat the verifier alone here, with what it would take; or when the
    wall clock and the cost model disagree about it (a busy machine during the run). None without a best N."""
    best = result.best
    if best is None or (best.speedup >= 1.0 and best.predicted_speedup >= 1.0):
        return None
    need = ""
    if best.break_even.below(best.mean_accepted_length):  # a break-even is shown only when the run is below it
        need = f"; {best.break_even.need()} (it reached {best.mean_accepted_length:.2f})"
    if best.speedup >= 1.0:
        return (f"wall-clock and predicted disagree: best N={best.n} wall-clock {best.speedup:.2f}x the verifier "
                f"alone but the calibrated costs predict {best.predicted_speedup:.2f}x{need}; was the machine busy? "
                "rerun with more --passes")
    return (f"speculation is slower than the verifier alone here: best N={best.n} wall-clock {best.speedup:.2f}x "
            f"(predicted {best.predicted_speedup:.2f}x){need}")


def break_even_cell(run_: BenchRun) -> str:
    """The table's break-even: shown only where the run is below it; "never" where no rate makes N pay here."""
    even = run_.break_even
    if not even.below(run_.mean_accepted_length):
        return f"{'–':>10}"
    return f"{even.length:10.3f}" if even.length is not None else f"{'never':>10}"


def _calibration_line(costs: dict[str, object]) -> str:
    """How far the calibrated costs can be trusted: their widest spread, and why they are unstable if they are."""
    # why the type: ignore below: the same (a float when the result was made by this version)
    spread = float(costs.get("spread", 0.0))  # type: ignore[arg-type]
    if costs.get("stable", True):
        return f"calibration: stable, widest spread of a part ±{spread / 2:.0%} (after warm-up and outlier rejection)"
    return (f"calibration: UNSTABLE ({costs.get('unstable_reason')}); predicted numbers are uncertain — "
            f"{UNSTABLE_ADVICE}")


def render(result: BenchResult, verifier: str, drafter: str) -> str:
    v = " ".join(f"{x:.2f}" for x in result.v)
    costs = result.costs
    verify = " ".join(f"{1e3 * x:.1f}" for x in cast("Sequence[float]", costs["verify_s"]))  # LoopCosts' fields
    draft = " ".join(f"{1e3 * x:.1f}" for x in cast("Sequence[float]", costs["draft_s"]))
    profile_names = list(result.runs[0].proxy_speedup) if result.runs else []
    priced = [priced_label(name[:20]) for name in profile_names]
    baseline = "" if result.baseline_stable else f"  UNSTABLE: {result.baseline_unstable_reason}"
    lines = [
        f"verifier  {verifier}: {result.verifier_step_s * 1e3:.1f} ms per decoded token",
        f"drafter   {drafter}: {result.drafter_step_s * 1e3:.1f} ms per decoded token",
        f"c_rel     {result.c_rel:.3f}",
        f"v(k)      k=1..{len(result.v)}: {v}",
        f"round costs (ms, decode + sampling + rule, calibrated): verify block k=1..: {verify}; "
        # why the type: ignore below: the costs are LoopCosts' fields read back from the JSON result, typed object there
        f"draft n=1..: {draft}; re-sync +{1e3 * costs['resync_extra_s']:.1f}; "  # type: ignore[operator]
        f"per token {1e3 * costs['emit_s']:.2f}",  # type: ignore[operator]
        _calibration_line(costs),
        f"verifier alone  {result.baseline_tokens_per_s:.2f} tokens/s wall-clock (interleaved in this run; python "
        f"share {result.baseline_python_share:.1%}; host {result.baseline_host_ms_per_round:.2f} ms and "
        f"{result.baseline_copied_bytes_per_round / 1024:.1f} KiB copied per token){baseline}",
        "",
    ]
    table = [["N", "tok/s", WALL_CLOCK, PREDICTED, "error", "accept", "mean len", "break-even", "python", "host ms",
              "KiB/rnd", *priced, ""]]
    for run_ in result.runs:
        table.append([str(run_.n), f"{run_.tokens_per_s:.2f}", f"{run_.speedup:.3f}x",
                      f"{run_.predicted_speedup:.3f}x", f"{run_.prediction_error:+.3f}", f"{run_.acceptance_rate:.3f}",
                      f"{run_.mean_accepted_length:.3f}", break_even_cell(run_).strip(), f"{run_.python_share:.1%}",
                      f"{run_.host_ms_per_round:.2f}", f"{run_.copied_bytes_per_round / 1024:.1f}",
                      *(f"{run_.proxy_speedup[name]:.3f}x" for name in profile_names),
                      "<- best" if run_.best else ("unstable" if not run_.stable else "")])
    lines += grid(table, gap=1).splitlines()  # (at 120 columns: more profiles wrap into a second block)
    settings = ", ".join(f"{k}={v}" for k, v in result.settings.items())
    lines += ["", f"peak RSS  {result.peak_rss_mb:.0f} MiB   ({settings})",
              f"{WALL_CLOCK} = tokens/s over the verifier alone's, both timed in this run on this machine "
              "(interleaved, same prompts and seeds)",
              f"{PREDICTED} = this machine's calibrated costs pricing each run's own rounds, against the verifier "
              f"alone priced the same way (error = {PREDICTED} - {WALL_CLOCK})"]
    if priced:
        lines.append(f"{priced_label('P')} = the same rounds priced under cost profile P, against the verifier "
                     "alone under P")
    lines.append("host ms = the loop's own time per round outside llama.cpp (Python, numpy, ctypes); KiB/rnd = logits "
                 "and hidden rows both models copied out of llama.cpp per round")
    lines += _whole_rows_lines(result)
    lines.append("break-even = the mean accepted length N's rounds need to match the verifier alone here, each at "
                 "the width it verified (a priced cut or an empty draft verifies fewer than N; shown only where the "
                 "run is below it; never = no acceptance rate makes them pay on this machine, as k drafts yield at "
                 "most k+1 tokens a round); the best N is the highest wall-clock speed-up among the stable Ns")
    for run_ in result.runs:
        if not run_.stable:
            lines.append(f"N={run_.n} unstable: {run_.unstable_reason}; {UNSTABLE_ADVICE}")
    if result.best_note is not None:
        lines.append(result.best_note)
    if (line := slower_line(result)) is not None:
        lines.append(line)
    return "\n".join(wrapped(lines))
