"""The HTTP layer: routes, auth, body limits and the one error shape, on Starlette (ASGI).

Every failure a client can cause is an OpenAI-style error object (``{"error": {"message", "type", "param",
"code"}}``) with its status: 400 for a bad field (named in ``param``), 401 for a missing or wrong key, 404/405 for
a wrong route or method, 413 for a body past the limit, 503 (with ``Retry-After``) while loading, when the queue is
full or when shutting down. Anything else is logged as one line and answered as a 500 error object — never a
traceback. Auth is one check before routing (Bearer or ``X-Api-Key``, compared in constant time); ``/health``
stays open, as in llama-server.
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from relaxtui.errors import UserError
from relaxtui.serve import respond, score_reply
from relaxtui.serve.body import ApiError, bad, read_json
from relaxtui.serve.pair import ServedPair, detokenize
from relaxtui.serve.protocol import (
    CompletionRequest,
    Defaults,
    parse_detokenize,
    parse_request,
    parse_tokenize,
)
from relaxtui.serve.render import StopText
from relaxtui.serve.scheduler import Generated, Scheduler, Scored, Ticket

OPEN_PATHS = ("/health", "/v1/health")
KEY_INDEX = "relaxtui.key"  # the ASGI scope entry naming the API key a request authenticated with
MAX_BODY_BYTES = 4 << 20


@dataclass(frozen=True)
class ServeSettings:
    defaults: Defaults
    api_keys: tuple[str, ...] = ()  # empty: no auth
    max_body_bytes: int = MAX_BODY_BYTES
    timeout_s: float = 600.0  # per request, queue wait included
    drain_s: float = 30.0  # on shutdown, how long live sequences may still run


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class _Auth:
    """Bearer / X-Api-Key check before routing (plain ASGI, so streamed responses pass through untouched)."""

    def __init__(self, app: ASGIApp, keys: Sequence[str]) -> None:
        self.app, self.keys = app, [k.encode() for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key") or b""
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        matches = [i for i, key in enumerate(self.keys) if hmac.compare_digest(given, key)]  # every key compared
        if not matches:
            error = ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)",
                             kind="authentication_error", code="invalid_api_key")
            return await error_response(error)(scope, receive, send)
        scope[KEY_INDEX] = matches[0]  # which key: its requests' scope (relaxtui.serve.policy)
        return await self.app(scope, receive, send)


Handler = Callable[[Request], Awaitable[Response]]


def _answer(handler: Handler) -> Handler:
    """Every route's errors in one place: ApiError as itself, a UserError as a 400, anything else a one-line 500."""
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as error:
            return error_response(error)
        except UserError as exc:
            return error_response(ApiError(400, str(exc)))
        except Exception as exc:  # noqa: BLE001 - logged in one line, answered without a traceback
            line = " ".join(str(exc).split())[:300]
            print(f"relaxtui serve: {request.url.path}: {type(exc).__name__}: {line}", file=sys.stderr, flush=True)
            return error_response(ApiError(500, f"internal error ({type(exc).__name__})", kind="server_error"))
    return route


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) past ``limit`` bytes before it is all read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is {declared} bytes (at most {limit})", code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is over {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(scheduler: Scheduler, settings: ServeSettings,
              on_started: Callable[[], Awaitable[None]] | None = None) -> ASGIApp:
    """The ASGI app over a scheduler (started here, closed on shutdown: drain, then free the models)."""

    def pair() -> ServedPair:
        if scheduler.state != "ready" or scheduler.pair is None:
            raise scheduler.unavailable()
        return scheduler.pair

    async def health(request: Request) -> Response:
        if scheduler.state == "ready":
            return JSONResponse({"status": "ok", "slots": scheduler.executor.verifier.n_seq if scheduler.executor
                                 else 0, "processing": scheduler.processing, "deferred": scheduler.deferred})
        return error_response(scheduler.unavailable())

    def card(served: ServedPair) -> dict[str, Any]:
        return {"id": served.name, "object": "model", "created": int(time.time()), "owned_by": "relaxtui",
                "meta": {"n_ctx_slot": served.n_ctx, "n_vocab": served.n_vocab, "slots": served.verifier.n_seq,
                         "drafter": settings.defaults.speculative.drafter, "priced_by": scheduler.profile_name,
                         "system_fingerprint": served.fingerprint,
                         "policy": settings.defaults.policy.describe(keyed=bool(settings.api_keys))}}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [card(pair())]})

    async def model(request: Request) -> Response:
        served, wanted = pair(), request.path_params["model"]
        if wanted != served.name:  # OpenAI's answer for a model it does not serve
            raise ApiError(404, f"The model '{wanted[:200]}' does not exist (this server serves '{served.name}')",
                           param="model", code="model_not_found")
        return JSONResponse(card(served))

    async def tokenizer_info(request: Request) -> Response:
        return JSONResponse(pair().tokenizer_info())

    async def metrics(request: Request) -> Response:
        model = scheduler.pair.name if scheduler.pair is not None else ""
        slots = scheduler.executor.verifier.n_seq if scheduler.executor is not None else 0
        text = scheduler.metrics.render(processing=scheduler.processing, deferred=scheduler.deferred, slots=slots,
                                        model=model, acceptance=settings.defaults.policy.verdicts)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def tokenize(request: Request) -> Response:
        served = pair()
        checked = parse_tokenize(read_json(await read_body(request, settings.max_body_bytes)))
        tokens = await asyncio.to_thread(served.text_tokens, checked.content, add_special=checked.add_special)
        if checked.with_pieces:
            return JSONResponse({"tokens": [{"id": t, "piece": served.token_bytes(t).decode("utf-8", "replace")}
                                            for t in tokens]})
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": served.n_ctx})  # (vLLM's too)

    async def detokenize_route(request: Request) -> Response:
        served = pair()
        tokens = parse_detokenize(read_json(await read_body(request, settings.max_body_bytes)), served.n_vocab)
        text = detokenize(served, tokens)
        return JSONResponse({"content": text, "prompt": text})  # llama-server's name, and vLLM's

    async def completion(request: Request, chat: bool) -> Response:
        endpoint = "chat" if chat else "completions"
        try:
            response = await _completion(request, chat)
        except ApiError as error:
            scheduler.metrics.observe_request(endpoint, str(error.status))
            raise
        scheduler.metrics.observe_request(endpoint, str(response.status_code))
        return response

    async def _completion(request: Request, chat: bool) -> Response:
        served = pair()
        body = read_json(await read_body(request, settings.max_body_bytes))
        checked = parse_request(body, chat=chat, defaults=settings.defaults, n_vocab=served.n_vocab)
        if chat:
            prompts = [await asyncio.to_thread(served.chat_tokens, checked.messages, checked.thinking)]
            echo: list[str] = []
        else:
            prompts = [await asyncio.to_thread(served.text_tokens, p) if isinstance(p, str) else list(p)
                       for p in checked.prompts]
            echo = [p if isinstance(p, str) else detokenize(served, p) for p in checked.prompts]
        scope = settings.defaults.policy.scope(request.scope.get(KEY_INDEX), checked.user)
        if checked.scoring:
            return await _score(request, served, checked, prompts, echo, scope)
        profile = scheduler.profile  # None while this machine's is measured in the background: priced by nothing
        choices = len(prompts) * checked.n
        ticket: Ticket[Generated] = Ticket(asyncio.get_running_loop(), choices, time.monotonic() + settings.timeout_s)
        jobs = scheduler.jobs(checked, prompts, ticket, "messages" if chat else "prompt", scope)
        scheduler.submit(jobs)
        out = respond.Reply(checked, ticket, checked.model or served.name, profile,
                                served.token_bytes, echo,
                                [respond.Choice(i, StopText(checked.stop)) for i in range(choices)],
                                fingerprint=served.fingerprint, show_acceptance=settings.defaults.policy.verdicts)
        if checked.stream:
            return await respond.stream(request, out)
        return await respond.full(request, out)

    async def _score(request: Request, served: ServedPair, checked: CompletionRequest, prompts: list[list[int]],
                     texts: list[str], scope: object) -> Response:
        """echo with logprobs: each prompt scored by the verifier on the model thread (relaxtui.serve.scoring)."""
        for j, prompt in enumerate(prompts):
            where = "prompt" if len(prompts) == 1 else f"prompt[{j}]"
            if not prompt:
                raise bad(where, "the prompt is empty")
            if len(prompt) > served.n_ctx:
                raise bad(where, f"the prompt has {len(prompt)} tokens but a slot holds {served.n_ctx} "
                                 "(--ctx-size): a scored prompt must fit one slot")
        ticket: Ticket[Scored] = Ticket(asyncio.get_running_loop(), len(prompts), time.monotonic() + settings.timeout_s)
        scheduler.submit(scheduler.scoring_jobs(prompts, checked.logprobs or 0, ticket, scope))
        return await score_reply.respond(request, score_reply.ScoreReply(
            checked, ticket, checked.model or served.name, served.fingerprint, texts, served.token_bytes,
            served.verifier.is_eog))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error_response(ApiError(status, message.get(status, "error"), kind="invalid_request_error"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start()
        announce = asyncio.create_task(_announce(scheduler, on_started)) if on_started is not None else None
        try:
            yield
        finally:
            if announce is not None:
                announce.cancel()
            await asyncio.to_thread(scheduler.close, settings.drain_s)

    routes = [
        Route("/health", _answer(health)), Route("/v1/health", _answer(health)),
        Route("/v1/models", _answer(models)), Route("/models", _answer(models)),
        Route("/v1/models/{model:path}", _answer(model)), Route("/models/{model:path}", _answer(model)),
        Route("/tokenizer_info", _answer(tokenizer_info)), Route("/v1/tokenizer_info", _answer(tokenizer_info)),
        Route("/metrics", _answer(metrics)),
        Route("/v1/chat/completions", _answer(lambda r: completion(r, True)), methods=["POST"]),
        Route("/chat/completions", _answer(lambda r: completion(r, True)), methods=["POST"]),
        Route("/v1/completions", _answer(lambda r: completion(r, False)), methods=["POST"]),
        Route("/completions", _answer(lambda r: completion(r, False)), methods=["POST"]),
        Route("/tokenize", _answer(tokenize), methods=["POST"]),
        Route("/detokenize", _answer(detokenize_route), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: not_found})
    return _Auth(app, settings.api_keys)


async def _announce(scheduler: Scheduler, on_started: Callable[[], Awaitable[None]]) -> None:
    """Once the models are loaded, say so (``relaxtui serve`` prints its "listening on" line here)."""
    await asyncio.to_thread(scheduler.ready.wait)
    await on_started()
