"""`relaxtui serve`: the OpenAI API over the batched loop, checked with the official `openai` client.

Servers run on free loopback ports: in this process on the fake pair (uvicorn in a thread, so a test can hold the
verifier at a gate or slow it down without racing the machine), or as `relaxtui serve` subprocesses (the CLI
contract, and SmolLM2). Nothing here depends on the machine's speed: waits are for events, with generous limits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from collections import Counter

import numpy as np
import openai
import pytest
import uvicorn

from relaxtui.commands.serve import bind
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams, softmax
from relaxtui.options import Speculative
from relaxtui.rules import make
from relaxtui.serve.app import ServeSettings, build_app
from relaxtui.serve.pair import FakeServedPair
from relaxtui.serve.protocol import DRAFT_KINDS, Defaults, parse_request
from relaxtui.serve.scheduler import Scheduler, Ticket
from tests.support.markov import random_table
from tests.support.servers import GREEDY, WAIT_S, client, raw, running

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)


def alone(tokens, config: GenerationConfig, rule=None, *, speculative: bool = True, tables=None) -> Finished:
    """What the one-sequence loop gives for these tokens on a fresh fake pair (the reference)."""
    pair = FakeServedPair(1, tables=tables)
    *_, finished = generate(pair.verifier, tokens, config, drafter=pair.drafter if speculative else None, rule=rule)
    return finished


def chat_tokens(text: str) -> list[int]:
    return FakeServedPair(1).chat_tokens([_message(text)], None)


def _message(text: str):
    from relaxtui.text import Message

    return Message("user", text)


# -- the four call shapes, on the fake pair -------------------------------------------------------------------
def test_chat_and_completions_sync_streaming_and_not_match_the_loop():
    expected = alone(chat_tokens("hi"), GenerationConfig(draft_max=3, max_tokens=12, sampling=GREEDY)).text
    with running() as (url, _):
        api = client(url)
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=12)
        assert reply.choices[0].message.content == expected and reply.choices[0].finish_reason == "length"
        assert reply.usage.completion_tokens == 12 and reply.usage.prompt_tokens == len(chat_tokens("hi"))
        chunks = list(api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=12, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
        assert chunks[-1].choices[0].finish_reason == "length"
        prompt = FakeServedPair(1).text_tokens("the cat")
        text = alone(prompt, GenerationConfig(draft_max=3, max_tokens=9, sampling=GREEDY)).text
        assert api.completions.create(model="x", prompt="the cat", max_tokens=9).choices[0].text == text
        assert api.completions.create(model="x", prompt=prompt, max_tokens=9).choices[0].text == text  # token ids
        streamed = api.completions.create(model="x", prompt="the cat", max_tokens=9, stream=True,
                                          stream_options={"include_usage": True})
        parts = list(streamed)
        assert "".join(c.choices[0].text for c in parts if c.choices) == text
        assert parts[-1].usage.completion_tokens == 9 and parts[-1].choices == []


def test_async_client_streams_and_not():
    expected = alone(chat_tokens("yo"), GenerationConfig(draft_max=3, max_tokens=10, sampling=GREEDY)).text

    async def talk(url: str) -> tuple[str, str]:
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=WAIT_S)
        whole = await api.chat.completions.create(model="x", messages=[{"role": "user", "content": "yo"}],
                                                  max_tokens=10)
        parts = []
        async for chunk in await api.chat.completions.create(model="x", messages=[{"role": "user", "content": "yo"}],
                                                             max_tokens=10, stream=True):
            parts.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
        await api.close()
        return whole.choices[0].message.content, "".join(parts)

    with running() as (url, _):
        assert asyncio.run(talk(url)) == (expected, expected)


def test_verdicts_timings_and_stats_in_streams_and_responses():
    with running() as (url, _):
        api = client(url)
        body = dict(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=16,
                    extra_body={"verdicts": True, "speculative": {"rule": "cactus:1", "draft_max": 2}})
        chunks = list(api.chat.completions.create(**body, stream=True, temperature=1.0, seed=3))
        tokens = [t for c in chunks for t in (c.model_extra.get("relaxtui") or {}).get("tokens", [])]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "".join(t["text"] for t in tokens) == content and len(tokens) == 16
        assert {t["verdict"] for t in tokens} <= {"accepted", "rejected", "bonus", "verifier"}
        assert "accepted" in {t["verdict"] for t in tokens}
        last = chunks[-1].model_extra
        assert last["timings"]["draft_n"] > 0 and last["timings"]["predicted_n"] == 16
        stats = last["relaxtui"]["stats"]
        assert stats["rule"] == "cactus" and stats["alpha"] == 1.0 and stats["draft_max"] == 2
        assert 0 <= stats["acceptance_rate"] <= 1 and stats["mean_accepted_length"] >= 1 and stats["priced_speedup"] > 0
        assert stats["priced_by"] == "memory-bound:0.1" and "proxy_speedup" not in stats  # the fake pair has no costs
        whole = api.chat.completions.create(**body, temperature=1.0, seed=3)
        extension = whole.choices[0].model_extra["relaxtui"]
        assert [t["verdict"] for t in extension["tokens"]] == [t["verdict"] for t in tokens]  # same seed, same run
        assert whole.model_extra["timings"]["draft_n_accepted"] == last["timings"]["draft_n_accepted"]
        strict = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=40,
                                             temperature=1.0, seed=1, extra_body={"verdicts": True})
        assert "rejected" in {t["verdict"] for t in strict.choices[0].model_extra["relaxtui"]["tokens"]}


def test_stop_strings_n_logprobs_tokenize():
    with running() as (url, _):
        api = client(url)
        free = api.completions.create(model="x", prompt=[0], max_tokens=30).choices[0].text
        stop = free[len(free) // 2:len(free) // 2 + 4]
        cut = api.completions.create(model="x", prompt=[0], max_tokens=30, stop=[stop])
        assert cut.choices[0].text == free[:free.index(stop)] and cut.choices[0].finish_reason == "stop"
        streamed = api.completions.create(model="x", prompt=[0], max_tokens=30, stop=stop, stream=True)
        assert "".join(c.choices[0].text for c in streamed) == free[:free.index(stop)]
        many = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=8, n=3,
                                           temperature=1.0, seed=5, logprobs=True, top_logprobs=2)
        assert [c.index for c in many.choices] == [0, 1, 2] and many.usage.completion_tokens == 24
        assert len({c.message.content for c in many.choices}) > 1  # seeds 5, 6, 7
        entry = many.choices[0].logprobs.content[0]
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        status, _, payload = raw(url, "POST", "/tokenize", {"content": " the cat"})
        assert status == 200
        ids = json.loads(payload)["tokens"]
        status, _, payload = raw(url, "POST", "/detokenize", {"tokens": [1, 2]})
        assert status == 200 and json.loads(payload)["content"] == " cat sat" and ids


# -- batching -----------------------------------------------------------------------------------------------------
def test_per_request_rules_in_one_batch_give_what_each_gets_alone():
    """Strict and cactus requests interleaved in batches of 4, through the scheduler. Each request's tokens equal
    its lone run's (same seed, same rule: the fake has no batched numerics), and the strict ones' first two tokens
    follow the verifier's law: every cell within 5 standard errors plus 0.002 (as tests/decoding/test_loop_fake.py)."""
    target = random_table(1)
    tables = (target, target + random_table(2, scale=1.0))
    runs = 1500
    scheduler = Scheduler(lambda: FakeServedPair(4, tables=tables), max_queue=4 * runs)
    scheduler.start(wait=True)
    defaults = Defaults(Speculative("strict", None, 2, "model"), PLAIN, 0, None, None, DRAFT_KINDS)

    async def submit_all() -> dict[tuple[str, int], tuple[int, ...]]:
        loop, tickets = asyncio.get_running_loop(), []
        for seed in range(runs):
            for rule in ("strict", "cactus:1"):
                request = parse_request({"prompt": [0], "max_tokens": 2, "seed": seed, "speculative": {"rule": rule}},
                                        chat=False, defaults=defaults, n_vocab=6)
                ticket = Ticket(loop, 1, time.monotonic() + WAIT_S)
                scheduler.submit(scheduler.jobs(request, [[0]], ticket, "prompt"))
                tickets.append(((rule, seed), ticket))
        out = {}
        for key, ticket in tickets:
            while True:
                _, event = await asyncio.wait_for(ticket.events.get(), WAIT_S)
                if isinstance(event, Finished):
                    out[key] = event.token_ids
                    break
        return out

    try:
        results = asyncio.run(submit_all())
    finally:
        scheduler.close()
    for seed in range(0, runs, 50):  # a sample of lone runs: identical tokens
        for spec, rule in (("strict", None), ("cactus:1", make("cactus", 1.0))):
            config = GenerationConfig(draft_max=2, max_tokens=2, sampling=PLAIN, seed=seed)
            assert results[(spec, seed)] == alone([0], config, rule, tables=tables).token_ids
    first = softmax(target[0])
    expected = np.array([[first[a] * softmax(target[a])[b] for b in range(6)] for a in range(6)])
    counts = Counter(results[("strict", seed)] for seed in range(runs))
    observed = np.zeros_like(expected)
    for (a, b), c in counts.items():
        observed[a, b] = c / runs
    assert np.all(np.abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / runs) + 0.002)


