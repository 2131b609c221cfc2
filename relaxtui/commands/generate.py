"""`relaxtui generate PROMPT`: stream one completion coloured by verdict, then the stats block."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from relaxtui import console
from relaxtui.commands.common import generation_config, model_options
from relaxtui.costmodel.bench import peak_rss_mb
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.rules import make
from relaxtui.session import load_pair, prompt_tokens


def run(args: argparse.Namespace) -> int:
    rule = make(args.rule, args.alpha, temperature=args.temperature or 1.0)
    config = generation_config(args)
    options = model_options(args, speculative=not args.no_spec)
    thinking = None if args.thinking is None else args.thinking == "on"
    pair = load_pair(options)
    try:
        tokens = prompt_tokens(pair.verifier, args.prompt, chat=not args.raw, thinking=thinking, system=args.system)
        c_rel = None
        draft_model = getattr(pair.drafter, "model", None)
        if args.measure_c_rel and draft_model is not None:
            from relaxtui.costmodel.measure import measure_c_rel

            c_rel = measure_c_rel(pair.verifier, draft_model)
        colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
        out = sys.stdout
        # Ctrl-C stops at the next round boundary and still reports what was generated.
        stop_requested = threading.Event()
        previous_handler = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
        finished = None
        try:
            for event in generate(pair.verifier, tokens, config, drafter=pair.drafter, rule=rule,
                                  should_stop=stop_requested.is_set):
                if args.json:
                    out.write(console.event_json(event) + "\n")
                elif isinstance(event, Finished):
                    finished = event
                else:
                    out.write(console.colour_token(event, colour))
                out.flush()
        finally:
            signal.signal(signal.SIGINT, previous_handler)
        if finished is not None and not args.json:
            out.write("\n\n" + console.legend(colour) + "\n")
            out.write(console.stats_block(finished.metrics, c_rel=c_rel, peak_rss_mb=peak_rss_mb()) + "\n")
        elif args.json and c_rel is not None:
            out.write(json.dumps({"type": "cost", "c_rel": c_rel, "peak_rss_mb": peak_rss_mb()}) + "\n")
    finally:
        pair.close()
    return 0
