"""What a hub that is down may cost: one probe of a few seconds, then the hub libraries' offline mode, and none of
their retry chatter.

Why: ``datasets`` retries a refused request five times with backoff (1 + 2 + 4 + 8 + 8 s) and logs every try on
stderr, so a user whose network is down waited 25 s and read 12 lines before our one. One HEAD of the endpoint,
bounded by ``PROBE_TIMEOUT_S``, answers the same question; when it fails, the call runs with the libraries in
offline mode, so a cached copy still loads at once and a missing one fails at once, in one line that names the
host setting and ``HF_HUB_OFFLINE=1`` (which skips the probe too).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Iterator

PROBE_TIMEOUT_S = 4.0  # connect and answer; a hub that answers at all answers a HEAD of its front page in far less


def http_errors(*names: str) -> tuple[type[BaseException], ...]:
    """The HTTP library's exception classes of these names (``httpx2`` in huggingface_hub 2.x, ``httpx`` before)."""
    errors: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        for name in names:
            with contextlib.suppress(ImportError, AttributeError):
                errors.append(getattr(importlib.import_module(module), name))
    return tuple(errors)


def transport_errors() -> tuple[type[BaseException], ...]:
    """Connection errors: the hub cannot be reached."""
    return ConnectionError, TimeoutError, *http_errors("TransportError")


_RETRY_CHATTER = ("Retrying in ", "thrown while requesting", "Rate limited. Waiting")
_RETRYING_LOGGERS = ("huggingface_hub.utils._http", "huggingface_hub.hf_api")  # where the backoff loops log


def _not_retry_chatter(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not any(phrase in message for phrase in _RETRY_CHATTER)


def quiet_hub_logging() -> None:
    """The hub client's retry lines off (what went wrong reaches the user as our one line); its other warnings,
    such as "Trying to resume download", stay."""
    for name in _RETRYING_LOGGERS:
        logger = logging.getLogger(name)
        if _not_retry_chatter not in logger.filters:
            logger.addFilter(_not_retry_chatter)


def reachable(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether anything answers HTTP at ``endpoint`` (any status will do), through the hub client's own session,
    so its proxies and certificates apply."""
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=timeout, follow_redirects=False)
    except transport_errors() + (OSError,):  # refused, timed out, no route, no such host
        return False
    return True


@contextlib.contextmanager
def offline_unless_reachable(endpoint: str) -> Iterator[bool]:
    """Run the block online when the hub answers the probe, else with the hub libraries in offline mode; yields
    whether the hub was found unreachable (so a failure can say so, not "not in the cache")."""
    from huggingface_hub import constants

    quiet_hub_logging()
    if constants.HF_HUB_OFFLINE or reachable(endpoint):
        yield False
        return
    modules = [constants, *([sys.modules["datasets.config"]] if "datasets.config" in sys.modules else [])]
    saved = [module.HF_HUB_OFFLINE for module in modules]
    for module in modules:
        module.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]  # a module's global, patched (mypy: read-only)
    try:
        yield True
    finally:
        for module, value in zip(modules, saved, strict=True):
            module.HF_HUB_OFFLINE = value  # type: ignore[attr-defined]  # restored (as above)
