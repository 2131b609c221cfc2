"""The speculative loop over many sequences in one context (docs/architecture.md#many-sequences): ``loop.generate``'s
six steps, each taken over the list of live sequences.

draft (one call per drafter per round: a model drafter batches every live sequence's next token per draft step)
→ verify (one verifier batch holding every sequence's ``[last, x_1..x_N]``) → accept, per sequence → commit its
counters → trim its own KV rows → stop check; a finished sequence frees its slot and the next job takes it, as in
llama.cpp's `parallel` example. Each sequence keeps what makes a run its own — its seed streams, draft length,
counters and text — in a ``round.Slot``, and goes through the same ``round`` steps as K = 1, so its law is the
one-sequence loop's; only the batches are shared. Batched rows may differ from one-row decodes in the last bits
(docs/architecture.md#llamacpp-pitfalls), so tokens agree with K = 1 up to those numerics.

``stream_many`` takes jobs from a ``JobSource`` while it runs (the server's queue) and yields every event;
``generate_many`` runs a fixed list of jobs and yields each one's ``Finished``. A ``ReadJob`` generates nothing: it
reads with the verifier on a sequence of its own between two rounds (a server's prompt scoring) and ends at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from relaxtui.checks import BadValue
from relaxtui.decoding import round as steps
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafting import Drafter
from relaxtui.decoding.events import Event, Finished, RoundTiming
from relaxtui.decoding.prefill import copy_cached_prompt, prepare
from relaxtui.decoding.round import Slot
from relaxtui.engine.api import Model, Rows, SeqDecode
from relaxtui.rules import Rule

__all__ = ["Job", "JobSource", "Read", "ReadJob", "generate_many", "stream_many"]


@dataclass(frozen=True)
class Job:
    """One generation to run: a prompt, its config and rule; ``tag`` is the caller's handle (a work unit)."""

    prompt: Sequence[int]
    config: GenerationConfig
    rule: Rule | None = None
    speculative: bool = True  # False: the verifier alone, even when the loop has a drafter
    tag: Any = None
    should_stop: Callable[[], bool] | None = None  # this job's own stop request (a client gone), polled per round
    drafter: Drafter | None = None  # drafts this job instead of the loop's drafter (e.g. n-gram lookup)
    scope: object = None  # whose cached state this job may reuse (a server's API key): a sequence that last served
    # another scope is emptied first, in the verifier and the drafters, and prompts are copied only from sequences of
    # the same scope, so neither the cache's content nor its timing tells one scope what another sent


@dataclass(frozen=True)
class ReadJob:
    """A job that generates nothing: it reads with the verifier on a sequence of its own (a server's prompt scoring:
    ``serve/scoring.py``). Taken like any job (same queue, bound and drain), it gets a free sequence between two
    rounds and ``read(verifier, seq)`` runs there, on the model thread, while every other sequence waits (a long
    prompt holds them for its decode, as a lone prefill does); the loop then yields (job, ``Read``) and frees the
    sequence. ``should_stop``: its own stop request (a client gone): it is then not read."""

    read: Callable[[Model, int], object]
    tag: Any = None
    should_stop: Callable[[], bool] | None = None
    scope: object = None  # whose cached state the sequence may hold afterwards (``Job.scope``)


@dataclass(frozen=True)
class Read:
    """The end of a ``ReadJob``: what its ``read`` returned; ``stopped``: it was not read (its own stop request, or
    the loop's)."""

    value: object = None
    stopped: bool = False


class JobSource(Protocol):
    def take(self, *, block: bool) -> Job | ReadJob | None: ...  # block only when nothing is live; None: no more


class _Listed:
    """A fixed iterable of jobs as a source."""

    def __init__(self, jobs: Iterable[Job]) -> None:
        self._jobs = iter(jobs)

    def take(self, *, block: bool) -> Job | ReadJob | None:
        return next(self._jobs, None)


