"""`relaxtui chat`: the Textual app on the embedded pair (or the models given); `--fake` needs no weights."""

from __future__ import annotations

import argparse
from dataclasses import replace

from relaxtui import checks
from relaxtui.commands.common import finite_float, model_options, utf8_path, utf8_text
from relaxtui.rules import split_spec
from relaxtui.session import ModelOptions
from relaxtui.tui.engine import NGRAM, NO_DRAFTER, ChatSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rule", type=utf8_text, default="strict", help="acceptance rule (see `relaxtui rules list`)")
    parser.add_argument("--alpha", type=finite_float, default=None, help="the rule's knob")
    parser.add_argument("--draft-max", "--spec-draft-n-max", type=checks.DRAFT_MAX.option("--draft-max"), default=3,
                        dest="draft_max", help="draft length N (0 = verifier alone)")
    parser.add_argument("--max-tokens", "-n", type=checks.MAX_TOKENS.option("--max-tokens"), default=512,
                        help="longest reply, in tokens")
    parser.add_argument("--thinking", choices=["on", "off"], default="off",
                        help="reasoning mode, for chat templates that have one (Qwen3)")
    parser.add_argument("--fake", action="store_true", help="a deterministic fake model pair (no weights)")
    parser.add_argument("--resume", type=utf8_path, metavar="FILE", default=None,
                        help="reopen a chat saved with ctrl+s (its .json): transcript, settings and conversation")


def check_model_files(options: ModelOptions) -> None:
    """Resolve both model names and read their GGUF headers (cheap) before any screen opens, and what the drafter's
    kind needs of them (an MTP head: MTP layers for the verifier's architecture)."""
    from relaxtui.decoding.drafters import drafter_kind
    from relaxtui.engine.gguf import read_header
    from relaxtui.models.store import resolve_model

    paths = [resolve_model(name) for name in [options.verifier, *([options.drafter_file] if options.drafter_file
                                                                  else [])]]
    for path in paths:
        read_header(path)
    if options.drafter is not None:
        drafter_kind(options.draft_kind).check_files(paths[0], paths[1] if len(paths) > 1 else None)


def run(args: argparse.Namespace) -> int:
    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import FakeChatEngine, LlamaChatEngine
    from relaxtui.tui.save import load_chat

    saved = load_chat(args.resume) if args.resume else None  # a bad file: one line, exit 2, no screen
    options = model_options(args)
    drafter = NGRAM if options.draft_kind == "ngram" else (options.drafter or NO_DRAFTER)
    rule, knob = split_spec(args.rule, args.alpha)  # NAME:KNOB as in the eval grid
    settings = ChatSettings(rule=rule, knob=knob, draft_max=args.draft_max,
                            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            thinking=args.thinking == "on", drafter=drafter, max_tokens=args.max_tokens,
                            seed=args.seed)
    settings = saved.settings if saved else settings  # a resumed chat runs on with its own settings
    settings.validated()  # bad options fail here, before the screen opens
    if not args.fake:
        check_model_files(options)  # a missing or non-GGUF model too: one line, exit 2, no screen
    engine = FakeChatEngine() if args.fake else LlamaChatEngine(options)
    if args.fake:
        settings = replace(settings, drafter=engine.drafter_name)
    try:
        RelaxApp(engine, settings, resume=saved).run()
    finally:
        engine.close()
    return 0
