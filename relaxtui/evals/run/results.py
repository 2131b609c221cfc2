"""The results folder of an eval run: a manifest (the run's identity) and one JSON line per sample.

Lines are appended and fsynced as each sample finishes, so a killed run loses at most the sample in flight;
on resume a torn last line is cut off and every (config, problem, seed) already present is skipped. Each
line carries its config id — a hash of everything that shapes an output — so configs never mix.

Both files are read as outside bytes (a folder may be damaged, hand-edited or from another version): the
manifest must be a JSON object with the fields a report uses, and a result line that is not a well-formed
record is skipped and counted, never trusted and never a traceback.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from relaxtui import checks
from relaxtui.costmodel.replay_rows import rows_path
from relaxtui.errors import UserError
from relaxtui.evals.run.identity import ENVIRONMENT, RunIdentity
from relaxtui.files import read_regular_bytes, write_atomic

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
MEASURED_PROFILE = "measured-profile.json"  # this machine's cost profile, measured when the run started
MANIFEST_MAX_BYTES = 1 << 20
RESULTS_MAX_BYTES = 4 << 30  # a results file past this is not one relaxtui wrote
LINE_MAX_BYTES = 64 << 20  # one record holds one output (a 32k-token answer is well under 1 MiB)
TORN = "torn last line (what a kill leaves)"


@dataclass(frozen=True)
class GridPoint:
    """One config of the grid: verifier alone, or a rule/knob/draft length."""

    rule: str | None  # None = verifier alone (--no-spec)
    knob: float | None
    draft_max: int

    @property
    def label(self) -> str:
        if self.rule is None:
            return "no-spec"
        knob = "" if self.knob is None else f"({self.knob:g})"
        return f"{self.rule}{knob} N={self.draft_max}"


# the manifest's fields that a flag sets -> that flag's own check (relaxtui.checks), so a hand-edited or damaged
# manifest is refused by the rule that refuses the flag
MANIFEST_CHECKS: dict[str, checks.Check] = {
    "task": checks.TEXT, "verifier": checks.TEXT, "drafter": checks.TEXT, "draft_kind": checks.TEXT,
    "temperature": checks.TEMPERATURE, "top_k": checks.TOP_K, "top_p": checks.TOP_P, "max_tokens": checks.MAX_TOKENS,
    "draft_min": checks.DRAFT_MIN, "draft_p_min": checks.DRAFT_P_MIN, "draft_adapt": checks.FLAG,
    "draft_cut": checks.TEXT, "ctx_size": checks.CTX_SIZE, "threads": checks.THREADS, "gpu_layers": checks.GPU_LAYERS,
    "parallel": checks.PARALLEL, "data": checks.Maybe(checks.TEXT),
}


INT_LIMIT = 2**63  # every count and seed a record holds is below this (a larger one would overflow a float)
LOGPROB_FLOOR = -1e4  # nats/token: far below any mean log-probability a model's logits give (they span ~100)
LOGPROB_SLACK = 1e-3  # a float32 normaliser can put log p(x) a hair above 0


def _is_int(value: object, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < INT_LIMIT


def _is_number(value: object, low: float = 0.0) -> TypeGuard[float]:
    """A finite number ≥ low (an integer past INT_LIMIT counts as not finite: no float holds it exactly)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (abs(value) < INT_LIMIT if isinstance(value, int) else math.isfinite(value)) and value >= low


# field -> check, for the fields the reports, tune and resume read from a record
_RECORD_FIELDS = {
    "config_id": lambda v: isinstance(v, str) and bool(v), "problem_id": lambda v: isinstance(v, str),
    "seed": _is_int, "correct": lambda v: isinstance(v, bool), "output_tokens": _is_int,
    "decode_s": _is_number, "tokens_per_s": _is_number, "rounds": _is_int, "drafted": _is_int,
    "accepted": _is_int, "truncated": lambda v: isinstance(v, bool), "degenerate": lambda v: isinstance(v, bool),
}


def _is_rate(value: object) -> bool:
    return value is None or (_is_number(value) and value <= 1)


def _is_logprob(value: object) -> bool:
    return value is None or (_is_number(value, LOGPROB_FLOOR) and value <= LOGPROB_SLACK)


# the drift signals (evals/analysis/drift.py) are optional (older records lack them) and may be null (not measured); a
# number must be one the loop can write — finite, a rate in [0, 1], a log-probability in [LOGPROB_FLOOR, 0] —
# as issue 17 asks of cost profiles, so the report never prints "-inf%" from a hand-edited or damaged line
_OPTIONAL_FIELDS = {
    "draft_lengths": lambda v: isinstance(v, list) and all(_is_int(k) for k in v),
    "extra_draft_steps": _is_int, "full_accept_rounds": _is_int,
    "verifier_logprob": _is_logprob, "verifier_logprob_processed": _is_logprob,
    "out_of_support_rate": _is_rate, "repetition_rate": _is_rate,
}


