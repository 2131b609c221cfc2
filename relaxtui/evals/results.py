"""The results folder of an eval run: a manifest of the run-level settings and one JSON line per sample.

Lines are appended and flushed as each sample finishes, so a killed run loses at most the sample in flight;
on resume a torn last line is cut off and every (config, problem, seed) already present is skipped. Each
line carries its config id — a hash of everything that shapes an output — so configs never mix.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from relaxtui.errors import UserError

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
MEASURED_PROFILE = "measured-profile.json"  # this machine's cost profile, measured when the run started
ENVIRONMENT = "environment"  # manifest key for facts about the machine, not part of the run's identity


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


def config_id(run: dict[str, Any], point: GridPoint) -> str:
    payload = json.dumps({"run": run, "point": asdict(point)}, sort_keys=True)
    return hashlib.sha1(payload.encode()).hexdigest()[:12]


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {directory} is not writable: {exc.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise UserError(f"--out {directory} is not writable")


class ResultsStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS

    def open_run(self, run: dict[str, Any], environment: dict[str, Any] | None = None) -> None:
        """Create the folder, or check that its manifest describes this same run (grid points may differ).

        ``run`` is the run's identity: every setting that changes outputs or speed; resuming with any of them
        changed is refused, naming them. ``environment`` (e.g. which sandbox protections were active) is
        recorded, refreshed on resume, and never compared."""
        _check_writable(self.directory)
        manifest = self.directory / MANIFEST
        if manifest.exists():
            try:
                existing = json.loads(manifest.read_text())
            except json.JSONDecodeError:
                raise UserError(f"{manifest} is not valid JSON; use another --out") from None
            existing.pop(ENVIRONMENT, None)
            if existing != run:
                diff = sorted(k for k in set(existing) | set(run) if existing.get(k) != run.get(k))
                shown = ", ".join(f"{k} (was {existing.get(k)!r}, now {run.get(k)!r})" for k in diff)
                raise UserError(f"{self.directory} holds results of another run (differs in {shown}); "
                                "use another --out or the same settings")
        if environment is not None or not manifest.exists():
            content = {**run, **({ENVIRONMENT: environment} if environment is not None else {})}
            partial = manifest.with_name(MANIFEST + ".partial")
            partial.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
            partial.replace(manifest)  # atomic: a kill never leaves a half-written manifest
        self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as stream:
                stream.truncate(data.rfind(b"\n") + 1)

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as stream:
            for number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    if not line.endswith("\n"):
                        return  # a torn last line from a killed run
                    raise UserError(f"{self.path}:{number}: malformed result line") from None

    def done_keys(self) -> set[tuple[str, str, int]]:
        return {(r["config_id"], r["problem_id"], r["seed"]) for r in self.records()}

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            stream.flush()
            os.fsync(stream.fileno())


def load_records(directory: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and every result line of a run folder (for `eval report`)."""
    directory = Path(directory)
    manifest = directory / MANIFEST
    if not manifest.exists():
        raise UserError(f"{directory} is not an eval run folder (no {MANIFEST})")
    try:
        run = json.loads(manifest.read_text())
    except json.JSONDecodeError:
        raise UserError(f"{manifest} is not valid JSON") from None
    run.pop(ENVIRONMENT, None)
    return run, list(ResultsStore(directory).records())