def test_eight_concurrent_streams_all_complete():
    async def one(api: openai.AsyncOpenAI, i: int) -> tuple[str, str]:
        text, reason = [], None
        async for chunk in await api.chat.completions.create(
                model="x", messages=[{"role": "user", "content": f"hello {i}"}], max_tokens=20, stream=True,
                temperature=1.0, seed=i):
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        return "".join(text), reason

    async def eight(url: str) -> list[tuple[str, str]]:
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=WAIT_S)
        try:
            return await asyncio.gather(*(one(api, i) for i in range(8)))
        finally:
            await api.close()

    with running(parallel=4) as (url, scheduler):
        results = asyncio.run(eight(url))
        assert [reason for _, reason in results] == ["length"] * 8 and all(text for text, _ in results)
        assert scheduler.metrics.sequences == 8


def test_a_client_that_disconnects_mid_stream_frees_its_slot():
    """One slot, a slow verifier (20 ms per row: the reply would take minutes). The first client reads one chunk
    and hangs up; the second request then gets the slot and completes."""
    with running(FakeServedPair(1, delay_s=0.02), parallel=1) as (url, scheduler):
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"model": "x", "prompt": [0], "max_tokens": 4000, "stream": True}).encode()
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while b"data: " not in received:  # headers first, then the first chunk
                part = sock.recv(65536)
                assert part, received
                received += part
        started = time.monotonic()
        reply = client(url).completions.create(model="x", prompt=[1], max_tokens=3)
        assert reply.choices[0].finish_reason == "length" and time.monotonic() - started < WAIT_S
        assert scheduler.metrics.sequences == 2  # the first one left the batch (stopped), the second finished
        assert scheduler.processing == 0


