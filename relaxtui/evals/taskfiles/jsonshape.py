"""A small subset of JSON Schema, for the ``json`` answer kind: enough to say "the reply is an object with these
fields of these types", with no dependency.

Why our own: the ``jsonschema`` package is not a dependency (it arrives only with Ray), and a task's verdict must
not depend on which optional packages a machine has. The subset is checked when the task file loads: a keyword
outside it is an error there, never silently ignored at scoring time.

Supported: ``type`` (a name or a list of names: object, array, string, number, integer, boolean, null),
``properties``, ``required``, ``additionalProperties`` (true, false or a schema), ``items``, ``enum``, ``const``,
``minimum``, ``maximum``, ``minLength``, ``maxLength``, ``pattern`` (searched by RE2, linear-time on any reply:
``relaxtui.patterns``), ``minItems``, ``maxItems``, ``anyOf``; ``title``, ``description``, ``$schema`` and ``$id``
are accepted and ignored.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from relaxtui.errors import UserError
from relaxtui.patterns import PatternError, compile_pattern

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
IGNORED = ("title", "description", "$schema", "$id", "examples", "default")
KEYWORDS = ("type", "properties", "required", "additionalProperties", "items", "enum", "const", "minimum",
            "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "anyOf", *IGNORED)
MAX_DEPTH = 32


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_bound(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_schema(schema: Any, where: str, depth: int = 0) -> None:
    """Refuse a schema outside the subset, naming the keyword and where it sits (``$.properties.name``)."""
    if depth > MAX_DEPTH:
        raise UserError(f"{where}: schema nested deeper than {MAX_DEPTH}")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise UserError(f"{where}: a schema must be a table (object), not {type(schema).__name__}")
    for key, value in schema.items():
        at = f"{where}.{key}"
        if key not in KEYWORDS:
            raise UserError(f"{at}: unsupported schema keyword (supported: {', '.join(KEYWORDS[:-len(IGNORED)])})")
        if key == "type":
            names = value if isinstance(value, list) else [value]
            if not names or any(name not in TYPES for name in names):
                raise UserError(f"{at}: must be one of {', '.join(TYPES)} or a list of them")
        elif key == "properties":
            if not isinstance(value, dict):
                raise UserError(f"{at}: must be a table of schemas")
            for name, sub in value.items():
                check_schema(sub, f"{at}.{name}", depth + 1)
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
                raise UserError(f"{at}: must be an array of field names")
        elif key in ("additionalProperties", "items"):
            check_schema(value, at, depth + 1)
        elif key == "anyOf":
            if not isinstance(value, list) or not value:
                raise UserError(f"{at}: must be a non-empty array of schemas")
            for index, sub in enumerate(value):
                check_schema(sub, f"{at}[{index}]", depth + 1)
        elif key == "enum" and not isinstance(value, list):
            raise UserError(f"{at}: must be an array")
        elif key in ("minimum", "maximum") and not _is_bound(value):
            raise UserError(f"{at}: must be a finite number")
        elif key in ("minLength", "maxLength", "minItems", "maxItems") and not _is_count(value):
            raise UserError(f"{at}: must be a whole number >= 0")
        elif key == "pattern":
            if not isinstance(value, str):
                raise UserError(f"{at}: must be a string")
            try:
                schema_pattern(value)
            except PatternError as exc:
                raise UserError(f"{at}: {exc}") from None


@functools.lru_cache(maxsize=256)
def schema_pattern(source: str) -> Any:
    """A schema's ``pattern`` compiled once (checked when the file loads, searched for every reply)."""
    return compile_pattern(source)


def type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _has_type(value: Any, name: str) -> bool:
    actual = type_of(value)
    return actual == name or (name == "number" and actual == "integer") or (
        name == "integer" and actual == "number" and float(value).is_integer())


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def violation(value: Any, schema: Any, path: str = "$") -> str | None:
    """The first way ``value`` breaks ``schema`` (``$.date: expected string, got number``), or None."""
    if schema is True:
        return None
    if schema is False:
        return f"{path}: not allowed"
    names = schema.get("type")
    if names is not None:
        names = names if isinstance(names, list) else [names]
        if not any(_has_type(value, name) for name in names):
            return f"{path}: expected {' or '.join(names)}, got {type_of(value)}"
    if "const" in schema and not same_json(value, schema["const"]):
        return f"{path}: must be {schema['const']!r}"
    if "enum" in schema and not any(same_json(value, option) for option in schema["enum"]):
        return f"{path}: must be one of {schema['enum']!r}"
    if "anyOf" in schema and all(violation(value, sub, path) for sub in schema["anyOf"]):
        return f"{path}: matches none of anyOf"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path}: below minimum {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path}: above maximum {schema['maximum']}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path}: shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path}: longer than {schema['maxLength']} characters"
        if "pattern" in schema and not schema_pattern(schema["pattern"]).search(value):
            return f"{path}: does not match pattern {schema['pattern']!r}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{path}: fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path}: more than {schema['maxItems']} items"
        if "items" in schema:
            for index, item in enumerate(value):
                found = violation(item, schema["items"], f"{path}[{index}]")
                if found:
                    return found
    if isinstance(value, dict):
        return _object_violation(value, schema, path)
    return None


def _object_violation(value: dict[str, Any], schema: dict[str, Any], path: str) -> str | None:
    for name in schema.get("required", ()):
        if name not in value:
            return f"{path}: missing required field {name!r}"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found = violation(item, properties[name], f"{path}.{name}")
        else:
            found = violation(item, extra, f"{path}.{name}") if extra is not True else None
        if found:
            return found
    return None
