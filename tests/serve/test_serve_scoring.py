"""What scoring clients read from `relaxtui serve`: prompt log-probs (echo + logprobs, max_tokens 0 or 1, the request
lm-eval's local-completions sends for every log-likelihood), the tokenizer routes of lm-eval's remote tokenizer,
GET /v1/models/{id}, system_fingerprint, and text_offset as OpenAI counts it. On the fake pair (its verifier is a
Markov table, so every log-prob has an exact value), and one SmolLM2 run against llama-cpp-python directly.
Loopback only; waits are for events or replies, never for the machine's speed."""

from __future__ import annotations

import http.client
import json
import threading

import numpy as np
import openai
import pytest

from relaxtui.serve.pair import FakeServedPair
from relaxtui.serve.scoring import SCORE_CHUNK, balanced_chunks
from tests.support.servers import WAIT_S, client, raw, running

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def exact_logprobs(pair: FakeServedPair, tokens: list[int]) -> list[float | None]:
    """log p(t_i | t_{i-1}) under the fake verifier's table (its rows are float32, as the server reads them)."""
    rows = pair.tables[0].astype(np.float32).astype(np.float64)
    out: list[float | None] = [None]
    for prev, token in zip(tokens, tokens[1:], strict=False):
        row = rows[prev]
        out.append(float(row[token] - (row.max() + np.log(np.exp(row - row.max()).sum()))))
    return out


def score(url: str, prompt: object, **fields: object) -> tuple[int, dict]:
    status, _, payload = raw(url, "POST", "/v1/completions",
                             {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0,
                              **fields})
    return status, json.loads(payload)


def test_echo_logprobs_give_each_prompt_token_its_verifier_log_prob_as_lm_eval_reads_them():
    pair = FakeServedPair(2)
    with running(pair) as (url, _):
        status, body = score(url, PROMPT, logprobs=3)
        assert status == 200
        choice = body["choices"][0]
        logprobs = choice["logprobs"]
        expected = exact_logprobs(pair, PROMPT)
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        assert np.allclose(logprobs["token_logprobs"][1:len(PROMPT)], expected[1:], atol=1e-6)
        pieces = [pair.token_bytes(t).decode() for t in PROMPT]
        assert logprobs["tokens"][:len(PROMPT)] == pieces
        assert logprobs["text_offset"][:len(PROMPT)] == list(np.cumsum([0] + [len(p) for p in pieces[:-1]]))
        # the one completion token: the verifier's argmax after the prompt, offset at the prompt's end
        row = pair.tables[0][PROMPT[-1]]
        following = int(np.argmax(row))
        assert logprobs["tokens"][-1] == pair.token_bytes(following).decode()
        assert logprobs["text_offset"][-1] == len("".join(pieces))
        assert choice["text"] == "".join(pieces) + pair.token_bytes(following).decode()
        assert choice["finish_reason"] == "length" and body["usage"]["prompt_tokens"] == len(PROMPT)
        assert body["usage"]["completion_tokens"] == 1
        for value, top in zip(logprobs["token_logprobs"][1:], logprobs["top_logprobs"][1:], strict=True):
            assert len(top) == 3 and value <= max(top.values())
        # what lm-eval's parse_logprobs computes with a context of 5 tokens: the continuation's sum, and "is greedy"
        ctxlen = 5
        total = sum(logprobs["token_logprobs"][ctxlen:-1])
        assert total == pytest.approx(sum(expected[ctxlen:]), abs=1e-6)
        greedy = all(v == max(t.values()) for v, t in zip(logprobs["token_logprobs"][ctxlen:-1],
                                                         logprobs["top_logprobs"][ctxlen:-1], strict=True))
        table = pair.tables[0]
        assert greedy == all(int(np.argmax(table[PROMPT[i - 1]])) == PROMPT[i] for i in range(ctxlen, len(PROMPT)))
        # max_tokens 0: the prompt alone; a batch of prompts (lm-eval with batch_size > 1): one choice each, in order
        status, alone = score(url, PROMPT, max_tokens=0)
        assert status == 200 and alone["choices"][0]["text"] == "".join(pieces)
        assert alone["choices"][0]["logprobs"]["token_logprobs"] == logprobs["token_logprobs"][:-1]
        assert alone["usage"]["completion_tokens"] == 0
        status, batch = score(url, [PROMPT, PROMPT[:3]], max_tokens=0)
        assert [c["index"] for c in batch["choices"]] == [0, 1]
        assert batch["choices"][1]["logprobs"]["token_logprobs"] == alone["choices"][0]["logprobs"][
            "token_logprobs"][:3]


