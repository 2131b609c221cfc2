"""Outside text as it may be shown: file names, GGUF metadata, manifest fields, hub records.

A run folder or a model file can hold newlines, terminal escape sequences or bytes that were not UTF-8; shown
as they are they would forge lines of a report, a Markdown file or the terminal. Shared by the CLI and the
reports (which must not import commands). Also the words every face shares: the names of speed verdicts, one
vocabulary in generate, chat, serve, bench, eval and tune (issue 31).
"""

from __future__ import annotations

import unicodedata


def terminal_text(text: str) -> str:
    """Outside text (file names, GGUF metadata, hub records) as it may be printed: bytes that were not UTF-8
    (lone surrogates, which a UTF-8 stdout cannot encode) and control characters other than newline and tab
    (terminal escape sequences) become visible ``\\xNN``-style escapes."""
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cs"):
            out.append(ascii(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def one_line(text: object) -> str:
    """``text`` as one line of printable text: whitespace runs (newlines too) become one space, then
    ``terminal_text`` escapes what is left."""
    return terminal_text(" ".join(str(text).split()))


def type_name(value: object, *, array: str = "a list", table: str = "an object") -> str:
    """What a decoded value is, in words for a one-line error: JSON readers say list (or array) and object,
    TOML ones array and table (``array``/``table``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return array
    return table if isinstance(value, dict) else type(value).__name__


# -- one vocabulary for speed verdicts: a speed-up is named by how it was obtained ----------------------------------
WALL_CLOCK = "wall-clock"  # measured: tokens/s over the verifier alone's, both timed on this machine
PREDICTED = "predicted"  # the cost model's forecast of a speed (bench's calibrated costs, --draft-max auto)
PRICED = "priced"  # the cost model's price of the rounds that ran, under a named cost profile
REPLAYED = "replayed"  # the cost model's price of rounds that did not run: another rule's expected acceptance on a
# recorded strict run's own drafts (costmodel/replay.py), priced as PRICED prices


def priced_label(profile: str) -> str:
    """A priced speed-up's name beside its number, as every table and sentence writes it: ``priced this-machine``."""
    return f"{PRICED} {profile}"

