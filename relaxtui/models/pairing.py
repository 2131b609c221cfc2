"""Which of your models can draft for a verifier, and what each would cost — llama.cpp leaves this to trial and error.

Every candidate is held to the loop's own vocabulary rules (``decoding.vocab.check_vocab``), with a free header
pre-check first (vocabulary size and tokenizer type from the GGUF header) so a big model with another vocabulary
is rejected without loading it. Each compatible one gets a quick measured c_rel (drafter step / verifier step on
this machine, small context, few repeats): the number that decides whether speculation can pay at all.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.engine.gguf import GGUFHeader, read_header
from relaxtui.errors import UserError
from relaxtui.models.store import models_dir

_SPLIT_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Candidate:
    path: Path
    size: int
    quantisation: str
    c_rel: float | None  # measured when compatible
    reason: str | None  # why it cannot draft for the verifier; None when it can


def installed_candidates(directory: Path | None = None) -> list[Path]:
    """Every GGUF in ggml_models/ (a split model once, by its first part)."""
    paths = sorted((directory or models_dir()).glob("*.gguf"))
    return [path for path in paths if not ((part := _SPLIT_PART.search(path.name)) and int(part.group(1)) != 1)]


def header_mismatch(verifier: GGUFHeader, drafter: GGUFHeader, names: tuple[str, str]) -> str | None:
    """The part of the vocabulary rules a header can decide (type and size), worded like check_vocab."""
    from relaxtui.decoding.vocab import MAX_VOCAB_SIZE_DIFFERENCE

    v_name, d_name = names
    v_type, d_type = verifier.metadata.get("tokenizer.ggml.model"), drafter.metadata.get("tokenizer.ggml.model")
    if v_type and d_type and v_type != d_type:
        return f"vocabularies differ: {v_name} tokenizer {v_type}, {d_name} tokenizer {d_type}"
    v_size, d_size = verifier.vocab_size, drafter.vocab_size
    if v_size is not None and d_size is not None and abs(v_size - d_size) > MAX_VOCAB_SIZE_DIFFERENCE:
        return (f"vocabularies differ: {v_name} has {v_size} tokens, {d_name} {d_size} "
                f"(more than {MAX_VOCAB_SIZE_DIFFERENCE} apart)")
    return None


def pair(verifier_path: Path, candidates: Sequence[Path], *, n_ctx: int = 256, repeats: int = 4,
         threads: int | None = None, progress: Callable[[str], None] | None = None
         ) -> tuple[float | None, list[Candidate]]:
    """(median verifier step in seconds, candidates): compatible ones cheapest first, then the rejected with
    reasons. The verifier is re-timed next to each drafter, so a machine whose load drifts (shared cores) skews
    both sides of a c_rel alike."""
    from relaxtui.costmodel.measure import step_time
    from relaxtui.decoding.vocab import check_vocab
    from relaxtui.engine.llama import LlamaModel

    verifier_header = read_header(verifier_path)
    own = verifier_path.resolve()
    results, verifier_steps = [], []
    with LlamaModel(verifier_path, n_ctx=n_ctx, n_threads=threads) as verifier:
        for path in candidates:
            if path.resolve() == own:
                continue
            if progress:
                progress(path.name)
            names = (verifier_path.name, path.name)
            size = path.stat().st_size if path.exists() else 0
            try:
                header = read_header(path)
            except UserError as exc:
                results.append(Candidate(path, size, "?", None, str(exc)))
                continue
            reason = header_mismatch(verifier_header, header, names)
            c_rel = None
            if reason is None:
                try:
                    with LlamaModel(path, n_ctx=n_ctx, n_threads=threads) as drafter:
                        check_vocab(verifier, drafter, names=names)
                        verifier_steps.append(step_time(verifier, repeats=repeats))
                        c_rel = step_time(drafter, repeats=repeats) / verifier_steps[-1]
                except UserError as exc:
                    reason = str(exc)
            results.append(Candidate(path, size, header.quantisation, c_rel, reason))
    results.sort(key=lambda c: (c.reason is not None, c.c_rel if c.c_rel is not None else 0.0, c.path.name))
    return (statistics.median(verifier_steps) if verifier_steps else None), results


# -- known drafters per family (hub names, suggested without downloading) --------------------------------------------
@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]  # searched in "architecture name basename file-name" of the verifier
    drafters: tuple[tuple[str, str], ...]  # (hub name, note)


FAMILIES = (
    Family("Qwen3", re.compile(r"qwen3", re.IGNORECASE), (
        ("hf:Qwen/Qwen3-0.6B-GGUF:Q8_0", "0.6B, official; the paper's small drafter"),
        ("hf:unsloth/Qwen3-0.6B-GGUF:Q4_K_M", "0.6B at Q4_K_M: a lower c_rel than Q8_0"),
        ("hf:Qwen/Qwen3-1.7B-GGUF:Q8_0", "1.7B, for 14B-32B verifiers"),
        ("hf:Qwen/Qwen3-8B-GGUF:Q4_K_M", "8B, the paper's large drafter for Qwen3-32B"),
    )),
    Family("Qwen2.5-Coder", re.compile(r"qwen2\.?5[-_ ]?coder", re.IGNORECASE), (
        ("hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M", "0.5B, official; the embedded drafter's model"),
        ("hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M", "1.5B, for 7B-32B coder verifiers"),
    )),
    Family("Qwen2.5", re.compile(r"qwen2\.?5|^qwen2 ", re.IGNORECASE), (
        ("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", "0.5B, official"),
        ("hf:Qwen/Qwen2.5-1.5B-Instruct-GGUF:Q4_K_M", "1.5B, for 14B-72B verifiers"),
    )),
    Family("Llama 3.x", re.compile(r"llama[-_ ]?3", re.IGNORECASE), (
        ("hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "1B; the 128k vocabulary of Llama 3.1/3.2/3.3"),
        ("hf:bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M", "3B, for 70B verifiers"),
    )),
    Family("Gemma 3", re.compile(r"gemma[-_ ]?3", re.IGNORECASE), (
        ("hf:unsloth/gemma-3-270m-it-GGUF:Q4_K_M", "270M, the same 262k vocabulary as the larger Gemma 3"),
        ("hf:ggml-org/gemma-3-1b-it-GGUF:Q4_K_M", "1B, for 12B-27B verifiers"),
    )),
)


def family_of(description: str) -> Family | None:
    return next((family for family in FAMILIES if family.pattern.search(description)), None)


def describe(header: GGUFHeader) -> str:
    """What family detection reads: architecture, model name and basename from the header, and the file name."""
    basename = header.metadata.get("general.basename", "")
    return f"{header.architecture} {header.name} {basename} {header.path.name}"