def generate_many(verifier: Model, jobs: Iterable[Job], *, drafter: Drafter | None = None,
                  should_stop: Callable[[], bool] = lambda: False,
                  clock: Callable[[], float] = time.perf_counter) -> Iterator[tuple[Job, Finished]]:
    """Run every job, ``verifier.n_seq`` at a time; yield (job, Finished) as each one ends (not in job order).

    A stop request ends every live sequence with finish reason "stopped" and starts no more jobs."""
    yield from cast("Iterator[tuple[Job, Finished]]",  # (tokens=False: it yields Finished events only)
                    stream_many(verifier, _Listed(jobs), drafter=drafter, should_stop=should_stop, clock=clock,
                                tokens=False))


def stream_many(verifier: Model, source: JobSource, *, drafter: Drafter | None = None,
                should_stop: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.perf_counter,
                tokens: bool = True, join_in_batch: bool = False) -> Iterator[tuple[Job | ReadJob, Event | Read]]:
    """Run jobs as ``source`` hands them over, ``verifier.n_seq`` at a time: yield (job, TokenEvent) per emitted
    token (``tokens``) and (job, Finished) as each ends. A job's own stop request ends it alone; ``should_stop``
    ends every live sequence with finish reason "stopped" and takes no more jobs.

    ``join_in_batch`` (the server's continuous batching, as llama-server does it): a job that arrives while other
    sequences run, or with others, sends its prompt in the verify batches (``PREFILL_BUDGET`` tokens a round, all
    joiners together) instead of being prefilled alone while the others wait; it drafts from the round after its
    prompt is in. A lone job into an idle loop is prefilled alone either way, as K = 1 does."""
    _check_room(drafter, verifier)
    free = list(range(verifier.n_seq - 1, -1, -1))  # pop() hands out sequence 0 first
    live: list[Slot] = []
    joining: list[_Joining] = []  # jobs holding a sequence whose prompts are still going into the verify batches
    own_stops: set[Slot] = set()  # stopped by their own request, not by ``should_stop``: the others go on
    scopes = _Scopes()  # whose cached state each sequence holds
    stopping = False

    def open_slot(entry: _Joining) -> None:
        job = entry.job
        slot = steps.open_slot(verifier, entry.seq, job.prompt, job.config, job.rule,
                               entry.drafter, should_stop=_either(should_stop, job.should_stop), clock=clock,
                               share_prompt=True, tag=job, sources=scopes.sources(entry))
        if entry.rest is not None:  # its prompt came in shared batches: count them as its prefill
            slot.prefill_decoded += entry.decoded
            slot.prefill_s = slot.started - entry.taken
        if slot.finish == "stopped" and job.should_stop is not None and job.should_stop():
            own_stops.add(slot)  # gone before (or while) its prompt was read: no prefill wasted on it
        live.append(slot)

    while True:
        taken: list[_Joining] = []
        while not stopping and free and (job := source.take(block=not (live or joining or taken))) is not None:
            if isinstance(job, ReadJob):  # between two rounds, on a sequence of its own, then it is done
                yield job, _read(verifier, job, free[-1], scopes, should_stop)
                continue
            job_drafter = (job.drafter or drafter) if job.speculative else None
            _check_room(job_drafter, verifier)
            seq = free.pop()
            scopes.enter(verifier, seq, job.scope, job_drafter)
            taken.append(_Joining(job, seq, job_drafter, clock()))
        if join_in_batch and (live or joining or len(taken) > 1):
            joining += taken
        else:
            for entry in taken:  # each sequence prefills alone, as K = 1 does
                if entry.job.config.reuse == "longest":  # (the exact copy is open_slot's own)
                    copy_cached_prompt(verifier, entry.seq, entry.job.prompt[:-1], "longest",
                                       sources=scopes.sources(entry))
                open_slot(entry)
        for entry in [e for e in joining if e.rest == [] or should_stop() or e.stop_requested()]:
            joining.remove(entry)  # its prompt is in (or it was stopped: the prefill sees that and reads nothing)
            open_slot(entry)
        if not live and not joining:
            return
        live.sort(key=lambda slot: slot.seq)  # batches in sequence order: see _in_order
        if should_stop():
            for slot in live:
                slot.finish = slot.finish or "stopped"
        else:
            for slot in live:
                if slot.finish is None and slot.tag.should_stop is not None and slot.tag.should_stop():
                    slot.finish = "stopped"
                    own_stops.add(slot)
            prefills = _prompt_parts(verifier, joining, scopes)
            events = _round(verifier, [drafter, *(s.drafter for s in live)], [s for s in live if s.finish is None],
                            clock, tokens, [item for _, item in prefills])
            for entry, item in prefills:
                if entry.rest is None:  # (_prompt_parts hands parts of prepared entries only)
                    raise RuntimeError(f"sequence {entry.seq}: a prompt part of a joiner that was never prepared")
                entry.rest, entry.decoded = entry.rest[len(item.tokens):], entry.decoded + len(item.tokens)
            yield from _handed(events, live, clock)
        ended = [s for s in live if s.finish is not None]
        results = [(slot.tag, steps.finished(slot, clock)) for slot in ended]  # timed before the caller gets any
        for slot in ended:
            live.remove(slot)
            free.append(slot.seq)
            free.sort(reverse=True)  # pop() hands out the lowest free sequence: live ones stay packed from 0
            stopping = stopping or (slot.finish == "stopped" and slot not in own_stops)
            own_stops.discard(slot)
        yield from _handed(results, live, clock)


