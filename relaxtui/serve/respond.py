"""From a request's events to its response: one SSE chunk per batch of tokens, or one JSON object at the end.

Like llama-server's handler, the stream waits for the first event before it sends its headers, so a request that
fails before producing anything gets a plain JSON error with its status. Tokens that arrive together (one round of
a sequence: its accepted drafts and the resampled or bonus token) go out as one chunk. A client that goes away is
noticed while waiting (polled for full responses, by the ASGI server's disconnect message or a failed keep-alive
ping for streams), and its sequences stop at their next round.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from relaxtui.costmodel.profiles import CostProfile
from relaxtui.decoding.events import Event, Finished, TokenEvent
from relaxtui.serve import render
from relaxtui.serve.body import ApiError
from relaxtui.serve.protocol import CompletionRequest
from relaxtui.serve.render import Piece, StopText, Totals
from relaxtui.serve.scheduler import Failure, Generated, Ticket

POLL_S = 0.5  # how often a waiting handler looks whether its client is still there
PING_S = 5.0  # an idle stream sends an SSE comment this often (and so notices a client that left)
GRACE_S = 5.0  # past the deadline, how long a handler still waits for its sequences to report


@dataclass
class Choice:
    """One choice's progress: text sent so far (through the stop-string filter), and how it ended."""

    index: int
    stops: StopText
    pieces: list[Piece] = field(default_factory=list)
    offset: int = 0  # completion characters sent: text_offset counts from the prompt's start, as OpenAI does
    raw_chars: int = 0  # characters of every token event so far (what the loop's final text starts with)
    echoed: bool = False
    finished: Finished | None = None
    failure: str | None = None
    failed: Failure | None = None  # how (a message and a status)
    stopped_by: str | None = None  # "stop" (a stop string), "deadline"

    @property
    def done(self) -> bool:
        return self.finished is not None or self.failure is not None


