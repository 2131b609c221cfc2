"""Regular expressions that come from outside — a task file's ``regex`` answer, a JSON schema's ``pattern`` — run
on RE2, never on Python's ``re``.

Why: ``re`` backtracks, so ``(a+)+$`` against 41 characters never finishes, and the text such a pattern meets
is often the model's own reply: a run would hang while scoring an answer no one wrote. RE2 matches in time
linear in the text and bounds its memory; it refuses the features that need backtracking (backreferences,
lookaround, atomic groups, possessive quantifiers, conditionals), and we refuse them when the file loads, in one
line naming the feature. Patterns written in relaxtui's own code keep ``re``.

Syntax is RE2's (https://github.com/google/re2/wiki/Syntax), close to Python's for everything else: ``(?P<name>…)``
groups, classes, ``\\d``/``\\w``/``\\b`` (ASCII in RE2), ``\\A`` and ``\\z`` (Python's ``\\Z``), and ``$`` matches at
the very end only (Python's also before a final newline) unless ``multiline``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import re2

_SURROGATE = re.compile("[\ud800-\udfff]")  # our own pattern: a class, linear
MAX_PATTERN_CHARS = 4096  # no answer pattern needs more; a bigger one is a file that went wrong
MAX_MEMORY = 8 << 20  # RE2's per-pattern budget: past it the DFA falls back to its (still linear) NFA
FLAG_PREFIXES = {"ignorecase": "i", "multiline": "m", "dotall": "s"}

# What RE2 says when it meets a feature that needs a backtracking engine, and the feature's name for the user.
_REFUSED = (
    ("invalid perl operator: (?=", "a lookahead (?=…)"),
    ("invalid perl operator: (?!", "a negative lookahead (?!…)"),
    ("invalid perl operator: (?<=", "a lookbehind (?<=…)"),
    ("invalid perl operator: (?<!", "a negative lookbehind (?<!…)"),
    ("invalid perl operator: (?>", "an atomic group (?>…)"),
    ("invalid perl operator: (?(", "a conditional group (?(…)…)"),
    ("invalid perl operator: (?P=", "a named backreference (?P=…)"),
    ("invalid perl operator: (?#", "a comment group (?#…)"),
    ("invalid perl operator: (?x", "the verbose flag (?x)"),
    ("bad repetition operator: *+", "a possessive quantifier (*+)"),
    ("bad repetition operator: ++", "a possessive quantifier (++)"),
    ("bad repetition operator: ?+", "a possessive quantifier (?+)"),
    ("invalid escape sequence: \\Z", "\\Z (write \\z for the end of the text)"),
)


class PatternError(ValueError):
    """The pattern cannot run on RE2; the message says why in words a task file's author can act on."""


def _refusal(source: str, message: str) -> str:
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return f"uses a backreference ({message.rsplit(': ', 1)[1]}), which RE2 (linear-time matching) does not support"
    if message.startswith("invalid perl operator: (?P") and "(?P=" in source:
        message = "invalid perl operator: (?P="
    for said, feature in _REFUSED:
        if message.startswith(said):
            return f"uses {feature}, which RE2 (linear-time matching) does not support"
    return f"does not compile ({message})"


class Pattern:
    """An RE2 pattern with the part of ``re``'s surface our readers use; every call is linear in the text.

    A lone surrogate cannot be encoded for RE2, and a reply may hold one: it is read as U+FFFD, one code point for
    one, so every offset a match reports is still an offset in the text given.
    """

    def __init__(self, compiled: Any, source: str) -> None:
        self._compiled = compiled
        self.pattern = source
        self.groups: int = compiled.groups
        self.groupindex: dict[str, int] = dict(compiled.groupindex)

    def search(self, text: str) -> Any:
        """The first match: one linear pass (``finditer`` restarts after every match, quadratic on some texts)."""
        return self._compiled.search(_encodable(text))

    def fullmatch(self, text: str) -> Any:
        return self._compiled.fullmatch(_encodable(text))

    def finditer(self, text: str) -> Iterator[Any]:
        """Every match, left to right: one search per match, each linear in the text after the last one (a pattern
        such as ``x.*y|x`` that must look to the end for every match costs matches x length)."""
        return self._compiled.finditer(_encodable(text))


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def compile_pattern(source: str, flags: tuple[str, ...] = ()) -> Pattern:
    """``source`` compiled by RE2 with the named flags (``ignorecase``, ``multiline``, ``dotall``)."""
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(f"is {len(source)} characters long; at most {MAX_PATTERN_CHARS} are taken")
    unknown = [name for name in flags if name not in FLAG_PREFIXES]
    if unknown:
        raise PatternError(f"flag {unknown[0]!r} is unknown (known: {', '.join(FLAG_PREFIXES)})")
    letters = "".join(dict.fromkeys(FLAG_PREFIXES[name] for name in flags))
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # RE2 would print its own message on stderr beside ours
    try:
        prefix = f"(?{letters})" if letters else ""
        compiled = re2.compile(prefix + source, options)
    except UnicodeEncodeError as exc:
        raise PatternError(f"holds a lone surrogate (U+{ord(source[exc.start]):04X}) at character {exc.start}: "
                           "not text") from None
    except re2.error as exc:
        message = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) \
            else str(exc)
        raise PatternError(_refusal(source, message)) from None
    return Pattern(compiled, source)
