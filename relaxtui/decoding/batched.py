"""The speculative loop over many sequences in one context (SPEC §8): ``loop.generate``'s six steps, each taken
over the list of live sequences.

draft (one drafter batch per draft step, every live sequence's next token in it) → verify (one verifier batch
holding every sequence's ``[last, x_1..x_N]``) → accept, per sequence → commit its counters → trim its own
KV rows → stop check; a finished sequence frees its slot and the next job from the queue takes it, as in
llama.cpp's `parallel` example. Each sequence keeps what makes a run its own — its seed streams, draft length,
counters and text — and uses the one-sequence helpers (``accept_round``, ``propose``, ``RoundCounters``,
``build_metrics``), so its law is the one-sequence loop's; only the batches are shared. Batched rows may differ
from one-row decodes in the last bits (SPEC §6), so tokens agree with K = 1 up to those numerics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relaxtui.decoding.acceptance import Emitted, accept_round
from relaxtui.decoding.backend import Backend, MultiBackend, SeqDecode, SequenceView
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.drafters import Draft, Drafter, ModelDrafter, fit_vocab, propose
from relaxtui.decoding.events import Finished, RoundTiming
from relaxtui.decoding.loop import DraftLength, GenerationConfig, build_metrics, check_request
from relaxtui.decoding.prefill import prefill, reusable
from relaxtui.decoding.sampling import spawn_generators
from relaxtui.engine.text import StreamDecoder
from relaxtui.errors import UserError
from relaxtui.rules import Rule


@dataclass(frozen=True)
class Job:
    """One generation to run: a prompt, its config and rule; ``tag`` is the caller's handle (a work unit)."""

    prompt: Sequence[int]
    config: GenerationConfig
    rule: Rule | None = None
    speculative: bool = True  # False: the verifier alone, even when the loop has a drafter
    tag: Any = None


@dataclass(eq=False)
class _Slot:
    """One live sequence: its own cache rows, seed streams, draft length, counters and text."""

    job: Job
    rule: Rule
    verifier: SequenceView
    drafter: Drafter | None
    context: list[int]
    draft_rng: np.random.Generator
    accept_rng: np.random.Generator
    draft_length: DraftLength
    counters: RoundCounters
    prefill_s: float
    prefill_decoded: int
    started: float  # decode clock
    llama_before: float
    decoder: StreamDecoder = field(default_factory=StreamDecoder)
    output: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish: str | None = None
    extra_steps: int = 0
    base: int = 0  # this round: cached tokens before the verify batch (everything but `last`)
    draft: Draft | None = None

    @property
    def seq(self) -> int:
        return self.verifier.seq

    @property
    def last(self) -> int:
        return self.context[-1]

    @property
    def config(self) -> GenerationConfig:
        return self.job.config


def generate_many(verifier: MultiBackend, jobs: Iterable[Job], *, drafter: Drafter | None = None,
                  should_stop: Callable[[], bool] = lambda: False,
                  clock: Callable[[], float] = time.perf_counter) -> Iterator[tuple[Job, Finished]]:
    """Run every job, ``verifier.n_seq`` at a time; yield (job, Finished) as each one ends (not in job order).

    A stop request ends every live sequence with finish reason "stopped" and starts no more jobs."""
    drafter_model: MultiBackend | None = getattr(drafter, "model", None)
    if drafter_model is not None and getattr(drafter_model, "n_seq", 1) < verifier.n_seq:
        raise UserError(f"the drafter's context holds {getattr(drafter_model, 'n_seq', 1)} sequences, "
                        f"the verifier's {verifier.n_seq}; load both with the same --parallel")
    slot_drafters = _slot_drafters(drafter, verifier.n_seq)
    queue = iter(jobs)
    free = list(range(verifier.n_seq - 1, -1, -1))  # pop() hands out sequence 0 first
    live: list[_Slot] = []
    stopping = False
    while True:
        while not stopping and free and (job := next(queue, None)) is not None:
            seq = free.pop()
            live.append(_start(verifier, seq, job, slot_drafters[seq] if job.speculative else None, should_stop,
                               clock))
        if not live:
            return
        if should_stop():
            for slot in live:
                slot.finish = slot.finish or "stopped"
        else:
            _round(verifier, drafter_model, [s for s in live if s.finish is None], clock)
        ended = [s for s in live if s.finish is not None]
        results = [(slot.job, _finished(slot, clock)) for slot in ended]  # timed before the caller gets any
        for slot in ended:
            live.remove(slot)
            free.append(slot.seq)
            stopping = stopping or slot.finish == "stopped"
        for result in results:
            handed = clock()
            yield result
            # what the caller did meanwhile (scoring, writing records) is not the live sequences' decode time
            away = clock() - handed
            for slot in live:
                slot.started += away


