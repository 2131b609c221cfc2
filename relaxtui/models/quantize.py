"""Re-quantising a GGUF through llama.cpp's own quantiser, to make a cheaper drafter.

A drafter's relative cost c_rel drives the speed-up (docs/metrics.md); re-quantising the embedded 0.5B drafter from
Q4_K_M to Q4_0 makes it ~25% faster on CPUs (docs/architecture.md#llamacpp-pitfalls). Requantising an already quantised
file loses a little quality, which a drafter can afford.
"""

from __future__ import annotations

import os
from pathlib import Path

from relaxtui.engine.gguf import read_header
from relaxtui.engine.gguf_check import check_loadable
from relaxtui.errors import UserError

QUANT_TYPES = {
    "f16": 1, "bf16": 32, "q8_0": 7, "q6_k": 18, "q5_k_m": 17, "q5_k_s": 16, "q5_1": 9, "q5_0": 8,
    "q4_k_m": 15, "q4_k_s": 14, "q4_1": 3, "q4_0": 2, "q3_k_l": 13, "q3_k_m": 12, "q3_k_s": 11, "q2_k": 10,
    "iq4_nl": 25, "iq4_xs": 30,
}


# ggml tensor types of the formats a "pure" file can use for every tensor (llama.cpp's --pure plus
# --output-tensor-type and --token-embedding-type of the same format)
PURE_TENSOR_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}


def quantize(source: str | os.PathLike[str], target: str | os.PathLike[str], type_name: str, *,
             threads: int | None = None, pure: bool = False) -> Path:
    """Write ``target`` as ``source`` (a path or a name in ggml_models/) quantised to ``type_name``; the file
    appears only when complete. ``pure`` puts every matrix in that format, the output projection and token
    embeddings included (llama.cpp otherwise keeps those at higher precision, and on a CPU the 152k-row
    output projection is a large share of a small drafter's step)."""
    key = type_name.lower()
    if key not in QUANT_TYPES:
        raise UserError(f"unknown quantisation type {type_name!r}; known: {', '.join(QUANT_TYPES)}")
    if pure and key not in PURE_TENSOR_TYPES:
        raise UserError(f"--pure needs one of {', '.join(PURE_TENSOR_TYPES)} (got {type_name!r})")
    from relaxtui.models.store import resolve_model

    source, target = resolve_model(source), Path(target)
    check_loadable(source)  # missing, non-GGUF or aborting source: a clear error before llama.cpp's loader sees it
    if source.resolve() == target.resolve():
        raise UserError("the quantised file must not overwrite its source")
    if not target.parent.is_dir():
        raise UserError(f"output folder does not exist: {target.parent}")
    import llama_cpp as llama

    from relaxtui.engine.llama import init_backend

    init_backend()
    params = llama.llama_model_quantize_default_params()
    params.nthread = threads or (os.cpu_count() or 1)
    params.ftype = QUANT_TYPES[key]
    params.allow_requantize = True
    if pure:
        params.pure = True
        params.output_tensor_type = params.token_embedding_type = PURE_TENSOR_TYPES[key]
    partial = target.with_name(target.name + ".partial")
    try:
        status = llama.llama_model_quantize(os.fsencode(source), os.fsencode(partial), params)
        if status != 0:
            raise UserError(f"llama.cpp could not quantise {source} to {type_name} (status {status})")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    read_header(target)
    return target
