"""The server's request readers under outside input (issue 34): property-based fuzzing, and a lone surrogate in
each string field over HTTP.

Whatever bytes a client sends, ``read_json`` and then ``parse_request`` (chat and completions), ``parse_tokenize``
or ``parse_detokenize`` either return a checked request or raise one ``ApiError`` with a 4xx status whose body can
be sent (strict JSON, UTF-8) — never another exception, which the HTTP layer would answer as a 500. Every string
in a returned request is text (encodable as UTF-8): ``st.text()`` draws lone surrogates, and a lone surrogate
anywhere in a body is a 400 naming its field.

Bodies are random bytes, random JSON (``st.recursive``), and objects with the API's own field names holding random
or hostile values, so the fuzz reaches the deeper checks. Example counts are fixed, nothing depends on the
machine's speed (``deadline=None``), and the example database is off (nothing is written into the repository).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st

from relaxtui.decoding.sampling import SamplingParams
from relaxtui.serve.body import ApiError, read_json
from relaxtui.serve.protocol import (
    DRAFT_KINDS,
    CompletionRequest,
    Defaults,
    Speculative,
    TokenizeRequest,
    parse_detokenize,
    parse_request,
    parse_tokenize,
)
from tests.support.servers import raw, running

N_VOCAB = 64
DEFAULTS = Defaults(Speculative("strict", None, 3, "model"), SamplingParams(1.0, 0, 1.0), 0, None, None, DRAFT_KINDS)


def fuzz(examples: int) -> settings:
    """Fixed example counts, no deadline (a busy 2-core machine must not fail them), no example database."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


NASTY = ["a\ud800b", "\udfff", "\ud83d\ude00", "😀", "", " ", "\x00", "x" * 600, "strict", "cactus:0.5", "cactus:x",
         "scd:-inf", "mentored", "ngram", "none", "model", "user", "system", "robot", "text", "image_url", -1, 0, 1,
         2, 1.5, 1e-308, 1e308, 10**400, -(10**400), 2**63, 2**31, True, False, None, [], {}, [0], [63, 64],
         {"type": "text"}, {"type": "text", "text": "a\ud800"}, {"include_usage": True}]
scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=12) | st.sampled_from(NASTY))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16)
FIELDS = ["model", "messages", "prompt", "role", "content", "name", "text", "type", "stop", "stream", "n", "seed",
          "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "logprobs", "top_logprobs", "echo",
          "user", "metadata", "verdicts", "stream_options", "include_usage", "speculative", "rule", "alpha",
          "draft_max", "draft_kind", "chat_template_kwargs", "enable_thinking", "response_format", "tools",
          "frequency_penalty", "logit_bias", "add_special", "with_pieces", "tokens"]
api_shaped = st.recursive(  # objects with the API's own keys
    json_values,
    lambda inner: st.dictionaries(st.sampled_from(FIELDS), inner, max_size=6) | st.lists(inner, max_size=3),
    max_leaves=12)
texts = st.text() | st.sampled_from([s for s in NASTY if isinstance(s, str)])  # st.text() draws lone surrogates
messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "developer"]) | texts},
    optional={"content": texts | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=3),
              "name": texts}), min_size=1, max_size=3)
text_fields = st.fixed_dictionaries({}, optional={  # every string field a request may carry
    "model": texts, "user": texts, "stop": texts | st.lists(texts, max_size=3),
    "prompt": texts | st.lists(texts, max_size=3), "messages": messages, "content": texts,
    "speculative": st.fixed_dictionaries({}, optional={"rule": texts, "draft_kind": texts}),
    "max_tokens": st.integers(1, 8), "stream": st.booleans()})


def has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_surrogate(v) for v in value)
    return False


def encodable(value: object) -> None:
    """Every string in a checked request is text: UTF-8 encoding it cannot fail."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for k, v in value.items():
            encodable(k)
            encodable(v)
    elif isinstance(value, list | tuple):
        for v in value:
            encodable(v)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            encodable(getattr(value, name))


def sendable(error: ApiError) -> dict[str, Any]:
    """A 4xx whose error object goes out as the HTTP layer sends it (strict JSON, UTF-8, no NaN)."""
    assert 400 <= error.status < 500, (error.status, error.message)
    body = json.loads(json.dumps(error.body(), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    assert body["error"]["message"] and body["error"]["type"] == "invalid_request_error", body
    return body["error"]


def read(raw: bytes) -> list[CompletionRequest | TokenizeRequest | list[int] | dict[str, Any]]:
    """Every reader over one body: what each returned, or the error object of the 4xx it raised."""
    try:
        body = read_json(raw)
    except ApiError as error:
        return [sendable(error)]
    assert not has_surrogate(body), body  # a lone one anywhere, a value or a field name, is refused here
    out: list[Any] = []
    for reader, parse in (("chat", lambda: parse_request(body, chat=True, defaults=DEFAULTS, n_vocab=N_VOCAB)),
                          ("completions", lambda: parse_request(body, chat=False, defaults=DEFAULTS, n_vocab=N_VOCAB)),
                          ("tokenize", lambda: parse_tokenize(body)),
                          ("detokenize", lambda: parse_detokenize(body, N_VOCAB))):
        try:
            checked = parse()
        except ApiError as error:
            out.append(sendable(error))
            if currently_in_test_context():  # --hypothesis-show-statistics: which checks the fuzz reached
                event(f"{reader}: 400 on {str(error.param).split('[')[0]}")
            continue
        encodable(checked)
        out.append(checked)
        if currently_in_test_context():
            event(f"{reader}: a request")
    return out


def dumped(value: object) -> bytes:
    """As a client's JSON library writes it: a lone surrogate becomes the escape ``\\ud800`` (valid JSON)."""
    return json.dumps(value).encode("ascii")


