"""This machine's measured profile, kept between starts of `serve`: a calibration takes seconds on an idle machine
and a minute or more on a busy 2-core one, and the server prices with it by default.

Kept in ``$RELAXTUI_CACHE/profiles/`` under a key of everything that changes what it measures — both model files
(path, size, modification time), threads, GPU layers, context size, the longest block, the sampling settings, the
hardware and the relaxtui and llama-cpp-python versions — so a different pair or setting is measured afresh. A
measurement whose timings stayed unstable is used for this run but never kept; a damaged cache file is measured
over. Deleting the file measures again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from relaxtui import __version__, envvars
from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile, from_dict, read_profile_file
from relaxtui.errors import UserError


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


def this_machine(key: Mapping[str, object], measure: Callable[[], str]) -> MeasuredProfile:
    """The cached profile for ``key`` when there is a stable one, else ``measure()`` (a profile's JSON) now,
    kept when its timings were stable."""
    path = cache_path({**key, **versions()})
    if path.is_file():
        try:
            cached = from_dict(read_profile_file(path), str(path))
        except UserError:  # damaged or foreign: measure over it
            cached = None
        if cached is not None and cached.timing_stable is not False:
            return MeasuredProfile(replace(cached, name=THIS_MACHINE), path, True)
    text = measure()
    profile = from_dict(json.loads(text), THIS_MACHINE)
    if profile.timing_stable is not False:
        from relaxtui.files import write_atomic

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
        except OSError:  # a read-only cache only costs the next start its measurement
            pass
    return MeasuredProfile(profile, path, False)