def test_a_streamed_scoring_request_is_one_chunk_per_choice_then_done():
    with running() as (url, _):
        whole = client(url).completions.create(model="x", prompt=PROMPT, echo=True, logprobs=2, max_tokens=1)
        chunks = list(client(url).completions.create(model="x", prompt=PROMPT, echo=True, logprobs=2, max_tokens=1,
                                                     stream=True, stream_options={"include_usage": True}))
        assert len(chunks) == 2 and chunks[-1].usage.prompt_tokens == len(PROMPT)
        assert chunks[0].choices[0].logprobs.token_logprobs == whole.choices[0].logprobs.token_logprobs
        assert chunks[0].choices[0].text == whole.choices[0].text


def _stream(url: str, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    connection.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    return connection, connection.getresponse()


def _text_of(response: http.client.HTTPResponse) -> str:
    text = ""
    for line in response:
        line = line.strip()
        if line.startswith(b"data: {"):
            text += json.loads(line[6:])["choices"][0]["text"] if json.loads(line[6:])["choices"] else ""
    return text


@pytest.mark.parametrize("parallel", [1, 2])
def test_scoring_while_a_generation_runs_leaves_it_unchanged(parallel):
    """A scoring request sent while a generation holds a slot: with a free slot it is scored between the
    generation's rounds, in its own sequence; with none it waits for the slot. Either way the generation's text is
    what it is alone, and the scores are exact."""
    pair = FakeServedPair(parallel, delay_s=0.005)
    generation = {"prompt": [0], "max_tokens": 200, "temperature": 1.0, "seed": 3, "stream": True}
    with running(pair, parallel=parallel) as (url, _):
        connection, response = _stream(url, generation)
        first = response.readline()  # the generation is live: its first chunk came
        assert first.startswith(b"data: ")
        scored: dict = {}
        thread = threading.Thread(target=lambda: scored.update(score(url, PROMPT)[1]))
        thread.start()
        text = json.loads(first[6:])["choices"][0]["text"] + _text_of(response)
        thread.join(WAIT_S)
        connection.close()
        assert np.allclose(scored["choices"][0]["logprobs"]["token_logprobs"][1:len(PROMPT)],
                           exact_logprobs(pair, PROMPT)[1:], atol=1e-6)
        connection, response = _stream(url, generation)
        assert _text_of(response) == text  # the same generation alone
        connection.close()
    # the verifier's batches: the first run's k rounds, the scoring decode (one item of the prompt's 8 tokens),
    # the lone run's k rounds; with a free slot the scoring comes after the first run began (between two of its
    # rounds wherever the HTTP round trip is shorter than the 1 s generation; this machine's speed is not asserted)
    batches = pair.verifier.batches
    scoring = [i for i, batch in enumerate(batches) if batch == ((parallel - 1, len(PROMPT)),)]
    rounds = (len(batches) - 1) // 2
    assert len(scoring) == 1 and len(batches) == 2 * rounds + 1
    assert 0 < scoring[0] <= rounds if parallel == 2 else scoring[0] == rounds


BAD = [
    ({"prompt": [1, 2], "echo": True, "logprobs": 1}, "max_tokens"),
    ({"prompt": [1, 2], "echo": True, "logprobs": 1, "max_tokens": 5}, "max_tokens"),
    ({"prompt": [1, 2], "echo": True, "logprobs": 1, "max_completion_tokens": 2}, "max_completion_tokens"),
    ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1, 2], "echo": True, "logprobs": 1, "max_tokens": 1, "stop": ["x"]}, "stop"),
    ({"prompt": [1] * 65, "echo": True, "logprobs": 1, "max_tokens": 0}, "prompt"),
    ({"prompt": [[1, 2], [1] * 65], "echo": True, "logprobs": 1, "max_tokens": 0}, "prompt[1]"),
]