def test_health_is_503_while_loading_then_ok():
    loaded = threading.Event()

    def slow_load() -> FakeServedPair:
        loaded.wait(WAIT_S)
        return FakeServedPair(1)

    with running(load=slow_load) as (url, scheduler):
        status, headers, payload = raw(url, "GET", "/health")
        assert status == 503 and json.loads(payload)["error"]["message"] == "Loading model"
        status, headers, _ = raw(url, "POST", "/v1/completions", {"prompt": "x"})
        assert status == 503 and headers["retry-after"] == "1"
        loaded.set()
        scheduler.ready.wait(WAIT_S)
        assert raw(url, "GET", "/health")[0] == 200


def test_auth_bearer_and_x_api_key_health_open():
    with running(keys=("sesame",)) as (url, _):
        assert raw(url, "GET", "/health")[0] == 200
        status, _, payload = raw(url, "GET", "/v1/models")
        assert status == 401 and json.loads(payload)["error"]["type"] == "authentication_error"
        assert raw(url, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert raw(url, "GET", "/v1/models", headers={"X-Api-Key": "sesame"})[0] == 200
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").models.list()
        assert client(url, "sesame").models.list().data[0].id == "fake-verifier"


def test_queue_limit_is_503_with_retry_after():
    gate = threading.Event()
    with running(FakeServedPair(1, gate=gate), parallel=1, max_queue=1) as (url, scheduler):
        api = client(url)
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            api.completions.create(model="x", prompt=[0, 1], max_tokens=2))) for _ in range(2)]
        threads[0].start()
        deadline = time.monotonic() + WAIT_S
        while scheduler.processing < 1 and time.monotonic() < deadline:  # the first holds the slot (at the gate)
            time.sleep(0.01)
        threads[1].start()
        while scheduler.deferred < 1 and time.monotonic() < deadline:  # the second waits in the queue
            time.sleep(0.01)
        status, headers, payload = raw(url, "POST", "/v1/completions", {"prompt": [0], "max_tokens": 2})
        assert status == 503 and headers["retry-after"] == "1"
        assert json.loads(payload)["error"]["code"] == "queue_full"
        gate.set()
        for thread in threads:
            thread.join(WAIT_S)
        assert len(results) == 2


