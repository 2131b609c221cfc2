"""Options shared by every command that runs models, their translation into configs, and the argparse types
that keep hostile command-line values out (issue 17).

Why the types: argparse's ``type=float`` takes ``nan`` and ``inf``, ``type=int`` takes any size, and ``type=str``
takes the lone surrogates Python decodes from argv bytes that are not UTF-8. Each of those later became a
traceback (numpy refusing a negative seed, ``str.encode`` in the tokenizer, ``print`` to a strict stdout) or a
NaN in a result. Every value is checked here, at parse time, so bad input is one line and exit code 2 before
any model loads. A type raises ``argparse.ArgumentTypeError``; a message that starts with the option's name is
shown as is (``relaxtui.cli._Parser`` drops argparse's "argument --x:" prefix), the others after that prefix.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from relaxtui.decoding.drafters import drafter_kind
from relaxtui.decoding.loop import BONUS_POLICIES, MAX_DRAFT, GenerationConfig
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.session import DRAFT_KINDS, ModelOptions

INT32_MAX = 2**31 - 1  # the C int llama.cpp takes for sizes, counts and threads
SEED_LIMIT = 2**63  # seeds are 0 <= seed < 2**63: numpy's SeedSequence refuses negatives; int64 everywhere else
_SHOWN = 40  # characters of a bad value quoted in a message


def _quoted(text: str) -> str:
    """A bad value as the message shows it: ASCII-escaped (lone surrogates too) and cut short."""
    return ascii(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _number(text: str, name: str | None = None) -> float:
    subject = f"{name} must be" if name else "must be"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{subject} a number (got {_quoted(text)})") from None
    if not math.isfinite(value):  # float() reads "nan", "inf", "-Infinity" and overflows "1e999" to inf
        raise argparse.ArgumentTypeError(f"{subject} a finite number (got {_quoted(text)})")
    return value


def _whole_number(text: str, name: str | None = None) -> int:
    try:
        return int(text)
    except ValueError:  # also Python's limit on int-string conversion (a 5000-digit argument)
        subject = f"{name} must be" if name else "must be"
        raise argparse.ArgumentTypeError(f"{subject} a whole number (got {_quoted(text)})") from None


def finite_float(text: str) -> float:
    """Any finite float: refuses ``nan``, ``inf``, ``-inf`` and values that overflow to infinity (``1e999``)."""
    return _number(text)


def float_option(name: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
                 high_open: bool = False) -> Callable[[str], float]:
    """A finite float in an interval (``low``/``high`` None = unbounded on that side; ``*_open`` excludes the
    bound); the message names the option: ``--top-p must be in (0, 1] (got 2)``."""
    def parse(text: str) -> float:
        value = _number(text, name)
        below = low is not None and (value <= low if low_open else value < low)
        above = high is not None and (value >= high if high_open else value > high)
        if below or above:
            if high is None:
                span = f"{'>' if low_open else '>='} {low:g}"
            elif low is None:
                span = f"{'<' if high_open else '<='} {high:g}"
            else:
                span = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise argparse.ArgumentTypeError(f"{name} must be {span} (got {text.strip()[:_SHOWN]})")
        return value

    parse.__name__ = "number"
    return parse


def int_option(name: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``high`` None: up to INT32_MAX, llama.cpp's C int); the message names the
    option: ``--parallel must be >= 1 (got 0)``, ``--draft-max must be in 1..16 (got 17)``."""
    cap = INT32_MAX if high is None else high

    def parse(text: str) -> int:
        value = _whole_number(text, name)
        if not low <= value <= cap:
            span = f"in {low}..{high}" if high is not None else (f">= {low}" if value < low else f"<= {cap}")
            raise argparse.ArgumentTypeError(f"{name} must be {span} (got {value})")
        return value

    parse.__name__ = "whole number"
    return parse


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


def seed(text: str) -> int:
    """A random seed: a whole number with 0 <= seed < 2**63. Negative seeds are refused here because numpy's
    SeedSequence raises on them mid-run (llama.cpp's ``-1`` = random has no place in reproducible runs)."""
    value = _whole_number(text, "--seed")
    if value < 0:
        raise argparse.ArgumentTypeError(f"--seed must be >= 0 (got {value}): runs are reproducible, there is no "
                                         "llama.cpp-style random seed -1")
    if value >= SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"--seed must be < 2**63 (got {value})")
    return value


