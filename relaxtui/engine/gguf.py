"""A small, validating reader for GGUF headers, so we can check and describe a model file without loading it.

Why our own: `models list` and the "is this GGUF at all?" check must not pay for loading weights, and
llama.cpp aborts noisily on garbage. Every byte is treated as hostile: each length, count and type is checked
against the bytes the file still has and against sane caps *before* anything is allocated or skipped, so a
crafted file is one UserError line ("not a valid GGUF model file (WHAT at byte N): PATH"), never a MemoryError,
an OverflowError or a hang. The key/value header and the tensor-info table are read; large arrays (the
152k-token vocabulary) are skipped unless asked for, keeping their length and where they lie in the file.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from relaxtui.errors import UserError
from relaxtui.files import check_regular, open_regular

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # v1 used 32-bit counts; llama.cpp refuses it too
MAX_STRING = 1 << 30  # llama.cpp's GGUF_MAX_STRING_LENGTH
MAX_KEY = 1 << 16  # keys are short ASCII paths ("llama.attention.head_count")
MAX_KEPT_STRING = 64 << 20  # a string value we keep in memory (chat templates are kilobytes)
MAX_ARRAY_DEPTH = 4  # arrays of arrays: no model nests them; llama.cpp accepts none
MAX_ARRAY = 1 << 30  # llama.cpp's GGUF_MAX_ARRAY_ELEMENTS
MAX_LISTED = 1 << 24  # elements of an array we walk one by one or keep (vocabularies are < 300k)
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # a tensor name must be shorter (ggml_tensor.name is char[64])
DEFAULT_ALIGNMENT = 32
INT64_MAX = (1 << 63) - 1

# GGUF value types -> struct (scalars only).
_SCALARS = {t: struct.Struct(f) for t, f in {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
                                              7: "<?", 10: "<Q", 11: "<q", 12: "<d"}.items()}
_STRING, _ARRAY = 8, 9
VALUE_TYPES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
               8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}
INTEGER_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
_U32, _I32, _U64, _I64 = (struct.Struct(f) for f in ("<I", "<i", "<Q", "<q"))

# llama_ftype values (general.file_type) -> the names llama.cpp's quantiser uses.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}

# ggml_type -> (name, elements per block, bytes per block): ggml.c's type_traits in the vendored llama.cpp of
# llama-cpp-python 0.3.36, block sizes from sizeof(block_*) in ggml-common.h. Removed types (4, 5, 31-33, 36-38)
# have no traits there and are refused.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}


@dataclass(frozen=True)
class ArrayInfo:
    """A skipped GGUF array: we keep its element type and length (e.g. the vocabulary size), and where its
    elements lie in the file (``offset``, ``size`` bytes) so a check can read them later (read_array)."""

    element_type: int
    length: int
    offset: int = field(default=0, compare=False)
    size: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor-info table; ``offset`` is relative to the data section, as in the file."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length (token_embd is [n_embd, n_vocab])
    ggml_type: int
    offset: int
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    tensor_count: int
    metadata: dict[str, Any] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False)
    types: dict[str, int] = field(default_factory=dict, repr=False)  # key -> GGUF value type
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0  # where tensor data starts (everything before it is header)
    file_size: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", self.path.stem))

    @property
    def vocab_size(self) -> int | None:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        if isinstance(tokens, ArrayInfo):
            return tokens.length
        if isinstance(tokens, list):
            return len(tokens)
        return None

    @property
    def quantisation(self) -> str:
        file_type = self.metadata.get("general.file_type")
        if not isinstance(file_type, int):
            return "?"
        return FILE_TYPES.get(file_type, f"type {file_type}")

    @property
    def chat_template(self) -> str | None:
        template = self.metadata.get("tokenizer.chat_template")
        return template if isinstance(template, str) else None

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)


class _Corrupt(Exception):
    """What is wrong, and the byte where the offending field starts."""

    def __init__(self, what: str, at: int) -> None:
        super().__init__(f"byte {at}: {what}")


def _num(n: int) -> str:
    """Huge crafted values read better as powers of two (2^63) than as 19 digits."""
    return f"2^{n.bit_length() - 1}" if n >= 1 << 16 and n & (n - 1) == 0 else str(n)


def _show(text: str) -> str:
    """A name from the file, quoted and escaped so the message stays one short line."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


