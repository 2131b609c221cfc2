"""`relaxtui serve`: relaxed speculative decoding behind an OpenAI-compatible HTTP API (see relaxtui/serve/).

Parse, build the scheduler and the app, run uvicorn on a socket bound here (so ``--port 0`` works and the line
``listening on http://H:P`` names the real port). The HTTP side answers ``/health`` with 503 while the models load;
the line is printed once they are loaded and requests are accepted. SIGINT/SIGTERM: the scheduler drains first
(new requests 503, each live sequence ends its response with a finish reason within ``--drain`` seconds and a
round), uvicorn stops accepting and waits for the responses, then the models are freed and the exit is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from relaxtui.checks import BadValue
from relaxtui.commands.common import (
    add_draft_options,
    add_parallel_option,
    add_rule_options,
    cli_rule,
    float_option,
    int_option,
    model_options,
    sampling,
    utf8_path,
    utf8_text,
)
from relaxtui.costmodel.profiles import THIS_MACHINE, load_profile
from relaxtui.decoding.drafters import STANDALONE_KINDS, check_options
from relaxtui.decoding.thinking import check_scope_on
from relaxtui.errors import UserError
from relaxtui.files import FileTooBig, read_regular_bytes
from relaxtui.options import DRAFT_MAX, MAX_TOKENS, Speculative
from relaxtui.serve.body import ApiError
from relaxtui.serve.policy import DEFAULT_SCOPES, Policy, parse_allow_kinds, parse_allow_rules
from relaxtui.serve.protocol import VERIFIER_ALONE, Defaults

if TYPE_CHECKING:
    import uvicorn

    from relaxtui.serve.pair import ServedPair

MAX_KEY_FILE_BYTES = 64 << 10
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("server")
    net.add_argument("--host", type=utf8_text, default="127.0.0.1", help="address to bind (loopback unless told)")
    net.add_argument("--port", type=int_option("--port", 0, 65535), default=8080, help="TCP port (0 = any free)")
    net.add_argument("--api-key", type=utf8_text, action="append", default=[], metavar="KEY",
                     help="require Authorization: Bearer KEY (repeatable)")
    net.add_argument("--api-key-file", type=utf8_path, default=None, metavar="FILE",
                     help="keys, one per line (blank lines and # comments skipped)")
    net.add_argument("--max-queue", type=int_option("--max-queue", 0), default=64,
                     help="sequences that may wait for a slot; past it 503 + Retry-After")
    net.add_argument("--timeout", type=float_option("--timeout", low=0, low_open=True), default=600.0,
                     help="per-request deadline in seconds, queue wait included")
    net.add_argument("--drain", type=float_option("--drain", low=0, high=3600), default=30.0,
                     help="on SIGINT/SIGTERM, seconds in-flight requests may still run; then they stop at their next "
                          "round and end with finish_reason \"length\"")
    net.add_argument("--max-body", type=int_option("--max-body", 1024), default=4 << 20,
                     help="largest request body in bytes")
    net.add_argument("--prompt-cache", choices=["longest", "exact"], default="longest",
                     help="reuse the longest cached prefix of a prompt (a shared system prompt; as llama-server), "
                          "or only a whole repeated prompt (outputs never depend on earlier requests)")
    net.add_argument("--fake", action="store_true", help="a deterministic fake model pair (no weights)")
    tenants = parser.add_argument_group("several tenants (docs/serve.md#several-tenants)")
    tenants.add_argument("--allow-rules", type=utf8_text, default=None, metavar="NAME[:LIMIT[:KNOB2]],…",
                         help="the rules requests may choose, each up to LIMIT, its most relaxed knob (compared in the "
                              "rule's own orientation: ensemble's w, typical's epsilon, fly's tau, topk-ratio's r, "
                              "threshold's t_acc and mars's theta relax downwards); a rule with a limit runs at the "
                              "second knob given after it, else its default; strict is always allowed (default: any "
                              "rule at any knob)")
    tenants.add_argument("--allow-draft-kinds", type=utf8_text, default=None, metavar="KIND,…",
                         help="the drafter kinds requests may choose (default: every kind this server drafts with; "
                              "'none', the verifier alone, is always allowed)")
    tenants.add_argument("--verdicts", choices=["on", "off"], default="on",
                         help="off: responses carry no per-token verdicts and no drafted/accepted counts (they tell "
                              "whether a continuation was in a drafter's corpus)")
    tenants.add_argument("--share-learning", action="store_true",
                         help="one learned state (drafter corpora, prompt cache) for every API key, for keys that are "
                              "one tenant; it lets one key's text draft for another (default: one state per key)")
    tenants.add_argument("--learning-scopes", type=int_option("--learning-scopes", 1, 4096), default=DEFAULT_SCOPES,
                         metavar="N", help="API keys (and users) whose learned drafter state is kept at once; the "
                                           f"least recently used is dropped first (default {DEFAULT_SCOPES})")
    gen = parser.add_argument_group("request defaults (each request may override them)")
    add_rule_options(gen)
    DRAFT_MAX.add(gen)
    MAX_TOKENS.add(gen, help="completion budget when a request gives none (default: up to the slot's context)")
    gen.add_argument("--thinking", choices=["on", "off"], default=None,
                     help="reasoning mode for chat templates that have one (default: the template's own)")
    gen.add_argument("--profile", type=utf8_text, default=None, metavar="NAME|FILE",
                     help="cost profile that prices each response's speed-up, as eval and tune price (default: "
                          "this-machine, measured at start and kept for the next one; --fake: memory-bound): a "
                          "shipped name (`relaxtui profiles list`) or a profile file")
    add_parallel_option(gen)
    add_draft_options(parser, with_length=False)


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    keys = [k for k in args.api_key if k]
    if args.api_key_file is not None:
        path = Path(args.api_key_file)
        try:  # a FIFO or /dev/zero: one line, never a hang or a read without end (relaxtui.files)
            raw = read_regular_bytes(path, MAX_KEY_FILE_BYTES, "--api-key-file")
        except FileTooBig:
            raise UserError(f"--api-key-file {path}: larger than {MAX_KEY_FILE_BYTES} bytes") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"--api-key-file {path}: not UTF-8 text") from None
        keys += [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if not keys:
            raise UserError(f"--api-key-file {path}: holds no key")
    if any(not k.isprintable() or " " in k for k in keys):
        raise UserError("an API key must be printable and without spaces")
    return tuple(keys)


def defaults(args: argparse.Namespace, draft_kinds: tuple[str, ...]) -> Defaults:
    # an unknown rule or a bad knob: one line, exit 2, before anything loads (greedy or not: each request's own say)
    rule = cli_rule(args.rule, args.alpha)
    kind = draft_kinds[0]
    policy = serve_policy(args, draft_kinds)
    if kind != VERIFIER_ALONE and args.draft_max > 0:
        rule.check_draft_max(args.draft_max)  # (FLy at N = 1: --draft-max)
        try:  # the server's own defaults must be what its policy allows
            policy.check_rule(rule, "--rule", "--alpha")
            policy.check_kind(kind, "--draft-kind", VERIFIER_ALONE)
        except ApiError as exc:
            raise UserError(f"{exc.message.partition(': ')[2]} (the server's own default, {exc.param})") from None
    return Defaults(Speculative(rule.name, rule.knob, args.draft_max, kind, args.relax_scope), sampling(args),
                    args.seed, args.max_tokens, None if args.thinking is None else args.thinking == "on", draft_kinds,
                    policy)


def scoped(pair: ServedPair, scope: str) -> ServedPair:
    """The loaded pair, when its verifier marks the thinking block the server's default ``--relax-scope`` needs; else
    one line naming the flag, and the server stops before it listens."""
    try:
        check_scope_on(pair.verifier, scope)
    except BadValue as exc:
        pair.close()
        raise exc.spelled("--relax-scope") from None
    return pair


def serve_policy(args: argparse.Namespace, draft_kinds: tuple[str, ...]) -> Policy:
    """The operator's bounds on what requests choose, each flag checked (one line, exit 2, before anything loads)."""
    rules, second_knobs = (None, {}) if args.allow_rules is None else parse_allow_rules(args.allow_rules)
    known = tuple(kind for kind in draft_kinds if kind != VERIFIER_ALONE)
    kinds = None if args.allow_draft_kinds is None else parse_allow_kinds(args.allow_draft_kinds, known)
    return Policy(rules, kinds, verdicts=args.verdicts == "on", share_learning=args.share_learning,
                  max_scopes=args.learning_scopes, second_knobs=second_knobs)


