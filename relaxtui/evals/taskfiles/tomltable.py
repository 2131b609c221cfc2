"""Reading one table of a task file: typed options, each error one line naming the file, the table and the key.

Why a helper: a task file is outside input written by hand, so every key is checked for its type and range,
and a key nobody reads (a typo such as ``max_token``) is an error rather than silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from relaxtui.display import type_name
from relaxtui.errors import UserError


def describe(value: Any) -> str:
    """A TOML-ish name for the type of ``value``, for error messages."""
    return type_name(value, array="an array", table="a table")


class Table:
    """One table of a task file; ``where`` names it in errors (``task.toml: [answer]``)."""

    def __init__(self, value: Any, where: str, section: str = "") -> None:
        self.file, self.section = where, section
        if section:
            where = f"{where}: [{section}]"
        if not isinstance(value, dict):
            raise UserError(f"{where} must be a table, not {describe(value)}")
        self.value, self.where = value, where
        self.read: set[str] = set()

    def error(self, key: str, what: str) -> UserError:
        return UserError(f"{self.where}: {key} {what}".replace("\n", "\\n"))

    def has(self, key: str) -> bool:
        return key in self.value

    def _get(self, key: str, default: Any) -> Any:
        self.read.add(key)
        return self.value.get(key, default)

    def text(self, key: str, default: str | None = None, *, required: bool = False, empty: bool = False) -> Any:
        value = self._get(key, None)
        if value is None:
            if required:
                raise self.error(key, "is required")
            return default
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, not {describe(value)}")
        if not empty and not value.strip():
            raise self.error(key, "must not be empty")
        return value

    def flag(self, key: str, default: bool | None) -> Any:
        value = self._get(key, default)
        if value is not None and not isinstance(value, bool):
            raise self.error(key, f"must be true or false, not {describe(value)}")
        return value

    def integer(self, key: str, default: int | None, *, low: int, high: int | None = None) -> Any:
        value = self._get(key, default)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"must be a whole number, not {describe(value)}")
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in {low}..{high}"
            raise self.error(key, f"must be {bound} (got {value})")
        return value

    def number(self, key: str, default: float, *, low: float = 0.0) -> float:
        value = self._get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, not {describe(value)}")
        if value < low:
            raise self.error(key, f"must be >= {low:g} (got {value:g})")
        return float(value)

    def texts(self, key: str, *, empty_items: bool = False) -> tuple[str, ...]:
        """An array of strings (a single string is taken as an array of one)."""
        value = self._get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.error(key, f"must be an array of strings, not {describe(value)}")
        for item in value:
            if not isinstance(item, str):
                raise self.error(key, f"must hold strings only, not {describe(item)}")
            if not empty_items and not item:
                raise self.error(key, "must not hold an empty string")
        return tuple(value)

    def choice(self, key: str, default: str | None, choices: Sequence[str]) -> Any:
        value = self.text(key, default)
        if value is not None and value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    def sub(self, key: str) -> Table | None:
        value = self._get(key, None)
        return None if value is None else Table(value, self.file, f"{self.section}.{key}" if self.section else key)

    def raw(self, key: str) -> Any:
        return self._get(key, None)

    def done(self) -> None:
        """Refuse keys nobody read: a typo must not be silently ignored."""
        unknown = sorted(set(self.value) - self.read)
        if unknown:
            known = ", ".join(sorted(self.read))
            raise UserError(f"{self.where}: unknown key {unknown[0]!r} (known here: {known})")
