"""A request body as the protocol reads it: bytes in, one JSON object out whose every string is text, and the typed
field readers; every failure is one ``ApiError`` (vLLM's single error shape: ``message, type, param, code``).

The body is checked whole before any field is read: strict UTF-8, strict JSON (``NaN`` is refused by the reader
itself), an object, and no string in it — a value or a field name, at any depth — that holds a lone surrogate.
JSON may spell one (``"a\\ud800b"`` is valid JSON) but it is not text: it cannot be encoded as UTF-8, so it would
fail in the tokenizer, or in the response that echoes it (``model``), after the request was taken. Checked here,
it is a 400 naming the field (``messages[0].content``, ``prompt[1]``, ``stop``), for every endpoint at once.
"""

from __future__ import annotations

import json
import re
from typing import Any

from relaxtui.checks import BadValue, Maybe, Whole
from relaxtui.display import type_name
from relaxtui.options import Setting, field_of


class ApiError(Exception):
    """An OpenAI-style error: HTTP status, message, type, the field it is about, optional extra headers."""

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


# -- the whole body ------------------------------------------------------------------------------------------------
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # how JSON spells a UTF-16 surrogate (paired or not)
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # one left in a decoded string: a lone one (a pair decodes to one char)


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def read_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object of text; anything else (bad UTF-8, bad JSON, NaN, a list, a lone
    surrogate in any string) is a 400."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_constant)
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not UTF-8") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, a 5000-digit integer
        raise ApiError(400, f"the request body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(raw):  # only an escape can make one: most bodies skip the walk
        check_text(data)
    return data


def check_text(data: object) -> None:
    """Refuse (400) the first string, in document order, that is not text: a value names its field, a field name
    its object. Iterative, so any depth the JSON reader took is walked."""
    stack: list[tuple[tuple[str | int, ...], object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                raise _not_text(path, value, found.start())
            continue
        nested: list[tuple[tuple[str | int, ...], object]] = []
        if isinstance(value, dict):
            for key, item in value.items():
                found = _SURROGATE.search(key)
                if found:
                    raise _not_text(path, key, found.start(), name=True)
                if isinstance(item, str | dict | list):
                    nested.append(((*path, key), item))
        elif isinstance(value, list):
            nested = [((*path, i), item) for i, item in enumerate(value) if isinstance(item, str | dict | list)]
        stack.extend(reversed(nested))


def field_name(path: tuple[str | int, ...]) -> str | None:
    """``("messages", 0, "content")`` as ``messages[0].content``; None for the body itself."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or None


def _not_text(path: tuple[str | int, ...], text: str, at: int, *, name: bool = False) -> ApiError:
    code = f"U+{ord(text[at]):04X}"
    if name:  # the name itself is not text: shown escaped, so the error can be sent as UTF-8
        shown = text.encode("utf-8", "backslashreplace").decode("ascii", "replace")[:80]
        param = field_name((*path, shown))
        return ApiError(400, f"{param}: this field name is not valid Unicode text (a lone surrogate {code} at "
                             f"character {at}); send UTF-8", param=param)
    param = field_name(path)
    return ApiError(400, f"{param}: must be valid Unicode text (a lone surrogate {code} at character {at}); "
                         "send UTF-8", param=param)


# -- typed fields --------------------------------------------------------------------------------------------------
def json_type(value: object) -> str:
    return type_name(value, array="an array")


def get_bool(body: dict[str, Any], name: str, default: bool, where: str = "") -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(where + name, f"must be a boolean (got {json_type(value)})")
    return value


def get_int(body: dict[str, Any], name: str, low: int, high: int, where: str = "") -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(where + name, f"must be an integer (got {json_type(value)})")
    if not low <= value <= high:
        raise bad(where + name, f"must be in {low}..{high} (got {value})")
    return value


def get_setting(body: dict[str, Any], setting: Setting) -> Any:
    """The request field of an option-table setting (``setting.key`` in ``body``, the object that holds it), checked
    by the table's own check, the one its flag uses; None when absent. JSON may spell a whole number ``3.0``: taken as
    3 where the setting is whole. A refusal names the field: ``speculative.draft_max: must be in 0..64 (got 99)``."""
    value = body.get(setting.key)
    if value is None:
        return None
    whole = setting.check.inner if isinstance(setting.check, Maybe) else setting.check
    if isinstance(whole, Whole) and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return setting.check.check(value, setting.name)
    except BadValue as exc:
        raise bad(setting.request_name, exc.problem) from None


def setting_error(exc: BadValue) -> ApiError:
    """A lower layer's refusal of a setting (a rule's knob, a rule that cannot run greedy) as a 400 naming the request
    field that carries it: the server's spelling of the setting the message names."""
    return bad(field_of(exc.name), exc.spelled(exc.name, field_of).problem)


def get_text(body: dict[str, Any], name: str, where: str = "") -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad(where + name, f"must be a string (got {json_type(value)})")
    return value