@pytest.mark.parametrize("body,param", BAD)
def test_a_scoring_request_out_of_bounds_is_a_400_naming_the_field(body, param):
    with running(FakeServedPair(2, n_ctx=64)) as (url, _):
        status, _, payload = raw(url, "POST", "/v1/completions", body)
        error = json.loads(payload)["error"]
        assert status == 400 and error["param"] == param and "\n" not in error["message"], error
        assert score(url, [1] * 64, max_tokens=0)[0] == 200  # a prompt that fills the slot exactly is scored


def test_balanced_chunks_cover_the_prompt_in_near_equal_parts():
    for n in (1, 63, 64, 128, 129, 300, 4096):
        chunks = balanced_chunks(n, 128)
        sizes = [end - start for start, end in chunks]
        assert chunks[0][0] == 0 and chunks[-1][1] == n and max(sizes) <= 128 and max(sizes) - min(sizes) <= 1
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))
        assert n < 64 or min(sizes) >= 64  # every chunk a large batch once the prompt is one


def test_lm_eval_remote_tokenizer_routes_and_model_by_id():
    """What lm-eval's ``check_remote_tokenizer_support`` and ``RemoteTokenizer`` read (vLLM's routes and names),
    beside llama-server's; GET /v1/models/{id} answers the served model and 404s any other in OpenAI's shape."""
    with running() as (url, _):
        status, _, payload = raw(url, "GET", "/tokenizer_info")
        info = json.loads(payload)
        assert status == 200 and "eos_token" in info and info["model_max_length"] == 4096
        status, _, payload = raw(url, "POST", "/tokenize", {"prompt": " the cat", "add_special_tokens": False})
        assert status == 200 and isinstance(json.loads(payload)["tokens"], list)
        assert json.loads(payload)["count"] == len(json.loads(payload)["tokens"])
        status, _, payload = raw(url, "POST", "/detokenize", {"tokens": [1, 2]})
        assert status == 200 and json.loads(payload) == {"content": " cat sat", "prompt": " cat sat"}
        status, _, payload = raw(url, "POST", "/tokenize", {"prompt": 3})
        assert status == 400 and json.loads(payload)["error"]["param"] == "prompt"
        api = client(url)
        listed = api.models.list().data[0]
        assert api.models.retrieve(listed.id).id == listed.id == "fake-verifier"
        with pytest.raises(openai.NotFoundError):
            api.models.retrieve("gpt-4")
        status, _, payload = raw(url, "GET", "/v1/models/gpt-4")
        assert status == 404 and json.loads(payload)["error"] == {
            "message": "The model 'gpt-4' does not exist (this server serves 'fake-verifier')",
            "type": "invalid_request_error", "param": "model", "code": "model_not_found"}


def test_every_response_carries_one_system_fingerprint():
    pair = FakeServedPair(2)
    with running(pair) as (url, _):
        api = client(url)
        seen = {api.completions.create(model="x", prompt=[0], max_tokens=3).system_fingerprint,
                api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=3).system_fingerprint,
                score(url, PROMPT)[1]["system_fingerprint"]}
        seen |= {c.system_fingerprint for c in api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True)}
        assert seen == {pair.fingerprint} and pair.fingerprint.startswith("fp_")
    assert FakeServedPair(2, seed=8).fingerprint != pair.fingerprint  # other weights, another fingerprint