def _slot_drafters(drafter: Drafter | None, n_seq: int) -> list[Drafter | None]:
    """Each sequence's drafter: a model drafter over that sequence of the drafter's context; a drafter without a
    model (n-gram lookup) reads only the context it is given, so every sequence shares it."""
    if not isinstance(drafter, ModelDrafter):
        return [drafter] * n_seq
    model: MultiBackend = drafter.model  # type: ignore[assignment]
    return [ModelDrafter(SequenceView(model, seq), drafter.target_vocab, p_min=drafter.p_min) for seq in range(n_seq)]


def _start(verifier: MultiBackend, seq: int, job: Job, drafter: Drafter | None,
           should_stop: Callable[[], bool], clock: Callable[[], float]) -> _Slot:
    """Fill a free slot: check the job, prefill both models' rows of this sequence (alone, as K = 1 does)."""
    view = SequenceView(verifier, seq)
    config = job.config
    rule = check_request(view, job.prompt, config, drafter, job.rule)
    prompt = list(job.prompt)
    draft_rng, accept_rng = spawn_generators(config.seed)
    draft_max = config.draft_max if drafter is not None else 0
    started = clock()
    copy_cached_prompt(view, prompt[:-1])
    decoded, prefilled = prefill(view, prompt[:-1], reuse=config.reuse, should_stop=should_stop)
    drafter_view = getattr(drafter, "model", None)
    if prefilled and drafter is not None:
        if isinstance(drafter_view, SequenceView):
            copy_cached_prompt(drafter_view, prompt[:-1])
        prefilled = drafter.begin(prompt, reuse=config.reuse, should_stop=should_stop)
    now = clock()
    return _Slot(job, rule, view, drafter, prompt, draft_rng, accept_rng,
                 DraftLength(draft_max, max(config.draft_min, 1), config.adaptive), RoundCounters(draft_max),
                 prefill_s=now - started, prefill_decoded=decoded, started=now,
                 llama_before=_llama_seconds(verifier, getattr(drafter, "model", None)),
                 finish=None if prefilled else "stopped")


def copy_cached_prompt(view: SequenceView, prefix: Sequence[int]) -> None:
    """Take a prompt another sequence already holds (the same problem under another config or seed: an eval
    plan puts them side by side) by copying its KV instead of prefilling it again. When that sequence
    prefilled the same prompt, the copied cells are the ones a fresh prefill makes, so outputs do not change
    (the guarantee and the limits of "exact" reuse, which also matches by tokens); on a CPU, where a prompt
    token costs about what an output token does, this saves most of a grid's prefill."""
    if not prefix or reusable(view.cached_tokens, prefix, "exact"):
        return  # nothing to do, or this sequence's own cache already holds it
    model, n = view.model, len(prefix)
    for other in range(model.n_seq):
        cached = model.tokens_of(other)
        if other != view.seq and len(cached) >= n and list(cached[:n]) == list(prefix):
            model.share_prefix(other, view.seq, n)
            return


def _round(verifier: MultiBackend, drafter_model: Backend | None, live: list[_Slot],
           clock: Callable[[], float]) -> None:
    """One round for every live sequence: the six steps, batched where a model is called."""
    llama_before = _llama_seconds(verifier, drafter_model)
    t0 = clock()
    lengths = {}
    for slot in live:
        slot.base = slot.verifier.n_past  # = len(context) - 1: everything but `last` is cached
        room = verifier.n_ctx - slot.base - 1
        if room < 0:
            slot.finish = "context"
            continue
        n = slot.draft_length.current if slot.drafter is not None else 0
        lengths[slot] = min(n, room, slot.config.max_tokens - len(slot.output) - 1)
    live = [slot for slot in live if slot.finish is None]
    _draft_all(drafter_model, live, lengths)  # 1. draft
    t1 = clock()
    items = [SeqDecode(s.seq, [s.last, *_tokens(s)], range(len(_tokens(s)) + 1)) for s in live]
    target_logits = verifier.decode_many(items) if items else []  # 2. verify: one batch for every sequence
    t2 = clock()
    llama_s = _llama_seconds(verifier, drafter_model) - llama_before
    for slot, logits in zip(live, target_logits, strict=True):
        started = clock()
        draft, tokens = slot.draft, _tokens(slot)
        emitted = accept_round(tokens, draft.probs if draft else np.empty((0, 0)),  # 3. accept
                               draft.logits if draft else None, logits, slot.rule, slot.config.sampling,
                               slot.accept_rng, bonus_draft=_bonus_step(slot), bonus=slot.config.bonus)
        n_accepted = len(emitted) - 1
        slot.verifier.rollback(slot.base + 1 + n_accepted)  # 5. keep `last` and the accepted drafts
        timing = RoundTiming(slot.counters.rounds, len(tokens), n_accepted, t1 - t0, t2 - t1, clock() - started,
                             llama_s)
        slot.counters.observe_round(timing)  # 4. commit counters
        slot.draft_length.observe(len(tokens), n_accepted)
        _commit(slot, emitted)  # 6. stop check


