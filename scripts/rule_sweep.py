#!/usr/bin/env python3
"""Every rule at each of its paper-grid knobs on one prompt and seed: acceptance, mean length, tokens/s.

Usage: .venv/bin/python scripts/rule_sweep.py [--draft-max 3] [--max-tokens 128] [--seed 1] [--prompt TEXT]
Loads the embedded pair once; the verifier-alone run comes first as the speed reference.
"""

from __future__ import annotations

import argparse

from relaxtui._alloc import keep_large_allocations_on_heap
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.rules import PAPER_GRID, make
from relaxtui.session import ModelOptions, load_pair, prompt_tokens

PROMPT = "Write a Python function that merges two sorted lists into one sorted list, with a docstring."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER)
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER)
    parser.add_argument("--draft-max", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    keep_large_allocations_on_heap()
    pair = load_pair(ModelOptions(args.verifier, args.drafter, ctx_size=2048))
    tokens = prompt_tokens(pair.verifier, args.prompt)
    sampling = SamplingParams()
    print(f"prompt: {args.prompt!r}  N={args.draft_max}  seed={args.seed}  T={sampling.temperature} "
          f"top-k {sampling.top_k} top-p {sampling.top_p}")
    print(f"{'rule':10} {'knob':>6} {'accept':>7} {'mean len':>8} {'tok/s':>7} {'tokens':>6}")
    runs = [("verifier", None)] + [(name, knob) for name, knobs in PAPER_GRID.items() for knob in knobs]
    for name, knob in runs:
        config = GenerationConfig(draft_max=0 if name == "verifier" else args.draft_max,
                                  max_tokens=args.max_tokens, sampling=sampling, seed=args.seed)
        rule = None if name == "verifier" else make(name, knob, temperature=sampling.temperature)
        drafter = None if name == "verifier" else pair.drafter
        finished = [e for e in generate(pair.verifier, tokens, config, drafter=drafter, rule=rule)
                    if isinstance(e, Finished)][0]
        m = finished.metrics
        shown = "-" if knob is None else f"{knob:g}"
        accept = "-" if name == "verifier" else f"{m.acceptance_rate:.3f}"
        print(f"{name:10} {shown:>6} {accept:>7} {m.mean_accepted_length:8.3f} {m.tokens_per_s:7.2f} "
              f"{m.output_tokens:6d}", flush=True)
    pair.close()


if __name__ == "__main__":
    main()