PREFILL_BUDGET = 512  # prompt tokens one verify batch takes from joining sequences: bounds how long the others wait


@dataclass(eq=False)
class _Joining:
    """A job that holds a sequence while its prompt goes into the verify batches, a part per round."""

    job: Job
    seq: int
    drafter: Drafter | None
    taken: float  # when it got its sequence: its prefill time runs from here
    rest: list[int] | None = None  # prompt tokens still to decode; None: not prepared yet
    decoded: int = 0

    def stop_requested(self) -> bool:
        return self.job.should_stop is not None and self.job.should_stop()


def _prompt_parts(verifier: Model, joining: list[_Joining],
                  scopes: _Scopes) -> list[tuple[_Joining, SeqDecode]]:
    """This round's prompt tokens of the joining sequences (oldest first, ``PREFILL_BUDGET`` in all, no logits).
    A sequence is prepared when it first gets here: checked, its cache trimmed to what it may keep of its prompt, or
    the prompt copied from a sequence that holds it; one whose prompt another joiner is still reading waits for it,
    then copies it."""
    parts, budget = [], PREFILL_BUDGET
    for entry in joining:
        prefix = list(entry.job.prompt[:-1])
        if entry.rest is None:
            sources = scopes.sources(entry)
            if any(other.rest and other.seq in sources and list(other.job.prompt[:-1]) == prefix for other in joining):
                continue  # the same prompt is being read for another choice: copy it once that is done
            steps.check_request(verifier, entry.job.prompt, entry.job.config, entry.drafter, entry.job.rule)
            copy_cached_prompt(verifier, entry.seq, prefix, entry.job.config.reuse, sources=sources)
            entry.rest = prefix[prepare(verifier, entry.seq, prefix, entry.job.config.reuse):]
        if entry.rest and budget > 0:
            parts.append((entry, SeqDecode(entry.seq, entry.rest[:budget])))
            budget -= len(parts[-1][1].tokens)
    return parts


def _in_order(verifier: Model, items: list[SeqDecode]) -> list[Rows]:
    """``decode_many`` with the items in increasing sequence order, results in the items' order. llama.cpp, whose
    sequences each have their own KV stream, puts only consecutive sequence ids, in increasing order, into one
    micro-batch: a batch in another order (or with gaps) is split into several, each a pass over the weights."""
    order = sorted(range(len(items)), key=lambda i: items[i].seq)
    decoded = verifier.decode_many([items[i] for i in order])
    out: list[Rows] = [decoded[0]] * len(items)
    for position, i in enumerate(order):
        out[i] = decoded[position]
    return out


def _handed(items: Sequence[tuple[Job, Event]], live: list[Slot],
            clock: Callable[[], float]) -> Iterator[tuple[Job, Event]]:
    """Yield each item; what the caller does meanwhile (scoring, writing records, sending a chunk) is not the live
    sequences' decode time."""
    for item in items:
        handed = clock()
        yield item
        away = clock() - handed
        for slot in live:
            slot.started += away