BAD = [  # (path, body, param named in the error)
    ("/v1/chat/completions", "{not json", None),
    ("/v1/chat/completions", "[1, 2]", None),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', None),
    ("/v1/chat/completions", {}, "messages"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    # below 1e-5 logits / T overflow: NaN draws on the model thread failed every request in the batch
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": 1e-308}, "temperature"),
    ("/v1/completions", {"prompt": [0], "n": 100}, "n"),  # 100 sequences never fit 64 queued + 2 slots: not a 503
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "seed": -1}, "seed"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stop": 5}, "stop"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 0.5},
     "frequency_penalty"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "speculative": {"rule": "nope"}},
     "speculative.rule"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "speculative": {"rule": "cactus", "alpha": -1}}, "speculative.alpha"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "speculative": {"rule": "cactus:x"}},
     "speculative.rule"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "speculative": {"n": 3}},
     "speculative.n"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "speculative": {"draft_max": 99}},
     "speculative.draft_max"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "speculative": {"draft_kind": "x"}},
     "speculative.draft_kind"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": 0,
                              "speculative": {"rule": "rfuzzy:0.1"}}, "speculative.rule"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": 1,
                              "speculative": {"rule": "scd:0.5", "draft_kind": "ngram"}}, "speculative.draft_kind"),
    ("/v1/completions", {"prompt": [0, 99]}, "prompt"),
    ("/v1/completions", {"prompt": 7}, "prompt"),
    ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1, "max_tokens": 2}, "max_tokens"),  # scoring: 0|1
    ("/v1/completions", {"prompt": [1] * 5000}, "prompt"),  # longer than a slot's context
]


@pytest.mark.parametrize("path,body,param", BAD)
def test_bad_input_is_a_400_naming_the_field(path, body, param):
    with running() as (url, _):
        status, _, payload = raw(url, "POST", path, body)
        error = json.loads(payload)["error"]
        assert status == 400 and error["type"] == "invalid_request_error" and error["message"]
        assert error["param"] == param, error


def test_too_big_wrong_route_wrong_method_are_error_objects():
    with running() as (url, _):
        status, _, payload = raw(url, "POST", "/v1/completions", "x" * (5 << 20))
        assert status == 413 and "error" in json.loads(payload)
        for method, path, code in (("GET", "/v2/nothing", 404), ("GET", "/v1/completions", 405)):
            status, _, payload = raw(url, method, path)
            assert status == code and "error" in json.loads(payload)


