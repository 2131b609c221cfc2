"""Prompt templates of a task file: ``{field}`` names a row field, ``{{`` and ``}}`` are literal braces.

Why not ``str.format`` or jinja2 on the user's text: a template is outside input, and ``str.format`` reaches
attributes and items (``{row.__class__}``, ``{x[0]}``) and pads without bound (``{x:>99999999}``). Here
``string.Formatter.parse`` only splits the text; every replacement must be a plain field name, with no
conversion and no format spec, and the text is assembled by hand. The fields a template names are known when
the file loads, so a field the data does not have is an error before any model loads.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.tasks.base import bad, describe, valid_text

FORBIDDEN = ".[]"


class Template:
    """A parsed template: literal text and field names in order."""

    def __init__(self, source: str, where: str) -> None:
        pieces: list[tuple[str, str | None]] = []
        try:
            parsed = list(string.Formatter().parse(source))
        except ValueError as exc:  # "Single '}' encountered", "unmatched '{'"
            raise UserError(f"{where}: {exc} (write {{{{ and }}}} for literal braces)") from None
        for literal, name, spec, conversion in parsed:
            if name is not None:
                if not name.strip() or name.isdigit():
                    raise UserError(f"{where}: {{{name}}} must name a row field, e.g. {{question}}")
                if any(char in name for char in FORBIDDEN):
                    raise UserError(f"{where}: {{{name}}}: attribute and index access are not allowed; name a field")
                if spec or conversion:
                    shown = f"{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}"
                    raise UserError(f"{where}: {{{shown}}}: conversions and format specs are not allowed")
            pieces.append((literal, name))
        self.source, self.pieces = source, tuple(pieces)
        self.fields = tuple(dict.fromkeys(name for _, name in pieces if name is not None))

    def render(self, row: Mapping[str, Any], where: str) -> str:
        """The template filled from ``row``; a missing or null field is a UserError naming the row and field."""
        parts = []
        for literal, name in self.pieces:
            parts.append(literal)
            if name is not None:
                parts.append(field_text(row, name, where))
        return valid_text("".join(parts), where)


def field_text(row: Mapping[str, Any], name: str, where: str) -> str:
    """A row value as prompt text: strings as they are, numbers and booleans as JSON writes them, lists and
    objects as JSON; a missing or null field, or bytes, is an error naming the field."""
    if name not in row:
        raise bad(where, f"missing field {name!r}")
    value = row[name]
    if value is None:
        raise bad(where, f"field {name!r} is null")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float | list | dict):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:  # a nested value JSON cannot write (bytes)
            raise bad(where, f"field {name!r} cannot be written as text ({exc})") from None
    if isinstance(value, bytes | bytearray):
        raise bad(where, f"field {name!r} holds bytes, not text")
    return str(value) if value.__class__.__module__ in ("datetime", "decimal") else _unknown(value, name, where)


def _unknown(value: Any, name: str, where: str) -> str:
    raise bad(where, f"field {name!r} holds {describe(value)}, which a prompt cannot show")
