"""Answer extraction shared by the math tasks: boxed contents, markers, integers."""

from __future__ import annotations

import re

MARKERS = re.compile(r"(?:final answer is|final answer|answer)\s*[:：]?\s*(.+)", re.IGNORECASE)
INTEGER = re.compile(r"-?\d[\d,]*")


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


def last_integer(text: str) -> str | None:
    matches = INTEGER.findall(text)
    for candidate in reversed(matches):
        normal = normalise_integer(candidate)
        if normal is not None:
            return normal
    return None