def test_metrics_counters_equal_the_sum_of_the_responses():
    with running(parallel=2) as (url, _):
        api = client(url)
        sums = Counter()
        per_pos: list[int] = []

        def count(timings: dict, stats: dict) -> None:
            sums["draft_tokens"] += timings["draft_n"]
            sums["accepted"] += timings["draft_n_accepted"]
            sums["drafts"] += stats["num_drafts"]
            for i, n in enumerate(stats["num_accepted_tokens_per_pos"]):
                per_pos.extend([0] * (i + 1 - len(per_pos)))
                per_pos[i] += n

        for i, rule in enumerate(["strict", "cactus:1", "mentored:0.7", "strict"]):
            extra = {"speculative": {"rule": rule, "draft_max": 1 + i}}
            whole = api.chat.completions.create(model="x", messages=[{"role": "user", "content": str(i)}],
                                                max_tokens=10, temperature=1.0, seed=i, extra_body=extra)
            count(whole.model_extra["timings"], whole.model_extra["relaxtui"]["stats"])
            last = list(api.completions.create(model="x", prompt=[i], max_tokens=7, stream=True, temperature=1.0,
                                               seed=i, extra_body=extra, stream_options={"include_usage": True}))[-1]
            count(last.model_extra["timings"], last.model_extra["relaxtui"]["stats"])
        status, _, payload = raw(url, "GET", "/metrics")
        samples = dict(line.rsplit(" ", 1) for line in payload.decode().splitlines() if not line.startswith("#"))
        assert int(samples["relaxtui:spec_decode_num_draft_tokens_total"]) == sums["draft_tokens"] > 0
        assert int(samples["relaxtui:spec_decode_num_accepted_tokens_total"]) == sums["accepted"]
        assert int(samples["relaxtui:spec_decode_num_drafts_total"]) == sums["drafts"]
        assert [int(samples[f'relaxtui:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}'])
                for i in range(len(per_pos))] == per_pos
        assert samples["relaxtui:requests_processing"] == "0" and samples["relaxtui:requests_deferred"] == "0"


def test_a_batch_that_fails_is_a_500_error_object_and_the_server_goes_on():
    """Broken logits (NaN after token 5) make the loop raise: that request gets a 500 error object, no traceback,
    and the next request is served by the restarted loop."""
    target = random_table(1)
    target[5] = np.nan
    with running(FakeServedPair(1, tables=(target, random_table(2))), parallel=1) as (url, _):
        status, _, payload = raw(url, "POST", "/v1/completions", {"prompt": [5], "max_tokens": 3})
        error = json.loads(payload)["error"]
        assert status == 500 and error["type"] == "server_error" and "Traceback" not in error["message"]
        assert raw(url, "POST", "/v1/completions", {"prompt": [0], "max_tokens": 1})[0] == 200


def test_deadline_ends_a_long_reply_with_length():
    with running(FakeServedPair(1, delay_s=0.01), parallel=1, timeout_s=0.5) as (url, _):
        reply = client(url).completions.create(model="x", prompt=[0], max_tokens=4000)
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens < 4000


# -- the remaining request fields ------------------------------------------------------------------------------------
def test_max_completion_tokens_top_k_top_p_echo_and_completion_logprobs():
    """``max_completion_tokens`` is the budget; top_k = 1 (or a tiny top_p) at temperature 1 leaves the verifier one
    token per step, so strict output is the greedy text; echo puts the prompt first; completions logprobs have the
    legacy shape with k alternatives."""
    with running() as (url, _):
        api = client(url)
        greedy = api.completions.create(model="x", prompt=[2], max_tokens=10).choices[0].text
        one = api.completions.create(model="x", prompt=[2], max_tokens=99, temperature=1.0, seed=4,
                                     extra_body={"max_completion_tokens": 10, "top_k": 1})
        assert one.usage.completion_tokens == 10 and one.choices[0].text == greedy
        assert api.completions.create(model="x", prompt=[2], max_tokens=10, temperature=1.0, seed=4,
                                      top_p=1e-6).choices[0].text == greedy
        chat = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                           max_completion_tokens=6)
        assert chat.usage.completion_tokens == 6
        echoed = api.completions.create(model="x", prompt="the cat", max_tokens=4, echo=True).choices[0].text
        assert echoed.startswith("the cat") and len(echoed) > len("the cat")
        scored = api.completions.create(model="x", prompt=[2], max_tokens=5, logprobs=2).choices[0].logprobs
        assert len(scored.tokens) == len(scored.token_logprobs) == len(scored.text_offset) == 5
        assert all(len(top) == 2 for top in scored.top_logprobs) and all(v <= 0 for v in scored.token_logprobs)


