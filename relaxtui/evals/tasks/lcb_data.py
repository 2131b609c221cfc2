"""LiveCodeBench's test cases, decoded without trusting a byte of them (issue 17).

LiveCodeBench ships public tests as a JSON string and private tests as base64(zlib(pickle(JSON string))).
Upstream unpickles that with the stock unpickler, which runs any callable a crafted row names, outside the
sandbox and before a model loads. Here the pickle is first scanned opcode by opcode: only opcodes that build
plain values (str, bytes, int, float, bool, None, list, tuple, dict) pass, so no global, constructor or
persistent id can appear, with bounded opcode count and memo indices (CPython's unpickler allocates a memo
as large as the largest index it is given). Then ``SafeUnpickler``, whose ``find_class`` and
``persistent_load`` always refuse, loads it; the result must be the JSON string LiveCodeBench pickles. The
base64 text and the decompressed bytes are bounded, so a zip bomb is refused after at most MAX_TESTS_BYTES.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import pickletools
import zlib
from typing import Any

from relaxtui.evals.tasks.base import as_object, bad, describe, field_str, json_problem, parse_json

MAX_TESTS_BYTES = 256 * 2**20  # decompressed; LiveCodeBench's largest private test sets are tens of MB
MAX_PACKED_CHARS = MAX_TESTS_BYTES * 3 // 2  # base64 is 4/3 of its bytes; zlib output is at most ~0.1% larger
MAX_PICKLE_OPS = 100_000  # a pickled string takes about five
PLAIN_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
    "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
})
MEMO_WRITES = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


class SafeUnpickler(pickle.Unpickler):
    """An unpickler for plain values only: it resolves no global and no persistent id, so nothing can run."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def scan_plain_pickle(data: bytes) -> None:
    """Raise unless ``data`` is a pickle of plain values: every opcode on the allowlist, few, small memo."""
    for count, (opcode, arg, _position) in enumerate(pickletools.genops(data)):
        if count >= MAX_PICKLE_OPS:
            raise pickle.UnpicklingError(f"more than {MAX_PICKLE_OPS} opcodes")
        if opcode.name not in PLAIN_OPCODES:
            raise pickle.UnpicklingError(f"refused opcode {opcode.name}")
        if opcode.name in MEMO_WRITES and isinstance(arg, int) and arg >= MAX_PICKLE_OPS:  # arg: the memo index
            raise pickle.UnpicklingError(f"memo index {arg} out of range")


def unpickle_plain(data: bytes, where: str) -> Any:
    """The plain value pickled in ``data``; anything else is a UserError and nothing in it runs."""
    try:
        scan_plain_pickle(data)
        return SafeUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a corrupt pickle raises many types: UnpicklingError, ValueError, EOFError, KeyError
        raise bad(where, f"refused pickled data ({type(exc).__name__}: {exc})") from None


def inflate(packed: bytes, where: str, not_json: str) -> bytes:
    """zlib-decompress ``packed``, refusing output beyond MAX_TESTS_BYTES before it is all produced."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(packed, MAX_TESTS_BYTES + 1)
    except zlib.error as exc:
        raise bad(where, f"neither JSON ({not_json}) nor packed tests (zlib: {exc})") from None
    if len(data) > MAX_TESTS_BYTES:
        raise bad(where, f"packed test cases decompress to more than {MAX_TESTS_BYTES >> 20} MiB: refused")
    if not inflater.eof:
        raise bad(where, "packed test cases are truncated (incomplete zlib stream)")
    return data


def unpack(raw: str, where: str, not_json: str) -> Any:
    """The JSON value in LiveCodeBench's base64(zlib(pickle(JSON string))) form, as upstream decodes it."""
    if len(raw) > MAX_PACKED_CHARS:
        raise bad(where, f"packed test cases longer than {MAX_PACKED_CHARS >> 20} Mi characters: refused")
    try:  # as upstream: characters outside the base64 alphabet are discarded
        packed = base64.b64decode(raw.encode("utf-8"))
    except ValueError as exc:  # binascii.Error, UnicodeEncodeError
        raise bad(where, f"neither JSON ({not_json}) nor packed tests (base64: {exc})") from None
    text = unpickle_plain(inflate(packed, where, not_json), where)
    if not isinstance(text, str | bytes):
        raise bad(where, f"packed test cases must hold a JSON string, not {describe(text)}")
    return parse_json(text, f"{where} (unpacked)")


def checked_tests(value: Any, where: str) -> list[dict[str, Any]]:
    """``value`` if it is a list of test objects with string ``input`` and ``output`` (and ``testtype``)."""
    if not isinstance(value, list):
        raise bad(where, f"must be a list of test cases, not {describe(value)}")
    for number, test in enumerate(value, start=1):
        at = f"{where} test {number}"
        as_object(test, at)
        field_str(test, "input", at)
        field_str(test, "output", at)
        if "testtype" in test:
            field_str(test, "testtype", at)
    return value


def decode_tests(raw: Any, where: str = "test cases") -> list[dict[str, Any]]:
    """A test-case field: a list, a JSON string, LiveCodeBench's packed form, or empty; checked either way."""
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        try:  # upstream's order: JSON first, the packed form when that fails
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            value = unpack(raw, where, json_problem(exc))
        except (RecursionError, ValueError) as exc:
            raise bad(where, json_problem(exc)) from None
    elif isinstance(raw, list):
        value = raw
    else:
        raise bad(where, f"must be a JSON string or a list of test cases, not {describe(raw)}")
    return checked_tests(value, where)


def decode_metadata(raw: Any, where: str) -> dict[str, Any]:
    """The ``metadata`` field (a JSON object, or a string holding one); a ``func_name`` must be an identifier,
    since the functional-test harness calls it by name."""
    raw = raw or "{}"  # as before: a missing, null or empty field is no metadata
    metadata = parse_json(raw, where) if isinstance(raw, str) else raw
    if not isinstance(metadata, dict):
        raise bad(where, f"must be a JSON object, not {describe(metadata)}")
    name = metadata.get("func_name")
    if name is not None and not isinstance(name, str):
        raise bad(where, f"func_name must be a string, not {describe(name)}")
    if name and not name.isidentifier():
        raise bad(where, f"func_name must be a Python identifier, not {name[:40]!r}")
    return metadata

