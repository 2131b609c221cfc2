"""One check per setting, shared by its command-line flag and by every file that carries it (issue 34).

Why: a setting reaches relaxtui by two roads, a flag (``chat --seed -1``) and a file (a saved chat's
``settings.seed``, a run folder's manifest). Checked twice by two pieces of code, the two drift apart: the flag
refused seed -1 while a saved chat's seed -1 opened the TUI and failed in numpy mid-reply. Here each setting is
one object: ``check(value, name)`` validates a value already parsed (a JSON number, a dataclass field), and
``option(name)`` is the argparse type built on that same check, so the two roads cannot disagree. A refusal is a
:class:`BadValue` (a UserError: one line, exit code 2) that names the setting as the road spells it
(``--seed must be >= 0 (got -1)``, ``settings.seed must be >= 0 (got -1)``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from relaxtui.errors import UserError

INT32_MAX = 2**31 - 1  # the C int llama.cpp takes for sizes, counts and threads
SEED_LIMIT = 2**63  # seeds are 0 <= seed < 2**63: numpy's SeedSequence refuses negatives; int64 everywhere else
MAX_DRAFT = 64  # the longest draft a round verifies (an engine context reserves its output rows for this many + 1)
# Drafter sizes (issue 47: --ngram-max 2147483647 built one index per size and died in a MemoryError)
MAX_NGRAM = 1024  # llama.cpp's bound on every n-gram size it takes (common/arg.cpp, --spec-ngram-*-size-n/m, -mod-n-*)
MAX_LOOKUP_NGRAM = 64  # prompt lookup keeps one index per size ngram_min..ngram_max (~150 bytes a token each)
MAX_NGRAM_COUNT = 16380  # llama.cpp's COMMON_NGRAM_MAX_VALUE_COUNT: a key's counts stop there, a higher min_hits never
MAX_SUFFIX_DEPTH = 1024  # SuffixDecoding's default is 64; each appended token walks up to depth x (1 + factor) states
MIN_TEMPERATURE = 1e-5  # below this (and above 0) logits / T overflow to inf and every draw is NaN: vLLM's epsilon
_SHOWN = 40  # characters of a bad value quoted in a message
T = TypeVar("T")


class BadValue(UserError):
    """A setting's value out of its range or of the wrong kind. The message is ``name`` then ``problem``: ``name`` is
    the setting as the road that carried it spells it (``--seed``, ``settings.seed``), or as the option table names
    it (``seed``, relaxtui.options) when a lower layer refuses it; a face then puts its own spelling in front of the
    same ``problem`` (:meth:`spelled`: the flag on the command line, the request field in the server). A problem that
    advises another setting names it as ``{setting}`` and lists it in ``mentions`` (``lower {parallel} or
    {ctx_size}``): shown by its name here, by each face's spelling after :meth:`spelled`."""

    def __init__(self, name: str, problem: str, mentions: Iterable[str] | Mapping[str, str] = ()) -> None:
        spelling = dict(mentions) if isinstance(mentions, Mapping) else {setting: setting for setting in mentions}
        shown = problem
        for setting, spelled in spelling.items():
            shown = shown.replace("{" + setting + "}", spelled)
        super().__init__(f"{name} {shown}")
        self.name, self.problem, self.template, self.mentions = name, shown, problem, spelling

    def __reduce__(self) -> tuple[type[BadValue], tuple[str, str, dict[str, str]]]:  # pickled (Ray) whole
        return type(self), (self.name, self.template, self.mentions)

    def spelled(self, name: str, spell: Callable[[str], str] | None = None) -> BadValue:
        """The same refusal with the setting spelled as ``name`` and each setting it mentions as ``spell`` says."""
        return BadValue(name, self.template, {setting: (spell or str)(setting) for setting in self.mentions})


