"""`relaxtui chat`: the Textual app on the embedded pair (or the models given); `--fake` needs no weights."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from relaxtui.commands.common import add_rule_options, model_options, utf8_path
from relaxtui.decoding.drafters import STANDALONE_KINDS, check_options, drafter_kind
from relaxtui.options import DRAFT_MAX, MAX_TOKENS
from relaxtui.rules import split_spec
from relaxtui.session import GGUF, ModelOptions, drafter_options
from relaxtui.tui.engine import FAKE_DRAFTER, NO_DRAFTER, ChatSettings, drafter_choice

TYPED = "typed_options"  # the namespace attribute: {dest: the option as typed}, in the order typed
# a flag typed with --resume -> the ChatSettings fields it sets instead of the saved chat's
OVERRIDES: dict[str, tuple[str, ...]] = {
    "rule": ("rule", "knob"), "alpha": ("knob",), "draft_max": ("draft_max",), "max_tokens": ("max_tokens",),
    "thinking": ("thinking",), "temperature": ("temperature",), "top_k": ("top_k",), "top_p": ("top_p",),
    "seed": ("seed",), "drafter": ("drafter",), "draft_kind": ("drafter",), "relax_scope": ("relax_scope",),
}


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return " ".join(map(_shown, value)) if isinstance(value, list | tuple) else str(value)


class _Typed(argparse.Action):
    """argparse's plain store that also records the option as typed: `--resume` must tell a typed `--seed 0` from
    the default 0, which no comparison of values can (every --help keeps showing the real defaults)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        typed = {key: text for key, text in getattr(namespace, TYPED, {}).items() if key != self.dest}
        setattr(namespace, TYPED, {**typed, self.dest: f"{option_string} {_shown(values)}"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # every store option added to this parser from here on (its groups share the registry) records itself typed
    parser.register("action", None, _Typed)
    parser.register("action", "store", _Typed)
    parser.set_defaults(**{TYPED: {}})
    add_rule_options(parser)
    DRAFT_MAX.add(parser)
    MAX_TOKENS.add(parser, default=512, help="longest reply, in tokens")
    parser.add_argument("--thinking", choices=["on", "off"], default="off",
                        help="reasoning mode, for chat templates that have one (Qwen3)")
    parser.add_argument("--fake", action="store_true", help="a deterministic fake model pair (no weights)")
    parser.add_argument("--resume", type=utf8_path, metavar="FILE", default=None,
                        help="reopen a chat saved with ctrl+s (its .json): transcript, settings and conversation; "
                             "settings flags typed with it override the saved ones")


def check_model_files(options: ModelOptions) -> None:
    """Resolve both model names and read their GGUF headers (cheap) before any screen opens, and what the drafter's
    kind needs of them (an MTP head: MTP layers for the verifier's architecture)."""
    from relaxtui.engine.gguf import read_header
    from relaxtui.models.store import resolve_model

    paths = [resolve_model(name) for name in [options.verifier, *([options.drafter_file] if options.drafter_file
                                                                  else [])]]
    for path in paths:
        read_header(path)
    if options.drafter is not None:
        drafter_kind(options.draft_kind).check_files(paths[0], paths[1] if len(paths) > 1 else None, GGUF)


def resumed_settings(saved: ChatSettings, given: ChatSettings,
                     typed: Mapping[str, str]) -> tuple[ChatSettings, list[str]]:
    """A resumed chat's settings: the saved ones, but every setting whose flag the user typed from the command
    line (``given``); and those flags as typed. A rule typed without a knob takes its own default knob."""
    fields = {name for dest in typed for name in OVERRIDES.get(dest, ())}
    settings = replace(saved, **{name: getattr(given, name) for name in sorted(fields)})
    return settings, [text for dest, text in typed.items() if dest in OVERRIDES]


def resume_notice(path: Path, overrides: list[str]) -> str:
    """The line the chat opens with when it resumes ``path``: which typed flags replaced saved settings."""
    if not overrides:
        return f"resumed {path} with its saved settings"
    verb = "overrides" if len(overrides) == 1 else "override"
    return f"resumed {path}; {', '.join(overrides)} {verb} the saved settings"


def run(args: argparse.Namespace) -> int:
    from relaxtui.tui.app import RelaxApp
    from relaxtui.tui.engine import ChatEngine, FakeChatEngine, LlamaChatEngine
    from relaxtui.tui.save import load_chat

    saved = load_chat(args.resume) if args.resume else None  # a bad file: one line, exit 2, no screen
    options = model_options(args)
    drafter = drafter_choice(options.draft_kind, options.drafter)  # a kind that opens no file: by its name
    rule, knob = split_spec(args.rule, args.alpha)  # NAME:KNOB as in the eval grid
    settings = ChatSettings(rule=rule, knob=knob, draft_max=args.draft_max,
                            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            thinking=args.thinking == "on", drafter=drafter, max_tokens=args.max_tokens,
                            seed=args.seed, relax_scope=args.relax_scope)
    notice = ""
    if saved is not None:  # a resumed chat runs on with its own settings, but for the flags typed with --resume
        settings, overrides = resumed_settings(saved.settings, settings, getattr(args, TYPED, {}))
        saved, notice = replace(saved, settings=settings), resume_notice(args.resume, overrides)
    settings.validated()  # bad options fail here, before the screen opens
    check_options(drafter_options(options), STANDALONE_KINDS)  # settings a kind of the drafter switch cannot take
    if not args.fake:
        check_model_files(options)  # a missing or non-GGUF model too: one line, exit 2, no screen
    engine: ChatEngine
    if args.fake:  # the fake pair drafts with its own LM unless the command line names none or a standalone kind
        engine = FakeChatEngine(drafter=drafter if drafter in (NO_DRAFTER, *STANDALONE_KINDS) else FAKE_DRAFTER,
                                drafting=drafter_options(options))
        settings = replace(settings, drafter=engine.drafter_name)
        engine.check_scope(settings.relax_scope)  # the fake pair marks no thinking block: one line, no screen
    else:
        engine = LlamaChatEngine(options)
    try:
        RelaxApp(engine, settings, resume=saved, notice=notice).run()
    finally:
        engine.close()
    return 0
