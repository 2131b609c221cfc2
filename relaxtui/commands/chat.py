"""`relaxtui chat`: the Textual app on the embedded pair (or the models given); `--fake` needs no weights."""

from __future__ import annotations

import argparse
from dataclasses import replace

from relaxtui.commands.common import model_options
from relaxtui.tui.engine import NGRAM, NO_DRAFTER, ChatSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rule", default="strict")
    parser.add_argument("--alpha", type=float, default=None, help="the rule's knob")
    parser.add_argument("--draft-max", "--spec-draft-n-max", type=int, default=3, dest="draft_max")
    parser.add_argument("--max-tokens", "-n", type=int, default=512)
    parser.add_argument("--thinking", choices=["on", "off"], default="off")
    parser.add_argument("--fake", action="store_true", help="a deterministic fake model pair (no weights)")


def run(args: argparse.Namespace) -> int:
    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import FakeChatEngine, LlamaChatEngine

    options = model_options(args)
    drafter = NGRAM if options.draft_kind == "ngram" else (options.drafter or NO_DRAFTER)
    settings = ChatSettings(rule=args.rule, knob=args.alpha, draft_max=args.draft_max,
                            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            thinking=args.thinking == "on", drafter=drafter, max_tokens=args.max_tokens,
                            seed=args.seed)
    settings.validated()  # bad options fail here, before the screen opens
    engine = FakeChatEngine() if args.fake else LlamaChatEngine(options)
    if args.fake:
        settings = replace(settings, drafter=engine.drafter_name)
    try:
        RelaxApp(engine, settings).run()
    finally:
        engine.close()
    return 0
