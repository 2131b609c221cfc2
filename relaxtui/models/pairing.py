"""Which of your models can draft for a verifier, and what each would cost — llama.cpp leaves this to trial and error.

Every candidate is held to the loop's own vocabulary rules (``decoding.vocab.check_vocab``), with a free header
pre-check first (vocabulary size and tokenizer type from the GGUF header) so a big model with another vocabulary
is rejected without loading it. Each compatible one gets a quick measured c_rel (drafter step / verifier step on
this machine, small context, few repeats): the number that decides whether speculation can pay at all. The steps
are timed by ``costmodel.timing`` (warm-up, outliers dropped, re-measured while implausible); a candidate whose
timing stays implausible is flagged unstable and ranked after every stable one, so it is never recommended.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relaxtui.engine.gguf import GGUFHeader, read_header
from relaxtui.errors import UserError
from relaxtui.models.store import models_dir
from relaxtui.progress import OnStep, StepCounter, no_steps

_SPLIT_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Candidate:
    path: Path
    size: int
    quantisation: str
    c_rel: float | None  # measured when compatible
    reason: str | None  # why it cannot draft for the verifier; None when it can
    stable: bool = True  # False: the timing stayed implausible after re-measuring (never recommended)
    unstable_reason: str | None = None
    spread: float | None = None  # the wider (max - min) / median of the two models' kept samples
    verifier_step_s: float | None = None  # the verifier's step, timed next to this drafter


@dataclass(frozen=True)
class KindCandidate:
    """A drafter kind that needs no model file (prompt lookup, llama.cpp's n-gram family, suffix): nothing to load, no
    vocabulary to match, and no model step — a draft costs host time only, so c_rel is about 0. Whether it pays is
    its acceptance, which depends on the workload (output that repeats input): `bench --workload edit` measures it."""

    kind: str
    about: str  # the kind's own words ("prompt lookup"), "" where its name says it
    c_rel: float = 0.0


def model_free_candidates() -> list[KindCandidate]:
    """Every kind the factory lists that drafts without a file or the verifier's hidden rows, in its order."""
    from relaxtui.decoding.drafters import KINDS, STANDALONE_KINDS

    return [KindCandidate(kind, KINDS[kind].about) for kind in STANDALONE_KINDS]


def rank(results: Sequence[Candidate]) -> list[Candidate]:
    """Compatible and stably timed first (cheapest first), then compatible but unstable, then the rejected."""
    return sorted(results, key=lambda c: (c.reason is not None, not c.stable,
                                          c.c_rel if c.c_rel is not None else 0.0, c.path.name))


def recommended(results: Sequence[Candidate]) -> Candidate | None:
    """The drafter to suggest: the cheapest compatible one whose timing is stable; None when there is none."""
    return next((c for c in rank(results) if c.reason is None and c.stable), None)


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
         threads: int | None = None, progress: OnStep = no_steps,
         clock: Callable[[], float] = time.perf_counter, open_model: Callable[..., Any] | None = None
         ) -> tuple[float | None, list[Candidate]]:
    """(median verifier step in seconds, candidates): compatible ones cheapest first (stable before unstable),
    then the rejected with reasons. The verifier is timed warm once, then interleaved with each drafter, so a
    machine whose load drifts (shared cores) skews both sides of a c_rel alike; a pair whose c_rel is implausible
    or whose verifier step is over ``STEP_JUMP`` x the warm median is re-measured, then flagged. ``clock`` is the
    timer and ``open_model(path, n_ctx=, n_threads=)`` the loader (LlamaModel; fakes in tests); ``progress`` gets a
    step per candidate as its check starts."""
    from relaxtui.costmodel.timing import Timing, c_rel_problem, jump_problem, step_timings
    from relaxtui.decoding.vocab import check_vocab
    from relaxtui.engine.llama import LlamaModel

    open_model = open_model or LlamaModel
    verifier_header = read_header(verifier_path)
    own = verifier_path.resolve()
    results, verifier_steps = [], []
    warm: list[float] = []  # the verifier's stable step medians so far: the least is its warm median
    verifier_size = verifier_path.stat().st_size
    others = [path for path in candidates if path.resolve() != own]
    steps = StepCounter(len(others), progress)
    with open_model(verifier_path, n_ctx=n_ctx, n_threads=threads) as verifier:
        for path in others:
            steps.start(path.name)
            names = (verifier_path.name, path.name)
            size = path.stat().st_size if path.exists() else 0
            try:
                header = read_header(path)
            except UserError as exc:
                results.append(Candidate(path, size, "?", None, str(exc)))
                continue
            reason = header_mismatch(verifier_header, header, names)
            c_rel = None
            timings = None
            if reason is None:
                try:
                    if not warm:  # before the first drafter is loaded: the verifier alone, warmed up
                        alone = step_timings([verifier], repeats=repeats, clock=clock)[0]
                        warm += [alone.median] if alone.stable else []
                    with open_model(path, n_ctx=n_ctx, n_threads=threads) as drafter:
                        check_vocab(verifier, drafter, names=names)
                        ratio = size / verifier_size if verifier_size else None

                        def implausible(found: Sequence[Timing], ratio: float | None = ratio,
                                        reference: float | None = min(warm, default=None)) -> str | None:
                            step = found[0].median
                            return (jump_problem(step, reference)
                                    or c_rel_problem(found[1].median / step if step > 0 else float("inf"), ratio))

                        timings = step_timings([verifier, drafter], repeats=repeats, clock=clock, check=implausible)
                        c_rel = timings[1].median / timings[0].median if timings[0].median > 0 else float("inf")
                except UserError as exc:
                    reason = str(exc)
            if timings is None or reason is not None:
                results.append(Candidate(path, size, header.quantisation, c_rel, reason))
                continue
            step_s = timings[0].median
            verifier_steps.append(step_s)
            warm += [step_s] if all(t.stable for t in timings) else []
            unstable = next((t.reason for t in timings if not t.stable), None)
            results.append(Candidate(path, size, header.quantisation, c_rel, None, stable=unstable is None,
                                     unstable_reason=unstable, spread=max(t.spread for t in timings),
                                     verifier_step_s=step_s))
    steps.finish()
    # a candidate timed before the verifier's warm median was known is held to it now (no re-measure: it is closed)
    results = [_held_to(c, min(warm, default=None)) for c in results]
    steady = [c.verifier_step_s for c in results if c.stable and c.verifier_step_s is not None]
    return (statistics.median(steady or verifier_steps) if verifier_steps else None), rank(results)


