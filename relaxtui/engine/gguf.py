"""A small reader for GGUF headers, so we can check and describe a model file without loading it.

Why our own: `models list` and the "is this GGUF at all?" check must not pay for loading weights, and
llama.cpp aborts noisily on garbage. Only the key/value header is read; large arrays (the 152k-token
vocabulary) are skipped unless asked for, keeping just their length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from relaxtui.errors import UserError

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars only).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# llama_ftype values (general.file_type) -> the names llama.cpp's quantiser uses.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}


@dataclass(frozen=True)
class ArrayInfo:
    """A skipped GGUF array: we keep its element type and length (e.g. the vocabulary size)."""

    element_type: int
    length: int


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    tensor_count: int
    metadata: dict[str, Any] = field(repr=False)

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
        if file_type is None:
            return "?"
        return FILE_TYPES.get(int(file_type), f"type {file_type}")

    @property
    def chat_template(self) -> str | None:
        template = self.metadata.get("tokenizer.chat_template")
        return template if isinstance(template, str) else None


def _read(stream: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = stream.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)[0]


def _read_string(stream: BinaryIO) -> str:
    length = _read(stream, "<Q")
    data = stream.read(length)
    if len(data) != length:
        raise EOFError
    return data.decode("utf-8", errors="replace")


def _read_value(stream: BinaryIO, value_type: int, keep_arrays: bool) -> Any:
    if value_type in _SCALARS:
        return _read(stream, _SCALARS[value_type])
    if value_type == _STRING:
        return _read_string(stream)
    if value_type == _ARRAY:
        element_type = _read(stream, "<I")
        length = _read(stream, "<Q")
        if keep_arrays:
            return [_read_value(stream, element_type, keep_arrays) for _ in range(length)]
        if element_type in _SCALARS:
            stream.seek(struct.calcsize(_SCALARS[element_type]) * length, 1)
        else:
            for _ in range(length):
                _read_value(stream, element_type, keep_arrays)
        return ArrayInfo(element_type, length)
    raise ValueError(f"unknown GGUF value type {value_type}")


def read_header(path: str | Path, *, keep_arrays: bool = False) -> GGUFHeader:
    """Read a GGUF file's key/value header. Raises UserError when the file is missing or not GGUF."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"model file not found: {path}")
    try:
        with path.open("rb") as stream:
            if stream.read(4) != GGUF_MAGIC:
                raise UserError(f"not a GGUF model file (bad magic): {path}")
            version = _read(stream, "<I")
            tensor_count = _read(stream, "<Q")
            kv_count = _read(stream, "<Q")
            metadata: dict[str, Any] = {}
            for _ in range(kv_count):
                key = _read_string(stream)
                value_type = _read(stream, "<I")
                metadata[key] = _read_value(stream, value_type, keep_arrays)
    except (EOFError, ValueError, struct.error) as exc:
        raise UserError(f"not a valid GGUF model file (truncated or corrupt header): {path}") from exc
    return GGUFHeader(path=path, version=version, tensor_count=tensor_count, metadata=metadata)
