"""The model side of the server: one thread owns the pair and runs the batched loop; requests join it.

Like llama-server's task queue and slots: HTTP handlers (the asyncio thread) turn a checked request into jobs — one
per choice, each with its own prompt, rule, knob, N, sampling and seed — and ``submit`` them to a
``BatchedExecutor``, whose thread takes a job whenever a slot frees and hands every event back through the
request's ``Ticket`` (``loop.call_soon_threadsafe``: the model thread never touches the event loop otherwise). A
ticket also carries the request's stop conditions, polled by the loop once per round for each of its sequences:
the client went away, a stop string was seen, the deadline passed. A stopped sequence leaves the batch at that
round and its slot takes the next job.

The server listens as soon as the models are loaded: this machine's verify prices and cost profile, when neither
is kept from an earlier start, are measured afterwards on the model thread while it is idle, a slice at a time
(``costmodel.background``); drafts are verified whole and responses are priced by nothing (``priced_by`` null)
until they are there.

Shutdown is the scheduler's (``drain``, called on SIGINT/SIGTERM before the web server stops): no new requests,
the live ones get until the drain deadline, then stop at their next round and end their responses as any stopped
sequence does; only then are the models freed (``close``).
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from relaxtui.checks import BadValue
from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile, load_profile
from relaxtui.decoding.batched import Job, Read, ReadJob
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Event, Finished, TokenEvent
from relaxtui.decoding.prefill import ReusePolicy
from relaxtui.decoding.thinking import check_scope_on
from relaxtui.errors import UserError
from relaxtui.executors import BatchedExecutor, Closed, QueueFull
from relaxtui.serve.body import ApiError, bad, setting_error
from relaxtui.serve.metrics import ServerMetrics
from relaxtui.serve.pair import ServedPair
from relaxtui.serve.protocol import CompletionRequest
from relaxtui.serve.scoring import ScoredPrompt, Scoring

RETRY_AFTER_S = 1  # what a client told "busy" is asked to wait
STOP_GRACE_S = 10.0  # past the drain deadline, how long the last round may take to end (the web server waits longer)
PROFILE_PROMPT = "Write a function that checks whether a number is prime, then explain it."  # this machine's profile


@dataclass(frozen=True)
class Failure:
    """The loop lost this sequence (it raised while the sequence held a slot: 500), or the server shut down before
    it got one (503)."""

    message: str
    status: int = 500

    def error(self) -> ApiError:
        return ApiError(self.status, self.message, kind="server_error" if self.status == 500 else "unavailable_error")


Delivered = Event | Failure | ScoredPrompt  # what a ticket hands its handler: an event, a failure, a score
Generated = Event | Failure  # a generation's ticket: its choices' events, or how a choice was lost
Scored = ScoredPrompt | Failure  # a scoring request's ticket: each prompt's scores, or how it was lost
D = TypeVar("D", bound=Delivered)  # what one ticket hands back


@dataclass(frozen=True)
class LoopSettings:
    """Server-wide generation settings no request field overrides (the speculation flags of the CLI)."""

    bonus: str = "auto"
    draft_min: int = 0
    adaptive: bool = False
    draft_max: int = 3  # the server's N: the longest block a this-machine profile is measured for
    reuse: ReusePolicy = "longest"  # prompt cache: keep (or copy from another slot) the longest common prefix, as
    # llama-server does; "exact": only a whole repeated prompt, so outputs never depend on what ran before


class Ticket(Generic[D]):
    """One request's choices in the batch: where their events go, and when each of them should stop.

    Events from the model thread are buffered and handed to the event loop in bursts: one wake-up of the loop for
    whatever arrived since the last one (a round's tokens of every choice), not one per token — each wake-up is a
    syscall and a turn of the GIL that the model thread would wait for."""

    def __init__(self, loop: asyncio.AbstractEventLoop, choices: int, deadline: float) -> None:
        self.loop = loop
        self.events: asyncio.Queue[tuple[int, D]] = asyncio.Queue()
        self.cancelled = threading.Event()  # the client went away, or the response is complete
        self.done = [False] * choices  # a stop string ended this choice
        self.deadline = deadline  # time.monotonic() after which every choice stops
        self._lock = threading.Lock()
        self._pending: list[tuple[int, D]] = []  # delivered, not yet on the loop's queue

    def should_stop(self, choice: int) -> bool:
        return self.cancelled.is_set() or self.done[choice] or time.monotonic() > self.deadline

    @property
    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def deliver(self, choice: int, event: D) -> None:
        """From any thread: queue the event; wake the loop only if no wake-up is pending already."""
        with self._lock:
            self._pending.append((choice, event))
            if len(self._pending) > 1:
                return  # the wake-up already scheduled takes this one too
        try:
            self.loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the event loop is gone (shutdown): nobody is waiting any more
            pass

    def _flush(self) -> None:
        """On the event loop: move every buffered event to the queue the handler reads."""
        with self._lock:
            items, self._pending = self._pending, []
        for item in items:
            self.events.put_nowait(item)


class Scheduler:
    """Loads the pair in its own thread (``state`` says "loading" until then), then feeds requests to the batch."""

    def __init__(self, load: Callable[[], ServedPair], *, max_queue: int, profile: str | None = None,
                 settings: LoopSettings = LoopSettings(), log: Callable[[str], None] | None = None) -> None:
        self._load, self.max_queue, self.profile_spec, self.settings = load, max_queue, profile, settings
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.state = "loading"  # loading -> ready -> draining -> closed, or failed
        self.error: str | None = None
        self.pair: ServedPair | None = None
        self.profile: CostProfile | None = None  # prices responses; None until there (measured in the background)
        self.executor: BatchedExecutor | None = None
        self.metrics = ServerMetrics()
        self.ready = threading.Event()  # set once loaded, or failed
        self._drain: threading.Thread | None = None  # the shutdown's drain, once begun
        self._stopped = True  # the batch loop has ended (or never ran): the models may be freed

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self, *, wait: bool = False) -> None:
        thread = threading.Thread(target=self._start, name="relaxtui-load", daemon=True)
        thread.start()
        if wait:
            thread.join()

    def _start(self) -> None:
        try:
            pair = self._load()
            try:
                self._resolve_profile(pair)
                pair.pair.start_pricing(log=self.log, done=lambda prices: self.log(
                    "verify prices measured: requests' drafts are cut by price from now on"))
            except BaseException:
                pair.close()
                raise
            if self._drain is not None:  # shut down while it loaded
                pair.close()
                self.state = "closed"
                return
            self.pair = pair
            background = pair.pair.background
            self.executor = BatchedExecutor(pair.verifier, pair.drafter, max_waiting=self.max_queue,
                                            join_in_batch=True,  # a new request's prompt rides in the running batch
                                            idle=background.step, taken=background.touched)
            self.executor.start(self._on_event, self._on_error)
            self._stopped = False  # until a drain has seen the batch loop end
            self.state = "ready"
        except UserError as exc:
            self.state, self.error = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - said in one line; the server answers 503 with it
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    @property
    def profile_name(self) -> str | None:
        """The name of the profile that prices responses (None until there is one)."""
        return None if self.profile is None else self.profile.name

    def _resolve_profile(self, pair: ServedPair) -> None:
        """The profile that prices responses: a shipped name or file, now; or ``this-machine`` — the default, as
        eval and tune price (for the fake pair, which has no costs to measure, its stand-in) — read from the cache,
        else measured in the background once the server listens (responses are priced by nothing until then)."""
        if self.profile_spec is not None and self.profile_spec != THIS_MACHINE:
            self.profile = load_profile(self.profile_spec)
            return
        options = pair.pair.options
        if options is None and self.profile_spec is None and pair.cost_profile is not None:
            self.profile = pair.cost_profile
            return
        if options is None or pair.pair.verifier_path is None:
            raise UserError("--profile this-machine needs real models (the fake pair has no costs to measure)")
        from relaxtui.costmodel import profile_cache
        from relaxtui.costmodel.calibrate import profile_slices
        from relaxtui.costmodel.measure import hardware_description
        from relaxtui.decoding.sampling import SamplingParams

        draft_max, sampling = max(1, self.settings.draft_max), SamplingParams()
        key = {"verifier": profile_cache.file_identity(pair.pair.verifier_path),
               "drafter": profile_cache.file_identity(pair.pair.drafter_path), "drafter_kind": pair.pair.drafter_name,
               "threads": options.threads, "gpu_layers": options.gpu_layers,
               "ctx_size": options.ctx_size, "draft_max": (draft_max,),
               "sampling": repr(sampling), "hardware": hardware_description()}
        found = profile_cache.kept_profile(key, log=self.log)
        if found is not None:
            self.profile = found.profile
            self.log(f"pricing responses with this machine's profile, read from {found.path} (delete it to measure "
                     "again)")
            return
        self.log("measuring this machine's cost profile in the background (seconds; a minute on a busy machine); "
                 "responses are priced by it once it is there…")
        slices = profile_slices(pair.verifier, pair.drafter, verifier_name=pair.name,
                                drafter_name=pair.pair.drafter_name, max_block=draft_max + 1, sampling=sampling,
                                prompt=pair.text_tokens(PROFILE_PROMPT), max_tokens=512)

        def measured(profile: CostProfile) -> None:
            kept = profile_cache.keep_profile(key, profile)
            self.profile = kept.profile
            if kept.profile.timing_stable is False:
                self.log("pricing responses with this machine's profile (its timings stayed unstable: rough, not kept)")
            else:
                self.log(f"pricing responses with this machine's profile, kept in {kept.path} (delete it to measure "
                         "again)")

        pair.pair.background.add("this machine's cost profile", slices, measured)

    def drain(self, timeout: float) -> None:
        """Begin the shutdown and return at once (SIGINT/SIGTERM call this before the web server stops): from now
        on a request is a 503; live and waiting sequences run on, and those still running ``timeout`` s from now
        stop at their next round, each ending its response with finish reason "length"; the requests that never
        got a slot are told the server is shutting down. Later calls change nothing."""
        if self._drain is not None:
            return
        if self.state == "ready":
            self.state = "draining"
        self._drain = threading.Thread(target=self._drain_batch, args=(timeout,), name="relaxtui-drain", daemon=True)
        self._drain.start()

    def _drain_batch(self, timeout: float) -> None:
        executor = self.executor
        if executor is None:
            return
        # up to the deadline the sequences run on (the waiting ones take the slots that free); then every live one
        # stops at its next round; a round that has not ended after STOP_GRACE_S more is left to the process exit
        self._stopped = executor.close(drain=True, timeout=timeout, grace=STOP_GRACE_S)
        for job in executor.queue.clear():
            ticket, choice = job.tag
            ticket.deliver(choice, Failure("the server is shutting down", 503))

    def close(self, timeout: float = 30.0) -> None:
        """Drain (``drain``, begun now unless it was already), wait for it, then free the models."""
        self.drain(timeout)
        assert self._drain is not None
        self._drain.join()  # bounded: the deadline, then one round (at most STOP_GRACE_S)
        self.state = "closed" if self.state in ("ready", "draining") else self.state
        if self.pair is not None and not self._stopped:
            self.log(f"relaxtui serve: the batch did not stop within {STOP_GRACE_S:g} s of the drain deadline; "
                     "the models are freed by the process exit")
        elif self.pair is not None:
            self.pair.close()
            self.pair = None

    # -- requests -----------------------------------------------------------------------------------------------
    def jobs(self, request: CompletionRequest, prompts: Sequence[Sequence[int]], ticket: Ticket[Generated],
             param: str, scope: object = None) -> list[Job]:
        """One job per (prompt, choice); choice i of prompt j is index j·n + i, seeds seed + i. ``scope``: whose
        learned state (drafter corpora, prompt cache) the jobs reuse and feed (``relaxtui.serve.policy``)."""
        pair = self.pair
        assert pair is not None
        spec, rule = request.speculative, request.rule  # the rule the request reader built, once per request
        draft_max = spec.draft_max if spec.drafts else 0
        # the drafter of the kind asked for: the pair's own, or a standalone kind's (one per scope where it learns),
        # cut by price where the server's --draft-cut says (the pair built it so)
        try:
            drafter = pair.drafter_for(spec.drafter, scope) if spec.drafts else None
            check_scope_on(pair.verifier, spec.relax_scope)  # a verifier that marks no thinking block: a 400
        except BadValue as exc:
            raise setting_error(exc) from None
        jobs = []
        for j, prompt in enumerate(prompts):
            room = pair.n_ctx - len(prompt)
            if not prompt:
                raise bad(param, "the prompt is empty")
            if room < 1:
                raise bad(param, f"the prompt has {len(prompt)} tokens but a slot holds {pair.n_ctx} (--ctx-size)")
            max_tokens = min(request.max_tokens or room, room)
            for i in range(request.n):
                choice = j * request.n + i
                config = GenerationConfig(draft_max=draft_max, max_tokens=max_tokens, sampling=request.sampling,
                                          seed=request.seed + i, top_alternatives=request.logprobs or 0,
                                          # what serve renders is p(x): at greedy the T=1 softmax's (the normaliser)
                                          logprobs=request.logprobs is not None and request.sampling.greedy,
                                          bonus=self.settings.bonus, draft_min=min(self.settings.draft_min, draft_max),
                                          adaptive=self.settings.adaptive, reuse=self.settings.reuse,
                                          stop=request.stop,  # the loop ends the sequence in the round that stops
                                          relax_scope=spec.relax_scope)
                jobs.append(Job(list(prompt), config, rule, speculative=spec.drafts, tag=(ticket, choice),
                                should_stop=functools.partial(ticket.should_stop, choice), drafter=drafter,
                                scope=scope))
        return jobs

    def scoring_jobs(self, prompts: Sequence[Sequence[int]], top: int, ticket: Ticket[Scored],
                     scope: object = None) -> list[ReadJob]:
        """One read job per prompt (``relaxtui.serve.scoring``): prompt j's scores come back as choice j."""
        return [ReadJob(Scoring(prompt, top), tag=(ticket, j), should_stop=functools.partial(ticket.should_stop, j),
                        scope=scope) for j, prompt in enumerate(prompts)]

    def submit(self, jobs: Sequence[Job | ReadJob]) -> None:
        """Queue a request's jobs, all or none: 503 (with Retry-After) while loading, when full, or shutting down."""
        if self.state != "ready" or self.executor is None:
            raise self.unavailable()
        slots = self.pair.verifier.n_seq if self.pair is not None else 1
        if len(jobs) > self.max_queue + slots:  # never fits: a 400, not a 503 a client would retry forever
            raise bad("n", f"{len(jobs)} sequences (prompts x n) can never be queued: at most --max-queue "
                           f"{self.max_queue} + {slots} slots")
        try:
            self.executor.submit(jobs)
        except QueueFull:
            self.metrics.observe_request("completions", "queue_full")
            raise ApiError(503, f"the server is busy: {self.executor.waiting} sequences are waiting for a slot "
                                f"(--max-queue {self.max_queue}); retry later", kind="server_busy",
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except Closed:
            raise ApiError(503, "the server is shutting down", kind="unavailable_error",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None

    def unavailable(self) -> ApiError:
        if self.state == "failed":
            return ApiError(503, f"the models failed to load: {self.error}", kind="unavailable_error")
        if self.state == "loading":
            return ApiError(503, "Loading model", kind="unavailable_error", headers={"Retry-After": str(RETRY_AFTER_S)})
        return ApiError(503, "the server is shutting down", kind="unavailable_error")

    # -- the model thread's side --------------------------------------------------------------------------------
    def _on_event(self, job: Job | ReadJob, event: Event | Read) -> None:
        ticket, choice = job.tag
        if isinstance(event, Read):  # a scoring request's prompt, read
            ticket.deliver(choice, self._scored(event))
            return
        if isinstance(event, TokenEvent):
            self.metrics.observe_tokens(1)
        elif isinstance(event, Finished):
            self.metrics.observe_finished(event.metrics)
        ticket.deliver(choice, event)

    def _scored(self, read: Read) -> ScoredPrompt | Failure:
        if isinstance(read.value, ScoredPrompt):
            self.metrics.observe_scored(len(read.value.tokens), read.value.seconds)
            return read.value
        if not read.stopped:
            return Failure(f"scoring failed: {read.value}")
        return Failure("the server is shutting down" if self._drain is not None else "scoring was stopped", 503)

    def _on_error(self, exc: BaseException, jobs: list[Job | ReadJob]) -> None:
        line = " ".join(str(exc).split()) or type(exc).__name__
        self.log(f"relaxtui serve: the batch failed ({type(exc).__name__}: {line[:300]}); {len(jobs)} sequence(s) "
                 "lost, the server goes on")
        for job in jobs:
            ticket, choice = job.tag
            ticket.deliver(choice, Failure(f"generation failed: {line[:300]}"))

    @property
    def processing(self) -> int:
        return self.executor.live if self.executor is not None else 0

    @property
    def deferred(self) -> int:
        return self.executor.waiting if self.executor is not None else 0