@dataclass
class _Scopes:
    """Which scope (``Job.scope``) each sequence last served, and the drafters that have held it since: what a change
    of scope empties, so a sequence's next prompt keeps nothing another scope sent (the prompt cache's ``cache_n``
    and its timing would tell)."""

    owners: dict[int, object] = field(default_factory=dict)
    holders: dict[int, dict[int, Drafter]] = field(default_factory=dict)

    def enter(self, verifier: Model, seq: int, scope: object, drafter: Drafter | None) -> None:
        if seq in self.owners and self.owners[seq] != scope:
            verifier.clear(seq)
            for held in self.holders.pop(seq, {}).values():
                held.release(seq)
        self.owners[seq] = scope
        if drafter is not None:
            self.holders.setdefault(seq, {})[id(drafter)] = drafter

    def sources(self, entry: _Joining) -> tuple[int, ...]:
        """The other sequences ``entry``'s job may copy a cached prompt from: those of its scope, now."""
        return tuple(seq for seq, owner in self.owners.items() if seq != entry.seq and owner == entry.job.scope)


def _read(verifier: Model, job: ReadJob, seq: int, scopes: _Scopes, should_stop: Callable[[], bool]) -> Read:
    """Run a ``ReadJob`` on the free sequence ``seq`` (which its scope then holds), unless a stop was asked."""
    if should_stop() or (job.should_stop is not None and job.should_stop()):
        return Read(stopped=True)
    scopes.enter(verifier, seq, job.scope, None)
    return Read(job.read(verifier, seq))


def _either(stop: Callable[[], bool], own: Callable[[], bool] | None) -> Callable[[], bool]:
    """A prefill's stop check: the loop's, or this job's own."""
    return stop if own is None else lambda: stop() or own()


def _check_room(drafter: Drafter | None, verifier: Model) -> None:
    held = drafter.traits.n_seq if drafter is not None else None
    if held is not None and held < verifier.n_seq:
        raise BadValue("parallel", f"must be the same for both models: the drafter's context holds {held} sequences, "
                                   f"the verifier's {verifier.n_seq}")


def _round(verifier: Model, drafters: Sequence[Drafter | None], live: list[Slot], clock: Callable[[], float],
           tokens: bool, prefills: Sequence[SeqDecode] = ()) -> list[tuple[Job, Event]]:
    """One round for every live sequence: the six steps, batched where a model is called; the emitted tokens'
    events when ``tokens``. ``prefills``: joining sequences' prompt tokens, decoded in the same verify batch."""
    drafters = list({id(d): d for d in drafters if d is not None}.values())
    llama_before = steps.llama_seconds(verifier, *drafters)
    t0 = clock()
    live = [slot for slot in live if steps.plan(slot)]  # room and N, per sequence
    steps.draft_all(live)  # 1. draft: one call per drafter for all its sequences
    t1 = clock()
    items = [SeqDecode(s.seq, s.verify_tokens, range(len(s.draft_tokens) + 1)) for s in live]
    items += prefills  # 2. verify: one batch for every sequence, and the joiners' prompts
    target_logits = _in_order(verifier, items)[:len(live)] if items else []
    t2 = clock()
    llama_s = steps.llama_seconds(verifier, *drafters) - llama_before
    events: list[tuple[Job, Event]] = []
    for slot, logits in zip(live, target_logits, strict=True):
        started = clock()
        emitted = steps.accept(slot, logits)  # 3. accept, 5. trim this sequence's rows
        timing = RoundTiming(slot.counters.rounds, len(slot.draft_tokens), len(emitted) - 1, t1 - t0, t2 - t1,
                             clock() - started, llama_s)
        steps.observe(slot, timing)  # 4. commit counters
        shown = steps.commit(slot, emitted)  # 6. stop check
        if tokens:
            top = slot.config.top_alternatives
            events += [(slot.tag, steps.token_event(i, item, text, timing, top, logp=slot.logprobs[i]))
                       for i, item, text in shown]
    return events