class _Cursor:
    """Reads a file through a window, every read bounded by the size the file had when opened. No mmap: a file
    truncated under us must be an error, not a SIGBUS."""

    CHUNK = 1 << 20

    def __init__(self, stream: BinaryIO, size: int, pos: int = 0) -> None:
        self.stream, self.size, self.pos = stream, size, pos
        self.buf, self.start = b"", 0

    def left(self) -> int:
        return self.size - self.pos

    def _window(self, n: int, what: str) -> int:
        """Make [pos, pos + n) readable; return its offset in the window."""
        if n > self.size - self.pos:
            raise _Corrupt(f"truncated: {what} needs {n} bytes, the file ends at byte {self.size}", self.pos)
        off = self.pos - self.start
        if off < 0 or off + n > len(self.buf):
            self.stream.seek(self.pos)
            self.buf, self.start, off = self.stream.read(max(n, self.CHUNK)), self.pos, 0
            if len(self.buf) < n:
                raise _Corrupt(f"truncated: the file shrank while {what} was read", self.pos)
        return off

    def unpack(self, st: struct.Struct, what: str) -> Any:
        off = self._window(st.size, what)
        self.pos += st.size
        return st.unpack_from(self.buf, off)[0]

    def take(self, n: int, what: str) -> bytes:
        off = self._window(n, what)
        self.pos += n
        return self.buf[off:off + n]

    def length(self, what: str, cap: int, unit: int = 1) -> int:
        """A u64 length/count field: n items of at least ``unit`` bytes must fit in the file and under ``cap``."""
        at = self.pos
        n = self.unpack(_U64, what)
        if n > cap:
            raise _Corrupt(f"{what} {_num(n)} exceeds the cap of {_num(cap)}", at)
        if n * unit > self.size - self.pos:
            raise _Corrupt(f"{what} {_num(n)} exceeds the file ({self.left()} bytes left)", at)
        return n

    def string(self, what: str, cap: int = MAX_STRING) -> bytes:
        return self.take(self.length(f"{what} length", cap), what)

    def strings(self, count: int, keep: bool, what: str) -> list[bytes]:
        """``count`` strings in a row: the vocabulary's hot loop (two of 152k strings, at every start), so the window
        is read through locals and refilled only when a length or a kept string crosses its end."""
        out: list[bytes] = []
        unpack, size = _U64.unpack_from, self.size
        buf, start, pos = self.buf, self.start, self.pos
        end = start + min(len(buf), size - start)  # (never past the size it had when opened)
        for _ in range(count):
            if pos < start or pos + 8 > end:
                self.pos = pos
                self._window(8, what)
                buf, start = self.buf, self.start
                end = start + min(len(buf), size - start)
            n = unpack(buf, pos - start)[0]
            pos += 8
            if n > MAX_STRING or n > size - pos:
                raise _Corrupt(f"{what} length {_num(n)} exceeds the file ({size - pos} bytes left)", pos - 8)
            if keep:
                if pos + n > end:
                    self.pos = pos
                    self._window(n, what)
                    buf, start = self.buf, self.start
                    end = start + min(len(buf), size - start)
                out.append(buf[pos - start:pos - start + n])
            pos += n
        self.pos = pos
        return out


def _element_size(element_type: int) -> int:
    """The fewest bytes one element of this type takes (a string: its u64 length; an array: type + length)."""
    return _SCALARS[element_type].size if element_type in _SCALARS else (8 if element_type == _STRING else 12)


