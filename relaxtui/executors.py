"""Continuous batching over one loaded pair: the seam between the batched loop and whoever feeds it.

The eval runner's batched executor and the server's scheduler are the same mechanism: a ``JobQueue`` that any
thread fills while the batched loop (``relaxtui.decoding.batched.stream_many``) runs, taking the next job whenever
a slot frees — never waiting for one while other sequences are live — and a ``BatchedExecutor`` with a small
lifecycle around it:

    start(on_event)  the loop in a thread of its own, every event to ``on_event`` (the server)
    submit(jobs)     from any thread; all or nothing against the queue's bound (``QueueFull``)
    close()          no more jobs: the live and waiting ones finish (drain), or stop at their next round
    run()            instead of start: the loop in the calling thread, events yielded (the eval runner)

Each job keeps its own prompt, config, rule and seed streams, and its own stop request (``Job.should_stop``):
a request whose client went away leaves the batch at the next round and its slot takes the next job. While no
sequence is live and no job waits, the loop's thread runs the pair's background measurements a slice at a time
(``idle``; ``costmodel.background``): a job that arrives waits for one slice at most.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from relaxtui.decoding.batched import Job, Read, ReadJob, stream_many
from relaxtui.decoding.events import Event, Finished
from relaxtui.engine.api import Model

__all__ = ["BatchedExecutor", "Closed", "JobQueue", "QueueFull"]


class QueueFull(Exception):
    """The queue holds as many waiting jobs as it may."""


class Closed(Exception):
    """The executor was closed: it takes no more jobs."""


class JobQueue:
    """Jobs waiting for a slot (a ``batched.JobSource``): filled from any thread, taken by the loop. ``take(block=
    False)`` answers at once (None: none right now); ``take(block=True)`` — asked only when no sequence is live —
    waits for a job, and returns None only once the queue is closed and empty."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._jobs: deque[Job | ReadJob] = deque()
        self._ready = threading.Condition()
        self._closed = False

    def put(self, jobs: Iterable[Job | ReadJob]) -> None:
        jobs = list(jobs)
        with self._ready:
            if self._closed:
                raise Closed("the executor is closed")
            # an empty queue takes a whole request (free slots take from it at once); the caller bounds its size
            if self.limit is not None and self._jobs and len(self._jobs) + len(jobs) > self.limit:
                raise QueueFull(f"{len(self._jobs)} jobs are waiting (at most {self.limit})")
            self._jobs.extend(jobs)
            self._ready.notify()

    def take(self, *, block: bool) -> Job | ReadJob | None:
        with self._ready:
            while block and not self._jobs and not self._closed:
                self._ready.wait()
            return self._jobs.popleft() if self._jobs else None

    @property
    def idle(self) -> bool:
        """Nothing waiting, and more may come."""
        return not self._jobs and not self._closed

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def clear(self) -> list[Job | ReadJob]:
        """Remove and return every waiting job (what a stopped loop left behind)."""
        with self._ready:
            jobs, self._jobs = list(self._jobs), deque()
            return jobs

    def __len__(self) -> int:
        return len(self._jobs)


class _Tracked:
    """The queue as the loop sees it, remembering which jobs hold a slot (so a crash can name them). Before it waits
    for a job with nothing live, it runs ``idle`` (one slice of background work; False: nothing left) while the queue
    stays empty; ``taken`` is told of every job it hands the loop (the models are used again)."""

    def __init__(self, queue: JobQueue, idle: Callable[[], bool] | None = None,
                 taken: Callable[[], None] | None = None) -> None:
        self.queue, self.idle, self.taken = queue, idle, taken
        self.live: dict[int, Job | ReadJob] = {}

    def take(self, *, block: bool) -> Job | ReadJob | None:
        while block and self.idle is not None and self.queue.idle and self.idle():
            pass
        job = self.queue.take(block=block)
        if job is not None:
            self.live[id(job)] = job
            if self.taken is not None:
                self.taken()
        return job


class BatchedExecutor:
    """One pair's contexts, ``verifier.n_seq`` sequences at a time, fed while it runs (module docstring)."""

    def __init__(self, verifier: Model, drafter: Any = None, *, max_waiting: int | None = None,
                 join_in_batch: bool = False, idle: Callable[[], bool] | None = None,
                 taken: Callable[[], None] | None = None) -> None:
        """``join_in_batch``: arriving jobs send their prompts in the running verify batches (``stream_many``);
        ``idle``, ``taken``: background work run while nothing is live, and told when the models are used again
        (``costmodel.background.Background.step`` and ``touched``)."""
        self.verifier, self.drafter, self.join_in_batch = verifier, drafter, join_in_batch
        self.queue = JobQueue(max_waiting)
        self._source = _Tracked(self.queue, idle, taken)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def live(self) -> int:
        """Jobs holding a slot now."""
        return len(self._source.live)

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def submit(self, jobs: Iterable[Job | ReadJob]) -> None:
        self.queue.put(jobs)

    def run(self, should_stop: Callable[[], bool] = lambda: False, *,
            tokens: bool = True) -> Iterator[tuple[Job | ReadJob, Event | Read]]:
        """The batched loop over the queue, in this thread: yields (job, event) for every token (``tokens``) and
        every end. A stop request ends every live sequence ("stopped") and starts no more."""
        def stop() -> bool:
            return self._stop.is_set() or should_stop()

        for job, event in stream_many(self.verifier, self._source, drafter=self.drafter, should_stop=stop,
                                      tokens=tokens, join_in_batch=self.join_in_batch):
            if isinstance(event, Finished | Read):
                self._source.live.pop(id(job), None)
            yield job, event

    def start(self, on_event: Callable[[Job | ReadJob, Event | Read], None],
              on_error: Callable[[BaseException, list[Job | ReadJob]], None]) -> None:
        """Run the loop in a thread of its own until closed. A loop that raises (a bug, broken logits) reports the
        jobs it held to ``on_error`` and starts again on the queue: one bad batch does not end the service."""
        def serve() -> None:
            while True:
                try:
                    for job, event in self.run():
                        on_event(job, event)
                    return  # closed and drained
                except BaseException as exc:  # noqa: BLE001 - reported with the jobs it cost, then carry on
                    lost, self._source.live = list(self._source.live.values()), {}
                    on_error(exc, lost)
                    if self._stop.is_set():
                        return

        self._thread = threading.Thread(target=serve, name="relaxtui-batch", daemon=True)
        self._thread.start()

    def close(self, *, drain: bool = True, timeout: float | None = None, grace: float | None = None) -> bool:
        """Take no more jobs; let the live and waiting ones finish (``drain``, up to ``timeout`` seconds), then stop
        what is left at its next round, waiting ``grace`` seconds more for it (default: ``timeout`` again).
        Returns whether the loop has ended."""
        self.queue.close()
        if not drain:
            self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout if grace is None else grace)
        return not self._thread.is_alive()