def test_text_offset_counts_from_the_start_of_the_prompt():
    """OpenAI's legacy offsets index prompt + completion: a completion's first token sits at the prompt's length,
    echoed or not, in a whole response and a stream alike."""
    pair = FakeServedPair(2)
    with running(pair) as (url, _):
        api = client(url)
        prompt = [2, 7]  # " sat."
        whole = api.completions.create(model="x", prompt=prompt, max_tokens=6, logprobs=0).choices[0].logprobs
        start = len(" sat.")
        assert whole.text_offset == list(np.cumsum([start] + [len(t) for t in whole.tokens[:-1]]))
        streamed = [o for c in api.completions.create(model="x", prompt=prompt, max_tokens=6, logprobs=0, stream=True)
                    if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
        assert streamed == whole.text_offset


def test_scored_tokens_are_counted_in_metrics():
    with running() as (url, _):
        score(url, PROMPT)
        score(url, [PROMPT, PROMPT[:2]], max_tokens=0)
        text = raw(url, "GET", "/metrics")[2].decode()
        assert f"relaxtui:prompt_tokens_scored_total {2 * len(PROMPT) + 2}" in text


# -- a real model ---------------------------------------------------------------------------------------------------
LOGPROB_TOLERANCE = 1e-4  # nats per token; measured 2e-8 on SmolLM2 (float32 rows, normalised in float64 each side)


@pytest.mark.model
def test_smollm2_prompt_log_probs_equal_llama_cpp_python_directly(test_model_path):
    """Served prompt log-probs against llama-cpp-python's own decode of the same tokens (logits_all, flash attention
    on as llama.cpp's default has it): a short prompt (one chunk) and a long one (balanced chunks of the server's
    scoring decode, against one batch) agree per token within LOGPROB_TOLERANCE."""
    import llama_cpp

    from tests.support.servers import serve_process

    texts = ["The capital of France is Paris.",
             " ".join(["Bees make honey and the sun rises in the east; two plus two equals four."] * 20)]
    with serve_process("-m", str(test_model_path), "--drafter", str(test_model_path), "-c", "512",
                       "--threads", "1") as (url, _):
        prompts = [json.loads(raw(url, "POST", "/tokenize", {"prompt": t, "add_special_tokens": False})[2])["tokens"]
                   for t in texts]
        served = [score(url, p, max_tokens=0)[1]["choices"][0]["logprobs"]["token_logprobs"] for p in prompts]
    assert len(prompts[1]) > SCORE_CHUNK  # the long prompt spans two scoring chunks
    llm = llama_cpp.Llama(str(test_model_path), n_ctx=512, n_batch=512, n_threads=1, logits_all=True,
                          flash_attn=True, verbose=False)
    gaps = []
    try:
        for tokens, values in zip(prompts, served, strict=True):
            llm.reset()
            llm.eval(tokens)
            rows = np.asarray(llm.scores[:len(tokens)], dtype=np.float64)
            rows -= rows.max(axis=1, keepdims=True)
            direct = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
            gaps.append(max(abs(values[i] - direct[i - 1, tokens[i]]) for i in range(1, len(tokens))))
            assert values[0] is None
    finally:
        llm.close()
    print(f"served vs llama-cpp-python prompt log-probs: max |delta| per token {max(gaps):.2e} nats "
          f"({len(prompts[0])} and {len(prompts[1])} tokens)")
    assert max(gaps) <= LOGPROB_TOLERANCE, gaps


def test_n_choices_share_the_prompt_scores_and_each_draws_its_own_next_token():
    """``n`` choices of one scored prompt: the prompt is scored once and every choice shows it; at temperature > 0
    each choice's one completion token is drawn with its own seed (seed + i), the same on every repeat."""
    with running() as (url, _):
        status, first = score(url, PROMPT, n=4, temperature=1.0, seed=11)
        _, again = score(url, PROMPT, n=4, temperature=1.0, seed=11)
        assert status == 200 and [c["index"] for c in first["choices"]] == [0, 1, 2, 3]
        prompts = {tuple(c["logprobs"]["token_logprobs"][:-1]) for c in first["choices"]}
        assert len(prompts) == 1 and first["usage"]["prompt_tokens"] == len(PROMPT)  # scored once
        assert first["usage"]["completion_tokens"] == 4
        assert [c["text"] for c in first["choices"]] == [c["text"] for c in again["choices"]]
        assert len({c["text"] for c in score(url, PROMPT, n=4)[1]["choices"]}) == 1  # greedy: one argmax