def _value(cur: _Cursor, value_type: int, keep: bool, key: str, depth: int = 0) -> Any:
    at = cur.pos - 4  # the type field we were given
    if value_type in _SCALARS:
        return cur.unpack(_SCALARS[value_type], f"the value of {_show(key)}")
    if value_type == _STRING:
        return cur.string(f"the string {_show(key)}", MAX_KEPT_STRING).decode("utf-8", errors="replace")
    if value_type != _ARRAY:
        raise _Corrupt(f"unknown value type {_num(value_type)} for {_show(key)}", at)
    if depth >= MAX_ARRAY_DEPTH:
        raise _Corrupt(f"arrays nested deeper than {MAX_ARRAY_DEPTH} in {_show(key)}", cur.pos)
    type_at = cur.pos
    element_type = cur.unpack(_U32, f"the element type of {_show(key)}")
    if element_type not in VALUE_TYPES:
        raise _Corrupt(f"unknown array element type {_num(element_type)} for {_show(key)}", type_at)
    walked = element_type in (_STRING, _ARRAY) or keep  # a skipped scalar array costs nothing, whatever its length
    length = cur.length(f"array length of {_show(key)}", MAX_LISTED if walked else MAX_ARRAY,
                        _element_size(element_type))
    start = cur.pos
    if element_type in _SCALARS:
        size = _SCALARS[element_type].size * length  # fits: length() checked it against the bytes left
        if keep:
            return [v[0] for v in _SCALARS[element_type].iter_unpack(cur.take(size, f"the array {_show(key)}"))]
        cur.pos += size
    elif element_type == _STRING:
        items = cur.strings(length, keep, f"a string in {_show(key)}")
        if keep:
            return [item.decode("utf-8", errors="replace") for item in items]
    else:
        values = []
        for _ in range(length):  # each element is an element type, a length and the elements
            values.append(_value(cur, _ARRAY, keep, key, depth + 1))
        if keep:
            return values
    return ArrayInfo(element_type, length, start, cur.pos - start)


