"""The `relaxtui` command: parse → config → run. Bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from relaxtui._alloc import keep_large_allocations_on_heap
from relaxtui.errors import NumericsError, UserError

EXIT_BAD_INPUT = 2
EXIT_NUMERICS = 3
MAX_TIMED_VOCAB = 1 << 21  # `rules bench --vocab`: twice the largest vocabularies in use, a few arrays of it in RAM


_ARGUMENT_PREFIX = re.compile(r"argument (?P<names>[^:]+): (?P<rest>.*)", re.DOTALL)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it or there is none to show
    (off switches, "not given" None, empty lists)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is argparse.SUPPRESS or default is None or default is False
                or default == [] or not action.option_strings):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, not usage + line
        """Raise the parse error as a UserError; a type's message that already starts with the option's name
        (``--top-p must be in (0, 1]``) is shown without argparse's "argument --top-p:" in front of it."""
        match = _ARGUMENT_PREFIX.fullmatch(message)
        if match and any(match["rest"].startswith(f"{name} ") for name in match["names"].split("/")):
            message = match["rest"]
        raise UserError(f"{self.prog}: {' '.join(message.split())}")


def build_parser() -> argparse.ArgumentParser:
    from relaxtui.commands.common import (
        add_draft_options,
        add_model_options,
        add_rule_options,
        add_sampling_options,
        int_option,
        utf8_text,
    )
    from relaxtui.options import MAX_TOKENS

    parser = _Parser(prog="relaxtui", description="Training-free relaxed speculative decoding on llama.cpp.")
    parser.add_argument("--version", action="version", version=f"relaxtui {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    gen = sub.add_parser("generate", help="stream one completion, tokens coloured by verdict")
    gen.add_argument("prompt", type=utf8_text, help="the user message (rendered with the verifier's chat template)")
    add_model_options(gen)
    add_sampling_options(gen)
    add_draft_options(gen)
    MAX_TOKENS.add(gen, default=256)
    gen.add_argument("--no-spec", action="store_true", help="verifier alone (autoregressive baseline)")
    add_rule_options(gen)
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--thinking", choices=["on", "off"], default=None,
                     help="reasoning mode, for chat templates that have one (default: the template's own)")
    gen.add_argument("--system", type=utf8_text, default=None, help="system message")
    gen.add_argument("--json", action="store_true", help="print events and metrics as JSON lines")
    gen.add_argument("--quiet", "-q", action="store_true",
                     help="only the completion: no legend, stats or verdict lines on stderr")
    gen.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                     help="colour tokens by verdict (auto: when writing to a terminal)")
    gen.add_argument("--measure-c-rel", action="store_true", help="time one step of each model first")

    bench = sub.add_parser("bench", help="c_rel, v(k), wall-clock vs predicted speed-up per draft length here")
    add_model_options(bench)
    add_sampling_options(bench, temperature=0.0)
    from relaxtui.commands import bench as bench_command

    bench_command.add_arguments(bench)

    from relaxtui.commands import chat as chat_command
    from relaxtui.commands import eval as eval_command

    chat = sub.add_parser("chat", help="the chat TUI: every token coloured by verdict, live stats, inspector")
    chat_command.add_arguments(chat)
    add_model_options(chat)
    add_sampling_options(chat)

    evaluate = sub.add_parser("eval", help="score capability and speed on a benchmark (resumable)")
    eval_command.add_arguments(evaluate)
    add_model_options(evaluate)
    add_sampling_options(evaluate)

    from relaxtui.commands import tune as tune_command

    tune = sub.add_parser("tune", help="recommend draft length, drafter and knob for a task")
    tune_command.add_arguments(tune)
    add_model_options(tune)
    add_sampling_options(tune)

    from relaxtui.commands import tasks as tasks_command

    tasks = sub.add_parser("tasks", help="check a task file (FILE.toml): its prompts, gold answers and rows")
    tasks_command.add_arguments(tasks)

    profiles = sub.add_parser("profiles", help="cost profiles that price speed-ups (shipped, or measured by bench)")
    from relaxtui.commands import profiles as profiles_command

    profiles_command.add_arguments(profiles)

    rules = sub.add_parser("rules", help="list the acceptance rules or time them")
    rsub = rules.add_subparsers(dest="rules_command", required=True, parser_class=_Parser)
    rsub.add_parser("list", help="rules, knobs, ranges and the paper's grid")
    rule_bench = rsub.add_parser("bench", help="time one position of every rule on a 152k vocabulary")
    rule_bench.add_argument("--vocab", type=int_option("--vocab", 2, MAX_TIMED_VOCAB), default=151_936,
                            help="vocabulary size to time on")
    rule_bench.add_argument("--repeats", type=int_option("--repeats", 1, 100_000), default=50,
                            help="timed repeats per rule")

    from relaxtui.commands import serve as serve_command

    serve = sub.add_parser("serve", help="an OpenAI-compatible server: per-request rules, continuous batching")
    serve_command.add_arguments(serve)
    add_model_options(serve)
    add_sampling_options(serve)

    from relaxtui.commands import models as models_command

    models = sub.add_parser("models", help="pull, pair, list, install and quantise GGUF models")
    models_command.add_arguments(models)
    return parser


def build_report_parser() -> argparse.ArgumentParser:
    """`relaxtui eval report DIR`: its own parser, so `eval report --help` shows only what the report takes."""
    from relaxtui.commands import eval as eval_command
    from relaxtui.commands.common import utf8_text

    parser = _Parser(prog="relaxtui eval report",
                     description="Rebuild the table, CSV, Markdown and PNG of a run folder from its records.")
    parser.add_argument("directory", type=utf8_text, help="the run folder (what `eval TASK --out` wrote)")
    eval_command.add_report_options(parser)
    return parser


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("relaxtui")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line as a namespace; `eval report` has a parser of its own."""
    if list(argv[:2]) == ["eval", "report"]:
        args = build_report_parser().parse_args(argv[2:])
        args.command, args.task = "eval", "report"
        return args
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        subcommands = parser._subparsers  # (argparse's own: the group holding the subcommands' action)
        choices = subcommands._group_actions[0].choices if subcommands is not None else None
        commands = ", ".join(choices or ())
        raise UserError(f"a command is needed: {commands} (relaxtui --help, relaxtui COMMAND --help)")
    return args


def _one_line(exc: Exception) -> str:
    """The message as one line of plain text: it may quote outside input (a file name, a header field), whose
    newlines, terminal escapes and undecodable bytes must not reach the terminal as such."""
    from relaxtui.display import terminal_text

    return terminal_text(" ".join(str(exc).split("\n")))


def main(argv: Sequence[str] | None = None) -> int:
    keep_large_allocations_on_heap()
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        command = importlib.import_module(f"relaxtui.commands.{args.command}")
        return int(command.run(args))
    except UserError as exc:
        from relaxtui.options import as_flag  # a lower layer names a setting: the command line spells it as its flag

        print(f"relaxtui: error: {_one_line(as_flag(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NumericsError as exc:  # never an accept: the run stops and says where the number went bad
        print(f"relaxtui: numerical error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_NUMERICS
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
