"""Several tenants on one server (docs/serve.md#several-tenants): what one API key generates never drafts for another,
its prompts are never another key's cache, and the operator bounds what requests may choose.

The leak probe: key A makes the server write some text; key B then sends a prompt that leads into it with the most
lenient setting there is (ensemble with w = 0 keeps every drafted token) and a drafter that learns from earlier
outputs. With state scoped per key, B's reply — text and per-token verdicts — is exactly what a fresh server gives
it; with ``--share-learning`` (one state for every key) B's first tokens are A's, so the probe can fail.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from relaxtui.decoding.drafters import DrafterOptions
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.serve.pair import FakeServedPair, KindDrafters
from relaxtui.serve.policy import Policy, parse_allow_rules
from tests.support.servers import client, raw, running

KEYS = ("key-a", "key-b")
SAMPLED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)
UNIFORM = (np.zeros((16, 16)), np.zeros((16, 16)))  # every word equally likely: text that is copied is told apart
# the learning kinds with sizes that learn from a few dozen tokens (ngram-mod's defaults need chains of 48)
DRAFTING = DrafterOptions(ngram_size_n=3, ngram_size_m=8, ngram_mod_n_min=1)
LENIENT = {"rule": "ensemble:0", "draft_max": 3}  # w = 0: every drafted token is kept


def pair() -> FakeServedPair:
    return FakeServedPair(2, tables=UNIFORM, drafting=DRAFTING)


def completion(url: str, key: str, prompt: list[int], kind: str, *, seed: int, max_tokens: int = 24,
               speculative: dict | None = None, n: int = 1) -> dict:
    status, _, body = raw(url, "POST", "/v1/completions",
                          {"prompt": prompt, "max_tokens": max_tokens, "seed": seed, "verdicts": True, "n": n,
                           "speculative": {**(speculative or {}), "draft_kind": kind}},
                          headers={"Authorization": f"Bearer {key}"})
    assert status == 200, body
    return json.loads(body)


def tokens(reply: dict) -> list[tuple[int, str]]:
    return [(t["id"], t["verdict"]) for t in reply["choices"][0]["relaxtui"]["tokens"]]


def probe(policy: Policy, kind: str) -> tuple[list[int], list[tuple[int, str]], list[tuple[int, str]]]:
    """(what follows B's prompt in A's request, B's reply after A's request, B's reply from a fresh server)."""
    lead = [3, 9, 14]
    with running(pair(), keys=KEYS, sampling=SAMPLED, policy=policy) as (url, _):
        a = completion(url, "key-a", lead, kind, seed=11, max_tokens=40)
        a_ids = [i for i, _ in tokens(a)]
        # ngram-mod learns A's prompt too: B's prompt leads into A's prompt + output alike
        told = 4 if kind == "ngram-mod" else 5  # A's output tokens B's prompt ends with
        b_prompt = [5, *lead[1:], *a_ids[:told]] if kind == "ngram-mod" else [5, *a_ids[:told]]
        b = completion(url, "key-b", b_prompt, kind, seed=3, speculative=LENIENT)
    with running(pair(), keys=KEYS, sampling=SAMPLED, policy=policy) as (url, _):
        fresh = completion(url, "key-b", b_prompt, kind, seed=3, speculative=LENIENT)
    return a_ids[told:], tokens(b), tokens(fresh)


@pytest.mark.parametrize("kind", ["suffix", "ngram-mod"])
def test_what_key_a_generates_never_drafts_for_key_b(kind):
    secret, b, fresh = probe(Policy(), kind)
    assert b == fresh  # text and every verdict: nothing of A's request reached B
    assert [i for i, _ in b[:3]] != secret[:3]


@pytest.mark.parametrize("kind", ["suffix", "ngram-mod"])
def test_share_learning_lets_the_same_probe_see_key_a(kind):
    """The probe can fail: one learned state for every key, and B's first drafts are A's continuation."""
    secret, b, fresh = probe(Policy(share_learning=True), kind)
    assert b != fresh
    assert b[:3] == [(token, "accepted") for token in secret[:3]]


def test_key_b_never_reads_key_a_prompt_from_the_cache():
    """B's cache_n for a prompt A sent is 0 (and its timing is a fresh prefill's); A's own repeat reads it."""
    prompt = list(range(16)) * 3
    with running(FakeServedPair(1), keys=KEYS, policy=Policy()) as (url, _):
        completion(url, "key-a", prompt, "model", seed=0, max_tokens=2)
        b = completion(url, "key-b", prompt, "model", seed=0, max_tokens=2)
        a_again = completion(url, "key-a", prompt, "model", seed=0, max_tokens=2)
        a_after_b = completion(url, "key-a", prompt, "model", seed=0, max_tokens=2)
    assert b["timings"]["cache_n"] == 0 and b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert a_again["timings"]["cache_n"] == 0  # B held the one slot last: emptied for A
    assert a_after_b["timings"]["cache_n"] == len(prompt) - 1


def test_share_learning_shares_the_prompt_cache_as_before():
    prompt = list(range(16)) * 3
    with running(FakeServedPair(1), keys=KEYS, policy=Policy(share_learning=True)) as (url, _):
        completion(url, "key-a", prompt, "model", seed=0, max_tokens=2)
        b = completion(url, "key-b", prompt, "model", seed=0, max_tokens=2)
    assert b["timings"]["cache_n"] == len(prompt) - 1


@pytest.mark.parametrize("share", [False, True])
def test_two_slots_copy_a_cached_prompt_only_within_a_key(share):
    """With two slots, a prompt is copied from the other slot (llama-server's prompt cache) only when that slot
    last served the same key (any key, with --share-learning)."""
    prompt = list(range(16)) * 3
    with running(FakeServedPair(2), keys=KEYS, policy=Policy(share_learning=share)) as (url, _):
        completion(url, "key-a", prompt, "model", seed=0, max_tokens=2, n=2)  # A's prompt in both slots
        b = completion(url, "key-b", prompt, "model", seed=0, max_tokens=2)  # slot 0, emptied for B
        a = completion(url, "key-a", [*prompt, 1], "model", seed=0, max_tokens=2)  # slot 0 again: copied from 1
    assert b["timings"]["cache_n"] == (len(prompt) - 1 if share else 0)
    assert a["timings"]["cache_n"] == len(prompt)


def test_a_user_under_one_key_is_a_scope_of_its_own():
    policy = Policy()
    assert policy.scope(0, None) != policy.scope(0, "alice") != policy.scope(0, "bob")
    assert policy.scope(0, "alice") == policy.scope(0, "alice") != policy.scope(1, "alice")
    assert policy.scope(None, "alice") is None and Policy(share_learning=True).scope(1, "x") is None
    assert "alice" not in repr(policy.scope(0, "alice"))  # the scope keeps a digest, not the user's text


def test_learned_state_stays_bounded_with_many_keys():
    """Each scope's learning drafters are built once and kept; past max_scopes the least recently used scope is
    dropped (closed), and a non-learning kind is one instance for all."""
    built: list[str] = []

    def build(kind: str):
        built.append(kind)
        return pair().kinds.build(kind)

    kinds = KindDrafters(None, build, max_scopes=3)
    first = kinds.get("suffix", "s0")
    for scope in ("s1", "s2", "s0", "s3"):  # s0 touched again: s1 is the least recently used when s3 arrives
        kinds.get("suffix", scope)
    assert kinds.scopes == 3 and kinds.evicted == 1 and kinds.get("suffix", "s0") is first
    kinds.get("suffix", "s1")  # s1 was dropped: a fresh instance (and s2 goes)
    assert built.count("suffix") == 5 and kinds.evicted == 2
    lookup = kinds.get("ngram", "s0")
    assert kinds.get("ngram", "s1") is lookup and lookup.traits.learns is False


@pytest.mark.parametrize("body,param,words", [
    ({"speculative": {"rule": "cactus:10"}}, "speculative.rule", "more relaxed"),
    ({"speculative": {"rule": "cactus", "alpha": 2}}, "speculative.alpha", "more relaxed"),
    ({"speculative": {"rule": "ensemble", "alpha": 0.5}}, "speculative.alpha", "at least 0.8"),
    ({"speculative": {"rule": "mentored:0.3"}}, "speculative.rule", "not allowed"),
    ({"speculative": {"draft_kind": "suffix"}}, "speculative.draft_kind", "not allowed"),
    ({"verdicts": True}, "verdicts", "--verdicts off"),
])
def test_requests_outside_the_operators_policy_are_a_400_naming_field_and_policy(body, param, words):
    policy = Policy(parse_allow_rules("cactus:1,ensemble:0.8")[0], ("model", "ngram"), verdicts=False)
    with running(keys=KEYS, policy=policy) as (url, _):
        status, _, payload = raw(url, "POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 2, **body},
                                 headers={"Authorization": "Bearer key-a"})
        error = json.loads(payload)["error"]
        assert status == 400 and error["param"] == param and words in error["message"]
        for allowed in ({"rule": "cactus:1"}, {"rule": "ensemble:0.9"}, {"rule": "strict"}, {"draft_kind": "none"},
                        {"draft_kind": "ngram", "rule": "cactus", "alpha": 0.5}):
            status, _, _ = raw(url, "POST", "/v1/completions",
                               {"prompt": [1, 2], "max_tokens": 2, "speculative": allowed},
                               headers={"Authorization": "Bearer key-a"})
            assert status == 200, allowed


def test_a_second_knob_cannot_relax_past_the_policy():
    # --allow-rules threshold:0.9 let threshold:0.9:0.001 through (t_single bounded by nothing), and
    # --allow-rules threshold:0.9:0.5 stored its key as threshold[t_single=0.5], so threshold was then always refused
    limits, seconds = parse_allow_rules("threshold:0.9,topk-delta:0.2:5,fly")
    assert (limits, seconds) == ({"threshold": 0.9, "topk-delta": 0.2, "fly": None}, {"topk-delta": 5.0})
    policy = Policy(limits, second_knobs=seconds)
    assert policy.rules_text() == "threshold:0.9,topk-delta:0.2:5,fly"
    with running(keys=KEYS, policy=policy) as (url, _):
        def status_of(rule: str) -> tuple[int, dict]:
            status, _, payload = raw(url, "POST", "/v1/completions",
                                     {"prompt": [1, 2], "max_tokens": 2, "speculative": {"rule": rule}},
                                     headers={"Authorization": "Bearer key-a"})
            return status, json.loads(payload).get("error") or {}

        for rule in ("threshold:0.9:0.001", "threshold:0.95:0.5", "topk-delta:0.2:50", "topk-delta:0.1"):
            status, error = status_of(rule)
            assert status == 400 and error["param"] == "speculative.rule" and "is held at" in error["message"], rule
        for rule in ("threshold:0.9", "threshold:0.95:1", "topk-delta:0.1:5", "fly::2", "fly:0.1"):
            assert status_of(rule)[0] == 200, rule
    with pytest.raises(UserError, match="a second knob needs the first's limit"):
        parse_allow_rules("threshold::0.5")


def test_verdicts_off_removes_acceptance_counts_everywhere_and_models_says_the_policy():
    limits, seconds = parse_allow_rules("cactus:1,topk-delta:0.2:5,fly:0.5")
    policy = Policy(limits, verdicts=False, second_knobs=seconds)
    with running(keys=KEYS, policy=policy) as (url, _):
        api = client(url, "key-a")
        reply = api.completions.create(model="x", prompt=[1, 2, 3], max_tokens=8)
        stats, timings = reply.choices[0].model_extra["relaxtui"]["stats"], reply.model_extra["timings"]
        assert "num_accepted_tokens" not in stats and "acceptance_rate" not in stats and stats["rule"] == "strict"
        assert "draft_n" not in timings and "draft_n_accepted" not in timings and timings["predicted_n"] > 0
        _, _, metrics = raw(url, "GET", "/metrics", headers={"Authorization": "Bearer key-a"})
        assert b"accepted_tokens" not in metrics and b"requests_total" in metrics
        card = api.models.list().data[0].model_extra["meta"]["policy"]
        assert card["verdicts"] is False and card["learning"] == "per key (and user)"
        assert card["rules"]["cactus"] == {"most_relaxed": 1.0, "orientation": "bigger relaxes"}
        # a second knob is held where the rule is limited: at the operator's value, else the rule's default
        assert card["rules"]["topk-delta"]["second_knob"] == {"name": "k", "held_at": 5.0}
        assert card["rules"]["fly"]["second_knob"] == {"name": "W", "held_at": None}
        assert card["rules"]["strict"] == {} and card["draft_kinds"] is None


def test_the_user_field_is_bounded():
    with running(keys=KEYS) as (url, _):
        for user, ok in (("alice", True), ("x" * 257, False), (7, False), ("a\nb", False)):
            status, _, _ = raw(url, "POST", "/v1/completions", {"prompt": [1], "max_tokens": 1, "user": user},
                               headers={"Authorization": "Bearer key-a"})
            assert (status == 200) == ok, user


@pytest.mark.parametrize("argv,message", [
    (["--allow-rules", "cactus:x"], "--allow-rules 'cactus:x': the limit 'cactus:x': the knob after ':' must be a "
                                    "number"),
    (["--allow-rules", "bogus"], "--allow-rules 'bogus': unknown rule 'bogus'"),
    (["--allow-rules", "cactus:-1"], "--allow-rules 'cactus:-1': the limit -1 is out of range for 'cactus'"),
    (["--allow-rules", "strict:1"], "--allow-rules 'strict:1': the limit must not be given: rule 'strict' takes no"),
    (["--allow-rules", "cactus,,mentored"], "an empty entry"),
    (["--allow-draft-kinds", "model,eagle"], "--allow-draft-kinds: 'eagle' is not a kind this server can draft with"),
    (["--rule", "cactus", "--alpha", "5", "--allow-rules", "cactus:1"],
     "cactus delta = 5 is more relaxed than this server allows (at most 1: --allow-rules cactus:1) (the server's own "
     "default, --alpha)"),
    (["--rule", "mentored:0.3", "--allow-rules", "cactus:1"], "rule 'mentored' is not allowed on this server"),
    (["--draft-kind", "suffix", "--allow-draft-kinds", "ngram"], "draft kind 'suffix' is not allowed on this server"),
    (["--learning-scopes", "0"], "--learning-scopes must be in 1..4096"),
])
def test_a_server_whose_policy_or_defaults_contradict_does_not_start(capsys, argv, message):
    from tests.support.cli import fails_with

    fails_with(capsys, ["serve", "--fake", "--port", "0", *argv], message)