def _tensor(cur: _Cursor, index: int, names: set[str], alignment: int) -> TensorInfo:
    at = cur.pos
    raw = cur.string(f"the name of tensor {index}", GGML_MAX_NAME - 1)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt(f"the name of tensor {index} is not valid UTF-8", at) from None
    if name in names:
        raise _Corrupt(f"duplicate tensor {_show(name)}", at)
    names.add(name)
    dims_at = cur.pos
    n_dims = cur.unpack(_U32, f"the dimension count of {_show(name)}")
    if n_dims > GGML_MAX_DIMS:
        raise _Corrupt(f"tensor {_show(name)} has {_num(n_dims)} dimensions (GGML_MAX_DIMS is {GGML_MAX_DIMS})",
                       dims_at)
    shape, elements = [], 1
    for j in range(n_dims):
        dim_at = cur.pos
        dim = cur.unpack(_I64, f"dimension {j} of {_show(name)}")
        if dim < 1:
            raise _Corrupt(f"tensor {_show(name)} has dimension {j} = {dim} (must be positive)", dim_at)
        elements *= dim
        if elements > INT64_MAX:
            raise _Corrupt(f"tensor {_show(name)} has more than 2^63 elements", dim_at)
        shape.append(dim)
    type_at = cur.pos
    ggml_type = cur.unpack(_I32, f"the type of {_show(name)}")
    if ggml_type not in GGML_TYPES:
        raise _Corrupt(f"tensor {_show(name)} has unknown ggml type {ggml_type}", type_at)
    type_name, block, block_bytes = GGML_TYPES[ggml_type]
    row = shape[0] if shape else 1
    if row % block:
        raise _Corrupt(f"tensor {_show(name)} rows of {row} are not a whole number of {type_name} blocks "
                       f"({block})", type_at)
    offset_at = cur.pos
    offset = cur.unpack(_U64, f"the data offset of {_show(name)}")
    if offset % alignment:
        raise _Corrupt(f"tensor {_show(name)} data offset {_num(offset)} is not a multiple of the alignment "
                       f"{alignment}", offset_at)
    return TensorInfo(name, tuple(shape), ggml_type, offset, elements // block * block_bytes)


def _parse(path: Path, cur: _Cursor, keep_arrays: bool) -> GGUFHeader:
    version = cur.unpack(_U32, "the GGUF version")
    if version not in GGUF_VERSIONS:
        hint = " (a big-endian file?)" if version & 0xFFFF == 0 else ""
        raise _Corrupt(f"unsupported GGUF version {_num(version)}{hint}; llama.cpp reads 2 and 3", 4)
    tensor_count = cur.length("tensor count", INT64_MAX, 24)  # name length, n_dims, type, offset
    kv_count = cur.length("key/value count", INT64_MAX, 13)  # key length, 1-byte key, type, 1-byte value
    if tensor_count * 24 + kv_count * 13 > cur.left():
        raise _Corrupt(f"{_num(tensor_count)} tensors and {_num(kv_count)} keys cannot fit in the "
                       f"{cur.left()} bytes left", 8)
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for index in range(kv_count):
        at = cur.pos
        raw = cur.string(f"key {index}", MAX_KEY)
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Corrupt(f"key {index} is not valid UTF-8", at) from None
        if not key or key in metadata:
            raise _Corrupt(f"{'empty' if not key else 'duplicate'} key {_show(key)}", at)
        value_type = cur.unpack(_U32, f"the type of {_show(key)}")
        metadata[key] = _value(cur, value_type, keep_arrays, key)
        types[key] = value_type
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in types and types["general.alignment"] != 4:
        raise _Corrupt(f"general.alignment is a {VALUE_TYPES[types['general.alignment']]}, not a uint32", 0)
    if alignment == 0 or alignment & (alignment - 1):
        raise _Corrupt(f"general.alignment {alignment} is not a power of two", 0)
    names: set[str] = set()
    tensors = tuple(_tensor(cur, i, names, alignment) for i in range(tensor_count))
    data_offset = -(-cur.pos // alignment) * alignment if tensor_count else cur.pos
    if data_offset > cur.size:
        raise _Corrupt(f"the tensor data would start past the end of the file ({cur.size} bytes)", cur.pos)
    for tensor in tensors:
        end = data_offset + tensor.offset + tensor.nbytes
        if end > cur.size:
            raise _Corrupt(f"tensor {_show(tensor.name)} data ({_num(tensor.nbytes)} bytes) ends at byte "
                           f"{_num(end)}, past the end of the file ({cur.size} bytes)", data_offset + tensor.offset)
    return GGUFHeader(path=path, version=version, tensor_count=tensor_count, metadata=metadata, tensors=tensors,
                      types=types, alignment=alignment, data_offset=data_offset, file_size=cur.size)


def _open(path: Path, body, *args: Any) -> Any:
    """Run ``body(path, cursor, *args)`` on the file; every failure becomes one UserError line naming it."""
    try:
        with open_regular(path, "model file") as stream:  # a FIFO or device swapped in: one line, no hang
            size = os.fstat(stream.fileno()).st_size
            if stream.read(4) != GGUF_MAGIC:
                raise UserError(f"not a GGUF model file (bad magic): {path}")
            return body(path, _Cursor(stream, size, 4), *args)
    except _Corrupt as exc:
        raise UserError(f"not a valid GGUF model file ({exc}): {path}") from None
    except MemoryError:  # belt and braces: every length is capped above, so only a tiny machine gets here
        raise UserError(f"not a valid GGUF model file (too large to read into memory): {path}") from None
    except OSError as exc:
        raise UserError(f"cannot read model file {path}: {exc.strerror or exc}") from None


def read_header(path: str | Path, *, keep_arrays: bool = False) -> GGUFHeader:
    """Read and validate a GGUF file's key/value header and tensor-info table. Raises UserError (one line)
    when the file is missing, not GGUF, or corrupt anywhere in what is read.

    Parsed once per process and file (``_HEADERS``): a face starting checks the same two files several times (the
    model checks, the capacity check, each load), and walking a 152k-token vocabulary's strings takes a third of a
    second each time. The cache is keyed by the file's identity as ``stat`` gives it (device, inode, size, and the
    modification and change times in nanoseconds), so a file rewritten or replaced is parsed again. A file changed
    in the last ``SETTLED_NS`` is parsed every time: the kernel stamps times at its clock tick, so two writes a few
    milliseconds apart may leave the same times (git's "racily clean" index entries, the same care)."""
    path = Path(path)
    check_regular(path, "model file")  # missing: "model file not found: PATH"; a FIFO or a folder: one line too
    identity = _identity(path)
    key = (str(path), keep_arrays, identity)
    with _HEADERS_LOCK:
        header = _HEADERS.get(key)
    if header is None:
        header = _open(path, _parse, keep_arrays)
        if identity is not None and time.time_ns() - max(identity[3:]) > SETTLED_NS:
            with _HEADERS_LOCK:
                _HEADERS[key] = header
                while len(_HEADERS) > MAX_CACHED_HEADERS:
                    del _HEADERS[next(iter(_HEADERS))]  # the oldest parsed first
    return header


MAX_CACHED_HEADERS = 32  # a process reads a few models; a header without its arrays is kilobytes
SETTLED_NS = 2_000_000_000  # a file's times older than this are trusted to change with its next write
_HEADERS: dict[tuple[str, bool, tuple[int, ...] | None], GGUFHeader] = {}
_HEADERS_LOCK = threading.Lock()  # (faces read headers from worker threads too)


def _identity(path: Path) -> tuple[int, ...] | None:
    """The file's identity for the header cache: what changes when it is rewritten or replaced (None: not known).
    The last two are its modification and change times."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def read_array(header: GGUFHeader, key: str) -> list[Any]:
    """The elements of a skipped array (scalars as numbers, strings as raw bytes), re-validated on reading:
    the file may have changed since its header was read."""
    info = header.metadata.get(key)
    if not isinstance(info, ArrayInfo) or info.element_type == _ARRAY:
        raise UserError(f"{key} is not a flat array in {header.path}")

    def body(_path: Path, cur: _Cursor) -> list[Any]:
        cur.pos = info.offset
        if info.element_type == _STRING:
            return cur.strings(info.length, True, f"a string in {_show(key)}")
        if info.length > MAX_LISTED:
            raise _Corrupt(f"array {_show(key)} of {_num(info.length)} elements is too long to read", info.offset)
        scalar = _SCALARS[info.element_type]
        return [v[0] for v in scalar.iter_unpack(cur.take(scalar.size * info.length, f"the array {_show(key)}"))]

    return _open(header.path, body)


FINGERPRINT_SAMPLES = 16
FINGERPRINT_SAMPLE_BYTES = 64 << 10


def model_fingerprint(path: str | Path) -> str:
    """A cheap content identity of a model file, "SIZE:16 hex digits": sha256 over the size, the whole header
    (metadata and tensor table: everything before the tensor data) and 16 samples of 64 KiB spread evenly over
    the tensor data. Why not a full sha256: that reads gigabytes; this reads ~1 MiB plus the header, well under
    a second for any model, and still tells apart two files that merely share a name (a re-quantised or
    fine-tuned model changes the header or every sampled block). Raises UserError for a file that is not GGUF."""
    header = read_header(path)
    size, start = header.file_size, header.data_offset
    digest = hashlib.sha256(f"gguf-fingerprint-v1 {size}\n".encode())
    span = max(0, size - start - FINGERPRINT_SAMPLE_BYTES)
    offsets = sorted({start + span * i // (FINGERPRINT_SAMPLES - 1) for i in range(FINGERPRINT_SAMPLES)})
    try:
        with header.path.open("rb") as stream:
            while stream.tell() < start:
                chunk = stream.read(min(1 << 20, start - stream.tell()))
                if not chunk:
                    break
                digest.update(chunk)
            for offset in offsets:
                stream.seek(offset)
                digest.update(stream.read(FINGERPRINT_SAMPLE_BYTES))
    except OSError as exc:
        raise UserError(f"cannot read model file {header.path}: {exc.strerror or exc}") from None
    return f"{size}:{digest.hexdigest()[:16]}"