def draft_kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """What requests may ask for: the server's own kind first (its default), then every standalone kind the factory
    lists (prompt lookup, the n-gram family, suffix: no model, so they ride along with any drafter, one instance each
    for the server's life), then the verifier alone. The fake pair's own drafter is its LM (``--draft-kind`` naming a
    standalone kind makes that the default)."""
    from relaxtui.serve.pair import FAKE_DRAFT_KIND

    if str(args.drafter).lower() == "none":
        return (VERIFIER_ALONE,)
    if args.fake:
        own = (args.draft_kind, FAKE_DRAFT_KIND) if args.draft_kind in STANDALONE_KINDS else (FAKE_DRAFT_KIND,)
    else:
        own = (args.draft_kind,)
    return tuple(dict.fromkeys((*own, *STANDALONE_KINDS, VERIFIER_ALONE)))


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url(host: str, port: int) -> str:
    return f"http://[{host.strip('[]')}]:{port}" if ":" in host else f"http://{host}:{port}"


class _ServerClass(Protocol):
    """What ``_server_class`` returns: uvicorn's server class, built with a ``drain`` callback."""

    def __call__(self, config: uvicorn.Config, drain: Callable[[], None] = ...) -> uvicorn.Server: ...


def _server_class() -> _ServerClass:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, but the scheduler drains first: on SIGINT/SIGTERM ``drain`` is called (no new requests,
        live sequences end their responses within ``--drain`` seconds) before uvicorn closes the socket and waits
        for the connections, with a graceful timeout longer than the drain so it never cancels a handler first. A
        drained shutdown exits 0 (uvicorn would re-raise the signal once it has stopped); a second signal stops at
        once."""

        def __init__(self, config: uvicorn.Config, drain: Callable[[], None] = lambda: None) -> None:
            super().__init__(config)
            self.drain = drain

        def handle_exit(self, sig: int, frame: object) -> None:
            if self.should_exit:
                self.force_exit = True
                return
            print("relaxtui serve: draining in-flight requests, then freeing the models…", file=sys.stderr, flush=True)
            self.should_exit = True

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            self.drain()  # returns at once; the scheduler owns the deadline
            await super().shutdown(sockets)

    return DrainingServer


def run(args: argparse.Namespace) -> int:
    kinds = draft_kinds(args)
    request_defaults = defaults(args, kinds)
    if args.profile not in (None, THIS_MACHINE):
        load_profile(args.profile)  # a bad profile: one line before anything loads
    if args.fake and args.profile == THIS_MACHINE:
        raise UserError("--profile this-machine needs real models (the fake pair has no costs to measure)")
    options = model_options(args, speculative=kinds[0] != VERIFIER_ALONE)
    keys = api_keys(args)

    import uvicorn

    _Server = _server_class()
    from relaxtui.serve.app import ServeSettings, build_app
    from relaxtui.serve.pair import FakeServedPair, LlamaServedPair
    from relaxtui.serve.scheduler import STOP_GRACE_S, LoopSettings, Scheduler
    from relaxtui.session import drafter_options

    check_options(drafter_options(options), [k for k in kinds if k in STANDALONE_KINDS])  # offered: one line, now
    if args.fake:
        def load() -> ServedPair:
            return scoped(FakeServedPair(args.parallel, drafting=drafter_options(options),
                                         max_scopes=args.learning_scopes), args.relax_scope)
    else:
        from relaxtui.commands.chat import check_model_files

        check_model_files(options)  # a missing or non-GGUF model: one line, exit 2, before the port opens

        def load() -> ServedPair:
            return scoped(LlamaServedPair(options, max_scopes=args.learning_scopes), args.relax_scope)
    settings = LoopSettings(args.bonus, args.draft_min, args.draft_adapt, args.draft_max, reuse=args.prompt_cache)
    scheduler = Scheduler(load, max_queue=args.max_queue, profile=args.profile, settings=settings)
    if not keys and args.host not in LOOPBACK:
        print(f"relaxtui serve: warning: listening on {args.host} with no --api-key: anyone who can reach this "
              "address can use the models", file=sys.stderr, flush=True)
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    failed: list[str] = []

    async def started() -> None:
        while not server.started:
            await asyncio.sleep(0.02)
        if scheduler.state == "ready":
            print(f"listening on {url(args.host, port)}", flush=True)
        else:
            failed.append(scheduler.error or "the models failed to load")
            server.should_exit = True

    app = build_app(scheduler, ServeSettings(request_defaults, keys, args.max_body, args.timeout, args.drain),
                    on_started=started)
    # uvicorn cancels the handlers still running after its graceful timeout: past the drain and the last round
    graceful = math.ceil(args.drain + STOP_GRACE_S) + 1
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=graceful,
                            lifespan="on", log_config=None, timeout_keep_alive=30)
    server = _Server(config, drain=lambda: scheduler.drain(args.drain))
    print(f"relaxtui serve: loading {'the fake pair' if args.fake else options.verifier} "
          f"({args.parallel} slot{'s' if args.parallel > 1 else ''})…", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if failed:
        raise UserError(failed[0])
    return 0