@fuzz(300)
@given(data=st.binary(max_size=256))
def test_random_bytes_are_a_request_or_a_4xx(data):
    read(data)


@fuzz(400)
@given(value=json_values)
def test_random_json_is_a_request_or_a_4xx(value):
    read(dumped(value))


@fuzz(500)
@given(fields=st.dictionaries(st.sampled_from(FIELDS), api_shaped, max_size=6), keep=st.booleans())
@example(fields={"messages": [{"role": []}]}, keep=False)  # an unhashable role once raised TypeError (CI, stop 37)
@example(fields={"messages": [{"role": {"a": 1}, "content": "x"}]}, keep=True)
def test_objects_with_the_apis_fields_are_a_request_or_a_4xx(fields, keep):
    """Random values for the API's fields, over a valid request (``keep``) so that the checks past ``messages`` and
    ``prompt`` are reached too, or alone."""
    base = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "content": "hi", "tokens": [1]}
    read(dumped({**base, **fields} if keep else fields))


@fuzz(500)
@given(value=text_fields)
def test_a_lone_surrogate_in_any_string_is_a_400_naming_it(value):
    raw = dumped(value)
    results = read(raw)
    if has_surrogate(json.loads(raw)):  # what the server reads: an escaped pair is one character, not two
        assert len(results) == 1 and isinstance(results[0], dict), results  # refused before any field is read
        param = results[0]["param"]
        assert param and param.split("[")[0].split(".")[0] in value, results[0]
    else:
        assert not any(isinstance(r, dict) and "Unicode" in r["message"] for r in results), results


# -- over HTTP: each field, then the next request ------------------------------------------------------------
CHAT = '"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2'
NOT_TEXT = [  # (path, JSON body text: "\ud800" is a lone surrogate, valid JSON but not text, param named)
    ("/v1/completions", '{"prompt": "a\\ud800b", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": ["ok", "a\\udfffb"], "max_tokens": 2}', "prompt[1]"),
    ("/v1/completions", '{"prompt": "hi", "stop": "\\ud800", "max_tokens": 2}', "stop"),
    ("/v1/completions", '{"prompt": "hi", "stop": ["x", "y\\ud800"], "max_tokens": 2}', "stop[1]"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": '
                             '[{"type": "text", "text": "a"}, {"type": "text", "text": "b\\udbff"}]}]}',
     "messages[1].content[1].text"),
    ("/v1/chat/completions", '{"messages": [{"role": "us\\ud800er", "content": "hi"}]}', "messages[0].role"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "name": "\\ud800", "content": "hi"}]}',
     "messages[0].name"),
    ("/v1/chat/completions", '{"model": "a\\ud800b", "stream": true, ' + CHAT + '}', "model"),  # was a 200, then
    ("/v1/chat/completions", '{"user": "\\udc00", ' + CHAT + '}', "user"),  # a broken stream and a traceback
    ("/v1/chat/completions", '{"metadata": {"k": ["\\ud800"]}, ' + CHAT + '}', "metadata.k[0]"),
    ("/v1/chat/completions", '{"speculative": {"rule": "strict\\ud800"}, ' + CHAT + '}', "speculative.rule"),
    ("/v1/chat/completions", '{"\\ud800": 1, ' + CHAT + '}', "\\ud800"),  # a field name: shown escaped
    ("/tokenize", '{"content": "a\\ud800b"}', "content"),
    ("/detokenize", '{"tokens": [1], "note": "\\ud800"}', "note"),
]


def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field_and_the_next_request_is_served():
    """Issue 34: with the llama tokenizer these were 500s (UnicodeEncodeError), and a streamed one with it in
    ``model`` a 200 whose body broke after the headers. Each is refused whole, before anything is queued."""
    good = {"/v1/completions": {"prompt": "a😀b", "max_tokens": 2},
            "/v1/chat/completions": {"messages": [{"role": "user", "content": "a\ud83d\ude00b"}], "max_tokens": 2,
                                     "stream": True},  # an escaped surrogate *pair* is one character: fine
            "/tokenize": {"content": "a😀b"}, "/detokenize": {"tokens": [1]}}
    with running() as (url, scheduler):
        for path, body, param in NOT_TEXT:
            before = scheduler.metrics.sequences
            status, headers, payload = raw(url, "POST", path, body)
            error = json.loads(payload)["error"]
            assert status == 400 and headers["content-type"] == "application/json", (path, body, payload)
            assert error["type"] == "invalid_request_error" and error["param"] == param, (body, error)
            assert "lone surrogate" in error["message"] and scheduler.metrics.sequences == before, error
            status, _, payload = raw(url, "POST", path, good[path])
            assert status == 200 and b"Unicode" not in payload, (path, payload)
