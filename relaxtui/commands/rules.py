"""`relaxtui rules list|bench`: what each rule's knobs mean, and how long one position takes."""

from __future__ import annotations

import argparse

from relaxtui.errors import UserError
from relaxtui.rules import PAPER_GRID, RULES


def run(args: argparse.Namespace) -> int:
    if args.rules_command == "list":
        for name, cls in RULES.items():
            grid = ", ".join("-" if k is None else f"{k:g}" for k in PAPER_GRID[name])
            knob = f"{cls.knob_name}: {cls.knob_help}" if cls.knob_name else "no knob"
            second = f"; second knob ({name}:KNOB:KNOB2) {cls.knob2_name}: {cls.knob2_help}" if cls.knob2_name else ""
            print(f"{name:10} {knob}{second}  [paper grid: {grid}]")
        print("every rule: --relax-scope all|thinking|answer relaxes everywhere, only inside <think>...</think>, or "
              "only outside it; strict elsewhere (docs/method.md#relaxation-scoped-to-thinking)")
        return 0
    from relaxtui.costmodel.rule_timing import time_rules

    if args.vocab < 2 or args.repeats < 1:
        raise UserError("--vocab must be >= 2 and --repeats >= 1")
    print(f"one position, vocabulary {args.vocab}, {args.repeats} repeats (decide + residual)")
    print(f"{'rule':10} {'knob':>6} {'dist':9} {'median ms':>10} {'p90 ms':>8}")
    for timing in time_rules(args.vocab, args.repeats):
        knob = "-" if timing.knob is None else f"{timing.knob:g}"
        kind = "dense" if timing.dense else "processed"
        print(f"{timing.rule:10} {knob:>6} {kind:9} {timing.median_ms:10.3f} {timing.p90_ms:8.3f}")
    return 0
