"""The option table: every setting a person gives relaxtui, once — name, check (type and range), default, help —
read by each command's flags (argparse) and by the server's request reader (issue 32).

Why: ``--draft-max`` was defined in six parsers with five ranges, reconciled afterwards with ``getattr`` and checked
again up to four times, and the server rewrote the flag names lower layers wrote into their messages
(``.replace("--alpha", "alpha")``). Here a setting is one :class:`Setting`. A lower layer's message names the
setting (``draft_max must be in 0..64 (got 99)``, a :class:`~relaxtui.checks.BadValue`) and each face puts its own
spelling in front of the same problem: the command line its flag (``--draft-max``: the argparse types, and
:func:`as_flag` for what a lower layer refuses), the server its request field (``speculative.draft_max``:
``serve/body.get_setting``), a saved chat ``settings.draft_max`` (tui/save.py). A command that needs a narrower range
states it from the table's bounds (:data:`SPECULATIVE_N`), never as a literal.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relaxtui import checks
from relaxtui.checks import ArgType, BadValue, quoted
from relaxtui.errors import UserError

_TABLE: Any = object()  # Setting.add's "the table's own default"


@dataclass(frozen=True)
class Setting:
    """One setting: what messages and files call it, its check, default and help, and each face's spelling."""

    name: str  # what messages, saved chats and run manifests call it, and the argparse dest: "draft_max"
    check: checks.Check  # its type and range (relaxtui.checks: the one a file's reader calls too)
    default: Any  # when none is given (a command may state its own: bench samples greedily)
    help: str
    flag: str  # the command line's spelling: "--draft-max"
    aliases: tuple[str, ...] = ()  # other flags for it ("--spec-draft-n-max" as llama-server spells it, "-n")
    field: str | None = None  # the server's request field ("speculative.draft_max"); None: not set per request

    @property
    def request_name(self) -> str:
        """How the server names it in an error: its request field (its name where it has none)."""
        return self.field or self.name

    @property
    def key(self) -> str:
        """The request field's key inside the JSON object that holds it (``draft_max`` in ``speculative``)."""
        return (self.field or self.name).rpartition(".")[2]

    def option(self, check: checks.Check | None = None, *, words: Sequence[str] = ()) -> ArgType[Any]:
        """The argparse type: the table's check, or a narrower one a command states from it, plus ``words`` a
        whole-number setting also takes as they are (``--draft-max auto``); a refusal names the flag."""
        chosen = check or self.check
        if isinstance(chosen, (checks.Text, checks.Flag)):
            raise TypeError(f"{self.flag}: a {type(chosen).__name__} setting has no argparse type of the table's")
        parse = chosen.option(self.flag)
        if not words:
            return parse
        either = " or ".join(words)

        def parse_or_word(text: str) -> Any:
            if text in words:
                return text
            try:
                int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{self.flag} must be a whole number or {either} "
                                                 f"(got {quoted(text)})") from None
            return parse(text)

        return ArgType(parse_or_word, f"whole number or {either}", parse.check)

    def add(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: Any = _TABLE,
            help: str | None = None, check: checks.Check | None = None, words: Sequence[str] = (),
            extra: Sequence[str] = (), **kwargs: Any) -> argparse.Action:
        """Add this setting's flag to ``parser``: its spellings (plus a command's ``extra`` ones), type, default and
        help from the table unless the command states its own; ``kwargs`` go to argparse (``nargs``, ``metavar``)."""
        return parser.add_argument(self.flag, *self.aliases, *extra, dest=self.name,
                                   type=self.option(check, words=words),
                                   default=self.default if default is _TABLE else default,
                                   help=self.help if help is None else help, **kwargs)


# A list of draft lengths to speculate with (eval's and tune's grids, bench's N = 1..this): N = 0 is the verifier
# alone, which those commands run on their own (--no-spec, bench's baseline); the top is the table's.
SPECULATIVE_N = checks.DRAFT_MAX.narrowed(low=1)

RULE = Setting("rule", checks.TEXT, "strict", "acceptance rule (NAME or NAME:KNOB; see `relaxtui rules list`)",
               "--rule", field="speculative.rule")
ALPHA = Setting("alpha", checks.KNOB, None, "the rule's knob", "--alpha", field="speculative.alpha")
DRAFT_MAX = Setting("draft_max", checks.DRAFT_MAX, 3, "draft length N (0 = verifier alone)", "--draft-max",
                    ("--spec-draft-n-max",), field="speculative.draft_max")
DRAFT_KIND = Setting("draft_kind", checks.TEXT, "model", "drafter kind", "--draft-kind",
                     field="speculative.draft_kind")
TEMPERATURE = Setting("temperature", checks.TEMPERATURE, 0.6, "sampling temperature (0 = greedy)", "--temperature",
                      ("--temp",), field="temperature")
TOP_K = Setting("top_k", checks.TOP_K, 20, "keep the k likeliest tokens (0 = off)", "--top-k", field="top_k")
TOP_P = Setting("top_p", checks.TOP_P, 0.95, "nucleus mass to keep (1 = off)", "--top-p", field="top_p")
SEED = Setting("seed", checks.SEED, 0, "random seed, 0 <= seed < 2**63 (drafting and acceptance draws)", "--seed",
               field="seed")
