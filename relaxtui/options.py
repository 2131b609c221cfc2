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

Text settings are in the table too (issue 45): a choice of words (``checks.Choice``: the drafter kind, the cut, the
bonus), the rule as the rules registry checks it (``rules.RuleSpec``: ``NAME``, ``NAME:KNOB``, ``NAME:KNOB:KNOB2``)
and on/off switches (``checks.Flag``: ``--draft-adapt``). So the table stands above the rules and the drafter factory
(it lists their names) and below everything that reads settings: nothing under ``decoding/``, ``rules/``, ``engine/``
or ``costmodel/`` imports it (tests/test_layers.py); those name a setting by its name and check it with
``relaxtui.checks``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from relaxtui import checks
from relaxtui.checks import ArgType, BadValue, quoted
from relaxtui.decoding.drafters import DRAFT_KINDS
from relaxtui.errors import UserError
from relaxtui.rules import RULE_SPEC, RULES

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
        whole-number setting also takes as they are (``--draft-max auto``); a refusal names the flag. An on/off
        switch has none (its flag takes no value)."""
        chosen = check or self.check
        if isinstance(chosen, checks.Flag):
            raise TypeError(f"{self.flag}: an on/off setting takes no value")
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
        help from the table unless the command states its own; ``kwargs`` go to argparse (``nargs``, ``metavar``).
        An on/off setting is a switch (``store_true``); a choice shows its words as argparse shows ``choices``."""
        chosen = check or self.check
        common: dict[str, Any] = {"dest": self.name, "default": self.default if default is _TABLE else default,
                                  "help": self.help if help is None else help}
        if isinstance(chosen, checks.Flag):
            return parser.add_argument(self.flag, *self.aliases, *extra, action="store_true", **common, **kwargs)
        if isinstance(chosen, checks.Choice):
            kwargs.setdefault("metavar", chosen.metavar)
        return parser.add_argument(self.flag, *self.aliases, *extra, type=self.option(check, words=words), **common,
                                   **kwargs)

    def read(self, text: str, name: str | None = None) -> Any:
        """A value typed as text somewhere other than a command line (the chat's settings panel): read as the value a
        file would hold (a whole number, a number, the text) and checked by the table's check, which may take what a
        flag does not (a cascade's ``-inf`` knob); a refusal names the setting as ``name`` (its own name when None).
        Empty: None."""
        text, name = text.strip(), name or self.name
        if not text:
            return None
        check = self.check.inner if isinstance(self.check, checks.Maybe) else self.check
        if isinstance(check, checks.Flag):
            raise TypeError(f"{self.name}: an on/off setting is not typed as text")
        value: object = text
        try:
            if isinstance(check, checks.Whole):
                value = int(text)
            elif isinstance(check, checks.Number):
                value = float(text)
        except ValueError:  # also Python's limit on int-string conversion
            kind = "whole number" if isinstance(check, checks.Whole) else "number"
            raise BadValue(name, f"must be a {kind} (got {quoted(text)})") from None
        if isinstance(check, checks.Number):
            return check.check(value, name, quoted(text)[1:-1])
        return check.check(value, name)


# A list of draft lengths to speculate with (eval's and tune's grids, bench's N = 1..this): N = 0 is the verifier
# alone, which those commands run on their own (--no-spec, bench's baseline); the top is the table's.
SPECULATIVE_N = checks.DRAFT_MAX.narrowed(low=1)

RULE = Setting("rule", RULE_SPEC, "strict", "acceptance rule: NAME, NAME:KNOB or NAME:KNOB:KNOB2 (see `relaxtui "
               "rules list`)", "--rule", field="speculative.rule")
_OWN_KNOBS = ", ".join(f"{name} {cls.knob_default:g}" for name, cls in RULES.items() if cls.knob_default is not None)
ALPHA = Setting("alpha", checks.KNOB, None, f"the rule's knob (default: the rule's own where it has one: {_OWN_KNOBS}; "
                "every other relaxed rule needs one; ranges: `relaxtui rules list`)", "--alpha",
                field="speculative.alpha")
RELAX_SCOPE = Setting("relax_scope", checks.RELAX_SCOPE, "all", "where a relaxed rule relaxes: all; thinking (only "
                      "inside <think>...</think>: the answer stays strict's given the reasoning); answer (only outside "
                      "it); strict elsewhere (docs/method.md#relaxation-scoped-to-thinking)", "--relax-scope",
                      field="speculative.relax_scope")