@pytest.mark.parametrize("kind,verdicts", [("none", {"verifier"}), ("ngram", None), ("model", None)])
def test_draft_kind_per_request(kind, verdicts):
    """A request may ask for the verifier alone (no drafts, every token "verifier"), the n-gram lookup or the model
    drafter; its stats say which ran, and greedy text is the same for all three (strict is lossless)."""
    with running() as (url, _):
        api = client(url)
        reply = api.completions.create(model="x", prompt=[0, 1, 2, 0, 1], max_tokens=12,
                                       extra_body={"speculative": {"draft_kind": kind}, "verdicts": True})
        plain = api.completions.create(model="x", prompt=[0, 1, 2, 0, 1], max_tokens=12,
                                       extra_body={"speculative": {"draft_max": 0}})
        extension = reply.choices[0].model_extra["relaxtui"]
        assert extension["stats"]["draft_kind"] == kind and reply.choices[0].text == plain.choices[0].text
        seen = {t["verdict"] for t in extension["tokens"]}
        if verdicts is not None:
            assert seen == verdicts and reply.model_extra["timings"]["draft_n"] == 0
        assert plain.model_extra["timings"]["draft_n"] == 0


def test_max_tokens_is_capped_by_the_slots_context():
    with running(FakeServedPair(1, n_ctx=48), parallel=1) as (url, _):
        reply = client(url).completions.create(model="x", prompt=[0, 1, 2, 3], max_tokens=100000)
        assert reply.choices[0].finish_reason == "length" and 0 < reply.usage.completion_tokens <= 48 - 4


def test_a_shutdown_drains_in_flight_requests_then_frees_the_models():
    """What SIGINT/SIGTERM do (the serve command's handler, called directly): no new connections, the request in
    flight (held at the gate, so it is surely in flight) runs to its end, then the pair is closed."""
    from relaxtui.commands.serve import _server_class

    gate = threading.Event()
    closed = threading.Event()

    class Pair(FakeServedPair):
        def close(self) -> None:
            closed.set()

    pair = Pair(1, gate=gate)
    scheduler = Scheduler(lambda: pair, max_queue=4)
    defaults = Defaults(Speculative("strict", None, 3, "model"), GREEDY, 0, None, None, DRAFT_KINDS)
    app = build_app(scheduler, ServeSettings(defaults, drain_s=WAIT_S))
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", log_config=None,
                            timeout_graceful_shutdown=int(WAIT_S))
    server = _server_class()(config, drain=lambda: scheduler.drain(WAIT_S))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    scheduler.ready.wait(WAIT_S)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    replies = []
    asker = threading.Thread(target=lambda: replies.append(client(url).completions.create(
        model="x", prompt=[0], max_tokens=30)))
    try:
        asker.start()
        deadline = time.monotonic() + WAIT_S
        while scheduler.processing < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.handle_exit(signal.SIGTERM, None)
        time.sleep(0.2)
        assert not closed.is_set() and thread.is_alive()  # still draining: the request holds the slot
        gate.set()
        asker.join(WAIT_S)
        thread.join(WAIT_S)
        assert replies and replies[0].usage.completion_tokens == 30 and replies[0].choices[0].finish_reason == "length"
        assert closed.is_set() and not thread.is_alive() and scheduler.state == "closed"
    finally:
        gate.set()
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


