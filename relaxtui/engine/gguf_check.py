"""Refuse, before llama.cpp sees it, a GGUF whose hyper-parameters would make llama.cpp abort the process.

Why: llama.cpp reports most bad files as a failed load (an exception it catches), but a few values reach a
``GGML_ASSERT``/``GGML_ABORT``, which calls abort(): the whole relaxtui process dies with SIGABRT, no message,
no cleanup, mid-TUI or mid-eval. Each check below names the assert it stands in front of (llama-cpp-python
0.3.36's vendored llama.cpp). Besides those, the few values we ourselves divide or size by (head counts,
embedding length, context length, the vocabulary against token_embd) are checked so that a nonsensical file is
one clear line. A value llama.cpp would merely reject with its own error we leave to it, so nothing valid is
refused here: every rule holds for every model llama.cpp can run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, overload

from relaxtui.engine.gguf import INTEGER_TYPES, ArrayInfo, GGUFHeader, read_array, read_header
from relaxtui.errors import UserError

LLAMA_MAX_LAYERS = 512  # llama-hparams.h
LLAMA_MAX_EXPERTS = 1024  # llama-hparams.h
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama-model.cpp LLAMA_ROPE_SCALING_TYPES
# Dense transformers whose tensors are shaped from layer 0's head counts (LLAMA_LOAD_LOCALS) and whose
# graphs assume every layer has them.
DENSE = frozenset({"llama", "qwen2", "qwen3", "gemma3"})
# Graphs that GGML_ASSERT(n_embd_head_v == n_embd_head_k) and (n_embd_head == n_rot): src/models/<arch>.cpp.
SAME_HEAD_DIMS = frozenset({"llama", "qwen2", "qwen3"})
# Hybrids of gated-delta-net layers and full attention every `full_attention_interval`-th layer
# (src/models/{qwen3next,qwen35,qwen35moe,qwen4exp}.cpp).
GATED_DELTA_NET = frozenset({"qwen3next", "qwen35", "qwen35moe", "qwen4exp"})


class _Refused(Exception):
    pass


@overload
def _int(meta: dict[str, Any], key: str, default: int) -> int: ...
@overload
def _int(meta: dict[str, Any], key: str, default: None = None) -> int | None: ...
def _int(meta: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = meta.get(key, default)
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    kind = "an array" if isinstance(value, ArrayInfo) else f"a {type(value).__name__}"
    raise _Refused(f"{key} is {kind}, not an integer")


@overload
def _per_layer(header: GGUFHeader, key: str, n_layer: int, default: list[int]) -> list[int]: ...
@overload
def _per_layer(header: GGUFHeader, key: str, n_layer: int, default: None) -> list[int] | None: ...
def _per_layer(header: GGUFHeader, key: str, n_layer: int, default: list[int] | None) -> list[int] | None:
    """A value llama.cpp reads with get_key_or_arr: one integer for every layer, or an array of n_layer."""
    value = header.metadata.get(key)
    if not isinstance(value, ArrayInfo):
        single = _int(header.metadata, key)
        return default if single is None else [single] * n_layer
    if value.element_type not in INTEGER_TYPES:
        raise _Refused(f"{key} is an array of non-integers")
    if value.length != n_layer:
        raise _Refused(f"{key} has {value.length} entries for {n_layer} layers")
    return [int(v) for v in read_array(header, key)]


def _check_experts(meta: dict[str, Any], header: GGUFHeader, arch: str, n_layer: int) -> None:
    """The expert asserts of llama_model_base::load_hparams (llama-model.cpp, after reading block_count)."""
    n_expert = _int(meta, f"{arch}.expert_count", 0)
    used = _per_layer(header, f"{arch}.expert_used_count", n_layer, [0] * n_layer) or [0]
    groups = _int(meta, f"{arch}.expert_group_count", 0)
    group_used = _int(meta, f"{arch}.expert_group_used_count", 0)
    if arch in ("hunyuan-vl", "hunyuan-dense") and n_expert <= 1:
        n_expert, used = 0, [0]
    used_max = max(used)
    if not 0 <= n_expert <= LLAMA_MAX_EXPERTS:
        raise _Refused(f"{arch}.expert_count is {n_expert}, outside 0..{LLAMA_MAX_EXPERTS} (LLAMA_MAX_EXPERTS)")
    if min(used) < 0 or used_max > n_expert:
        raise _Refused(f"{arch}.expert_used_count {used_max} exceeds expert_count {n_expert}")
    if n_expert > 0:
        if used_max == 0:
            raise _Refused(f"{arch} has {n_expert} experts but expert_used_count is 0")
        if not 0 <= groups < n_expert:
            raise _Refused(f"{arch}.expert_group_count {groups} must be below expert_count {n_expert}")
        if groups > 1 and (n_expert % groups or not 0 < group_used < groups):
            raise _Refused(f"{arch}: {n_expert} experts in {groups} groups of which {group_used} are used")
    elif groups != 0:
        raise _Refused(f"{arch}.expert_group_count is {groups} without experts")


def _check_heads(header: GGUFHeader, arch: str, n_layer: int, n_embd: int) -> None:
    """Dense attention: every layer has heads, the KV heads of layer 0 everywhere (the KV cache is sized per
    layer but the tensors from layer 0; a difference trips GGML_ASSERT(a->ne[0] == b->ne[0]) in ggml.c at the
    first graph), and head sizes the graph asserts on."""
    meta = header.metadata
    heads = _per_layer(header, f"{arch}.attention.head_count", n_layer, None)
    if heads is None:
        raise _Refused(f"{arch}.attention.head_count is missing")
    if min(heads) <= 0:
        raise _Refused(f"{arch}.attention.head_count is {min(heads)} (must be positive in every layer)")
    kv_heads = _per_layer(header, f"{arch}.attention.head_count_kv", n_layer, heads)
    if min(kv_heads) <= 0:
        raise _Refused(f"{arch}.attention.head_count_kv is {min(kv_heads)} (must be positive in every layer)")
    if len(set(kv_heads)) > 1:
        raise _Refused(f"{arch}.attention.head_count_kv varies across layers ({min(kv_heads)}..{max(kv_heads)}), "
                       f"which {arch} models do not support")
    if heads[0] % kv_heads[0]:
        raise _Refused(f"{arch}.attention.head_count {heads[0]} is not a multiple of head_count_kv {kv_heads[0]}")
    key_length = _int(meta, f"{arch}.attention.key_length")
    value_length = _int(meta, f"{arch}.attention.value_length")
    if (key_length is None or value_length is None) and n_embd % heads[0]:
        raise _Refused(f"{arch}.embedding_length {n_embd} is not a multiple of head_count {heads[0]}")
    key_length = n_embd // heads[0] if key_length is None else key_length
    value_length = n_embd // heads[0] if value_length is None else value_length
    if key_length <= 0 or value_length <= 0:
        raise _Refused(f"{arch} head size is {min(key_length, value_length)} (key_length/value_length)")
    if arch in SAME_HEAD_DIMS:
        rope_dims = _int(meta, f"{arch}.rope.dimension_count", key_length)
        if not key_length == value_length == rope_dims:  # src/models/{llama,qwen2,qwen3}.cpp graph asserts
            raise _Refused(f"{arch} key_length {key_length}, value_length {value_length} and "
                           f"rope.dimension_count {rope_dims} must be equal")


def _check_gated_delta_net(meta: dict[str, Any], arch: str) -> None:
    """load_arch_hparams marks layer i recurrent by ``(i + 1) % full_attention_interval`` (0: SIGFPE, the process
    dies), and the linear-attention layers (none when the interval is 1) reshape ``ssm.inner_size`` into
    ``time_step_rank`` heads of ``ssm.state_size`` (any other product trips GGML_ASSERT(a->ne[d] == b->ne[d]) in
    ggml.c at context creation)."""
    interval = _int(meta, f"{arch}.full_attention_interval")
    if interval is not None and interval <= 0:
        raise _Refused(f"{arch}.full_attention_interval is {interval} (must be positive)")
    inner, state, rank = (_int(meta, f"{arch}.ssm.{key}") for key in ("inner_size", "state_size", "time_step_rank"))
    if interval != 1 and inner is not None and state is not None and rank is not None and inner != state * rank:
        raise _Refused(f"{arch}.ssm.inner_size {inner} is not ssm.state_size {state} x ssm.time_step_rank {rank}")


def _check_vocab(header: GGUFHeader) -> int | None:
    """GGML_ASSERT(id_to_token.size() == token_to_id.size()) in llama-vocab.cpp: two equal token strings abort
    the load. llama.cpp stores an empty token as "[EMPTY_<id>]", so that is what is compared."""
    meta = header.metadata
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if model in ("none", "no_vocab") or not isinstance(tokens, ArrayInfo) or tokens.element_type != 8:
        return None  # no vocabulary, or one llama.cpp refuses with its own error
    if tokens.length == 0:
        raise _Refused("the vocabulary (tokenizer.ggml.tokens) is empty")
    seen: dict[bytes, int] = {}
    for i, token in enumerate(read_array(header, "tokenizer.ggml.tokens")):
        token = token or f"[EMPTY_{i}]".encode()
        if token in seen:
            raise _Refused(f"tokens {seen[token]} and {i} of the vocabulary are both {token[:40]!r}")
        seen[token] = i
    return tokens.length


def _check(header: GGUFHeader) -> None:
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or arch == "clip":
        return  # llama.cpp refuses an unknown architecture itself; CLIP files have no hyper-parameters
    n_layer = _int(meta, f"{arch}.block_count")
    if n_layer is None:
        raise _Refused(f"{arch}.block_count is missing")
    if not 0 < n_layer <= LLAMA_MAX_LAYERS:  # llama-model.cpp load_hparams GGML_ASSERT, first thing it reads
        raise _Refused(f"{arch}.block_count is {n_layer}, outside 1..{LLAMA_MAX_LAYERS} (LLAMA_MAX_LAYERS)")
    nextn = _int(meta, f"{arch}.nextn_predict_layers", 0)
    if not 0 <= nextn <= n_layer:
        raise _Refused(f"{arch}.nextn_predict_layers {nextn} exceeds block_count {n_layer}")
    if arch == "wavtokenizer-dec":
        for part in ("posnet", "convnext"):
            if not 0 <= _int(meta, f"{arch}.{part}.block_count", 0) <= n_layer:
                raise _Refused(f"{arch}.{part}.block_count exceeds block_count {n_layer}")
    _check_experts(meta, header, arch, n_layer)
    rope = meta.get(f"{arch}.rope.scaling.type")
    if isinstance(rope, str) and rope not in ROPE_SCALING_TYPES:  # GGML_ASSERT(rope_scaling_type_train != ...)
        raise _Refused(f"{arch}.rope.scaling.type is {rope[:40]!r}, not one of {', '.join(ROPE_SCALING_TYPES)}")
    for key in ("context_length", "embedding_length"):
        value = _int(meta, f"{arch}.{key}")
        if value is not None and value <= 0:
            raise _Refused(f"{arch}.{key} is {value} (must be positive)")
    n_vocab = _check_vocab(header)
    if arch in GATED_DELTA_NET:
        _check_gated_delta_net(meta, arch)
    if arch not in DENSE:
        return
    n_embd = _int(meta, f"{arch}.embedding_length")
    if n_embd is None:
        raise _Refused(f"{arch}.embedding_length is missing")
    _check_heads(header, arch, n_layer, n_embd)
    for name in ("token_embd.weight", "output.weight"):
        tensor = header.tensor(name)
        if tensor is not None and n_vocab is not None and tensor.shape != (n_embd, n_vocab):
            raise _Refused(f"tensor {name} is {'x'.join(map(str, tensor.shape))}, not embedding_length x vocabulary "
                           f"({n_embd}x{n_vocab})")


def mtp_layers(model: GGUFHeader | str | Path) -> int:
    """How many MTP (nextn) layers a GGUF holds: ``{arch}.nextn_predict_layers`` (0 when absent), for
    ``models list`` and for refusing ``--draft-kind mtp`` before anything is loaded."""
    header = model if isinstance(model, GGUFHeader) else read_header(model)
    value = header.metadata.get(f"{header.architecture}.nextn_predict_layers", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def check_loadable(model: GGUFHeader | str | Path) -> GGUFHeader:
    """Validate a GGUF (its header and tensor table, then the hyper-parameters llama.cpp asserts on) right
    before handing it to llama.cpp. Returns the header; raises one-line UserError naming the file."""
    header = model if isinstance(model, GGUFHeader) else read_header(model)
    with _PASSED_LOCK:
        if _PASSED.get(id(header)) is header:
            return header
    try:
        _check(header)
    except _Refused as exc:
        raise UserError(f"not a loadable GGUF model ({exc}): {header.path}") from None
    with _PASSED_LOCK:
        _PASSED[id(header)] = header  # (held: its id cannot be reused while it is here)
        while len(_PASSED) > MAX_PASSED:
            del _PASSED[next(iter(_PASSED))]
    return header


MAX_PASSED = 32
# Headers that passed, by object: a face starting checks each model up to three times (the capacity check, the model
# check, the load), and the vocabulary's duplicate scan re-reads 152k strings each time (a tenth of a second). Only
# the same header object skips it, and ``read_header`` hands the same object back only while the file's identity
# (device, inode, size, times) is unchanged, so a rewritten file is checked again.
_PASSED: dict[int, GGUFHeader] = {}
_PASSED_LOCK = threading.Lock()
