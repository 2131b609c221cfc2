"""Measurements that decode on a face's own models without holding the face up: a slice at a time, on the thread
that owns the models, while nothing else decodes there.

llama.cpp runs one decode at a time per context, and a measurement is a timing: it must neither decode beside a
reply (both would be wrong and the reply slower) nor from another thread (llama.cpp's OpenMP keeps a team of compute
threads per calling thread; two teams on a small machine throttle each other's spin-waits for good). So a face that
must answer at once (chat, serve) hands its measurements here and, whenever its model thread is idle, runs one
``step``: one timed block or step, a fraction of a second, after which a reply or a request goes first. A face that
used the models in between says so (``touched``): the measurement sets its state up again, untimed, before its next
slice. Each measurement is a ``timing.Slices`` generator (``verify_prices.price_slices``, ``calibrate
.calibration_slices``); what it returns goes to its ``done``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relaxtui.costmodel.timing import Slices

__all__ = ["Background"]


@dataclass
class _Job:
    what: str
    slices: Slices[Any]
    done: Callable[[Any], None]
    started: bool = False


class Background:
    """Measurements waiting for a face's idle model thread, first come first served."""

    def __init__(self, log: Callable[[str], None] = lambda line: None) -> None:
        self.log = log
        self._jobs: deque[_Job] = deque()
        self._lock = threading.Lock()  # added from any thread; stepped on the model thread
        self._touched = False

    def add(self, what: str, slices: Slices[Any], done: Callable[[Any], None]) -> None:
        """Queue a measurement (``what`` names it in a failure's line); nothing of it runs here."""
        with self._lock:
            self._jobs.append(_Job(what, slices, done))

    def touched(self) -> None:
        """A face decoded on the models (from its model thread): the next slice sets its measurement up again."""
        self._touched = True

    @property
    def pending(self) -> bool:
        return bool(self._jobs)

    @property
    def running(self) -> str | None:
        """What is being measured now (None: nothing)."""
        jobs = self._jobs
        return jobs[0].what if jobs else None

    def step(self) -> bool:
        """One slice of the first measurement, on the models' own thread while nothing else decodes there; whether
        more remain. A measurement that fails is dropped with one line (what it measures stays unknown)."""
        with self._lock:
            if not self._jobs:
                return False
            job = self._jobs[0]
        touched, self._touched = self._touched, False
        try:
            if job.started:
                job.slices.send(touched)
            else:
                job.started = True
                next(job.slices)
        except StopIteration as end:
            self._drop(job)
            job.done(end.value)
        except Exception as exc:  # noqa: BLE001 - a measurement's failure, never the face's
            self._drop(job)
            reason = " ".join(str(exc).split())[:200]
            self.log(f"warning: measuring {job.what} failed ({type(exc).__name__}: {reason}); going on without it")
        return self.pending

    def run(self) -> None:
        """Every queued measurement to its end, now."""
        while self.step():
            pass

    def _drop(self, job: _Job) -> None:
        with self._lock:
            if self._jobs and self._jobs[0] is job:
                self._jobs.popleft()

    def close(self) -> None:
        """Forget what has not run (the models are about to be freed)."""
        with self._lock:
            for job in self._jobs:
                job.slices.close()
            self._jobs.clear()