@dataclass
class Reply:
    """What the handler needs to shape JSON: the request, its choices, how to name tokens, the profile."""

    request: CompletionRequest
    ticket: Ticket[Generated]
    model: str
    profile: CostProfile | None  # None: no profile yet (measured in the background), responses priced by nothing
    token_bytes: Callable[[int], bytes]
    echo: list[str]  # completions with echo: each prompt's text, shown before its choices
    choices: list[Choice] = field(default_factory=list)
    request_id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex[:24]}")
    fingerprint: str | None = None  # system_fingerprint: the build and the models (one value per server)
    show_acceptance: bool = True  # False (--verdicts off): no counts of drafted and accepted tokens in stats/timings

    @property
    def kind(self) -> str:
        return "chat.completion" if self.request.chat else "text_completion"

    def take(self, choice: Choice, event: Event | Failure) -> list[Piece]:
        """Apply one event to its choice; return the pieces that can be sent now."""
        if isinstance(event, Failure):
            choice.failure, choice.failed = event.message, event
            return []
        if isinstance(event, TokenEvent):
            choice.raw_chars += len(event.text)
            released = choice.stops.push([render.piece(event, self.request.logprobs)])
            if choice.stops.stopped:
                choice.stopped_by = "stop"
                self.ticket.done[choice.index] = True  # the loop drops the sequence at its next round
            return released
        choice.finished = event
        released = choice.stops.finish(event.text[choice.raw_chars:])  # a split UTF-8 character at the very end
        if choice.stopped_by is None and event.metrics.finish_reason == "stopped" and self.ticket.expired:
            choice.stopped_by = "deadline"
        return released

    def totals(self, choices: list[Choice]) -> Totals:
        totals = Totals()
        per_prompt = self.request.n
        for c in choices:
            if c.finished is not None:
                shown = sum(1 for p in c.pieces if p.token_id >= 0)
                totals.add(c.finished.metrics, shown, prompt=c.index % per_prompt == 0)
        return totals

    def extras(self, choices: list[Choice]) -> dict[str, Any]:
        totals = self.totals(choices)
        timings, stats = render.timings(totals), render.stats(totals, self.request.speculative, self.profile)
        if not self.show_acceptance:  # what would tell whether a continuation was in a drafter's corpus
            timings, stats = render.without_acceptance(timings, stats)
        return {"timings": timings, "stats": stats}

    def prompt_chars(self, choice: Choice) -> int:
        """Where a completion's text starts (its first text_offset): after its prompt, echoed or not (OpenAI's
        offsets count from the start of the prompt)."""
        return len(self.echo[choice.index // self.request.n]) if self.echo else 0

    def finish_reason(self, choice: Choice) -> str:
        if choice.failure is not None or choice.finished is None:
            return "length"
        return render.finish_reason(choice.finished, choice.stopped_by)


async def _next(ticket: Ticket[Generated], request: Request | None, timeout: float) -> tuple[int, Generated] | None:
    """The next event, or None after ``timeout`` s; raises ApiError(499) when the client went away."""
    try:
        return await asyncio.wait_for(ticket.events.get(), timeout)
    except asyncio.TimeoutError:
        if request is not None and await request.is_disconnected():
            raise ApiError(499, "client closed the connection") from None
        return None


def _remaining(ticket: Ticket[Generated]) -> float:
    return ticket.deadline + GRACE_S - time.monotonic()


async def full(request: Request, out: Reply) -> Response:
    """Wait for every choice, then one JSON object (choices in index order)."""
    try:
        while not all(c.done for c in out.choices):
            if _remaining(out.ticket) < 0:
                break
            item = await _next(out.ticket, request, POLL_S)
            if item is not None:
                choice = out.choices[item[0]]
                choice.pieces += out.take(choice, item[1])
    finally:
        out.ticket.cancelled.set()
    failed = [c for c in out.choices if c.failure is not None]
    if failed and len(failed) == len(out.choices):
        first = failed[0].failed
        raise first.error() if first is not None else ApiError(500, "generation failed", kind="server_error")
    if not any(c.done for c in out.choices):
        raise ApiError(503, "the request's deadline passed before a slot was free (--timeout)", kind="timeout",
                       headers={"Retry-After": "1"})
    body = render.envelope(out.kind, out.request_id, out.model, fingerprint=out.fingerprint)
    body["choices"] = [_full_choice(out, c) for c in out.choices]
    body["usage"] = render.usage(out.totals(out.choices))
    extras = out.extras(out.choices)
    body["timings"] = extras["timings"]
    body["relaxtui"] = {"stats": extras["stats"]}
    return JSONResponse(body)


def _full_choice(out: Reply, c: Choice) -> dict[str, Any]:
    text = "".join(p.text for p in c.pieces)
    extras = out.extras([c])
    extension: dict[str, Any] = {"stats": extras["stats"], "timings": extras["timings"]}
    if out.request.verdicts:
        extension["tokens"] = render.verdict_tokens(c.pieces)
    if c.failure is not None:
        extension["error"] = c.failure
    if out.request.chat:
        choice: dict[str, Any] = {"index": c.index, "message": {"role": "assistant", "content": text},
                                  "logprobs": render.chat_logprobs(c.pieces, out.token_bytes)
                                  if out.request.logprobs is not None else None}
    else:
        echo = out.echo[c.index // out.request.n] if out.request.echo else ""
        choice = {"index": c.index, "text": echo + text,
                  "logprobs": render.completion_logprobs(c.pieces, out.token_bytes, out.prompt_chars(c))
                  if out.request.logprobs is not None else None}
    choice["finish_reason"] = out.finish_reason(c)
    choice["relaxtui"] = extension
    return choice


async def stream(request: Request, out: Reply) -> Response:
    """An SSE stream; its headers go out with the first event, so an early failure is a plain JSON error."""
    first = None
    try:
        while first is None:
            if _remaining(out.ticket) < 0:
                raise ApiError(503, "the request's deadline passed before a slot was free (--timeout)",
                               kind="timeout", headers={"Retry-After": "1"})
            first = await _next(out.ticket, request, POLL_S)
    except BaseException:
        out.ticket.cancelled.set()
        raise
    if isinstance(first[1], Failure) and len(out.choices) == 1:
        out.ticket.cancelled.set()
        raise first[1].error()
    return StreamingResponse(_sse(out, first), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _sse(out: Reply, first: tuple[int, Event | Failure]) -> AsyncIterator[str]:
    try:
        if out.request.chat:
            for c in out.choices:
                yield _data(_chunk(out, c, {"role": "assistant", "content": ""}, []))
        batch = [first]
        while True:
            for index, pieces, ended in _group(out, batch):
                choice = out.choices[index]
                if pieces or ended:
                    choice.pieces += pieces
                    yield _data(_chunk(out, choice, None, pieces, ended=ended))
            if all(c.done for c in out.choices):
                break
            batch = []
            while not batch:
                if _remaining(out.ticket) < 0:
                    for c in out.choices:
                        if not c.done:
                            c.failure = "deadline"
                            yield _data(_chunk(out, c, None, [], ended=True))
                    break
                item = await _next(out.ticket, None, PING_S)
                if item is None:
                    yield ": ping\n\n"  # keeps proxies from timing out, and fails on a client that left
                    continue
                batch.append(item)
                while not out.ticket.events.empty():
                    batch.append(out.ticket.events.get_nowait())
            if not batch:
                break
        if out.request.include_usage:
            body = render.envelope(f"{out.kind}.chunk" if out.request.chat else out.kind, out.request_id, out.model,
                                   fingerprint=out.fingerprint)
            extras = out.extras(out.choices)
            body.update(choices=[], usage=render.usage(out.totals(out.choices)), timings=extras["timings"],
                        relaxtui={"stats": extras["stats"]})
            yield _data(body)
        yield "data: [DONE]\n\n"
    finally:
        out.ticket.cancelled.set()  # a client that left: its sequences stop at their next round


def _group(out: Reply, batch: list[tuple[int, Event | Failure]]) -> list[tuple[int, list[Piece], bool]]:
    """Events that arrived together, as (choice, pieces to send, ended) in arrival order, one entry per run of a
    choice's tokens (a round's tokens become one chunk)."""
    groups: list[tuple[int, list[Piece], bool]] = []
    for index, event in batch:
        choice = out.choices[index]
        if choice.done:
            continue
        pieces = out.take(choice, event)
        ended = choice.done
        if groups and groups[-1][0] == index and not groups[-1][2]:
            groups[-1] = (index, groups[-1][1] + pieces, ended)
        else:
            groups.append((index, pieces, ended))
    return groups


def _chunk(out: Reply, c: Choice, delta: dict[str, Any] | None, pieces: list[Piece], *,
           ended: bool = False) -> dict[str, Any]:
    text = "".join(p.text for p in pieces)
    body = render.envelope(f"{out.kind}.chunk" if out.request.chat else out.kind, out.request_id, out.model,
                           fingerprint=out.fingerprint)
    if out.request.chat:
        choice: dict[str, Any] = {"index": c.index, "delta": delta if delta is not None else
                                  ({"content": text} if text or not ended else {}),
                                  "logprobs": render.chat_logprobs(pieces, out.token_bytes)
                                  if out.request.logprobs is not None and pieces else None}
    else:
        echo = out.echo[c.index // out.request.n] if out.request.echo and not c.echoed else ""
        c.echoed = True
        choice = {"index": c.index, "text": echo + text,
                  "logprobs": render.completion_logprobs(pieces, out.token_bytes, out.prompt_chars(c) + c.offset)
                  if out.request.logprobs is not None and pieces else None}
        c.offset += len(text)
    choice["finish_reason"] = out.finish_reason(c) if ended else None
    body["choices"] = [choice]
    extension: dict[str, Any] = {}
    if out.request.verdicts and delta is None:
        extension["tokens"] = render.verdict_tokens(pieces)
    if ended:
        extras = out.extras([c])
        body["timings"] = extras["timings"]
        extension["stats"] = extras["stats"]
        if c.failure is not None:
            extension["error"] = c.failure
    if extension:
        body["relaxtui"] = extension
    return body


def _data(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False, allow_nan=False)}\n\n"  # strict JSON for every client