def quoted(text: str) -> str:
    """A bad value as a message shows it: ASCII-escaped (lone surrogates too) and cut short."""
    return ascii(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _shown(value: object) -> str:
    return quoted(value) if isinstance(value, str) else repr(value)[:_SHOWN]


class ArgType(Generic[T]):
    """An argparse type: ``parse`` (text -> value; a refusal is an ArgumentTypeError naming the option) and the
    ``check`` it applies, which a test compares with a file reader's; ``__name__`` is what argparse calls the type in
    its messages."""

    def __init__(self, parse: Callable[[str], T], name: str, check: Check) -> None:
        self.parse, self.__name__, self.check = parse, name, check

    def __call__(self, text: str) -> T:
        return self.parse(text)


class Whole:
    """A whole number in ``low..high`` (``high`` None: up to INT32_MAX, llama.cpp's C int); bools are not numbers."""


    def __init__(self, low: int, high: int | None = None) -> None:
        self.low, self.high = low, high
        self.wider: Whole | None = None  # the range this one was narrowed from (see ``narrowed``)

    @property
    def cap(self) -> int:
        return INT32_MAX if self.high is None else self.high

    def narrowed(self, low: int | None = None, high: int | None = None) -> Whole:
        """A command's narrower range, stated from this one's bounds and never wider (eval's list of N starts at 1:
        N = 0 is ``--no-spec`` there); ``wider`` keeps where it came from, for the tests that compare faces."""
        narrow = Whole(self.low if low is None else low, self.high if high is None else high)
        if narrow.low < self.low or narrow.cap > self.cap or narrow.low > narrow.cap:
            raise ValueError(f"{narrow.low}..{narrow.cap} is not inside {self.low}..{self.cap}")
        narrow.wider = self
        return narrow

    def check(self, value: object, name: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadValue(name, f"must be a whole number (got {_shown(value)})")
        if not self.low <= value <= self.cap:
            raise BadValue(name, f"must be {self.span(value)} (got {_shown(value)})")
        return value

    def span(self, value: int) -> str:
        if self.high is not None:
            return f"in {self.low}..{self.high}"
        return f">= {self.low}" if value < self.low else f"<= {self.cap}"

    def option(self, name: str) -> ArgType[int]:
        """The argparse type: text -> int, then :meth:`check`; the message names the option."""
        def parse(text: str) -> int:
            try:
                value = int(text)
            except ValueError:  # also Python's limit on int-string conversion (a 5000-digit argument)
                raise argparse.ArgumentTypeError(f"{name} must be a whole number (got {quoted(text)})") from None
            try:
                return self.check(value, name)
            except BadValue as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        return ArgType(parse, "whole number", self)


class Seed(Whole):
    """0 <= seed < 2**63. Negative seeds are refused because numpy's SeedSequence raises on them mid-run
    (llama.cpp's ``-1`` = random has no place in reproducible runs)."""

    def __init__(self) -> None:
        super().__init__(0, SEED_LIMIT - 1)

    def span(self, value: int) -> str:
        if value < 0:
            return ">= 0"
        return "< 2**63"

    def check(self, value: object, name: str) -> int:
        try:
            return super().check(value, name)
        except BadValue as exc:
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise BadValue(name, f"{exc.problem}: runs are reproducible, there is no llama.cpp-style random seed "
                                     "-1") from None
            raise


class Number:
    """A finite number in an interval (``low``/``high`` None = unbounded; ``*_open`` excludes the bound); an int
    is taken as a float. ``minus_inf``: -infinity is a value too (a cascade rule's strict knob)."""


    def __init__(self, *, low: float | None = None, high: float | None = None, low_open: bool = False,
                 high_open: bool = False, minus_inf: bool = False,
                 extra: Callable[[float], str | None] | None = None) -> None:
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open
        self.minus_inf, self.extra = minus_inf, extra

    def check(self, value: object, name: str, shown: str | None = None) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise BadValue(name, f"must be a number (got {_shown(value)})")
        try:
            number = float(value)
        except OverflowError:  # a JSON integer past any float
            number = math.inf if value > 0 else -math.inf
        shown = _shown(value) if shown is None else shown
        if self.minus_inf and number == -math.inf:
            return number
        if not math.isfinite(number):
            raise BadValue(name, f"must be a finite number (got {shown})")
        below = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        above = self.high is not None and (number >= self.high if self.high_open else number > self.high)
        if below or above:
            raise BadValue(name, f"must be {self.span()} (got {shown})")
        if self.extra is not None and (problem := self.extra(number)):
            raise BadValue(name, problem)
        return number

    def span(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"

    def option(self, name: str | None = None) -> ArgType[float]:
        """The argparse type: text -> float, then :meth:`check` (a flag is always finite: ``-inf`` is refused
        even where a file may hold it)."""
        def parse(text: str) -> float:
            subject = f"{name} must be" if name else "must be"
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{subject} a number (got {quoted(text)})") from None
            if not math.isfinite(value):  # float() reads "nan", "inf", "-Infinity" and overflows "1e999" to inf
                raise argparse.ArgumentTypeError(f"{subject} a finite number (got {quoted(text)})")
            try:
                return self.check(value, name or "", text.strip()[:_SHOWN])
            except BadValue as exc:
                raise argparse.ArgumentTypeError(str(exc).strip()) from None

        return ArgType(parse, "number", self)


def utf8_problem(text: str) -> str | None:
    """Why ``text`` is not valid UTF-8 (Python decodes argv bytes that are not into lone surrogates, and a JSON
    ``\\udcff`` escape yields one too), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        return f"is not valid UTF-8 text ({byte} at character {exc.start})"
    return None


def _word_option(check: Text | Choice, name: str, type_name: str) -> ArgType[str]:
    """The argparse type of a text setting: the text as typed, then ``check``; the message names the option."""
    def parse(text: str) -> str:
        try:
            return check.check(text, name)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return ArgType(parse, type_name, check)


class Text:
    """Text that is valid UTF-8: the tokenizer, llama.cpp's path argument and a UTF-8 stdout cannot encode
    anything else. A subclass checks what the text must name (``rules.RuleSpec``: a rule and its knobs)."""

    def check(self, value: object, name: str) -> str:
        if not isinstance(value, str):
            raise BadValue(name, f"must be a string (got {_shown(value)})")
        if problem := utf8_problem(value):
            raise BadValue(name, problem)
        return value

    def option(self, name: str) -> ArgType[str]:
        """The argparse type: the text, then :meth:`check`."""
        return _word_option(self, name, "text")


class Choice:
    """One word of a fixed list (a policy, a kind, a scope): the flag, the request field and a saved file take the
    same words, in the same order (the first is not necessarily the default: the option table says that)."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = tuple(values)

    def check(self, value: object, name: str) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise BadValue(name, f"must be one of {', '.join(self.values)} (got {_shown(value)})")
        return value

    def option(self, name: str) -> ArgType[str]:
        """The argparse type: one of the words (anything else names the option and lists them)."""
        return _word_option(self, name, "choice")

    @property
    def metavar(self) -> str:
        """How --help shows the words, as argparse shows a ``choices`` list."""
        return "{" + ",".join(self.values) + "}"


class Flag:
    """true or false (a flag's on/off, a saved chat's thinking)."""

    def check(self, value: object, name: str) -> bool:
        if not isinstance(value, bool):
            raise BadValue(name, f"must be true or false (got {_shown(value)})")
        return value


class Maybe:
    """``inner`` or None (a setting whose absence means "the default")."""

    def __init__(self, inner: Whole | Number | Text | Flag) -> None:
        self.inner = inner

    def check(self, value: object, name: str) -> Any:
        return None if value is None else self.inner.check(value, name)

    def option(self, name: str) -> ArgType[Any]:
        """The inner setting's argparse type (a flag that is not given is the None)."""
        if isinstance(self.inner, (Whole, Number, Text)):
            return self.inner.option(name)
        raise TypeError(f"{name}: no flag type for {type(self.inner).__name__}")


Check = Whole | Number | Text | Flag | Maybe | Choice


def _temperature_floor(value: float) -> str | None:
    if 0 < value < MIN_TEMPERATURE:
        return f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g} (got {value:g}: logits / T would overflow)"
    return None


# The settings a flag and a file share (the flag's name is given where the flag is added).
TEXT = Text()
SEED = Seed()
TEMPERATURE = Number(low=0.0, extra=_temperature_floor)
TOP_K = Whole(0)
TOP_P = Number(low=0.0, high=1.0, low_open=True)
KNOB = Maybe(Number(minus_inf=True))  # --alpha is finite; NAME:-inf (cascades' strict) and a file may be -inf
MAX_TOKENS = Whole(1)
DRAFT_MAX = Whole(0, MAX_DRAFT)  # N; 0 = verifier alone
DRAFT_P_MIN = Number(low=0.0, high=1.0, high_open=True)
CTX_SIZE = Whole(16)  # tokens; the smallest context relaxtui opens (engine/llama.py refuses less)
THREADS = Maybe(Whole(1))
GPU_LAYERS = Whole(-1)
PARALLEL = Whole(1)
LOOKUP_NGRAM = Whole(1, MAX_LOOKUP_NGRAM)  # prompt lookup's smallest and largest n-gram
NGRAM_MIN_HITS = Whole(1, MAX_NGRAM_COUNT)
SUFFIX_DEPTH = Whole(1, MAX_SUFFIX_DEPTH)
NGRAM_SIZE = Maybe(Whole(1, MAX_NGRAM))  # an n-gram kind's key or longest draft (None: the kind's own)
NGRAM_MOD_MIN = Maybe(Whole(0, MAX_NGRAM))
SUFFIX_FACTOR = Number(low=0.0, high=64.0, low_open=True)
SUFFIX_MIN_PROB = Number(low=0.0, high=1.0)
FLAG = Flag()
THINKING = FLAG
DRAFT_MIN = Whole(0)
DRAFT_CUT = Choice(("auto", "priced", "none"))  # priced drafting's policy (docs/method.md#priced-drafts)
BONUS = Choice(("auto", "target", "relaxed"))  # the bonus token from: the rule's policy, p, the rule's target
RELAX_SCOPE = Choice(("all", "thinking", "answer"))  # where a relaxed rule judges: everywhere, inside <think>…</think>
# only, outside it only (docs/method.md#relaxation-scoped-to-thinking)
# What shapes a drafter that opens no model, by setting name: the factory checks its options with these, and the
# option table's entries (relaxtui.options.DRAFTER_SETTINGS) are these names with these checks
DRAFTER: dict[str, Check] = {
    "ngram_min": LOOKUP_NGRAM, "ngram_max": LOOKUP_NGRAM, "ngram_size_n": NGRAM_SIZE, "ngram_size_m": NGRAM_SIZE,
    "ngram_min_hits": NGRAM_MIN_HITS, "ngram_mod_n_min": NGRAM_MOD_MIN, "suffix_depth": SUFFIX_DEPTH,
    "suffix_factor": SUFFIX_FACTOR, "suffix_min_prob": SUFFIX_MIN_PROB}