def utf8_text(text: str) -> str:
    """Text that is valid UTF-8. Python decodes argv bytes that are not UTF-8 into lone surrogates
    (surrogateescape), which the tokenizer, llama.cpp's path argument and a UTF-8 stdout cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise argparse.ArgumentTypeError(f"is not valid UTF-8 text ({byte} at character {exc.start})") from None
    return text


def utf8_path(text: str) -> Path:
    """A path whose name is valid UTF-8 (see ``utf8_text``: it is printed and handed to llama.cpp as UTF-8)."""
    return Path(utf8_text(text))


def draft_length(text: str) -> int | str:
    """A draft length in 0..MAX_DRAFT, or the word ``auto``."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid draft length: {_quoted(text)} (a whole number or auto)") from None
    if not 0 <= value <= MAX_DRAFT:
        raise argparse.ArgumentTypeError(f"--draft-max must be in 0..{MAX_DRAFT} (got {value})")
    return value


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--verifier", "-m", type=utf8_text, default=DEFAULT_VERIFIER,
                       help="GGUF path or name in ggml_models/")
    group.add_argument("--drafter", "-md", type=utf8_text, default=DEFAULT_DRAFTER,
                       help="GGUF path or name in ggml_models/ ('none' = verifier alone)")
    group.add_argument("--draft-kind", type=utf8_text, default="model", help=f"drafter kind: {', '.join(DRAFT_KINDS)}")
    group.add_argument("--ngram-min", type=int_option("--ngram-min", 1), default=1,
                       help="smallest n-gram the ngram drafter matches")
    group.add_argument("--ngram-max", type=int_option("--ngram-max", 1), default=3,
                       help="largest n-gram the ngram drafter matches")
    group.add_argument("--ctx-size", "-c", type=int_option("--ctx-size", 1), default=4096,
                       help="context window, in tokens (default 4096)")
    group.add_argument("--threads", "-t", type=int_option("--threads", 1), default=None,
                       help="CPU threads for llama.cpp (default: every core)")
    group.add_argument("--gpu-layers", "-ngl", type=int_option("--gpu-layers", -1), default=0,
                       help="layers to offload (-1 = all)")


def add_parallel_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--parallel", type=int_option("--parallel", 1), default=1, metavar="K",
                        help="work units run at once, one sequence each in one context per model (--ctx-size is "
                             "per sequence; default 1)")


def add_sampling_options(parser: argparse.ArgumentParser, *, temperature: float = 0.6) -> None:
    group = parser.add_argument_group("sampling (applied to both models)")
    group.add_argument("--temperature", "--temp", type=float_option("--temperature", low=0.0), default=temperature,
                       help=f"sampling temperature (0 = greedy; default {temperature:g})")
    group.add_argument("--top-k", type=int_option("--top-k", 0), default=20,
                       help="keep the k likeliest tokens (0 = off)")
    group.add_argument("--top-p", type=float_option("--top-p", low=0.0, high=1.0, low_open=True), default=0.95,
                       help="nucleus mass to keep (1 = off)")
    group.add_argument("--seed", type=seed, default=0,
                       help="random seed, 0 <= seed < 2**63 (drafting and acceptance draws)")


def add_draft_options(parser: argparse.ArgumentParser, *, with_length: bool = True) -> None:
    group = parser.add_argument_group("speculation")
    if with_length:
        group.add_argument("--draft-max", "--spec-draft-n-max", "--draft", type=draft_length, default=3,
                           dest="draft_max", help="draft length N, or `auto`: the N this machine's costs and a short "
                           "acceptance estimate predict fastest (0 when speculation does not pay)")
    group.add_argument("--draft-min", type=int_option("--draft-min", 0), default=0,
                       help="drop drafts shorter than this")
    group.add_argument("--draft-p-min", type=float_option("--draft-p-min", low=0.0, high=1.0, high_open=True),
                       default=0.0, help="stop drafting when the drafter's top probability is below this")
    group.add_argument("--draft-adapt", action="store_true", help="grow/shrink N from recent acceptance")
    group.add_argument("--bonus", choices=BONUS_POLICIES, default="auto",
                       help="bonus token from p (target), the rule's target at N+1 (relaxed), or the rule's policy")


def model_options(args: argparse.Namespace, *, speculative: bool = True) -> ModelOptions:
    drafter = args.drafter if speculative and str(args.drafter).lower() != "none" else None
    own = drafter_kind(args.draft_kind).own_name  # a kind that drafts from the verifier itself without --drafter
    if own is not None and drafter == DEFAULT_DRAFTER:
        drafter = own
    return ModelOptions(args.verifier, drafter, args.ctx_size, args.threads, args.gpu_layers,
                        draft_kind=args.draft_kind, ngram_min=args.ngram_min, ngram_max=args.ngram_max,
                        draft_p_min=getattr(args, "draft_p_min", 0.0), parallel=getattr(args, "parallel", 1),
                        draft_max=_longest_draft(getattr(args, "draft_max", getattr(args, "n_max", None))))


def _longest_draft(value: object) -> int:
    """The longest N a run's --draft-max asks for (a list in an eval grid; `auto` and none: the default room)."""
    values = value if isinstance(value, list | tuple) else [value]
    lengths = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    default = ModelOptions.draft_max
    return max([*lengths, *([default] if len(lengths) < len(values) or not lengths else [])])


def sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(args.temperature, args.top_k, args.top_p)


def generation_config(args: argparse.Namespace, *, draft_max: int | None = None, seed: int | None = None,
                      top_alternatives: int = 0) -> GenerationConfig:
    return GenerationConfig(
        draft_max=args.draft_max if draft_max is None else draft_max, max_tokens=args.max_tokens,
        sampling=sampling(args), seed=args.seed if seed is None else seed, top_alternatives=top_alternatives,
        bonus=args.bonus, draft_min=args.draft_min, adaptive=args.draft_adapt,
    )