DRAFT_MAX = Setting("draft_max", checks.DRAFT_MAX, 3, "draft length N (0 = verifier alone)", "--draft-max",
                    ("--spec-draft-n-max",), field="speculative.draft_max")
DRAFT_KIND = Setting("draft_kind", checks.Choice(DRAFT_KINDS), "model",
                     f"drafter kind: {', '.join(DRAFT_KINDS)} (a kind that opens no model file needs no --drafter)",
                     "--draft-kind", field="speculative.draft_kind")
DRAFT_CUT = Setting("draft_cut", checks.DRAFT_CUT, "auto", "priced: verify only the part of each draft that pays for "
                    "its verify width on this machine (its verify costs measured once, cached); none: every draft "
                    "whole; auto: priced for a drafter that runs no model (n-gram, suffix), none for a model or MTP "
                    "drafter (docs/method.md#priced-drafts)", "--draft-cut")
BONUS = Setting("bonus", checks.BONUS, "auto", "bonus token from p (target), the rule's target at N+1 (relaxed), or "
                "the rule's policy (auto)", "--bonus")
DRAFT_ADAPT = Setting("draft_adapt", checks.FLAG, False, "grow/shrink N from recent acceptance", "--draft-adapt")
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
"""What shapes a drafter that opens no model: each kind reads the ones its ``DrafterKind.reads`` names (the factory
checks them by name with ``checks.DRAFTER``, the same checks)."""

SETTINGS: dict[str, Setting] = {s.name: s for s in (
    RULE, ALPHA, DRAFT_MAX, DRAFT_KIND, RELAX_SCOPE, TEMPERATURE, TOP_K, TOP_P, SEED, MAX_TOKENS, DRAFT_MIN,
    DRAFT_P_MIN, DRAFT_CUT, BONUS, DRAFT_ADAPT, CTX_SIZE, THREADS, GPU_LAYERS, PARALLEL, *DRAFTER_SETTINGS)}
SPECULATIVE = tuple(s for s in SETTINGS.values() if (s.field or "").startswith("speculative."))
"""The request extension's fields (``"speculative": {...}``), in the table's order."""


NO_DRAFTER = "none"  # who drafts when nothing does: the verifier alone (a request's draft_kind, the chat's drafter)


@dataclass(frozen=True)
class Speculative:
    """The speculative settings a server request and a chat turn share: the rule and its knob, where it relaxes, the
    draft length, and who drafts (``none``: the verifier alone; a drafter kind; in the chat's drafter switch also a
    model file). A request's ``speculative`` object and a saved chat's ``settings`` carry them (``chat.ChatSettings``
    adds the sampling and the budget of a turn); each field reads the check of its entry in the table."""

    rule: str = RULE.default
    knob: float | None = ALPHA.default
    draft_max: int = DRAFT_MAX.default
    drafter: str = DRAFT_KIND.default
    relax_scope: str = RELAX_SCOPE.default  # where the rule relaxes (strict elsewhere)
    CHECKS: ClassVar[dict[str, checks.Check]] = {
        "rule": RULE.check, "knob": ALPHA.check, "draft_max": DRAFT_MAX.check, "drafter": checks.TEXT,
        "relax_scope": RELAX_SCOPE.check}
    """Each field's check (a subclass adds its own fields'); tests walk it against the fields."""

    @property
    def drafts(self) -> bool:
        """Whether a turn with these settings speculates at all."""
        return self.drafter != NO_DRAFTER and self.draft_max > 0

    def checked(self, where: str = "") -> Any:
        """Itself, once every field has passed its check (the one its flag uses), each refusal naming the field as
        ``{where}{field}`` (``settings.seed must be >= 0 (got -1)``)."""
        for field in fields(self):
            self.CHECKS[field.name].check(getattr(self, field.name), f"{where}{field.name}")
        return self


def as_flag(exc: UserError) -> UserError:
    """A lower layer's refusal as the command line says it: a setting the table knows spelled as its flag (any other
    error as it is)."""
    if not isinstance(exc, BadValue):
        return exc
    setting = SETTINGS.get(exc.name)
    return exc.spelled(exc.name if setting is None else setting.flag, flag_of)


def flag_of(name: str) -> str:
    """The flag that sets setting ``name`` (the name itself for one the table does not know)."""
    setting = SETTINGS.get(name)
    return setting.flag if setting is not None else name


def field_of(name: str) -> str:
    """The request field that carries setting ``name`` (the name itself for one the table does not know)."""
    setting = SETTINGS.get(name)
    return setting.request_name if setting is not None else name
