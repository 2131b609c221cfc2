"""Recorded rounds on disk: one compressed ``.npz`` per eval unit, beside the run's results
(docs/metrics.md#replayed-speed-up).

An eval run whose plan asks for it (``EvalPlan.record_rows``) writes each finished unit's rounds to
``rows/CONFIG_ID/PROBLEM-SEED.npz`` in its folder before the unit's result line: a unit with a line has its rows,
and a resumed run never recomputes them (the unit is skipped). The file holds every round's drafted tokens and sparse
p and q rows (``decoding/round_rows.py``), concatenated over rounds, and a JSON header naming the unit and its
sampling. Read back as outside bytes: a damaged or foreign file is skipped and counted, never trusted.

Layout (D drafted positions over R rounds, K ≤ K_MAX entries per row):

    meta            JSON: format, config_id, problem_id, seed, draft_max, temperature, top_k, top_p, finish_reason
    round_index     [R] int32     round_drafted [R] int32     round_accepted [R] int32     round_has_q [R] bool
    tokens          [D] int32
    p_ids, q_ids    [D, K] int32 (-1 pads)      p_probs, q_probs [D, K] float32
    p_rest, q_rest  [D] float32                 p_x, q_x [D] float64
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from relaxtui.costmodel.replay import RecordedRun
from relaxtui.decoding.events import RoundRows, SparseRows
from relaxtui.decoding.round_rows import K_MAX
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.files import FileRefused, FileTooBig, read_regular_bytes

__all__ = ["FORMAT", "ROWS_DIR", "RowsRead", "pack", "read_rows", "rows_path", "unpack"]

FORMAT = 1
ROWS_DIR = "rows"
ROWS_MAX_BYTES = 256 << 20  # one unit's file, compressed or not: past this it is not one relaxtui wrote
_CONFIG_ID = re.compile(r"[0-9a-f]{1,64}")
_SIDES = ("p", "q")


class RowsProblem(ValueError):
    """Why a rows file is not usable (one short phrase)."""


def rows_path(directory: Path, config_id: str, problem_id: str, seed: int) -> Path:
    """Where a unit's rows live in a run folder: a name from the problem's id by digest (ids are outside text)."""
    if not _CONFIG_ID.fullmatch(config_id):
        raise ValueError(f"not a config id: {config_id!r}")
    digest = hashlib.sha1(problem_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(directory) / ROWS_DIR / config_id / f"{digest}-{int(seed)}.npz"


def pack(rounds: Sequence[RoundRows], meta: Mapping[str, Any]) -> bytes:
    """One unit's rounds as the bytes of a compressed .npz (the header ``meta`` as JSON, ``format`` added)."""
    drafted = [r for r in rounds if r.tokens]
    width = max((r.p.ids.shape[1] for r in drafted), default=0)
    width = max([width, *(r.q.ids.shape[1] for r in drafted)])
    arrays: dict[str, np.ndarray] = {
        "meta": np.array(json.dumps({**meta, "format": FORMAT}, ensure_ascii=True)),
        "round_index": np.array([r.index for r in rounds], dtype=np.int32),
        "round_drafted": np.array([len(r.tokens) for r in rounds], dtype=np.int32),
        "round_accepted": np.array([r.n_accepted for r in rounds], dtype=np.int32),
        "round_has_q": np.array([r.has_distribution for r in rounds], dtype=bool),
        "tokens": np.array([x for r in drafted for x in r.tokens], dtype=np.int32),
    }
    for name in _SIDES:
        sides: list[SparseRows] = [getattr(r, name) for r in drafted]
        arrays[f"{name}_ids"] = _padded([s.ids for s in sides], width, -1, np.int32)
        arrays[f"{name}_probs"] = _padded([s.probs for s in sides], width, 0, np.float32)
        arrays[f"{name}_rest"] = np.concatenate([s.rest for s in sides]) if sides else np.zeros(0, np.float32)
        arrays[f"{name}_x"] = np.concatenate([s.at_x for s in sides]) if sides else np.zeros(0, np.float64)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # (numpy's stub types **kwds loosely)
    return buffer.getvalue()


def _padded(blocks: Sequence[np.ndarray], width: int, fill: float, dtype: type) -> np.ndarray:
    out: np.ndarray = np.full((sum(len(b) for b in blocks), width), fill, dtype=dtype)
    at = 0
    for block in blocks:
        out[at:at + len(block), :block.shape[1]] = block
        at += len(block)
    return out


_DTYPES = {"round_index": "i", "round_drafted": "i", "round_accepted": "i", "round_has_q": "b", "tokens": "i",
           "p_ids": "i", "q_ids": "i", "p_probs": "f", "q_probs": "f", "p_rest": "f", "q_rest": "f", "p_x": "f",
           "q_x": "f"}


