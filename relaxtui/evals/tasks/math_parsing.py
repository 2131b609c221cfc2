"""Answer extraction shared by the math tasks: boxed contents, markers, integers.

Two readings live here: the balanced one MATH-500 uses, and the flat one of the paper's reproduction that AIME
matches for comparability (``flat_boxed_contents``, ``last_signed_integer``, ``plain_integer``).
"""

from __future__ import annotations

import re

MARKERS = re.compile(r"(?:final answer is|final answer|answer)\s*[:：]?\s*(.+)", re.IGNORECASE)
FLAT_BOXED = re.compile(r"\\boxed\{([^{}]+)\}")
SIGNED_DIGITS = re.compile(r"[-+]?\d+")


def boxed_contents(text: str) -> list[str]:
    r"""Every ``\boxed{…}`` (and ``\fbox{…}``) body in order, with nested braces balanced."""
    found = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            char = text[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:index])
                    break
    return found


def flat_boxed_contents(text: str) -> list[str]:
    r"""Every ``\boxed{…}`` body that holds no brace at all, in order: the box convention of the paper's reproduction.

    graphcore-research/relaxed-spec-dec-repro, ``src/ens_spec_dec/tasks/aime_2024.py``, reads boxes with a
    brace-free pattern, so ``\boxed{\frac{1}{2}}``, ``\boxed{\text{25}}`` and ``\boxed{10^{3}}`` are not boxes
    to it, and neither are ``\fbox{…}``, ``\boxed {…}`` (a space) or ``\Boxed{…}``. ``boxed_contents`` above is
    the balanced reading MATH-500 keeps.
    """
    return FLAT_BOXED.findall(text)


def last_signed_integer(text: str) -> str | None:
    """The last run of digits in ``text`` with the ``+``/``-`` written right before it, or None.

    The reproduction's integers have no commas or points, so ``9,975`` ends in ``975``, ``3.14`` in ``14``, and a
    hyphen joins its number (``x-5`` → ``-5``, ``2024-07`` → ``-07``).
    """
    tokens = SIGNED_DIGITS.findall(text)
    return tokens[-1] if tokens else None


def plain_integer(token: str) -> str:
    """``+007`` → ``7``, ``-012`` → ``-12``, ``-0`` → ``0``: sign and leading zeros as the reproduction writes them."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return f"-{digits}" if token.startswith("-") and digits != "0" else digits


def strip_text_wrappers(value: str) -> str:
    r"""``\text{(B)}`` → ``(B)``; ``\mathrm{x}`` → ``x``; surrounding $ and spaces removed."""
    value = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\s*\{([^{}]*)\}", r"\1", value)
    return value.strip().strip("$").strip()


def normalise_integer(value: str) -> str | None:
    """'1,024' → '1024', '007' → '7', '-0' → '0'; None when not a plain integer."""
    value = strip_text_wrappers(value).replace(",", "").replace(" ", "").rstrip(".")
    if not re.fullmatch(r"-?\d+", value):
        return None
    negative = value.startswith("-")
    digits = value.lstrip("-").lstrip("0") or "0"
    return f"-{digits}" if negative and digits != "0" else digits