def _tokens(slot: _Slot) -> list[int]:
    return slot.draft.tokens if slot.draft is not None else []


def _draft_all(drafter_model: Backend | None, live: list[_Slot], lengths: dict[_Slot, int]) -> None:
    """Step 1 for every sequence. Model drafters share one drafter batch per draft step (the first also
    re-syncs each sequence's rows); a drafter without a model drafts each sequence on its own."""
    batched: list[tuple[_Slot, int]] = []
    for slot in live:
        slot.draft = None
        n = lengths[slot]
        if isinstance(slot.drafter, ModelDrafter) and drafter_model is not None:
            n = max(0, min(n, slot.drafter.room(slot.context)))
            if n > 0:
                batched.append((slot, n))
        elif slot.drafter is not None and n > 0:
            slot.draft = slot.drafter.draft(slot.context, n, slot.config.sampling, slot.draft_rng)
    if batched:
        _draft_batched(drafter_model, batched)  # type: ignore[arg-type]
    for slot in live:
        if slot.draft is not None and len(slot.draft.tokens) < slot.config.draft_min:
            slot.draft = None  # llama.cpp's --draft-min: too short to pay for itself


def _draft_batched(model: MultiBackend, wanted: list[tuple[_Slot, int]]) -> None:
    started = time.perf_counter()
    state = {slot: ([], [], []) for slot, _ in wanted}  # tokens, q rows, raw logits rows
    limit = dict(wanted)
    items = {slot: SeqDecode(slot.seq, slot.drafter.resync(slot.context), [-1])  # type: ignore[union-attr]
             for slot, _ in wanted}
    while items:
        rows = model.decode_many(list(items.values()))
        following = {}
        for slot, logits in zip(items, rows, strict=True):
            drafter: ModelDrafter = slot.drafter  # type: ignore[assignment]
            fitted = fit_vocab(logits[0], drafter.target_vocab)
            step = propose(fitted, slot.config.sampling, slot.draft_rng, drafter.p_min)
            if step is None:
                continue
            tokens, probs, raw = state[slot]
            tokens.append(step[0])
            probs.append(step[1])
            raw.append(fitted)
            if len(tokens) < limit[slot]:
                following[slot] = SeqDecode(slot.seq, [step[0]], [0])
        items = following
    for slot, (tokens, probs, raw) in state.items():
        slot.draft = slot.drafter.finish(slot.context, tokens, probs, raw, started)  # type: ignore[union-attr]


def _bonus_step(slot: _Slot) -> Callable[[], tuple[np.ndarray, np.ndarray]] | None:
    """A relaxed bonus needs one more drafter step past the draft: this sequence's alone (rounds that need it
    are the fully accepted ones of relaxed rules)."""
    drafter = slot.drafter
    if getattr(drafter, "model", None) is None:
        return None

    def step() -> tuple[np.ndarray, np.ndarray]:
        slot.extra_steps += 1
        return drafter.next_distribution(slot.config.sampling)  # type: ignore[union-attr]
    return step


def _commit(slot: _Slot, emitted: list[Emitted]) -> None:
    """Append the round's tokens to the sequence (stopping at an end-of-generation token) and decide whether
    it is done."""
    for item in emitted:
        if slot.verifier.is_eog(item.token_id):
            slot.finish = "eog"
            break
        slot.text_parts.append(slot.decoder.push(slot.verifier.token_piece(item.token_id)))
        slot.output.append(item.token_id)
    slot.context.extend(item.token_id for item in emitted)
    if slot.finish is None and len(slot.output) >= slot.config.max_tokens:
        slot.finish = "max_tokens"


def _finished(slot: _Slot, clock: Callable[[], float]) -> Finished:
    slot.text_parts.append(slot.decoder.flush())
    llama_s = _llama_seconds(slot.verifier, getattr(slot.drafter, "model", None)) - slot.llama_before
    metrics = build_metrics(len(slot.job.prompt), len(slot.output), slot.counters, prefill_s=slot.prefill_s,
                            decode_s=clock() - slot.started, llama_s=llama_s, finish=slot.finish or "stopped",
                            extra_draft_steps=slot.extra_steps, prefill_decoded=slot.prefill_decoded)
    return Finished("".join(slot.text_parts), metrics, tuple(slot.output))


def _llama_seconds(verifier: Backend, drafter_model: Backend | None) -> float:
    """Seconds inside llama_decode of both contexts (shared by every sequence in them)."""
    return verifier.decode_seconds + (drafter_model.decode_seconds if drafter_model is not None else 0.0)
