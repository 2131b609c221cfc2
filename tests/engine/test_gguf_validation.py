"""Hostile GGUF files: the header reader, the pre-load check and the KV sizing give one-line UserErrors only.

A small valid GGUF is built here with struct, recording where every length, count and type field lies, so
the fuzzing can aim at exactly those; the `gguf` package (llama.cpp's own gguf-py) cross-checks the reader on
a file it wrote. The last tests take the real SmolLM2 file, break one hyper-parameter that makes llama.cpp
abort (SIGABRT), and check that relaxtui refuses it with exit 2 and one line instead.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxtui.engine.capacity import kv_bytes_per_token
from relaxtui.engine.gguf import (
    GGML_TYPES,
    ArrayInfo,
    model_fingerprint,
    read_array,
    read_header,
)
from relaxtui.engine.gguf_check import check_loadable
from relaxtui.errors import UserError

U8, I32, U32, F32, BOOL, STR, ARR, U64 = 0, 5, 4, 6, 7, 8, 9, 10
FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
TOKENS = ["<s>", "</s>", "a", "b", "ab", "\n"]


class Builder:
    """Writes GGUF v3 by hand, remembering the offset of every u64 length/count and u32 type/count field."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.u64_fields: list[int] = []
        self.u32_fields: list[int] = []

    def u32(self, value: int, *, field: bool = True) -> None:
        if field:
            self.u32_fields.append(len(self.out))
        self.out += struct.pack("<I", value)

    def u64(self, value: int) -> None:
        self.u64_fields.append(len(self.out))
        self.out += struct.pack("<Q", value)

    def string(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.u64(len(data))
        self.out += data

    def value(self, kind: int, value) -> None:
        if kind == STR:
            self.string(value)
        elif kind == ARR:
            element, items = value
            self.u32(element)
            self.u64(len(items))
            for item in items:
                self.value(element, item)
        else:
            self.out += struct.pack({U8: "<B", I32: "<i", U32: "<I", F32: "<f", BOOL: "<?", U64: "<Q"}[kind], value)


def base_kvs(**changes) -> list[tuple[str, int, object]]:
    """A tiny dense llama: 2 layers, 4 heads of size 2 (2 KV heads), 8-wide embedding, 6 tokens."""
    kvs = {
        "general.architecture": (STR, "llama"),
        "general.alignment": (U32, 32),
        "llama.block_count": (U32, 2),
        "llama.context_length": (U32, 64),
        "llama.embedding_length": (U32, 8),
        "llama.attention.head_count": (U32, 4),
        "llama.attention.head_count_kv": (U32, 2),
        "llama.rope.dimension_count": (U32, 2),
        "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "tokenizer.ggml.model": (STR, "gpt2"),
        "tokenizer.ggml.tokens": (ARR, (STR, TOKENS)),
        "tokenizer.ggml.token_type": (ARR, (I32, [1] * len(TOKENS))),
        "test.nested": (ARR, (ARR, [(U8, [1, 2]), (U8, [3])])),
        "test.flag": (BOOL, True),
        "test.big": (U64, 2**40),
    }
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            kvs.pop(key, None)
        else:
            kvs[key] = value
    return [(key, kind, value) for key, (kind, value) in kvs.items()]


BASE_TENSORS = [("token_embd.weight", [8, len(TOKENS)], 0), ("output_norm.weight", [8], 0),
                ("blk.0.attn_q.weight", [32, 2], 8)]  # F32, F32, Q8_0


def build(kvs=None, tensors=None, alignment: int = 32, with_data: bool = True) -> Builder:
    """A valid small GGUF whose last tensor ends exactly at the end of the file (or only its header)."""
    kvs = base_kvs() if kvs is None else kvs
    tensors = BASE_TENSORS if tensors is None else tensors
    b = Builder()
    b.out += b"GGUF"
    b.u32(3)
    b.u64(len(tensors))
    b.u64(len(kvs))
    for key, kind, value in kvs:
        b.string(key)
        b.u32(kind)
        b.value(kind, value)
    offset, sizes = 0, []
    for name, dims, ggml_type in tensors:
        b.string(name)
        b.u32(len(dims))
        for dim in dims:
            b.u64(dim)
        b.u32(ggml_type)
        b.u64(offset)
        _, block, block_bytes = GGML_TYPES.get(ggml_type, ("?", 1, 0))
        elements = 1
        for dim in dims:
            elements *= dim
        sizes.append(elements // block * block_bytes if elements < 2**40 else 0)
        offset += -(-sizes[-1] // alignment) * alignment
    b.out += bytes(-len(b.out) % alignment)
    for i, size in enumerate(sizes if with_data else []):
        b.out += bytes([i + 1]) * size
        if i < len(sizes) - 1:
            b.out += bytes(-size % alignment)
    return b


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf")


def write(workdir: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = workdir / name
    path.write_bytes(bytes(data))
    return path


def refused(action, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        action(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message, message
    return message


def only_user_errors(path: Path) -> bool:
    """Every reader of a file we may be handed: nothing but UserError (one line) may come out of it."""
    def attempt(action, *args) -> bool:
        try:
            action(*args)
            return True
        except UserError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)
            return False

    if not attempt(read_header, path):
        return False
    header = read_header(path)
    for key, value in header.metadata.items():
        if isinstance(value, ArrayInfo) and value.element_type != ARR:
            attempt(read_array, header, key)
    attempt(check_loadable, header)
    attempt(kv_bytes_per_token, path)
    attempt(model_fingerprint, path)
    return True


# -- the valid file, and agreement with llama.cpp's gguf-py --------------------------------------------------------
def test_the_small_file_is_valid_and_loadable(workdir):
    path = write(workdir, build().out)
    header = check_loadable(path)
    assert header.architecture == "llama" and header.vocab_size == len(TOKENS)
    assert [t.name for t in header.tensors] == [name for name, _, _ in BASE_TENSORS]
    assert header.tensor("blk.0.attn_q.weight").nbytes == 2 * 34
    assert header.metadata["test.nested"] == ArrayInfo(ARR, 2)
    assert read_array(header, "tokenizer.ggml.tokens") == [t.encode() for t in TOKENS]
    assert read_header(path, keep_arrays=True).metadata["test.nested"] == [[1, 2], [3]]
    assert kv_bytes_per_token(path) == 2 * 2 * (2 + 2) * 2  # layers x kv heads x (k + v) x f16


def test_reader_agrees_with_gguf_py_on_a_file_it_wrote(workdir):
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = workdir / "by-gguf-py.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_string("general.name", "tiny")
    writer.add_array("tokenizer.ggml.tokens", TOKENS)
    writer.add_tensor("token_embd.weight", np.ones((len(TOKENS), 8), dtype=np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((3, 16), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ours, theirs = read_header(path), gguf.GGUFReader(str(path))
    assert ours.data_offset == theirs.data_offset and ours.vocab_size == len(TOKENS)
    for mine, reference in zip(ours.tensors, theirs.tensors, strict=True):
        assert (mine.name, list(mine.shape), mine.nbytes) == (reference.name, list(reference.shape),
                                                              reference.n_bytes)
        assert ours.data_offset + mine.offset == reference.data_offset


# -- fuzzing: nothing but UserError, ever ----------------------------------------------------------------------
@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(workdir, data):
    only_user_errors(write(workdir, data))


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_after_a_valid_preamble(workdir, data):
    only_user_errors(write(workdir, b"GGUF" + struct.pack("<I", 3) + data))


VALID = build()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID.out) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_valid_file_with_bytes_changed(workdir, changes):
    data = bytearray(VALID.out)
    for index, byte in changes:
        data[index] = byte
    only_user_errors(write(workdir, data))


HUGE = st.one_of(st.sampled_from([2**63, 2**64 - 1, 2**63 - 1, 2**32, 2**31, 2**24 + 1, len(VALID.out),
                                  len(VALID.out) + 1, 0]), st.integers(0, 2**64 - 1))


@FUZZ
@given(st.sampled_from(VALID.u64_fields), HUGE)
def test_valid_file_with_a_length_or_count_replaced(workdir, at, value):
    data = bytearray(VALID.out)
    data[at:at + 8] = struct.pack("<Q", value)
    only_user_errors(write(workdir, data))


@settings(deadline=None, max_examples=200)
@given(st.sampled_from(VALID.u32_fields), st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 50)))
def test_valid_file_with_a_type_or_dimension_count_replaced(workdir, at, value):
    data = bytearray(VALID.out)
    data[at:at + 4] = struct.pack("<I", value)
    only_user_errors(write(workdir, data))


def test_every_truncation_is_refused(workdir):
    """The last tensor ends at the end of the file, so every shorter prefix misses bytes something needs."""
    for length in range(len(VALID.out)):
        path = write(workdir, VALID.out[:length])
        refused(read_header, path)


# -- each class of bad input, by hand --------------------------------------------------------------------------
def patched(b: Builder, at: int, fmt: str, value: int) -> bytes:
    data = bytearray(b.out)
    data[at:at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(data)


@pytest.mark.parametrize("field,value,message", [
    (1, 2**64 - 1, "tensor count 18446744073709551615 exceeds"),  # tensor_count
    (2, 2**63, "key/value count 2^63 exceeds"),  # kv_count
    (2, 1000, "key/value count 1000 exceeds the file"),
    (3, 2**63, "key 0 length 2^63 exceeds the cap"),  # the first key's length
    (3, 10000, "key 0 length 10000 exceeds the file"),
])
def test_counts_and_lengths_past_the_file(workdir, field, value, message):
    b = build()
    assert message in refused(read_header, write(workdir, patched(b, b.u64_fields[field - 1], "<Q", value)))


@pytest.mark.parametrize("element,length,message", [
    (STR, 10**6, "1000000 exceeds the file"),  # a million strings of at least 8 bytes each, in 100 bytes
    (STR, 2**62, "2^62 exceeds the cap of 2^24"),
    (U64, 2**29, "2^29 exceeds the file"),  # 2^32 bytes
    (U8, 2**40, "2^40 exceeds the cap of 2^30"),
])
def test_array_length_larger_than_the_bytes_left(workdir, element, length, message):
    b = Builder()
    b.out += b"GGUF"
    b.u32(3)
    b.u64(0)
    b.u64(1)
    b.string("tokenizer.ggml.tokens")
    b.u32(ARR)
    b.u32(element)
    b.u64(length)
    b.out += bytes(100)
    assert f"byte 61: array length of 'tokenizer.ggml.tokens' {message}" in refused(read_header, write(workdir, b.out))


def nested(levels: int) -> tuple[int, object]:
    value: tuple[int, object] = (U8, [1])
    for _ in range(levels - 1):
        value = (ARR, [value])
    return (ARR, value)


def test_nesting_deeper_than_four_levels(workdir):
    assert "nested deeper than 4" in refused(read_header, write(workdir, build(base_kvs(test__deep=nested(5))).out))
    header = read_header(write(workdir, build(base_kvs(test__deep=nested(4))).out), keep_arrays=True)
    assert header.metadata["test.deep"] == [[[[1]]]]


def test_unknown_value_type_invalid_utf8_key_duplicate_key(workdir):
    b = build()
    first_type = b.u32_fields[1]  # general.architecture's value type
    assert "unknown value type 13" in refused(read_header, write(workdir, patched(b, first_type, "<I", 13)))
    bad_key = build([(b"\xff\xfe", STR, "x")] + base_kvs())  # type: ignore[list-item]
    assert "key 0 is not valid UTF-8" in refused(read_header, write(workdir, bad_key.out))
    twice = build(base_kvs() + [("llama.block_count", U32, 3)])
    assert "duplicate key 'llama.block_count'" in refused(read_header, write(workdir, twice.out))


@pytest.mark.parametrize("tensors,message", [
    ([("t", [1, 2, 3, 4, 5], 0)], "5 dimensions"),
    ([("t", [2**40, 2**40], 0)], "more than 2^63 elements"),
    ([("t", [8], 99)], "unknown ggml type 99"),
    ([("t", [8], 4)], "unknown ggml type 4"),  # Q4_2: removed from ggml
    ([("t", [20], 2)], "not a whole number of Q4_0 blocks"),
    ([("t", [8], 0), ("t", [8], 0)], "duplicate tensor 't'"),
    ([("x" * 64, [8], 0)], "name of tensor 0 length 64 exceeds the cap of 63"),
])
def test_bad_tensor_infos(workdir, tensors, message):
    assert message in refused(read_header, write(workdir, build(tensors=tensors).out))


def test_zero_and_negative_dimensions(workdir):
    b = build()
    dim = b.u64_fields[-3]  # blk.0.attn_q.weight's dims[0] (then dims[1], then its offset)
    assert "dimension 0 = 0" in refused(read_header, write(workdir, patched(b, dim, "<q", 0)))
    assert "dimension 0 = -32" in refused(read_header, write(workdir, patched(b, dim, "<q", -32)))


def test_tensor_data_past_the_end_of_the_file(workdir):
    b = build()
    message = refused(read_header, write(workdir, b.out[:-1]))
    assert "'blk.0.attn_q.weight' data (68 bytes)" in message and "past the end of the file" in message
    offset = b.u64_fields[-1]  # the last tensor's data offset
    assert "past the end" in refused(read_header, write(workdir, patched(b, offset, "<Q", 2**63)))
    assert "not a multiple of the alignment" in refused(read_header, write(workdir, patched(b, offset, "<Q", 3)))


@pytest.mark.parametrize("alignment,message", [(0, "not a power of two"), (48, "not a power of two"),
                                               (2**31, "tensor data would start past the end")])
def test_bad_alignment(workdir, alignment, message):
    b = build(base_kvs(general__alignment=(U32, alignment)), tensors=[("t", [8], 0)])
    assert message in refused(read_header, write(workdir, b.out))


def test_bad_version_and_magic(workdir):
    b = build()
    assert "unsupported GGUF version 1" in refused(read_header, write(workdir, patched(b, 4, "<I", 1)))
    assert "big-endian" in refused(read_header, write(workdir, patched(b, 4, ">I", 3)))
    assert "bad magic" in refused(read_header, write(workdir, b"GGML" + b.out[4:]))


# -- hyper-parameters llama.cpp asserts on ---------------------------------------------------------------------
@pytest.mark.parametrize("changes,message", [
    ({"llama.block_count": (U32, 100000)}, "block_count is 100000, outside 1..512"),
    ({"llama.block_count": (U32, 0)}, "block_count is 0, outside 1..512"),
    ({"llama.block_count": (STR, "2")}, "block_count is a str, not an integer"),
    ({"llama.block_count": None}, "block_count is missing"),
    ({"llama.attention.head_count": (U32, 0)}, "head_count is 0"),
    ({"llama.attention.head_count": (ARR, (U32, [4, 0]))}, "head_count is 0"),
    ({"llama.attention.head_count": (ARR, (U32, [4]))}, "has 1 entries for 2 layers"),
    ({"llama.attention.head_count_kv": (U32, 0)}, "head_count_kv is 0"),
    ({"llama.attention.head_count_kv": (U32, 3)}, "not a multiple of head_count_kv 3"),
    ({"llama.attention.head_count_kv": (ARR, (U32, [2, 1]))}, "head_count_kv varies across layers"),
    ({"llama.embedding_length": (U32, 0)}, "embedding_length is 0"),
    ({"llama.embedding_length": (U32, 10)}, "embedding_length 10 is not a multiple of head_count 4"),
    ({"llama.context_length": (U32, 0)}, "context_length is 0"),
    ({"llama.rope.dimension_count": (U32, 4)}, "rope.dimension_count 4 must be equal"),
    ({"llama.attention.value_length": (U32, 4)}, "value_length 4"),
    ({"llama.rope.scaling.type": (STR, "bogus")}, "rope.scaling.type is 'bogus'"),
    ({"llama.expert_count": (U32, 5000)}, "expert_count is 5000"),
    ({"llama.expert_used_count": (U32, 2)}, "expert_used_count 2 exceeds expert_count 0"),
    ({"llama.expert_count": (U32, 8)}, "8 experts but expert_used_count is 0"),
    ({"llama.nextn_predict_layers": (U32, 3)}, "nextn_predict_layers 3 exceeds block_count 2"),
    ({"tokenizer.ggml.tokens": (ARR, (STR, ["a", "b", "a", "c", "d", "e"]))}, "tokens 0 and 2"),
    ({"tokenizer.ggml.tokens": (ARR, (STR, ["", "[EMPTY_0]", "b", "c", "d", "e"]))}, "tokens 0 and 1"),
    ({"tokenizer.ggml.tokens": (ARR, (STR, TOKENS[:5]))}, "token_embd.weight is 8x6, not embedding_length x "
                                                           "vocabulary (8x5)"),
])
def test_hyper_parameters_llama_cpp_aborts_on(workdir, changes, message):
    kvs = base_kvs(**{key.replace(".", "__"): value for key, value in changes.items()})
    path = write(workdir, build(kvs).out)
    read_header(path)  # a well-formed file: only the pre-load check refuses it
    assert message in refused(check_loadable, path)


HPARAMS = ["llama.block_count", "llama.context_length", "llama.embedding_length", "llama.attention.head_count",
           "llama.attention.head_count_kv", "llama.attention.key_length", "llama.attention.value_length",
           "llama.rope.dimension_count", "llama.expert_count", "llama.expert_used_count", "llama.expert_group_count",
           "llama.expert_group_used_count", "llama.nextn_predict_layers", "general.alignment"]
NUMBERS = st.one_of(st.integers(-2, 8), st.sampled_from([512, 513, 1024, 1025, 2**31 - 1]),
                    st.integers(-2**31, 2**31 - 1))
HPARAM_VALUE = st.one_of(
    st.tuples(st.just(U32), NUMBERS.map(lambda n: n % 2**32)), st.tuples(st.just(I32), NUMBERS),
    st.tuples(st.just(F32), st.floats(width=32)), st.tuples(st.just(STR), st.sampled_from(["", "4", "yarn"])),
    st.tuples(st.just(ARR), st.tuples(st.just(U32), st.lists(NUMBERS.map(lambda n: n % 2**32), max_size=3))),
    st.none())


@FUZZ
@given(st.dictionaries(st.sampled_from(HPARAMS), HPARAM_VALUE, min_size=1, max_size=4))
def test_random_hyper_parameters(workdir, changes):
    """Any mix of values, types and per-layer arrays: the check and the KV sizing refuse in one line or pass."""
    kvs = base_kvs(**{key.replace(".", "__"): value for key, value in changes.items()})
    only_user_errors(write(workdir, build(kvs).out))


@pytest.mark.parametrize("changes,message", [
    ({"llama.attention.head_count": (U32, 0)}, "head_count is 0"),
    ({"llama.attention.head_count": None}, "no integer llama.attention.head_count"),
    ({"llama.attention.head_count": (F32, 4.0)}, "no integer llama.attention.head_count"),
    ({"llama.block_count": (U32, 100000)}, "block_count is 100000"),
    ({"llama.embedding_length": (I32, -8)}, "embedding_length is -8"),
    ({"llama.attention.head_count_kv": (I32, -2)}, "head_count_kv is -2"),
    ({"llama.attention.head_count_kv": (ARR, (F32, [1.0, 2.0]))}, "not 2 non-negative integers"),
])
def test_kv_sizing_refuses_what_it_cannot_divide_by(workdir, changes, message):
    kvs = base_kvs(**{key.replace(".", "__"): value for key, value in changes.items()})
    assert message in refused(kv_bytes_per_token, write(workdir, build(kvs).out))


def test_per_layer_kv_heads_are_summed(workdir):
    kvs = base_kvs(llama__attention__head_count_kv=(ARR, (U32, [2, 0])))  # a hybrid: layer 1 keeps no KV
    assert kv_bytes_per_token(write(workdir, build(kvs).out)) == 2 * (2 + 2) * 2


# -- fingerprints ----------------------------------------------------------------------------------------------
def test_fingerprint_is_stable_and_tells_files_apart(workdir):
    data = build().out
    first = model_fingerprint(write(workdir, data, "a.gguf"))
    assert first == model_fingerprint(write(workdir, data, "b.gguf")) == model_fingerprint(workdir / "a.gguf")
    assert first.startswith(f"{len(data)}:") and len(first.split(":")[1]) == 16
    changed = bytearray(data)
    changed[-1] ^= 1  # one byte of tensor data
    assert model_fingerprint(write(workdir, changed, "a.gguf")) != first
    renamed = build(base_kvs(general__name=(STR, "other"))).out  # same weights, another header
    assert model_fingerprint(write(workdir, renamed, "a.gguf")) != first


def test_fingerprint_samples_a_large_file_sparsely(workdir):
    """A 1 GiB (sparse) model: only the header and 16 x 64 KiB are read, whatever the machine."""
    header = build(tensors=[("big", [1 << 28], 0)], with_data=False).out  # 2^28 F32 = 1 GiB of data
    path = workdir / "big.gguf"
    with path.open("wb") as out:
        out.write(header)
        out.truncate(len(header) + (1 << 30))
    first = model_fingerprint(path)
    assert first == f"{len(header) + (1 << 30)}:" + first.split(":")[1]
    for at in (len(header), len(header) + (1 << 30) - 1):  # the first and the last sampled byte
        with path.open("r+b") as out:
            out.seek(at)
            out.write(b"\x01")
        assert model_fingerprint(path) != first
        first = model_fingerprint(path)


# -- the real thing: llama.cpp would abort, relaxtui refuses -----------------------------------------------------
def broken_copy(source: Path, target: Path, key: str, value: int) -> Path:
    """A copy of a real model with one uint32 hyper-parameter overwritten in place."""
    shutil.copyfile(source, target)
    header = read_header(source)
    encoded = key.encode()
    needle = struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", U32)
    with target.open("r+b") as stream:
        head = stream.read(header.data_offset)
        at = head.index(needle) + len(needle)
        stream.seek(at)
        stream.write(struct.pack("<I", value))
    return target


def duplicate_token_copy(source: Path, target: Path) -> Path:
    """A copy of a real model whose vocabulary holds one token twice (the first two of equal length): llama.cpp's
    vocabulary loader asserts that every token is distinct."""
    shutil.copyfile(source, target)
    header = read_header(source)
    tokens = read_array(header, "tokenizer.ggml.tokens")
    first = next(i for i in range(len(tokens)) if any(len(t) == len(tokens[i]) for t in tokens[i + 1:i + 50]))
    second = next(j for j in range(first + 1, len(tokens)) if len(tokens[j]) == len(tokens[first]))
    at = header.metadata["tokenizer.ggml.tokens"].offset + sum(8 + len(t) for t in tokens[:second]) + 8
    with target.open("r+b") as stream:
        stream.seek(at)
        stream.write(tokens[first])
    return target


@pytest.mark.model
@pytest.mark.parametrize("key,value,message", [
    ("llama.block_count", 600, "llama.block_count is 600, outside 1..512"),  # aborts llama.cpp unguarded
    ("llama.attention.head_count", 0, "llama.attention.head_count is 0"),  # llama.cpp's own error unguarded
    ("tokenizer.ggml.tokens", None, "of the vocabulary are both"),  # aborts llama.cpp unguarded
])
def test_a_model_llama_cpp_would_abort_on_is_refused(tmp_path, test_model_path, key, value, message):
    if value is None:
        broken = duplicate_token_copy(test_model_path, tmp_path / "broken.gguf")
    else:
        broken = broken_copy(test_model_path, tmp_path / "broken.gguf", key, value)
    from relaxtui.engine.llama import LlamaModel

    assert message in refused(LlamaModel, broken, n_ctx=64)
    result = subprocess.run([sys.executable, "-m", "relaxtui.cli", "generate", "hi", "--verifier", str(broken),
                             "--no-spec"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])  # not -6 (SIGABRT)
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
