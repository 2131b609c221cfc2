"""Options shared by every command that runs models, their translation into configs, and the argparse types
that keep hostile command-line values out (issue 17).

Why the types: argparse's ``type=float`` takes ``nan`` and ``inf``, ``type=int`` takes any size, and ``type=str``
takes the lone surrogates Python decodes from argv bytes that are not UTF-8. Each of those later became a
traceback (numpy refusing a negative seed, ``str.encode`` in the tokenizer, ``print`` to a strict stdout) or a
NaN in a result. Every value is checked here, at parse time, so bad input is one line and exit code 2 before
any model loads. A type raises ``argparse.ArgumentTypeError``; a message that starts with the option's name is
shown as is (``relaxtui.cli._Parser`` drops argparse's "argument --x:" prefix), the others after that prefix.
A setting that a file or a request carries too (a saved chat's seed, a manifest's temperature, a request's
``speculative.draft_max``) is added from its one entry in the option table (``relaxtui.options``: ``SEED.add(group)``),
whose check the file's and the request's readers call as well.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from relaxtui import checks, options
from relaxtui.checks import INT32_MAX, utf8_problem
from relaxtui.checks import quoted as _quoted
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import drafter_kind
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.rules import RULES, Rule, make, split_spec
from relaxtui.session import ModelOptions

_FINITE = checks.Number().option()


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # also Python's limit on int-string conversion (a 5000-digit argument)
        raise argparse.ArgumentTypeError(f"must be a whole number (got {_quoted(text)})") from None


def finite_float(text: str) -> float:
    """Any finite float: refuses ``nan``, ``inf``, ``-inf`` and values that overflow to infinity (``1e999``)."""
    return _FINITE(text)


def float_option(name: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
                 high_open: bool = False) -> Callable[[str], float]:
    """A finite float in an interval (``low``/``high`` None = unbounded on that side; ``*_open`` excludes the
    bound); the message names the option: ``--top-p must be in (0, 1] (got 2)``. A setting a file carries too
    is added from its entry in the option table instead (``relaxtui.options.TOP_P.add(group)``)."""
    return checks.Number(low=low, high=high, low_open=low_open, high_open=high_open).option(name)


def int_option(name: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``high`` None: up to INT32_MAX, llama.cpp's C int); the message names the
    option: ``--max-queue must be >= 0 (got -1)``, ``--port must be in 0..65535 (got 70000)``. A setting of the
    option table (``relaxtui.options``) is added from its entry instead."""
    return checks.Whole(low, high).option(name)


def non_negative_int(text: str) -> int:
    """A whole number in 0..INT32_MAX."""
    value = _whole_number(text)
    if not 0 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number in 0..{INT32_MAX} (got {value})")
    return value


def positive_int(text: str) -> int:
    """A whole number in 1..INT32_MAX."""
    value = _whole_number(text)
    if not 1 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number in 1..{INT32_MAX} (got {value})")
    return value


seed = checks.SEED.option("--seed")
"""A random seed, 0 <= seed < 2**63 (``checks.SEED``, which a saved chat's seed goes through too)."""


def utf8_text(text: str) -> str:
    """Text that is valid UTF-8. Python decodes argv bytes that are not UTF-8 into lone surrogates
    (surrogateescape), which the tokenizer, llama.cpp's path argument and a UTF-8 stdout cannot encode."""
    if problem := utf8_problem(text):
        raise argparse.ArgumentTypeError(problem)
    return text


def utf8_path(text: str) -> Path:
    """A path whose name is valid UTF-8 (see ``utf8_text``: it is printed and handed to llama.cpp as UTF-8)."""
    return Path(utf8_text(text))


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--verifier", "-m", type=utf8_text, default=DEFAULT_VERIFIER,
                       help="GGUF path or name in ggml_models/")
    group.add_argument("--drafter", "-md", type=utf8_text, default=DEFAULT_DRAFTER,
                       help="GGUF path or name in ggml_models/ ('none' = verifier alone)")
    options.DRAFT_KIND.add(group, metavar="KIND")
    for setting in (options.CTX_SIZE, options.THREADS, options.GPU_LAYERS):
        setting.add(group)
    drafting = parser.add_argument_group("drafters that open no model (each kind reads its own; docs/method.md)")
    for setting in options.DRAFTER_SETTINGS:
        setting.add(drafting)


def add_task_file_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """For every command that loads task files: a task file's data path stays in its folder unless the user
    says otherwise here (a task file may be someone else's; see ``evals.taskfiles.taskdata.inside_folder``)."""
    parser.add_argument("--allow-outside-data", action="store_true",
                        help="let a task file's [data] path lie outside the task file's folder (an absolute path, "
                             "../, a link to elsewhere); without it such a path is refused")


def add_parallel_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    options.PARALLEL.add(parser, metavar="K")


