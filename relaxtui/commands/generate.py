"""`relaxtui generate PROMPT`: stream one completion coloured by verdict, then the stats block."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from dataclasses import replace

from relaxtui import console
from relaxtui.commands.common import cli_rule, generation_config, model_options, refuse_rules_without_logits
from relaxtui.costmodel.auto import AutoChoice, choose_draft_length, position_acceptance, slower_line
from relaxtui.costmodel.bench import peak_rss_mb
from relaxtui.costmodel.calibrate import calibrate, typical_context
from relaxtui.costmodel.pricing import rounds_of_metrics
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished, Metrics
from relaxtui.decoding.loop import generate
from relaxtui.rules import Rule
from relaxtui.session import Pair, load_pair, prompt_tokens

AUTO_MAX_DRAFT = 6  # --draft-max auto considers N = 0..this
PROBE_TOKENS = 48  # tokens of the acceptance estimate


def run(args: argparse.Namespace) -> int:
    rule = cli_rule(args.rule, args.alpha, args.temperature)
    if not args.no_spec:
        refuse_rules_without_logits([args.rule], args.draft_kind)  # a kind's traits, before any model loads
    auto = args.draft_max == "auto"
    config = generation_config(args, draft_max=AUTO_MAX_DRAFT if auto else None)  # validates the other options
    options = model_options(args, speculative=not args.no_spec)
    if auto:  # the verifier's recurrent-state snapshots (a hybrid model) for the longest N auto may choose
        options = replace(options, rollback_depth=AUTO_MAX_DRAFT)
    thinking = None if args.thinking is None else args.thinking == "on"
    pair = load_pair(options)
    try:
        tokens = prompt_tokens(pair.verifier, args.prompt, chat=not args.raw, thinking=thinking, system=args.system)
        if auto:
            choice = auto_draft_length(pair, tokens, config, rule)
            print(f"--draft-max auto: {choice.line() if choice is not None else '0 (no drafter)'}", file=sys.stderr)
            config = replace(config, draft_max=choice.draft_max if choice is not None else 0)
        if config.draft_max > 0:  # drafts cut by price (--draft-cut): the prices before the first round
            pair.price_drafts(log=lambda line: print(line, file=sys.stderr))
        c_rel = None
        if args.measure_c_rel and pair.drafter is not None and pair.drafter.traits.holds_model:
            from relaxtui.costmodel.measure import measure_c_rel

            c_rel = measure_c_rel(pair.verifier, pair.drafter)
        colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
        out = sys.stdout
        # Ctrl-C stops at the next round boundary and still reports what was generated.
        stop_requested = threading.Event()
        previous_handler = signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
        finished = None  # the Finished event (also under --json, for the cost line)
        try:
            for event in generate(pair.verifier, tokens, config, drafter=pair.drafter, rule=rule,
                                  should_stop=stop_requested.is_set):
                if isinstance(event, Finished):
                    finished = event
                if args.json:
                    out.write(console.event_json(event) + "\n")
                elif not isinstance(event, Finished):
                    out.write(console.colour_token(event, colour))
                out.flush()
        finally:
            signal.signal(signal.SIGINT, previous_handler)
        if finished is not None and not args.json:
            out.write("\n")  # the completion alone on stdout; the legend and stats go to stderr
            out.flush()
            if not args.quiet:
                stderr_colour = args.color == "always" or (args.color == "auto" and sys.stderr.isatty())
                print("\n" + console.legend(stderr_colour), file=sys.stderr)
                print(console.stats_block(finished.metrics, c_rel=c_rel, peak_rss_mb=peak_rss_mb()), file=sys.stderr)
        if args.json and c_rel is not None:
            out.write(json.dumps({"type": "cost", "c_rel": c_rel, "peak_rss_mb": peak_rss_mb()}) + "\n")
        # the verdict line costs a few seconds of timing: for people reading a finished reply, not for scripts
        stopped = finished is None or finished.metrics.finish_reason == "stopped"
        if (not (args.json or args.quiet or stopped or auto) and config.draft_max > 0 and pair.drafter is not None
                and finished is not None):  # implied by not stopped; spelled out for mypy
            line = predicted_slower(pair, tokens, config, finished.metrics)
            if line is not None:
                print(line, file=sys.stderr)
    finally:
        pair.close()
    return 0


def auto_draft_length(pair: Pair, tokens: list[int], config: GenerationConfig, rule: Rule) -> AutoChoice | None:
    """Calibrate this machine, estimate acceptance on this prompt (a short probe at the largest N), choose N."""
    if pair.drafter is None:
        return None
    costs = calibrate(pair.verifier, pair.drafter, max_block=AUTO_MAX_DRAFT + 1, sampling=config.sampling,
                      rule=rule, context=typical_context(tokens, config.max_tokens), repeats=3, seed=config.seed)
    probe = replace(config, draft_max=AUTO_MAX_DRAFT, max_tokens=min(PROBE_TOKENS, config.max_tokens),
                    learn=False)  # the probe's output is not the answer: nothing may draft from it
    metrics = next(e.metrics for e in generate(pair.verifier, tokens, probe, drafter=pair.drafter, rule=rule)
                   if isinstance(e, Finished))
    rates = position_acceptance(metrics.per_position_reached, metrics.per_position_accepted)
    return choose_draft_length(costs, rates, AUTO_MAX_DRAFT)


def predicted_slower(pair: Pair, tokens: list[int], config: GenerationConfig, metrics: Metrics) -> str | None:
    """After the reply: price its own rounds with this machine's costs (a few seconds of timing) and say so
    when speculation was slower than the verifier alone would have been."""
    n = max(metrics.draft_lengths, default=0)
    if n == 0:
        return None
    costs = calibrate(pair.verifier, pair.drafter, max_block=n + 1, sampling=config.sampling,
                      context=typical_context(tokens, config.max_tokens), repeats=3, seed=config.seed)
    return slower_line(costs, config.draft_max, metrics.mean_accepted_length, rounds_of_metrics([metrics]))
