"""The environment variables relaxtui reads, each checked where it is read.

Why: a variable is input from outside like any argument. Read raw, a bad value surfaces far away as some
library's traceback (``HF_ENDPOINT=http://localhost:99999`` became httpx's ``ValueError: Port out of range``;
a 64-character host label, 62 lines of ``UnicodeError`` from the resolver's idna codec); read here, it is one line
naming the variable and its value (a :class:`UserError`, so exit code 2). An empty variable counts as unset, as most
tools treat it. A URL's credentials (``user:password@``) are never shown: messages print ``***@`` in their place.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from relaxtui.errors import UserError

DEFAULT_HUB = "https://huggingface.co"
_USERINFO = re.compile(r"^(\s*[A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)@")  # the authority's part before its last @
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")  # letters, digits, - (not first or last) and _
MAX_LABEL, MAX_HOST = 63, 253  # DNS (RFC 1035): a label's octets, a name's in text form


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


def redacted(value: str) -> str:
    """A URL as a message may show it: its credentials (``user:password@``), if any, as ``***@``."""
    return _USERINFO.sub(r"\1***@", value, count=1)


def url(name: str, default: str, *, credentials: str = "") -> str:
    """An http(s) URL with a valid host, no credentials and, if given, a port in 1..65535; returned without a
    trailing slash. ``credentials``: where they go instead (said when a URL holds some)."""
    value = text(name)
    if value is None:
        return default.rstrip("/")
    problem = _url_problem(value.strip(), credentials)
    if problem:
        userinfo = _USERINFO.match(value)
        if userinfo and userinfo.group(2):  # a library's words may quote the part of the value they failed on
            problem = problem.replace(userinfo.group(2), "***")
        raise UserError(f"{name}={_show(redacted(value))} is not a usable URL: {problem} (expected e.g. {default})")
    return value.strip().rstrip("/")


def _url_problem(value: str, credentials: str) -> str | None:
    if not value.isprintable() or any(char.isspace() for char in value):
        return "it contains spaces or control characters"
    if _USERINFO.match(value):
        return "it holds credentials (user:password@ before the host), which are not sent from here" + (
            f"; {credentials}" if credentials else "")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        return str(exc).splitlines()[0] if str(exc) else "it cannot be parsed"
    if parts.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme or 'none'}"
    if not parts.hostname:
        return "it has no host"
    if problem := _host_problem(parts):
        return problem
    if port == 0:
        return "port 0 is not a port one can connect to"
    if parts.query or parts.fragment:
        return "it must not have a query (?...) or fragment (#...)"
    return None


def _idna(host: str) -> str:
    """``host`` as ASCII the way the hub's HTTP client encodes it (httpx: the ``idna`` package, IDNA 2008), and the
    resolver (Python's idna codec, IDNA 2003) after it; either one's refusal is a UnicodeError."""
    try:
        import idna  # installed with huggingface_hub's HTTP client
    except ImportError:
        encoded = host
    else:
        encoded = idna.encode(host.lower()).decode("ascii")
    return encoded.encode("idna").decode("ascii")


def _host_problem(parts: SplitResult) -> str | None:
    """Why the URL's host is no address or DNS name a resolver takes (the idna codec raises on what DNS refuses):
    an IPv6 literal in brackets must be one; a name, once IDNA-encoded, at most 253 characters in labels of 1..63
    letters, digits, ``-`` (not first or last) and ``_``; a trailing dot is allowed."""
    host = parts.hostname or ""
    if parts.netloc.rpartition("@")[2].startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"[{_show(host)}] is not an IPv6 address"
        return None
    if not host.isascii():
        try:
            host = _idna(host)
        except UnicodeError as exc:  # idna.IDNAError is one
            reason = str(exc.__context__) if isinstance(exc.__context__, UnicodeError) else str(exc)
            return f"the host {_show(host[:60])} cannot be encoded as a DNS name (IDNA: {reason.splitlines()[0]})"
    name = host[:-1] if host.endswith(".") else host
    if len(name) > MAX_HOST:
        return f"the host is {len(name)} characters long, longer than {MAX_HOST}"
    for label in name.split("."):
        if not label:
            return "the host has an empty label (a dot first, or two dots in a row)"
        if len(label) > MAX_LABEL:
            return f"the host's label {label[:20]}... is {len(label)} characters long, longer than {MAX_LABEL}"
        if not _LABEL.fullmatch(label):
            return (f"the host's label {_show(label)} holds characters not allowed in a host name (letters, digits, "
                    "- and _; no - first or last)")
    return None


def hub_endpoint() -> str:
    """``HF_ENDPOINT``, read at call time (huggingface_hub reads it once, at import)."""
    return url("HF_ENDPOINT", DEFAULT_HUB, credentials="a hub token belongs in HF_TOKEN")


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