def _held_to(candidate: Candidate, warm: float | None) -> Candidate:
    """``candidate`` flagged when its verifier step is over ``STEP_JUMP`` x the verifier's final warm median."""
    from relaxtui.costmodel.timing import jump_problem

    if not candidate.stable or candidate.verifier_step_s is None:
        return candidate
    problem = jump_problem(candidate.verifier_step_s, warm)
    return candidate if problem is None else replace(candidate, stable=False, unstable_reason=problem)


# -- known drafters per family (hub names, suggested without downloading) --------------------------------------------
@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]  # searched in "architecture name basename file-name" of the verifier
    drafters: tuple[tuple[str, str], ...]  # (hub name, note)


FAMILIES = (
    # before Qwen3 (its pattern matches "qwen35" too). Hybrid models with MTP layers: their own head drafts too
    # (--draft-kind mtp); these small siblings share the 248k vocabulary. Names not checked against the hub here.
    Family("Qwen3.5", re.compile(r"qwen3[._ -]?5", re.IGNORECASE), (
        ("hf:unsloth/Qwen3.5-0.8B-GGUF:Q4_K_M", "0.8B, the smallest sibling; or the verifier's own MTP head"),
        ("hf:unsloth/Qwen3.5-2B-GGUF:Q4_K_M", "2B, for 27B-122B verifiers"),
        ("hf:unsloth/Qwen3.5-4B-GGUF:Q4_K_M", "4B, a large drafter for the 27B (the paper's pair uses its MTP head)"),
    )),
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