def unpack(data: bytes) -> tuple[dict[str, Any], tuple[RoundRows, ...]]:
    """(header, rounds) of a rows file's bytes; a RowsProblem names what is wrong with one that is not usable."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if sum(info.file_size for info in archive.infolist()) > 8 * ROWS_MAX_BYTES:
                raise RowsProblem("expands past any rows file")
        with np.load(io.BytesIO(data), allow_pickle=False) as found:
            arrays = {name: found[name] for name in ("meta", *_DTYPES) if name in found.files}
    except RowsProblem:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError):
        raise RowsProblem("not a .npz file") from None
    missing = [name for name in ("meta", *_DTYPES) if name not in arrays]
    if missing:
        raise RowsProblem(f"no array {missing[0]!r}")
    meta = _meta(arrays.pop("meta"))
    for name, kind in _DTYPES.items():
        if arrays[name].dtype.kind != kind and not (kind == "i" and arrays[name].dtype.kind == "u"):
            raise RowsProblem(f"array {name!r} has the wrong type")
    return meta, _rounds(arrays)


def _meta(raw: np.ndarray) -> dict[str, Any]:
    try:
        meta = json.loads(str(raw.item())) if raw.shape == () and raw.dtype.kind == "U" else None
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RowsProblem("its header is not a rows header of this version")
    checks = {"problem_id": lambda v: isinstance(v, str), "seed": _whole, "draft_max": _whole,
              "temperature": _number, "top_k": _whole, "top_p": _number, "finish_reason": lambda v: isinstance(v, str)}
    for name, check in checks.items():
        if not check(meta.get(name)):
            raise RowsProblem(f"its header's {name!r} is missing or wrong")
    return meta


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1e6


def _rounds(a: dict[str, np.ndarray]) -> tuple[RoundRows, ...]:
    count = a["round_index"].shape
    if len(count) != 1 or any(a[name].shape != count for name in ("round_drafted", "round_accepted", "round_has_q")):
        raise RowsProblem("its round arrays disagree in length")
    drafted, accepted = a["round_drafted"].astype(np.int64), a["round_accepted"].astype(np.int64)
    if (drafted < 0).any() or (accepted < 0).any() or (accepted > drafted).any():
        raise RowsProblem("a round's counts are impossible")
    total = int(drafted.sum())
    width = a["p_ids"].shape[1] if a["p_ids"].ndim == 2 else -1
    if not 0 <= width <= K_MAX or a["tokens"].shape != (total,):
        raise RowsProblem("its row arrays disagree in shape")
    for name in _SIDES:
        ids, probs = a[f"{name}_ids"], a[f"{name}_probs"]
        if ids.shape != (total, width) or probs.shape != (total, width) \
                or a[f"{name}_rest"].shape != (total,) or a[f"{name}_x"].shape != (total,):
            raise RowsProblem("its row arrays disagree in shape")
        values = (probs, a[f"{name}_rest"], a[f"{name}_x"])
        if (ids < -1).any() or any(not np.isfinite(v).all() or (v < 0).any() or (v > 1 + 1e-5).any() for v in values):
            raise RowsProblem("a probability or an id is out of range")
    if (a["tokens"] < 0).any():
        raise RowsProblem("a drafted token is out of range")
    rounds, at = [], 0
    for r in range(count[0]):
        n = int(drafted[r])
        sides = [_side(a, name, at, at + n) for name in _SIDES]
        tokens = tuple(int(x) for x in a["tokens"][at:at + n])
        rounds.append(RoundRows(int(a["round_index"][r]), tokens, int(accepted[r]), sides[0], sides[1],
                                bool(a["round_has_q"][r])))
        at += n
    return tuple(rounds)


def _side(a: dict[str, np.ndarray], name: str, start: int, end: int) -> SparseRows:
    arrays = (a[f"{name}_ids"][start:end].astype(np.int32), a[f"{name}_probs"][start:end].astype(np.float32),
              a[f"{name}_rest"][start:end].astype(np.float32), a[f"{name}_x"][start:end].astype(np.float64))
    for array in arrays:
        array.flags.writeable = False
    return SparseRows(*arrays)


def recorded_run(meta: Mapping[str, Any], rounds: tuple[RoundRows, ...]) -> RecordedRun:
    """A rows file's header and rounds as the replay reads them."""
    sampling = SamplingParams(float(meta["temperature"]), int(meta["top_k"]), float(meta["top_p"]))
    return RecordedRun(rounds, sampling, int(meta["draft_max"]), meta["finish_reason"] == "eog",
                       str(meta["problem_id"]), int(meta["seed"]))


@dataclass
class RowsRead:
    """A run folder's recorded rounds per config id, and the files skipped, by reason."""

    runs: dict[str, list[RecordedRun]] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)


def read_rows(directory: Path, config_ids: Iterable[str] | None = None) -> RowsRead:
    """Every usable rows file of a run folder (of ``config_ids`` only, when given), in name order."""
    read = RowsRead()
    base = Path(directory) / ROWS_DIR
    wanted = set(config_ids) if config_ids is not None else None
    if not base.is_dir():
        return read
    for folder in sorted(base.iterdir()):
        if not folder.is_dir() or not _CONFIG_ID.fullmatch(folder.name) or (wanted is not None
                                                                            and folder.name not in wanted):
            continue
        for path in sorted(folder.glob("*.npz")):
            try:
                meta, rounds = unpack(read_regular_bytes(path, ROWS_MAX_BYTES, "rows file"))
            except FileTooBig:
                read.skipped["larger than any rows file"] += 1
                continue
            except FileRefused as exc:
                read.skipped[exc.reason] += 1
                continue
            except RowsProblem as exc:
                read.skipped[str(exc)] += 1
                continue
            read.runs.setdefault(folder.name, []).append(recorded_run(meta, rounds))
    return read
