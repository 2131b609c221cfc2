"""Where a task file's rows come from: a local JSON lines, JSON, CSV or Parquet file, or a hub dataset.

Local files go through the same hostile-input readers as the built-in tasks' ``--data`` (``tasks.base.read_rows``:
one line naming file and row on any defect); Parquet needs ``pyarrow`` (installed with ``datasets``), and its
absence is one line saying so. Hub datasets load through ``tasks.hub.load_hub_rows`` (``datasets``, cached, a
token for gated ones), pinned by ``revision`` when the file gives one.

A local path must stay in the task file's folder once resolved (``inside_folder``; ``--allow-outside-data``
lifts it), and is read only as a regular file (``relaxtui.files``: a FIFO or ``/dev/zero`` is one line) with no
other name: ``resolve`` finds nothing to follow in a hard link, yet ``rows.jsonl`` in the folder could be another
name for ``~/.ssh/id_rsa`` (``contained``; the flag lifts that too). Hard links have uses (a deduplicated dataset
store), but a task file's data is no place to need one: a copy, or the flag, reads it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from relaxtui.errors import UserError
from relaxtui.evals.taskfiles.tomltable import Table
from relaxtui.evals.tasks.base import DATA_FILE, Located, bad, numbered, read_rows
from relaxtui.files import FileMissing, HardLinked, open_regular

PARQUET_SUFFIXES = (".parquet", ".pq")
ALLOW_OUTSIDE_FLAG = "--allow-outside-data"
MAX_PARQUET_BYTES = 1 << 30


@dataclass(frozen=True)
class DataSource:
    """A local file (``path``), or a hub dataset (``hub`` with ``config``, ``split``, ``revision``)."""

    path: Path | None = None
    hub: str | None = None
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    contained: bool = False  # a task file's own path, held to its folder: a hard-linked file is refused

    @classmethod
    def read(cls, table: Table, base: Path, *, allow_outside: bool = False) -> DataSource:
        """From the ``[data]`` table; a relative path is relative to the task file's folder, and must stay in it
        (see ``inside_folder``) unless ``allow_outside`` (``--allow-outside-data``)."""
        path, hub = table.text("path"), table.text("hub")
        config, split, revision = table.text("config"), table.text("split", "train"), table.text("revision")
        if (path is None) == (hub is None):
            raise table.error("path", "or hub: give exactly one (a local file, or a hub dataset name)")
        if path is not None:
            for key, value in (("config", config), ("revision", revision)):
                if value is not None:
                    raise table.error(key, "applies to a hub dataset, not to a local path")
            if not allow_outside:
                inside_folder(table, path, base)
            return cls(path=base / path, contained=not allow_outside)
        return cls(hub=hub, config=config, split=split, revision=revision)

    def add_to(self, digest: hashlib._Hash) -> None:
        """Fold the local data file's bytes into the task's digest (hub data is named by its revision)."""
        if self.path is None:
            return
        try:
            with open_regular(self.path, DATA_FILE, single_link=self.contained) as stream:  # a FIFO: one line
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
        except (FileMissing, OSError):  # a missing file is reported when rows are read (or --data replaces it)
            digest.update(b"\0missing")
        except HardLinked as exc:
            raise hard_linked(exc) from None


def hard_linked(exc: HardLinked) -> UserError:
    """A task file's hard-linked data file, refused in one line that says how to read it anyway."""
    return UserError(f"{exc}; copy it into the folder, or pass {ALLOW_OUTSIDE_FLAG} to read data from anywhere")


def inside_folder(table: Table, path: str, base: Path) -> None:
    """Refuse a data path that leaves the task file's folder once resolved (symbolic links followed): an
    absolute path, a ``../`` escape or a link to elsewhere. Why: a task file is often someone else's (a shared
    benchmark, a downloaded folder), and its data path is read and its rows sent to the models and written
    into results; without this a task file could read ``~/.ssh/id_rsa`` as "data". ``..`` that ends inside the
    folder is fine; the user's own ``--data`` is not a task file's path and is not checked."""
    try:
        folder, target = base.resolve(), (base / path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a loop of links, a NUL byte
        raise table.error("path", f"{path!r} cannot be resolved ({exc})") from None
    if not target.is_relative_to(folder):
        raise table.error("path", f"{path!r} resolves to {target}, outside the task file's folder {folder}; "
                          f"pass {ALLOW_OUTSIDE_FLAG} to read data from there")


def parquet_rows(path: Path, *, single_link: bool = False) -> list[Located]:
    """The rows of a Parquet file as plain Python values, located as ``file row N`` (``single_link``: see
    ``DataSource.contained``)."""
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type information
    except ImportError:
        raise UserError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), not installed here") from None
    with open_regular(path, DATA_FILE, single_link=single_link) as stream:  # pyarrow reads this file, not the name
        try:
            if os.fstat(stream.fileno()).st_size > MAX_PARQUET_BYTES:
                raise bad(str(path), f"larger than {MAX_PARQUET_BYTES >> 20} MiB: refused")
            rows = pq.read_table(stream).to_pylist()
        except UserError:
            raise
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others for a damaged file
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise bad(str(path), f"not a readable Parquet file ({text})") from None
    return numbered(rows, str(path))


def read_source(source: DataSource) -> list[Located]:
    """Every row of the source with where it came from (file and line, or row number)."""
    if source.path is None:
        from relaxtui.evals.tasks.hub import load_hub_rows

        assert source.hub is not None
        return load_hub_rows(source.hub, config=source.config, split=source.split, revision=source.revision)
    try:
        if source.path.suffix.lower() in PARQUET_SUFFIXES:
            return parquet_rows(source.path, single_link=source.contained)
        return read_rows(source.path, single_link=source.contained)
    except HardLinked as exc:
        raise hard_linked(exc) from None