def add_sampling_options(parser: argparse.ArgumentParser, *, temperature: float = 0.6) -> None:
    group = parser.add_argument_group("sampling (applied to both models)")
    options.TEMPERATURE.add(group, default=temperature,
                            help=f"sampling temperature (0 = greedy; default {temperature:g})")
    for setting in (options.TOP_K, options.TOP_P, options.SEED):
        setting.add(group)


def add_draft_options(parser: argparse.ArgumentParser, *, with_length: bool = True) -> None:
    group = parser.add_argument_group("speculation")
    if with_length:
        options.DRAFT_MAX.add(group, words=("auto",), extra=("--draft",),
                              help="draft length N, or `auto`: the N this machine's costs and a short acceptance "
                                   "estimate predict fastest (0 when speculation does not pay)")
    for setting in (options.DRAFT_MIN, options.DRAFT_P_MIN, options.DRAFT_ADAPT, options.DRAFT_CUT, options.BONUS):
        setting.add(group)


def add_rule_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, grid: bool = False) -> None:
    """``--rule`` and ``--alpha`` from the option table: one of each (generate, chat, serve), or an eval grid's lists
    (``grid``: the run is their product with the other lists); and ``--relax-scope``, one for the whole run."""
    options.RELAX_SCOPE.add(parser)
    if not grid:
        options.RULE.add(parser)
        options.ALPHA.add(parser)
        return
    options.RULE.add(parser, nargs="+", default=["strict"],
                     help="acceptance rules; NAME:KNOB pins a knob (e.g. strict cactus:1 mentored:0.7)")
    options.ALPHA.add(parser, nargs="+", default=[], help="knobs (default: each rule's paper grid)")


def cli_rule(spec: str, knob: float | None, temperature: float = 1.0) -> Rule:
    """The rule a command runs (``--rule NAME`` or ``NAME:KNOB``, ``--alpha``), built by the factory: the command
    line's one place for it. ``temperature`` 0 (greedy) refuses a rule that cannot run greedy; a refusal names the
    setting, which ``relaxtui.cli`` spells as its flag."""
    return make(*split_spec(spec, knob), temperature=temperature)


def model_options(args: argparse.Namespace, *, speculative: bool = True) -> ModelOptions:
    drafter = args.drafter if speculative and str(args.drafter).lower() != "none" else None
    own = drafter_kind(args.draft_kind).own_name  # a kind that drafts from the verifier itself without --drafter
    if own is not None and drafter == DEFAULT_DRAFTER:
        drafter = own
    return ModelOptions(args.verifier, drafter, args.ctx_size, args.threads, args.gpu_layers,
                        draft_kind=args.draft_kind, **{s.name: getattr(args, s.name) for s in options.DRAFTER_SETTINGS},
                        draft_p_min=getattr(args, "draft_p_min", 0.0), parallel=getattr(args, "parallel", 1),
                        rollback_depth=_longest_draft(args.draft_max),
                        draft_cut=getattr(args, "draft_cut", "auto"))  # (chat, tune: auto)


def refuse_rules_without_logits(specs: Sequence[str], kind: str, flag: str = "--draft-kind") -> None:
    """A rule that reads the drafter's logits, asked of a kind whose drafts carry none (its traits say so before
    anything loads): one line now, not a refusal once the models are loaded (``decoding.round`` refuses it too)."""
    if drafter_kind(kind).has_distribution:
        return
    for spec in specs:
        name = split_spec(spec, None)[0]
        if getattr(RULES.get(name), "needs_draft_logits", False):
            raise UserError(f"--rule {spec}: rule {name!r} needs the drafter's logits, which {flag} {kind} drafts "
                            "without (its drafts are tokens); use a model drafter")


def drafts_without_file(kind: str) -> bool:
    """Whether a drafter kind needs no ``--drafter`` file, as its traits say: it opens none (prompt lookup) or has a
    ``--drafter`` value of its own (the verifier's MTP head)."""
    traits = drafter_kind(kind)
    return not traits.model_file or traits.own_name is not None


def _longest_draft(value: object) -> int:
    """The longest N a run's --draft-max asks for (a list in an eval grid; `auto` and none: the default room)."""
    values = value if isinstance(value, list | tuple) else [value]
    lengths = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    default = ModelOptions.rollback_depth
    return max([*lengths, *([default] if len(lengths) < len(values) or not lengths else [])])


def sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(args.temperature, args.top_k, args.top_p)


def generation_config(args: argparse.Namespace, *, draft_max: int | None = None, seed: int | None = None,
                      top_alternatives: int = 0) -> GenerationConfig:
    return GenerationConfig(
        draft_max=args.draft_max if draft_max is None else draft_max, max_tokens=args.max_tokens,
        sampling=sampling(args), seed=args.seed if seed is None else seed, top_alternatives=top_alternatives,
        bonus=args.bonus, draft_min=args.draft_min, adaptive=args.draft_adapt, relax_scope=args.relax_scope,
    )
