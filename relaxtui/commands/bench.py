"""`relaxtui bench`: c_rel, v(k), and measured vs modelled speed-up for N = 1..N_max, side by side."""

from __future__ import annotations

import argparse
import json
import sys

from relaxtui.commands.common import model_options, sampling
from relaxtui.costmodel.bench import BENCH_PROMPTS, BenchResult, run_bench
from relaxtui.errors import UserError
from relaxtui.session import load_pair, prompt_tokens

MAX_BENCH_DRAFT = 16


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.n_max <= MAX_BENCH_DRAFT:
        raise UserError(f"--draft-max must be in 1..{MAX_BENCH_DRAFT} (got {args.n_max})")
    if not args.prompt and not 1 <= args.prompts <= len(BENCH_PROMPTS):
        raise UserError(f"--prompts must be in 1..{len(BENCH_PROMPTS)} (got {args.prompts})")
    if args.max_tokens < 1 or args.repeats < 1 or args.passes < 1:
        raise UserError("--max-tokens, --repeats and --passes must be >= 1")
    if str(args.drafter).lower() == "none":
        raise UserError("bench compares drafting against the verifier alone: give a --drafter or --draft-kind ngram")
    options = model_options(args)
    params = sampling(args)
    pair = load_pair(options)
    try:
        texts = args.prompt or BENCH_PROMPTS[: args.prompts]
        prompts = [prompt_tokens(pair.verifier, text) for text in texts]
        progress = (lambda line: print(f"[bench] {line}", file=sys.stderr, flush=True)) if not args.json else None
        result = run_bench(pair.verifier, pair.drafter, prompts, n_max=args.n_max, max_tokens=args.max_tokens,
                           sampling=params, seed=args.seed, repeats=args.repeats, passes=args.passes,
                           progress=progress or (lambda _: None))
    finally:
        pair.close()
    print(json.dumps(result.as_dict()) if args.json else render(result, pair.verifier_path.name,
                                                              pair.drafter_path.name if pair.drafter_path else
                                                              result.drafter_kind))
    return 0


def render(result: BenchResult, verifier: str, drafter: str) -> str:
    v = " ".join(f"{x:.2f}" for x in result.v)
    lines = [
        f"verifier  {verifier}: {result.verifier_step_s * 1e3:.1f} ms/token",
        f"drafter   {drafter}: {result.drafter_step_s * 1e3:.1f} ms/token",
        f"c_rel     {result.c_rel:.3f}",
        f"v(k)      k=1..{len(result.v)}: {v}",
        f"baseline  {result.baseline_tokens_per_s:.2f} tokens/s (verifier alone; python share "
        f"{result.baseline_python_share:.1%})",
        "",
        f"{'N':>3} {'tok/s':>7} {'speedup':>8} {'predicted':>9} {'accept':>7} {'mean len':>8} {'python':>7}",
    ]
    for run_ in result.runs:
        mark = "  <- best" if run_.best else ""
        lines.append(f"{run_.n:>3} {run_.tokens_per_s:7.2f} {run_.speedup:7.3f}x {run_.predicted_speedup:8.3f}x "
                     f"{run_.acceptance_rate:7.3f} {run_.mean_accepted_length:8.3f} {run_.python_share:6.1%}{mark}")
    settings = ", ".join(f"{k}={v}" for k, v in result.settings.items())
    lines += ["", f"peak RSS  {result.peak_rss_mb:.0f} MiB   ({settings})"]
    return "\n".join(lines)
