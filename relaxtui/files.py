"""Reading a file a user named: a regular file, checked before a byte is read, and read with a bound (issue 34).

Why: a path from outside (a task file, its data, a saved chat, a profile, a run folder's files, ``--data``) may
name a FIFO, a device or a folder. A plain ``open`` of a FIFO blocks until a writer comes, forever in practice;
``/dev/zero`` reads at full speed forever; a folder fails late with a confusing error. Here the name is
``stat``-ed first (so a device is never even opened), then opened with ``O_NONBLOCK`` (a FIFO swapped in after
the stat cannot block the open) and ``fstat``-ed again: anything but a regular file is one UserError line,
``task data /tmp/fifo is not a regular file (a FIFO)``, exit code 2. Every reader of a user-named path goes
through :func:`open_regular` or :func:`read_regular_bytes`. ``single_link=True`` also refuses a file with more than
one name (a hard link): for a path someone else wrote (a task file's data), which must stay in its folder, since a
hard link is a name in the folder for a file that may lie anywhere on the file system, and nothing can follow it.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from relaxtui.errors import UserError

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class FileRefused(UserError):
    """A user-named file that cannot be read as one: missing, not a regular file, unreadable or too big.

    ``reason`` is the part after the name, for callers that put their own words in front
    (``cannot resume chat.json: is not a regular file (a FIFO)``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class FileMissing(FileRefused):
    """The name points at nothing (callers that tolerate an absent file catch this one only)."""


class NotRegularFile(FileRefused):
    """A FIFO, a device, a socket or a folder where a file is expected."""


class HardLinked(FileRefused):
    """A file with more than one name, where one was asked for (``single_link``)."""


class FileTooBig(FileRefused):
    """More bytes than the reader's bound; ``size`` is what the file holds (at least the bound plus one)."""

    def __init__(self, message: str, reason: str, size: int) -> None:
        super().__init__(message, reason)
        self.size = size


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words: ``a FIFO``, ``a directory``, ``a character device``..."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def _refuse_kind(mode: int, path: Path | str, what: str) -> None:
    if not stat.S_ISREG(mode):
        reason = f"is not a regular file ({kind_of(mode)})"
        raise NotRegularFile(f"{what} {path} {reason}", reason)


def _os_error(exc: OSError, path: Path | str, what: str) -> FileRefused:
    if isinstance(exc, FileNotFoundError):
        return FileMissing(f"{what} not found: {path}", exc.strerror or "No such file or directory")
    reason = f"cannot be read ({exc.strerror or exc})"
    return FileRefused(f"{what} {path} {reason}", reason)


def check_regular(path: Path | str, what: str) -> None:
    """Raise unless ``path`` (links followed) is an existing regular file; opens nothing (for a reader that takes
    a path only, such as a library; :func:`open_regular` checks again on the open file)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _os_error(exc, path, what) from None
    except ValueError:  # an embedded NUL byte
        raise FileMissing(f"{what} not found: {path}", "not a valid file name") from None
    _refuse_kind(info.st_mode, path, what)


def open_regular(path: Path | str, what: str, *, single_link: bool = False) -> BinaryIO:
    """``path`` opened for reading in binary, known to be a regular file; the caller bounds what it reads.
    ``what`` names the file in messages (``task data``, ``saved chat``). ``single_link``: refuse a file with other
    names too (hard links), checked on the open file."""
    check_regular(path, what)  # a device or FIFO is never opened at all
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise _os_error(exc, path, what) from None
    try:
        info = os.fstat(fd)
        _refuse_kind(info.st_mode, path, what)  # swapped in between the stat and the open
        if single_link and info.st_nlink > 1:
            reason = (f"has {info.st_nlink} hard links: another name for a file that may lie anywhere on this file "
                      "system")
            raise HardLinked(f"{what} {path} {reason}", reason)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (the size is checked before reading, and the read
    is bounded too: the file may grow in between); more is :class:`FileTooBig`."""
    with open_regular(path, what) as stream:
        try:
            size = os.fstat(stream.fileno()).st_size
            data = b"" if size > limit else stream.read(limit + 1)
        except OSError as exc:
            raise _os_error(exc, path, what) from None
    if size > limit or len(data) > limit:
        reason = f"is larger than {_bytes(limit)}, more than any {what} holds"
        raise FileTooBig(f"{what} {path} {reason}", reason, max(size, len(data)))
    return data


def read_regular_text(path: Path | str, limit: int, what: str) -> str:
    """A regular file of at most ``limit`` bytes as strict UTF-8 (a BOM allowed); bytes that are not UTF-8 are
    one line naming their offset."""
    data = read_regular_bytes(path, limit, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        reason = f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        raise FileRefused(f"{what} {path} {reason}", reason) from None


def _bytes(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` whole or not at all, through a new temporary file renamed over it: a kill never leaves half
    a file, and a symbolic link planted under the name is replaced, never followed into another file."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
