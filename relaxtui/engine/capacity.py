"""How many sequences a context can hold here: KV-cache bytes per token from the GGUF header, against free memory.

Each sequence gets its own ``n_ctx`` tokens of KV cache in every model of the pair (SPEC §8), so K sequences
cost K × n_ctx × (bytes per token of each model). Checked before loading, so a K that cannot fit is one clear
line (with the largest K that fits) instead of an allocation failure or the OOM killer mid-run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.engine.gguf import read_header
from relaxtui.errors import UserError

MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ (llama_max_parallel_sequences in 0.3.36)
MEMORY_SHARE = 0.8  # of the memory left after the weights: room for compute buffers and logits
KV_BYTES = 2  # f16 K and V cache entries (llama.cpp's default cache type)


def kv_bytes_per_token(path: Path) -> int:
    """K and V bytes one cached token costs across every layer of this model."""
    meta = read_header(path).metadata
    arch = meta.get("general.architecture", "")

    def number(key: str, default: int | None = None) -> int:
        value = meta.get(f"{arch}.{key}", default)
        if not isinstance(value, int):
            raise UserError(f"{path.name}: GGUF metadata has no {arch}.{key}; cannot size the KV cache")
        return value

    heads = number("attention.head_count")
    kv_heads = meta.get(f"{arch}.attention.head_count_kv", heads)
    head_dim = number("embedding_length") // heads
    per_layer = int(kv_heads) * (number("attention.key_length", head_dim) + number("attention.value_length",
                                                                                   head_dim))
    return number("block_count") * per_layer * KV_BYTES


def available_memory() -> int | None:
    """Bytes the kernel says new allocations can take (MemAvailable); None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Capacity:
    n_ctx: int
    bytes_per_sequence: int
    budget: int | None  # bytes for KV caches, None when unknown

    @property
    def max_sequences(self) -> int:
        if self.budget is None:
            return MAX_SEQUENCES
        return max(0, min(MAX_SEQUENCES, self.budget // max(1, self.bytes_per_sequence)))


def capacity(paths: Sequence[Path], n_ctx: int, *, available: int | None = None) -> Capacity:
    """The largest K whose KV caches (n_ctx tokens per sequence, in every model) fit in free memory."""
    available = available_memory() if available is None else available
    weights = sum(os.path.getsize(p) for p in paths)
    budget = None if available is None else int(MEMORY_SHARE * max(0, available - weights))
    return Capacity(n_ctx, n_ctx * sum(kv_bytes_per_token(p) for p in paths), budget)


def check_parallel(k: int, paths: Sequence[Path], n_ctx: int, *, available: int | None = None) -> None:
    """Refuse a K the context cannot hold, naming the largest one that fits."""
    if k < 1:
        raise UserError(f"--parallel must be >= 1 (got {k})")
    if k == 1:
        return
    room = capacity(paths, n_ctx, available=available)
    if k > room.max_sequences:
        memory = (f"{room.bytes_per_sequence / 2**20:.0f} MiB of KV cache per sequence, "
                  f"{room.budget / 2**20:.0f} MiB to spare" if room.budget is not None else "llama.cpp's limit")
        raise UserError(f"--parallel {k}: the context holds at most {room.max_sequences} sequences of {n_ctx} "
                        f"tokens here ({memory}); lower --parallel or --ctx-size")