def test_a_drain_refuses_new_requests_and_ends_live_streams_with_a_finish_reason():
    """The scheduler's drain (what SIGTERM starts before the web server stops): a new request is a 503 at once; a
    stream that cannot finish within the drain stops at its next round and still ends properly: a last chunk
    with finish_reason "length", then [DONE]. The request waiting for the slot is told the server is shutting
    down."""
    with running(FakeServedPair(1, delay_s=0.01), parallel=1) as (url, scheduler):
        streamed: list = []
        waiting: list = []
        body = {"prompt": [0], "max_tokens": 4000, "stream": True}
        first = threading.Thread(target=lambda: streamed.append(raw(url, "POST", "/v1/completions", body)))
        second = threading.Thread(target=lambda: waiting.append(raw(url, "POST", "/v1/completions", body)))
        first.start()
        deadline = time.monotonic() + WAIT_S
        while scheduler.processing < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        second.start()
        while scheduler.deferred < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        scheduler.drain(0.5)
        status, _, payload = raw(url, "POST", "/v1/completions", {"prompt": [1], "max_tokens": 2})
        assert status == 503 and "shutting down" in json.loads(payload)["error"]["message"]
        first.join(WAIT_S)
        second.join(WAIT_S)
        assert 0.5 <= time.monotonic() - started < WAIT_S
        status, _, payload = streamed[0]
        lines = [line for line in payload.decode().splitlines() if line.startswith("data: ")]
        last = json.loads(lines[-2].removeprefix("data: "))
        assert status == 200 and lines[-1] == "data: [DONE]" and last["choices"][0]["finish_reason"] == "length"
        assert waiting[0][0] == 503 and "shutting down" in json.loads(waiting[0][2])["error"]["message"]


def test_a_prompt_that_starts_like_an_earlier_one_reads_only_the_rest():
    """The prompt cache (--prompt-cache longest, the default): a request sharing its first tokens with one before
    it (a system prompt) decodes only the rest, and usage says how many were cached; the text is unchanged."""
    with running(parallel=1) as (url, _):
        api = client(url)
        api.completions.create(model="x", prompt=[1, 2, 3, 4, 5, 6, 7], max_tokens=3)
        again = api.completions.create(model="x", prompt=[1, 2, 3, 4, 5, 0, 2], max_tokens=5)
        assert again.usage.prompt_tokens_details.cached_tokens == 5
        assert again.model_extra["timings"]["cache_n"] == 5 and again.model_extra["timings"]["prompt_n"] == 2
        fresh = alone([1, 2, 3, 4, 5, 0, 2], GenerationConfig(draft_max=3, max_tokens=5, sampling=GREEDY))
        assert again.choices[0].text == fresh.text


