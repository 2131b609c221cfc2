"""What every task shares: the Sample it yields, the Task base class, data-file loading, think-stripping.

Following lighteval: one file per benchmark with its prompt template (citing its source), a pure
record → sample function, and an explicit ``version`` that goes into every result record ("increment when
the dataset or the prompt changes").

Data files and hub rows may be hostile (issue 17): ``read_rows`` and the ``field_*`` checks turn every defect
(bytes that are not UTF-8 or not gzip, JSON too deep or malformed, a row or field of the wrong type) into one
UserError line naming the file, the row and the field, and never another exception type.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from relaxtui.display import type_name
from relaxtui.errors import UserError
from relaxtui.files import open_regular
from relaxtui.text import Message

REPO_ROOT = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """``$RELAXTUI_EVALS_DATA`` (checked: a directory, or one that can be made) or the repository's evals/data."""
    from relaxtui import envvars

    return envvars.directory("RELAXTUI_EVALS_DATA", REPO_ROOT / "evals" / "data")


@dataclass(frozen=True)
class Sample:
    id: str
    messages: tuple[Message, ...]
    gold: Any
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Score:
    parsed: Any
    correct: bool
    detail: str = ""


THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL | re.IGNORECASE)
THINK_UNCLOSED = re.compile(r"<think>.*", re.DOTALL | re.IGNORECASE)


def strip_think(text: str) -> str:
    """What the answer parsers see of a reply: thinking removed the way the paper's reproduction does
    (docs/protocols.md).

    graphcore-research/relaxed-spec-dec-repro, ``src/ens_spec_dec/tasks/_text.py``: every closed
    ``<think>…</think>`` block goes with the whitespace after it, then everything from a ``<think>`` that is
    never closed to the end of the reply (so a reply that is still thinking parses to nothing, while text
    written before that tag stays); tags match in any case; a ``</think>`` without an opening tag (the prompt
    owned it) stays in place, and the reasoning before it is parsed too. The result is stripped.
    """
    return THINK_UNCLOSED.sub("", THINK_BLOCK.sub("", text)).strip()


# Every data file and hub row is read as if hostile (issue 17): whatever the bytes, loading either yields samples
# or raises one UserError line naming the file, the row and the field. These bound what one row or one
# decompressed file may take, far above any real benchmark (a LiveCodeBench row is a few MB).
MAX_ROW_BYTES = 512 * 2**20
MAX_GZIP_BYTES = 2**30
SURROGATE = re.compile("[\ud800-\udfff]")

DATA_FILE = "data file"  # how messages name a data file (`data file x.jsonl is not a regular file (a FIFO)`)
Located = tuple[str, dict[str, Any]]  # (where the row came from, e.g. "file.jsonl:3" or "repo row 3"; the row)


def bad(where: str, what: str) -> UserError:
    """The one-line UserError for bad data at ``where``; newlines in either part are escaped."""
    return UserError(f"{where}: {what}".replace("\r", "\\r").replace("\n", "\\n"))


def describe(value: Any) -> str:
    """A JSON-ish name for the type of ``value``, for error messages."""
    return type_name(value)


