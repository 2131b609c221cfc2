"""The response to a scoring request (``echo`` with ``logprobs``, ``max_tokens`` 0 or 1): the echoed prompt with
each of its tokens' log-probs under the verifier, and for ``max_tokens: 1`` the next token, in the legacy
completions shape — ``tokens``, ``token_logprobs`` (the first ``null``), ``top_logprobs`` (the first ``null``),
``text_offset`` — that lm-evaluation-harness parses (it sums ``token_logprobs[ctxlen:-1]`` and compares each to
the top entry). The scores come from ``relaxtui.serve.scoring`` through the scheduler; this module waits for them
and shapes JSON (or one SSE chunk per choice).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from relaxtui.serve import render
from relaxtui.serve.body import ApiError
from relaxtui.serve.protocol import CompletionRequest
from relaxtui.serve.render import Totals
from relaxtui.serve.scheduler import Failure, Scored, Ticket
from relaxtui.serve.scoring import NextToken, ScoredPrompt, Top, next_token

POLL_S = 0.5  # how often a waiting handler looks whether its client is still there
GRACE_S = 5.0  # past the deadline, how long a handler still waits for a score to come back


@dataclass
class ScoreReply:
    """What the handler needs to shape a scoring response."""

    request: CompletionRequest
    ticket: Ticket[Scored]
    model: str
    fingerprint: str
    texts: list[str]  # each prompt as echoed (a text prompt as sent, token ids detokenized)
    token_bytes: Callable[[int], bytes]
    is_eog: Callable[[int], bool]
    request_id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex[:24]}")


async def respond(request: Request, out: ScoreReply) -> Response:
    scores = await _collect(request, out.ticket, len(out.texts))
    n = out.request.n
    choices = [_choice(out, scores[j], j, j * n + i, out.request.seed + i) for j in range(len(scores))
               for i in range(n)]
    completion = len(choices) if out.request.max_tokens else 0  # one token per choice, or none
    totals = Totals(prompt_tokens=sum(len(s.tokens) for s in scores), prompt_s=sum(s.seconds for s in scores),
                    completion_tokens=completion, output_tokens=completion)
    if out.request.stream:
        return StreamingResponse(_sse(out, choices, totals), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    body = _envelope(out)
    body.update(choices=choices, usage=render.usage(totals), timings=render.timings(totals))
    return JSONResponse(body)


async def _collect(request: Request, ticket: Ticket[Scored], count: int) -> list[ScoredPrompt]:
    """Every prompt's scores, in prompt order; a failure, a deadline or a client gone ends the wait."""
    scores: list[ScoredPrompt | None] = [None] * count
    try:
        while any(s is None for s in scores):
            remaining = ticket.deadline + GRACE_S - time.monotonic()
            if remaining < 0:
                raise ApiError(503, "the request's deadline passed before its prompts were scored (--timeout)",
                               kind="timeout", headers={"Retry-After": "1"})
            try:
                index, item = await asyncio.wait_for(ticket.events.get(), min(POLL_S, remaining))
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise ApiError(499, "client closed the connection") from None
                continue
            if isinstance(item, Failure):
                raise item.error()
            if isinstance(item, ScoredPrompt):
                scores[index] = item
    finally:
        ticket.cancelled.set()  # carriers not yet run skip their work
    return [s for s in scores if s is not None]


def _choice(out: ScoreReply, scored: ScoredPrompt, prompt: int, index: int, seed: int) -> dict[str, Any]:
    request = out.request
    top = request.logprobs or 0
    generated: NextToken | None = next_token(scored, request.sampling, seed, top) if request.max_tokens else None
    text = out.texts[prompt]
    ids = list(scored.tokens)
    logprobs = list(scored.logprobs)
    tops = [None if t is None else _top_dict(t, out.token_bytes) for t in scored.top]
    offsets = text_offsets([out.token_bytes(t) for t in ids])
    finish = "length"
    if generated is not None:
        ids.append(generated.token)
        logprobs.append(generated.logprob)
        tops.append(_top_dict(generated.top, out.token_bytes))
        offsets.append(len(text))  # a completion's text starts after its prompt
        finish = "stop" if out.is_eog(generated.token) else "length"
        text += _text(out.token_bytes(generated.token))
    return {"index": index, "text": text, "finish_reason": finish,
            "logprobs": {"tokens": [_text(out.token_bytes(t)) for t in ids], "token_logprobs": logprobs,
                         "top_logprobs": tops, "text_offset": offsets}}


def text_offsets(pieces: Sequence[bytes]) -> list[int]:
    """Each token's character offset in the text the pieces make: a token that begins inside a character split
    across tokens points at that character's start."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(decoder.decode(piece))
    return offsets


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _top_dict(top: Top, token_bytes: Callable[[int], bytes]) -> dict[str, float]:
    """OpenAI's {token text: log-prob}; two ids with the same text keep the likelier one."""
    out: dict[str, float] = {}
    for token, value in top:
        out.setdefault(_text(token_bytes(token)), value)
    return out


def _envelope(out: ScoreReply) -> dict[str, Any]:
    return render.envelope("text_completion", out.request_id, out.model, fingerprint=out.fingerprint)


async def _sse(out: ScoreReply, choices: list[dict[str, Any]], totals: Totals) -> AsyncIterator[str]:
    """One chunk per choice (its whole text and logprobs), the usage chunk when asked for, then [DONE]."""
    for choice in choices:
        yield _data({**_envelope(out), "choices": [choice]})
    if out.request.include_usage:
        yield _data({**_envelope(out), "choices": [], "usage": render.usage(totals),
                     "timings": render.timings(totals)})
    yield "data: [DONE]\n\n"


def _data(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False, allow_nan=False)}\n\n"
