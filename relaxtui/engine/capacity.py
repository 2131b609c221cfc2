"""How many sequences a context can hold here: KV-cache bytes per token from the GGUF header, against free memory.

Each sequence gets its own ``n_ctx`` tokens of KV cache in every model of the pair
(docs/architecture.md#many-sequences), so K sequences cost K × n_ctx × (bytes per token of each model), plus, in a
recurrent/hybrid model, its recurrent state and that state's rollback snapshots (``1 + rollback_depth`` copies per
sequence: gigabytes for a large Qwen3.5). Checked before loading, so a K that cannot fit is one clear line (with the
largest K that fits) instead of an allocation failure or the OOM killer mid-run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.checks import BadValue
from relaxtui.engine.gguf import INTEGER_TYPES, ArrayInfo, GGUFHeader, read_array, read_header
from relaxtui.engine.gguf_check import GATED_DELTA_NET, LLAMA_MAX_LAYERS, check_loadable
from relaxtui.engine.memory import DEFAULT_ROLLBACK_DEPTH, SNAPSHOT_ARCHS
from relaxtui.errors import UserError

MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ (llama_max_parallel_sequences in 0.3.36)
MEMORY_SHARE = 0.8  # of the memory left after the weights: room for compute buffers and logits
KV_BYTES = 2  # f16 K and V cache entries (llama.cpp's default cache type)
STATE_BYTES = 4  # f32 recurrent conv and SSM states (llama_memory_recurrent's type_r, type_s)


Model = Path | GGUFHeader  # a header already read is not read again (a big vocabulary makes one read ~0.1 s)


def _header(model: Model) -> GGUFHeader:
    return model if isinstance(model, GGUFHeader) else read_header(model)


def kv_bytes_per_token(model: Model) -> int:
    """K and V bytes one cached token costs across every layer of this model. Every value comes from a file
    that may be hostile: a missing, ill-typed, zero or negative count is a UserError naming the key, never a
    ZeroDivisionError or a negative size."""
    header = _header(model)
    path = header.path
    meta = header.metadata
    arch = meta.get("general.architecture", "")

    def number(key: str, default: int | None = None, *, positive: bool = True) -> int:
        value = meta.get(f"{arch}.{key}", default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{path.name}: GGUF metadata has no integer {arch}.{key}; cannot size the KV cache")
        if value < 0 or positive and value == 0:
            raise UserError(f"{path.name}: GGUF metadata {arch}.{key} is {value}; cannot size the KV cache")
        return value

    layers = number("block_count")
    if layers > LLAMA_MAX_LAYERS:
        raise UserError(f"{path.name}: GGUF metadata {arch}.block_count is {layers} (llama.cpp allows at most "
                        f"{LLAMA_MAX_LAYERS}); cannot size the KV cache")
    trunk = layers - _nextn(meta, arch, layers)  # the MTP layers' cache lives in the MTP head's own context
    head_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    heads = per_layer(header, head_key, layers) if isinstance(meta.get(head_key), ArrayInfo) else None
    heads = heads or [number("attention.head_count")] * layers
    kv_heads = per_layer(header, kv_key, layers) if isinstance(meta.get(kv_key), ArrayInfo) else None
    kv_heads = kv_heads or [number("attention.head_count_kv", heads[0], positive=False)] * layers
    if heads[0] <= 0:  # llama.cpp takes the head size from layer 0
        raise UserError(f"{path.name}: GGUF metadata {head_key} is {heads[0]}; cannot size the KV cache")
    head_dim = number("embedding_length") // heads[0]
    per_head = number("attention.key_length", head_dim) + number("attention.value_length", head_dim)
    attention = [il for il in range(trunk) if il not in _recurrent_layers(meta, arch, trunk)]
    return sum(kv_heads[il] for il in attention) * per_head * KV_BYTES


def _nextn(meta: dict, arch: str, layers: int) -> int:
    """MTP layers at the end of the stack (a value llama.cpp would refuse counts as none: check_loadable says)."""
    value = meta.get(f"{arch}.nextn_predict_layers", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < layers else 0


def _recurrent_layers(meta: dict, arch: str, trunk: int) -> set[int]:
    """The trunk layers holding recurrent state instead of KV cells, where the header says so: gated-delta-net
    hybrids mark all but every ``full_attention_interval``-th (src/models/qwen35.cpp load_arch_hparams); other
    hybrids give those layers no KV heads (a per-layer array, counted as zeros already)."""
    if arch not in GATED_DELTA_NET:
        return set()
    interval = meta.get(f"{arch}.full_attention_interval", 4)
    if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
        return set()
    return {il for il in range(trunk) if (il + 1) % interval}


def _size(value: object) -> int | None:
    """``value`` if it is a whole number in 1 .. 2**20 - 1 (a state size or a layer count as a header holds it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 20 else None


def recurrent_bytes_per_sequence(model: Model, rollback_depth: int = DEFAULT_ROLLBACK_DEPTH) -> int:
    """Recurrent-state bytes one sequence costs: per recurrent layer, its conv and SSM states (llama.cpp's
    n_embd_r, n_embd_s for Mamba-style and gated-delta-net layers) in ``1 + snapshots`` copies (the rollback
    snapshots, where llama.cpp keeps them for the architecture). 0 for a transformer, and for recurrent families
    whose header does not say their state sizes (RWKV, LFM2): those are left to llama.cpp's own allocation."""
    header = _header(model)
    meta = header.metadata
    arch = meta.get("general.architecture", "")
    conv, inner, state, layers = (_size(meta.get(f"{arch}.{key}")) for key in (
        "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "block_count"))
    groups = meta.get(f"{arch}.ssm.group_count", 0)
    if conv is None or inner is None or state is None or layers is None or \
            not isinstance(groups, int) or isinstance(groups, bool) or not 0 <= groups < 1 << 20 or \
            layers > LLAMA_MAX_LAYERS:
        return 0
    trunk = layers - _nextn(meta, arch, layers)
    recurrent = _recurrent_layers(meta, arch, trunk) if arch in GATED_DELTA_NET else set(range(trunk))
    kv_key = f"{arch}.attention.head_count_kv"
    if arch not in GATED_DELTA_NET and isinstance(meta.get(kv_key), ArrayInfo):  # attention where KV heads are
        recurrent = {il for il, heads in enumerate(per_layer(header, kv_key, layers)[:trunk]) if heads == 0}
    per_layer_bytes = ((conv - 1) * (inner + 2 * groups * state) + state * inner) * STATE_BYTES
    copies = 1 + (max(0, rollback_depth) if arch in SNAPSHOT_ARCHS else 0)
    return len(recurrent) * per_layer_bytes * copies


def per_layer(header: GGUFHeader, key: str, layers: int) -> list[int]:
    """A per-layer integer array (hybrid models give some layers no KV heads), checked like any other value."""
    info = header.metadata[key]
    values = read_array(header, key) if info.element_type in INTEGER_TYPES else []
    if len(values) != layers or min(values) < 0:
        raise UserError(f"{header.path.name}: GGUF metadata {key} is not {layers} non-negative integers; "
                        f"cannot size the KV cache")
    return values


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


def capacity(models: Sequence[Model], n_ctx: int, *, available: int | None = None,
             rollback_depth: int = DEFAULT_ROLLBACK_DEPTH) -> Capacity:
    """The largest K whose KV caches (n_ctx tokens per sequence, in every model) and recurrent states (with
    ``rollback_depth`` snapshots) fit in free memory."""
    headers = [_header(model) for model in models]
    available = available_memory() if available is None else available
    weights = sum(os.path.getsize(header.path) for header in headers)
    budget = None if available is None else int(MEMORY_SHARE * max(0, available - weights))
    per_sequence = sum(cached_tokens(h, n_ctx) * kv_bytes_per_token(h) + recurrent_bytes_per_sequence(h, rollback_depth)
                       for h in headers)
    return Capacity(n_ctx, per_sequence, budget)


def cached_tokens(model: Model, n_ctx: int) -> int:
    """The tokens of KV cache a sequence of ``n_ctx`` gets in this model: the engine caps a context at the model's
    trained length (``ARCH.context_length``), so a huge --ctx-size costs what that length costs."""
    meta = _header(model).metadata
    trained = meta.get(f"{meta.get('general.architecture', '')}.context_length")
    if isinstance(trained, int) and not isinstance(trained, bool) and trained > 0:
        return min(n_ctx, max(16, trained))
    return n_ctx


def check_parallel(k: int, paths: Sequence[Path], n_ctx: int, *, available: int | None = None,
                   rollback_depth: int = DEFAULT_ROLLBACK_DEPTH) -> None:
    """Refuse a K the context cannot hold, naming the largest one that fits; and a context that not even one
    sequence fits in, at any K, naming the largest --ctx-size that does."""
    if k < 1:
        raise BadValue("parallel", f"must be >= 1 (got {k})")
    headers = [check_loadable(path) for path in paths]  # one read each; a header llama.cpp would abort on first
    room = capacity(headers, n_ctx, available=available, rollback_depth=rollback_depth)
    if room.max_sequences == 0 and room.budget is not None:  # K = 1 too: llama.cpp would try, then swap or abort
        per_token = sum(kv_bytes_per_token(h) for h in headers)
        cached = sum(cached_tokens(h, n_ctx) * kv_bytes_per_token(h) for h in headers)
        fits = max(0, room.budget - (room.bytes_per_sequence - cached)) // max(1, per_token)
        advice = f"at most {fits} fits" if fits >= 1 else "not even 1 fits: free memory"
        raise BadValue("ctx_size", f"{n_ctx}: one sequence needs {room.bytes_per_sequence / 2**20:.0f} MiB of KV "
                                   f"cache and state, {room.budget / 2**20:.0f} MiB are to spare here; {advice}")
    if k > room.max_sequences:
        memory = (f"{room.bytes_per_sequence / 2**20:.0f} MiB of KV cache and state per sequence, "
                  f"{room.budget / 2**20:.0f} MiB to spare" if room.budget is not None else "llama.cpp's limit")
        raise BadValue("parallel", f"{k}: the context holds at most {room.max_sequences} sequences of {n_ctx} tokens "
                                   f"here ({memory}); lower {{parallel}} or {{ctx_size}}", ("parallel", "ctx_size"))
