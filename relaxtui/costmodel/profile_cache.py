"""This machine's measured profile, kept between starts of `serve`: a calibration takes seconds on an idle machine
and a minute or more on a busy 2-core one, and the server prices with it by default.

Kept in ``$RELAXTUI_CACHE/profiles/`` under a key of everything that changes what it measures — both model files
(path, size, modification time), threads, GPU layers, context size, the longest block, the sampling settings, the
hardware and the relaxtui and llama-cpp-python versions — so a different pair or setting is measured afresh. A
measurement whose timings stayed unstable is used for this run but never kept. The key is kept in the file with the
profile, and a file is read back only for that very key and when its verify blocks can be a measurement
(``block_price_problem``); a damaged, edited or foreign file is measured over, with one warning line. Deleting the
file measures again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from relaxtui import __version__, envvars
from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile, from_dict, read_profile_file
from relaxtui.costmodel.timing import MAX_SPREAD
from relaxtui.errors import UserError

# A verify block of k tokens does at least one verifier step's work and at most k steps' (the k single steps it
# replaces, in one pass); a price in steps is a ratio of two stable medians (costmodel.timing), each off by at most
# MAX_SPREAD of itself.
SLACK = 1.0 + MAX_SPREAD


@dataclass(frozen=True)
class MeasuredProfile:
    profile: CostProfile
    path: Path  # where it is (or would be) cached
    cached: bool  # read from the cache, not measured now


def cache_folder() -> Path:
    return envvars.directory("RELAXTUI_CACHE", Path.home() / ".cache" / "relaxtui") / "profiles"


def file_identity(path: Path | None) -> list[object] | None:
    """What identifies a model file without reading it: its resolved path, size and modification time."""
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return [str(path)]
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def versions() -> dict[str, str]:
    try:
        llama = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        llama = "none"
    return {"relaxtui": __version__, "llama_cpp_python": llama}


def cache_path(key: Mapping[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return cache_folder() / f"{THIS_MACHINE}-{digest[:20]}.json"


def block_price_problem(k: int, price: object) -> str | None:
    """Why ``price`` cannot be v(k), what a verify block of k tokens costs in single verifier steps as this machine
    measures it (None: it can): a finite number in [1 / SLACK, k × SLACK]. Not required monotone in k: a real
    measurement is not (docs/method.md#priced-drafts: on a CPU, k = 4 is cheaper than k = 3)."""
    if not isinstance(price, (int, float)) or isinstance(price, bool) or not math.isfinite(price):
        return f"v({k}) is {json.dumps(price)[:40]}, not a finite number"
    low, high = 1.0 / SLACK, k * SLACK
    if not low - 1e-9 <= price <= high + 1e-9:
        return f"v({k}) = {price:g} is outside [{low:.3g}, {high:.3g}] single steps"
    return None


def _kept(path: Path, key: Mapping[str, object]) -> tuple[CostProfile | None, str | None]:
    """(the stable profile kept at ``path`` for ``key``, None), or (None, why it cannot be used); (None, None) for
    no file or an unstable one."""
    if not path.is_file():
        return None, None
    try:
        data = read_profile_file(path)
    except UserError as exc:  # not a regular file, too big, not JSON
        return None, str(exc)
    if not isinstance(data, dict) or set(data) != {"key", "profile"}:
        return None, "not a kept profile"
    if data["key"] != json.loads(json.dumps(dict(key), sort_keys=True, default=str)):
        return None, "measured for another pair, setting or machine than the one it is named for"
    try:
        profile = from_dict(data["profile"], str(path))
    except UserError as exc:
        return None, str(exc)
    for k, ms in sorted(profile.verify_ms.items()):
        if problem := block_price_problem(k, ms / profile.verifier_ar_ms):
            return None, problem
    return (profile, None) if profile.timing_stable is not False else (None, None)


def kept_profile(key: Mapping[str, object], log: Callable[[str], None] = lambda line: None) -> MeasuredProfile | None:
    """The stable profile kept for ``key`` (None: none is, and a kept file that cannot be used was warned of through
    ``log``; the next ``keep_profile`` replaces it)."""
    full = {**key, **versions()}
    path = cache_path(full)
    cached, problem = _kept(path, full)
    if cached is not None:
        return MeasuredProfile(replace(cached, name=THIS_MACHINE), path, True)
    if problem is not None:
        log(f"warning: ignoring the kept profile {path}: {problem}; measuring it again")
    return None


def keep_profile(key: Mapping[str, object], profile: CostProfile) -> MeasuredProfile:
    """A profile just measured for ``key``, kept when its timings were stable (an unstable one is used, not kept, and
    any file kept under ``key`` removed: it could not be used either)."""
    full = {**key, **versions()}
    path = cache_path(full)
    profile = replace(profile, name=THIS_MACHINE)
    from relaxtui.files import write_atomic

    try:
        if profile.timing_stable is not False:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({"key": full, "profile": json.loads(profile.to_json())}, indent=2,
                                          sort_keys=True, default=str) + "\n")
        else:
            path.unlink(missing_ok=True)  # not warned about again at every start
    except OSError:  # a read-only cache only costs the next start its measurement
        pass
    return MeasuredProfile(profile, path, False)


def this_machine(key: Mapping[str, object], measure: Callable[[], str],
                 log: Callable[[str], None] = lambda line: None) -> MeasuredProfile:
    """The cached profile for ``key`` when there is a stable one, else ``measure()`` (a profile's JSON) now,
    kept when its timings were stable; ``log`` warns of a kept file that cannot be used."""
    found = kept_profile(key, log)
    if found is not None:
        return found
    return keep_profile(key, from_dict(json.loads(measure()), THIS_MACHINE))