MAX_TOKENS = Setting("max_tokens", checks.MAX_TOKENS, None, "longest completion, in tokens", "--max-tokens", ("-n",),
                     field="max_tokens")
DRAFT_MIN = Setting("draft_min", checks.DRAFT_MIN, 0, "drop drafts shorter than this", "--draft-min")
DRAFT_P_MIN = Setting("draft_p_min", checks.DRAFT_P_MIN, 0.0,
                      "stop drafting when the drafter's top probability is below this", "--draft-p-min")
CTX_SIZE = Setting("ctx_size", checks.CTX_SIZE, 4096, "context window, in tokens (default 4096)", "--ctx-size",
                   ("-c",))
THREADS = Setting("threads", checks.THREADS, None, "CPU threads for llama.cpp (default: every core)", "--threads",
                  ("-t",))
GPU_LAYERS = Setting("gpu_layers", checks.GPU_LAYERS, 0, "layers to offload (-1 = all)", "--gpu-layers", ("-ngl",))
PARALLEL = Setting("parallel", checks.PARALLEL, 1, "work units run at once, one sequence each in one context per "
                   "model (--ctx-size is per sequence; default 1)", "--parallel")
NGRAM_MIN = Setting("ngram_min", checks.LOOKUP_NGRAM, 1, "smallest n-gram the ngram drafter matches", "--ngram-min")
NGRAM_MAX = Setting("ngram_max", checks.LOOKUP_NGRAM, 3, "largest n-gram the ngram drafter matches", "--ngram-max")
# llama.cpp's n-gram kinds and the suffix drafter (docs/method.md#drafters): one flag each, read by the kinds whose
# DrafterKind.reads name it (llama.cpp spells them per kind: --spec-ngram-simple-size-n, --spec-ngram-mod-n-min, ...)
NGRAM_SIZE_N = Setting("ngram_size_n", checks.NGRAM_SIZE, None, "the key n-gram of ngram-simple, ngram-map, "
                       "ngram-map-k4v and ngram-mod (default: the kind's own, as llama.cpp's: 12, 12, 12, 24)",
                       "--ngram-size-n")
NGRAM_SIZE_M = Setting("ngram_size_m", checks.NGRAM_SIZE, None, "the longest draft of an n-gram kind: the m-gram "
                       "of ngram-simple/-map/-map-k4v, ngram-mod's n_max, ngram-cache's n_draft (default: the kind's "
                       "own: 48, 48, 48, 64, 8); the round's --draft-max caps it too", "--ngram-size-m")
NGRAM_MIN_HITS = Setting("ngram_min_hits", checks.NGRAM_MIN_HITS, 1,
                         "ngram-map-k4v: times a key must recur before it drafts", "--ngram-min-hits")
NGRAM_MOD_N_MIN = Setting("ngram_mod_n_min", checks.NGRAM_MOD_MIN, None, "ngram-mod: drop a draft shorter than "
                          "this (default: llama.cpp's 48, never above the kind's longest draft)", "--ngram-mod-n-min")
SUFFIX_DEPTH = Setting("suffix_depth", checks.SUFFIX_DEPTH, 64, "suffix: the longest context suffix matched, in "
                       "tokens", "--suffix-depth")
SUFFIX_FACTOR = Setting("suffix_factor", checks.SUFFIX_FACTOR, 1.0, "suffix: a match of L tokens drafts at most "
                        "factor x L", "--suffix-factor")
SUFFIX_MIN_PROB = Setting("suffix_min_prob", checks.SUFFIX_MIN_PROB, 0.1, "suffix: stop drafting where the draft's "
                          "estimated probability falls below this", "--suffix-min-prob")
DRAFTER_SETTINGS = (NGRAM_MIN, NGRAM_MAX, NGRAM_SIZE_N, NGRAM_SIZE_M, NGRAM_MIN_HITS, NGRAM_MOD_N_MIN, SUFFIX_DEPTH,
                    SUFFIX_FACTOR, SUFFIX_MIN_PROB)
"""What shapes a drafter that opens no model: each kind reads the ones its ``DrafterKind.reads`` names."""

SETTINGS: dict[str, Setting] = {s.name: s for s in (
    RULE, ALPHA, DRAFT_MAX, DRAFT_KIND, TEMPERATURE, TOP_K, TOP_P, SEED, MAX_TOKENS, DRAFT_MIN, DRAFT_P_MIN, CTX_SIZE,
    THREADS, GPU_LAYERS, PARALLEL, *DRAFTER_SETTINGS)}
SPECULATIVE = tuple(s for s in SETTINGS.values() if (s.field or "").startswith("speculative."))
"""The request extension's fields (``"speculative": {...}``), in the table's order."""


def as_flag(exc: UserError) -> UserError:
    """A lower layer's refusal as the command line says it: a setting the table knows spelled as its flag (any other
    error as it is)."""
    setting = SETTINGS.get(exc.name) if isinstance(exc, BadValue) else None
    return exc.spelled(setting.flag) if isinstance(exc, BadValue) and setting is not None else exc


def field_of(name: str) -> str:
    """The request field that carries setting ``name`` (the name itself for one the table does not know)."""
    setting = SETTINGS.get(name)
    return setting.request_name if setting is not None else name