def test_a_strict_knob_of_minus_infinity_is_strict_json_in_both_reply_kinds():
    """casc-opt's strict setting is -inf: a reply names it "-inf" (a bare -Infinity is not JSON, and a JSON
    response refused it with a 500)."""
    with running() as (url, _):
        body = {"prompt": [0, 1], "max_tokens": 4, "speculative": {"rule": "casc-opt:-inf"}}
        status, _, payload = raw(url, "POST", "/v1/completions", body)
        assert status == 200, payload
        assert json.loads(payload)["relaxtui"]["stats"]["alpha"] == "-inf"
        status, _, payload = raw(url, "POST", "/v1/completions", {**body, "stream": True})
        chunks = [line.removeprefix(b"data: ") for line in payload.splitlines() if line.startswith(b"data: {")]
        assert status == 200 and chunks
        parsed = [json.loads(chunk, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
                  for chunk in chunks]
        assert any(chunk.get("relaxtui", {}).get("stats", {}).get("alpha") == "-inf" for chunk in parsed)


def test_an_idle_server_takes_a_request_larger_than_the_queue_limit():
    """n = 4 choices on 2 slots with --max-queue 2: more than the queue holds, yet it fits (the slots take two at
    once); it was refused as "busy, retry later" on an idle server. One more can never fit: a 400."""
    with running(max_queue=2) as (url, _):
        reply = client(url).completions.create(model="x", prompt=[0, 1], max_tokens=3, n=4)
        assert len(reply.choices) == 4
        status, _, payload = raw(url, "POST", "/v1/completions", {"prompt": [0], "n": 5})
        assert status == 400 and json.loads(payload)["error"]["param"] == "n"


CPU = (1.0, 1.56, 1.9, 1.73, 2.22, 2.63, 3.02, 3.25, 3.48)  # v(1..9) measured on a 2-core Xeon


@pytest.mark.parametrize(("cut", "cut_kinds"), [("auto", {"suffix"}), ("priced", {"suffix", "model"}),
                                                ("none", set())])
def test_each_requests_drafter_is_cut_where_the_servers_draft_cut_says(cut, cut_kinds):
    """--draft-cut is the pair's: each kind a request may ask for is built once, cut by price (a PricedDrafter that
    reads the pair's prices) where the policy says so; a request's config carries no cut and no prices."""
    from relaxtui.decoding.drafters import DrafterOptions

    pair = FakeServedPair(1, prices=CPU, drafting=DrafterOptions(draft_cut=cut))
    scheduler = Scheduler(lambda: pair, max_queue=4, log=lambda line: None)
    scheduler.start(wait=True)
    defaults = Defaults(Speculative("strict", None, 3, "model"), GREEDY, 0, None, None, DRAFT_KINDS)
    try:
        loop = asyncio.new_event_loop()
        ticket = Ticket(loop, 1, time.monotonic() + WAIT_S)
        for kind in ("suffix", "model"):
            request = parse_request({"prompt": [0], "max_tokens": 4, "speculative": {"draft_kind": kind}},
                                    chat=False, defaults=defaults, n_vocab=6)
            (job,) = scheduler.jobs(request, [[0]], ticket, "prompt")
            assert job.drafter.traits.kind == kind and (job.drafter.traits.cut == "priced") is (kind in cut_kinds)
            assert not hasattr(job.config, "verify_prices") and not hasattr(job.config, "draft_cut")
        loop.close()
    finally:
        scheduler.close()


def test_a_server_answers_before_its_prices_are_measured_and_cuts_drafts_once_they_are():
    """serve listens at once: the verify prices are measured in the background, on the model thread while it is idle,
    a slice at a time; a request meanwhile is answered with its drafts whole (the measurement here does not end
    until the gate is set), and from the prices' arrival on, drafts are cut by them."""
    gate = threading.Event()
    pair = FakeServedPair(1, prices=CPU, prices_gate=gate)
    with running(pair, parallel=1) as (url, scheduler):
        assert scheduler.state == "ready" and pair.pair.prices() is None and pair.pair.background.pending
        reply = client(url).completions.create(model="x", prompt=[0, 1, 2, 0, 1, 2, 0, 1], max_tokens=12,
                                               extra_body={"speculative": {"draft_kind": "ngram", "draft_max": 8}})
        assert reply.choices[0].text and not gate.is_set() and pair.pair.prices() is None  # answered meanwhile
        lookup = pair.drafter_for("ngram")
        assert lookup.traits.cut == "priced" and lookup.prices() is None  # its drafts were verified whole
        gate.set()
        deadline = time.monotonic() + WAIT_S
        while pair.pair.prices() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pair.pair.prices() == CPU and not pair.pair.background.pending
        client(url).completions.create(model="x", prompt=[0, 1, 2, 0, 1, 2, 0, 1], max_tokens=12,
                                       extra_body={"speculative": {"draft_kind": "ngram", "draft_max": 8}})
        assert lookup.prices()[:len(CPU)] == CPU  # the next request's drafts were cut at them