def record_problem(record: object) -> str | None:
    """Why a parsed line is not a usable record (None when it is)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for name, check in _RECORD_FIELDS.items():
        if name not in record:
            return f"no field {name!r}"
        if not check(record[name]):
            return f"field {name!r} has the wrong type or value"
    for name, check in _OPTIONAL_FIELDS.items():
        if name in record and not check(record[name]):
            return f"field {name!r} has the wrong type or value"
    config = record.get("config")
    if not (isinstance(config, dict) and (config.get("rule") is None or isinstance(config.get("rule"), str))
            and (config.get("knob") is None or _is_number(config.get("knob"), -math.inf))
            and _is_int(config.get("draft_max")) and isinstance(config.get("label"), str)):
        return "field 'config' is not {rule, knob, draft_max, label}"
    return None


@dataclass
class ReadResult:
    """The usable records of a results file, and how many lines were skipped for which reason."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def skipped_line(self, path: Path) -> str | None:
        """One line for stderr naming what was skipped, or None when nothing was."""
        if not self.skipped:
            return None
        total = sum(self.skipped.values())
        reasons = "; ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        return f"{path}: skipped {total} line{'s' * (total != 1)} ({reasons})"


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    if len(raw) > LINE_MAX_BYTES:
        return None, "longer than any record"
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except (ValueError, RecursionError):  # JSONDecodeError, ints past Python's digit limit, deep nesting
        return None, "not JSON"
    problem = record_problem(value)
    return (value, None) if problem is None else (None, problem)


def read_regular(path: Path, cap: int) -> bytes:
    """The bytes of a run folder's file of at most ``cap`` bytes: a FIFO, a device (a link to /dev/zero) or a
    folder under the name is one line, never a hang (``relaxtui.files``)."""
    return read_regular_bytes(path, cap, "run folder file")


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The folder's manifest as a JSON object, None when there is none; a damaged one is a UserError."""
    path = Path(directory) / MANIFEST
    if not path.exists() and not path.is_symlink():
        return None
    try:
        value = json.loads(read_regular(path, MANIFEST_MAX_BYTES).decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8; use another --out") from None
    except (ValueError, RecursionError):
        raise UserError(f"{path} is not valid JSON; use another --out") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} must hold a JSON object (got {type(value).__name__})")
    for name, check in MANIFEST_CHECKS.items():
        if name in value:
            check.check(value[name], f"{path}: field {name!r}")
    return value


def _writable(directory: Path) -> None:
    """Refuse an --out that cannot be created or written, without creating anything."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--out {directory} is not writable: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {directory} is not writable")


class ResultsStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS

    def check(self, identity: RunIdentity) -> RunIdentity:
        """Refuse a folder of another run (or a damaged one) without touching it; return what to record."""
        _writable(self.directory)
        manifest = read_manifest(self.directory)
        return identity if manifest is None else identity.resumed_from(manifest, self.directory)

    def open_run(self, identity: RunIdentity, environment: Mapping[str, Any] | None = None) -> str | None:
        """Create the folder, or check that its manifest describes this same run (grid points may differ),
        then record the manifest. Returns a line to show when a torn last result line was cut off.

        ``environment`` (e.g. which sandbox protections were active) is recorded, refreshed on resume, and
        never compared."""
        recorded = self.check(identity)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {self.directory} is not writable: {exc.strerror}") from None
        manifest = self.directory / MANIFEST
        previous = read_manifest(self.directory)  # read again: check() may have run before the folder existed
        if environment is None and previous is not None:
            environment = previous.get(ENVIRONMENT)
        content = recorded.manifest(environment if isinstance(environment, Mapping) else None)
        if content != previous:
            write_atomic(manifest, json.dumps(content, indent=2, sort_keys=True) + "\n")
        return self._repair_torn_tail()

    def _repair_torn_tail(self) -> str | None:
        if not self.path.exists():
            return None
        data = read_regular(self.path, RESULTS_MAX_BYTES)
        if not data or data.endswith(b"\n"):
            return None
        with self.path.open("r+b") as stream:
            stream.truncate(data.rfind(b"\n") + 1)
        return f"{self.path}: cut off 1 {TORN}; that sample runs again"

    def read(self) -> ReadResult:
        """Every usable record in file order, and the lines skipped (a torn last line among them)."""
        result = ReadResult()
        if not self.path.exists() and not self.path.is_symlink():
            return result
        lines = read_regular(self.path, RESULTS_MAX_BYTES).split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record, problem = _parse_line(raw)
            if record is not None:
                result.records.append(record)
            else:
                result.skipped[TORN if number == len(lines) else str(problem)] += 1
        return result

    def records(self) -> Iterator[dict[str, Any]]:
        yield from self.read().records

    def done_keys(self) -> set[tuple[str, str, int]]:
        return {(r["config_id"], r["problem_id"], r["seed"]) for r in self.records()}

    def write_rows(self, key: tuple[str, str, int], payload: bytes) -> Path:
        """A unit's recorded rounds (``costmodel/replay_rows.py``), whole or not at all; returns where."""
        config_id, problem_id, seed = key
        path = rows_path(self.directory, config_id, problem_id, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, payload)
        return path

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            stream.flush()
            os.fsync(stream.fileno())


@dataclass(frozen=True)
class RunFolder:
    """What `eval report` reads: the run's settings, its usable records, and what was skipped."""

    settings: dict[str, Any]
    records: list[dict[str, Any]]
    skipped_line: str | None


def load_records(directory: Path) -> RunFolder:
    """The manifest and every usable result line of a run folder (for `eval report`)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        raise UserError(f"{directory} is not an eval run folder (no {MANIFEST})")
    if not str(manifest.get("task") or "").strip():  # every manifest eval and tune write names their task
        raise UserError(f"{directory / MANIFEST} names no task, so it is not one an eval run wrote: nothing to report")
    store = ResultsStore(directory)
    read = store.read()
    settings = {k: v for k, v in manifest.items() if k != ENVIRONMENT}
    return RunFolder(settings, read.records, read.skipped_line(store.path))