def json_problem(exc: Exception) -> str:
    """What went wrong in ``json.loads``, in one line."""
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return f"unreadable JSON ({exc})"  # UnicodeDecodeError, or an integer over sys.get_int_max_str_digits()


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads`` whose every failure is a UserError: malformed text, nesting deep enough to exhaust the
    recursion limit, a number too long to convert, bytes that are not UTF-8."""
    try:
        return json.loads(text)
    except (RecursionError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad(where, json_problem(exc)) from None


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8; invalid bytes are a UserError naming their offset (and line, if there are several)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        at = f"line {line}, byte {exc.start}" if data.count(b"\n", 0, len(data) - 1) else f"byte {exc.start}"
        raise bad(where, f"not UTF-8 at {at} ({exc.reason})") from None


def as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(where, f"expected a JSON object, not {describe(value)}")
    return value


def numbered(rows: Iterable[Any], where: str) -> list[Located]:
    """Rows from somewhere without lines (the hub, a list in memory), located as ``where row N``."""
    return [(f"{where} row {n}", as_object(row, f"{where} row {n}")) for n, row in enumerate(rows, start=1)]


DataStream = IO[bytes] | gzip.GzipFile  # a data file as opened, or gunzipped on the fly


def _text_lines(stream: DataStream, path: Path, gzipped: bool) -> Iterable[tuple[int, bytes]]:
    """Numbered lines split as text mode splits them (``\\n``, ``\\r\\n`` and a lone ``\\r``), each bounded."""
    number = total = 0
    while chunk := stream.readline(MAX_ROW_BYTES + 1):
        if len(chunk) > MAX_ROW_BYTES:
            raise bad(f"{path}:{number + 1}", f"line longer than {MAX_ROW_BYTES >> 20} MiB")
        total += len(chunk)
        if gzipped and total > MAX_GZIP_BYTES:
            raise bad(str(path), f"decompresses to more than {MAX_GZIP_BYTES >> 20} MiB: refused")
        body = chunk[:-2] if chunk.endswith(b"\r\n") else chunk.rstrip(b"\n")
        for piece in body.split(b"\r"):
            number += 1
            yield number, piece


def _jsonl(stream: DataStream, path: Path, gzipped: bool) -> list[Located]:
    rows = []
    for number, line in _text_lines(stream, path, gzipped):
        where = f"{path}:{number}"
        text = decode_utf8(line, where)
        if text.strip():
            rows.append((where, as_object(parse_json(text, where), where)))
    return rows


def _whole(stream: DataStream, path: Path, gzipped: bool) -> str:
    data = stream.read(MAX_GZIP_BYTES + 1)  # a whole-file format (JSON, CSV) is read into memory: bounded
    if len(data) > MAX_GZIP_BYTES:
        what = "decompresses to" if gzipped else "holds"
        raise bad(str(path), f"{what} more than {MAX_GZIP_BYTES >> 20} MiB: refused")
    return decode_utf8(data, str(path))


def _json_list(stream: DataStream, path: Path, gzipped: bool) -> list[Located]:
    rows = parse_json(_whole(stream, path, gzipped), str(path))
    if not isinstance(rows, list):
        raise bad(str(path), f"expected a JSON list of rows, not {describe(rows)}")
    return numbered(rows, str(path))


def _csv(stream: DataStream, path: Path, gzipped: bool) -> list[Located]:
    rows: list[Located] = []
    reader = csv.DictReader(io.StringIO(_whole(stream, path, gzipped), newline=""))
    try:
        for row in reader:
            rows.append((f"{path} row {len(rows) + 1}", row))
    except csv.Error as exc:
        raise bad(f"{path} row {len(rows) + 1}", f"malformed CSV ({exc})") from None
    return rows


def read_rows(path: Path, *, by_suffix: bool = True, single_link: bool = False) -> list[Located]:
    """The rows of a data file, each with where it came from; any defect is one UserError naming file and row.

    By suffix: ``.csv`` (a header row), ``.json`` (a list of objects), anything else JSON lines; ``.gz`` is
    gunzipped first (bounded) and read by the suffix before it (``HumanEval.jsonl.gz``). ``by_suffix=False``
    reads JSON lines whatever the name, as the math tasks always have. ``single_link``: refuse a hard-linked file
    (``relaxtui.files.open_regular``; a task file's own data path).
    """
    gzipped = path.suffix == ".gz"
    suffix = (path.with_suffix("") if gzipped else path).suffix if by_suffix else ".jsonl"
    reader = {".csv": _csv, ".json": _json_list}.get(suffix, _jsonl)
    with open_regular(path, DATA_FILE, single_link=single_link) as raw:  # a FIFO, a device or a folder: one line
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw as stream:
                return reader(stream, path, gzipped)
        except (OSError, EOFError, zlib.error) as exc:  # EOFError, zlib.error: a truncated or corrupt gzip stream
            kind = "not a valid gzip file" if gzipped else "cannot read data file"
            raise bad(str(path), f"{kind} ({exc})") from None


def require(row: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}")


def valid_text(value: str, where: str) -> str:
    """``value`` if it is valid Unicode: a ``\\ud800`` escape in JSON yields a lone surrogate, which no
    tokenizer, pipe or file can encode later."""
    found = SURROGATE.search(value)
    if found:
        raise bad(where, f"holds an unpaired surrogate (U+{ord(found.group()):04X}) at character {found.start()}")
    return value


def field_str(row: dict[str, Any], key: str, where: str) -> str:
    """The text field ``key`` of ``row``: present and a string (a prompt, a test, a choice)."""
    require(row, (key,), where)
    value = row[key]
    if not isinstance(value, str):
        raise bad(where, f"field {key!r} must be a string, not {describe(value)}")
    return valid_text(value, f"{where}: field {key!r}")


def field_label(row: dict[str, Any], key: str, where: str) -> str:
    """An id or an answer: a string, or an integer as JSON files and the hub often write them, as ``str()``."""
    require(row, (key,), where)
    value = row[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise bad(where, f"field {key!r} must be a string or an integer, not {describe(value)}")
    return valid_text(value, f"{where}: field {key!r}")


def field_optional_str(row: dict[str, Any], key: str, where: str) -> str:
    """A text field that may be absent or null (read as ``""``), else a string."""
    if row.get(key) is None:
        return ""
    return field_str(row, key, where)


def field_identifier(row: dict[str, Any], key: str, where: str) -> str:
    """A name that generated code calls (an entry point): a Python identifier, so it cannot inject code."""
    value = field_str(row, key, where)
    if not value.isidentifier():
        raise bad(where, f"field {key!r} must be a Python identifier, not {value[:40]!r}")
    return value


class Task:
    """A benchmark: load samples, parse an output, judge it."""

    name: ClassVar[str]
    version: ClassVar[int | str]  # a built-in task's number; a task file's ``N+sha:<digest>`` (taskfile.py)
    description: ClassVar[str] = ""
    max_tokens: ClassVar[int] = 4096  # a sensible default budget for this task

    def load(self, data: Path | None = None) -> list[Sample]:
        raise NotImplementedError

    def parse(self, text: str) -> Any:
        """The parsed answer, or None."""
        raise NotImplementedError

    def is_correct(self, parsed: Any, gold: Any) -> bool:
        raise NotImplementedError

    def score(self, text: str, sample: Sample) -> Score:
        parsed = self.parse(text)
        return Score(parsed, parsed is not None and self.is_correct(parsed, sample.gold))


TaskFactory = Callable[[], Task]
