"""The environment variables relaxtui reads, each checked where it is read.

Why: a variable is input from outside like any argument. Read raw, a bad value surfaces far away as some
library's traceback (``HF_ENDPOINT=http://localhost:99999`` became httpx's ``ValueError: Port out of range``);
read here, it is one line naming the variable and its value (a :class:`UserError`, so exit code 2). An empty
variable counts as unset, as most tools treat it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from relaxtui.errors import UserError

DEFAULT_HUB = "https://huggingface.co"


def _show(value: str) -> str:
    """The value as the user would type it, but never on two lines."""
    shown = value if len(value) <= 200 else value[:200] + "..."
    return shown if shown.isprintable() else repr(shown)


def text(name: str) -> str | None:
    """The variable's value, or None when it is unset or empty."""
    value = os.environ.get(name)
    return value or None


def flag(name: str, default: bool = False, *, strict: bool = True) -> bool:
    """``0`` or ``1`` (unset or empty: ``default``). ``strict=False`` returns ``default`` for any other value
    instead of raising: for a caller that cannot raise, such as a callback from C."""
    value = text(name)
    if value is None:
        return default
    if value.strip() in ("0", "1"):
        return value.strip() == "1"
    if not strict:
        return default
    raise UserError(f"{name} must be 0 or 1, not {_show(value)}")


def optional_flag(name: str) -> bool | None:
    """``0``/``1`` as False/True; None when unset or empty (the program decides)."""
    return flag(name) if text(name) is not None else None


def url(name: str, default: str) -> str:
    """An http(s) URL with a host and, if given, a port in 1..65535; returned without a trailing slash."""
    value = text(name)
    if value is None:
        return default.rstrip("/")
    problem = _url_problem(value.strip())
    if problem:
        raise UserError(f"{name}={_show(value)} is not a usable URL: {problem} (expected e.g. {default})")
    return value.strip().rstrip("/")


def _url_problem(value: str) -> str | None:
    if not value.isprintable() or any(char.isspace() for char in value):
        return "it contains spaces or control characters"
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        return str(exc).splitlines()[0] if str(exc) else "it cannot be parsed"
    if parts.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme or 'none'}"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0 is not a port one can connect to"
    if parts.query or parts.fragment:
        return "it must not have a query (?...) or fragment (#...)"
    return None


def hub_endpoint() -> str:
    """``HF_ENDPOINT``, read at call time (huggingface_hub reads it once, at import)."""
    return url("HF_ENDPOINT", DEFAULT_HUB)


def directory(name: str, default: Path) -> Path:
    """A folder named by ``name``: an existing directory, or one that can be created (its nearest existing
    parent is a writable directory). The default is returned as is: only what the user set is checked."""
    value = text(name)
    if value is None:
        return default
    path = Path(value).expanduser()
    shown = f"{name}={_show(value)}"
    try:
        if path.exists():
            if not path.is_dir():
                raise UserError(f"{shown} is not a directory")
            return path
        if path.is_symlink():
            raise UserError(f"{shown} is a link to nothing ({os.readlink(path)})")
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a loop of links, no permission
        raise UserError(f"{shown} cannot be used: {exc}") from None
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        why = "is not a directory" if not parent.is_dir() else "is not writable"
        raise UserError(f"{shown} does not exist and cannot be created ({parent} {why})")
    return path
