"""llama.cpp's n-gram drafter kinds (docs/method.md#drafters): each kind's proposals on hand-made contexts, worked
by hand from llama.cpp's algorithm (common/ngram-map.cpp, ngram-mod.cpp, ngram-cache.cpp); bounded memory; state per
sequence; the shared corpora learning from finished outputs; and strict greedy output unchanged by any of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pytest

from relaxtui.decoding.batched import Job, generate_many
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import DRAFT_KINDS, KINDS, DrafterOptions, Openers, make_drafter
from relaxtui.decoding.drafting import Drafter, DraftRequest
from relaxtui.decoding.loop import generate
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.ngram_cache import DynamicCache
from relaxtui.decoding.ngram_index import GramIndex, gram_hash
from relaxtui.decoding.ngram_map import NgramSimpleDrafter
from relaxtui.engine.fake import FakeBackend, markov_logits
from relaxtui.errors import UserError
from relaxtui.rules import make
from tests.support.markov import GREEDY, VOCAB, random_table

NGRAM_KINDS = ("ngram-simple", "ngram-map", "ngram-map-k4v", "ngram-mod", "ngram-cache")
VERIFIER = FakeBackend(markov_logits(random_table(1)), VOCAB)


def build(kind: str, **options) -> Drafter:
    return make_drafter(DrafterOptions(kind=kind, **options), VERIFIER, Openers(model=lambda _: VERIFIER))


class Out(NamedTuple):
    """A token a round emitted, as a drafter reads it (``Drafter.accept``)."""

    token_id: int


def out(*tokens: int) -> list[Out]:
    return [Out(token) for token in tokens]


def ask(drafter: Drafter, context: Sequence[int], n: int = 8, seq: int = 0) -> list[int]:
    request = DraftRequest(seq, context, n, GREEDY, np.random.default_rng(0))
    return drafter.draft([request])[0].tokens


def test_the_factory_builds_every_ngram_kind_and_declares_no_distribution():
    assert set(NGRAM_KINDS) <= set(DRAFT_KINDS)
    for kind in NGRAM_KINDS:
        traits = build(kind).traits
        assert traits.kind == kind and not traits.has_distribution and not traits.holds_model
    for kind in NGRAM_KINDS[:4]:  # what it reads reaches it
        assert {"ngram_size_n", "ngram_size_m"} <= set(KINDS[kind].reads) <= set(vars(DrafterOptions()))
        drafter = build(kind, ngram_size_n=5, ngram_size_m=7, ngram_mod_n_min=3)
        assert (drafter.size_n, drafter.size_m) == (5, 7)
    assert build("ngram-cache", ngram_size_m=5, ngram_cache_entries=9).dynamic.capacity == 9
    assert build("ngram-cache", ngram_size_m=5).n_draft == 5
    assert build("ngram-map-k4v", ngram_min_hits=3).min_hits == 3
    assert (build("ngram-mod", ngram_mod_n_min=3).n_min, build("ngram-mod", ngram_mod_slots=64).table.size) == (3, 64)
    with pytest.raises(UserError, match="ngram_size_n must be in 1..1024"):  # the option table's check first
        build("ngram-simple", ngram_size_n=0)
    with pytest.raises(UserError, match="n-gram sizes >= 1"):  # the class's own, for code that builds it directly
        NgramSimpleDrafter(0, 4)
    with pytest.raises(UserError, match=r"ngram_mod_n_min must be in 0\.\.ngram_size_m \(got 5, ngram_size_m 4\)"):
        build("ngram-mod", ngram_size_m=4, ngram_mod_n_min=5)


def test_llama_cpp_defaults():
    """common.h: ngram_simple/map_k/map_k4v size_n 12, size_m 48, min_hits 1; ngram_mod n_match 24, n_max 64,
    n_min 48 over 4 Mi slots; ngram-cache 1..4-grams, n_draft 8."""
    simple, k4v, mod, cache = (build(k) for k in ("ngram-simple", "ngram-map-k4v", "ngram-mod", "ngram-cache"))
    assert (simple.size_n, simple.size_m) == (12, 48) and (k4v.size_n, k4v.size_m, k4v.min_hits) == (12, 48, 1)
    assert (mod.size_n, mod.size_m, mod.n_min, mod.table.size) == (24, 64, 48, 1 << 22)
    assert cache.n_draft == 8


# -- ngram (prompt lookup): incremental, the proposals of a scan ----------------------------------------------------
def scanned(context: Sequence[int], n: int, n_min: int, n_max: int, window: int) -> list[int]:
    """Prompt lookup by scanning the window, as it was written before it was indexed (the reference)."""
    tokens = list(context[-window:])
    for gram in range(min(n_max, len(tokens) - 1), n_min - 1, -1):
        for start in range(len(tokens) - gram - 1, -1, -1):
            if tokens[start:start + gram] == tokens[len(tokens) - gram:]:
                return tokens[start + gram:start + gram + n]
    return []


@pytest.mark.parametrize("window", [4096, 40])
def test_prompt_lookup_proposes_what_a_scan_of_the_window_finds(window):
    rng = np.random.default_rng(7)
    drafter = build("ngram", ngram_min=1, ngram_max=3) if window == 4096 else NgramDrafter(window=window)
    context = rng.integers(0, 5, size=30).tolist()
    found = 0
    for step in range(150):
        expected = scanned(context, 4, 1, 3, window)
        assert ask(drafter, context, n=4) == expected, step
        found += bool(expected)
        context.extend(rng.integers(0, 5, size=int(rng.integers(1, 4))).tolist())
        if step == 100:
            context = context[:50] + [4, 4, 4]  # another request on the sequence: re-synced by common prefix
    assert found > 100


# -- ngram-simple ---------------------------------------------------------------------------------------------------
def test_simple_copies_what_followed_the_newest_earlier_key():
    simple = build("ngram-simple", ngram_size_n=2, ngram_size_m=3)
    context = [7, 1, 2, 3, 4, 1, 2, 5, 6, 1, 2]  # key (1, 2); earlier at 5 and 1: the newest, 5, is taken
    assert ask(simple, context) == [5, 6, 1]  # m = 3 tokens after it (the last token, 2, is never copied)
    assert ask(simple, context, n=2) == [5, 6]  # the round's N cuts it


def test_simple_keeps_llama_cpp_conditions():
    simple = build("ngram-simple", ngram_size_n=2, ngram_size_m=3)
    # the newest match has only 1 token to copy (< n): nothing, though an older match (at 1) has more
    assert ask(simple, [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 1, 2]) == []
    assert ask(simple, [1, 2, 3, 4, 5, 6, 7, 1, 2]) == []  # a match at position 0 does not count
    assert ask(simple, [0, 1, 1, 5, 6, 7, 8, 1, 1, 1]) == [5, 6, 7]  # the key shifted by one (at 7) is skipped
    assert ask(simple, [1, 2, 3, 1, 2]) == []  # the context must be longer than n + m + 2
    assert ask(simple, [3, 1, 2, 4, 5, 6, 7, 8]) == []  # no earlier key: nothing to draft


# -- ngram-map and ngram-map-k4v --------------------------------------------------------------------------------------
def test_map_drafts_from_the_occurrence_it_holds_and_remembers_what_was_kept():
    drafter = build("ngram-map", ngram_size_n=2, ngram_size_m=2)
    context = [9, 1, 2, 3, 4, 8, 1, 2, 5, 6, 7, 1, 2]  # key (1, 2) at 1 and 6; starts up to 13-2-2-2 = 7 eligible
    assert ask(drafter, context) == [5, 6]  # the first batch goes in newest first: 6 is held
    drafter.accept(0, 1, out(5, 0))  # the round emitted 5 then another token: one of the two confirmed
    context += [9, 0, 1, 2]  # (1, 2) at 11 is eligible now, but the map still holds 6
    assert ask(drafter, context) == [5]  # and the key drafts no more than the 1 token kept last time
    drafter.accept(0, 0, out(0))
    drafter.accept(0, 3, out(5, 6, 7, 8))  # a round that drafted nothing changes nothing
    assert ask(drafter, context + [3, 1, 2]) == []  # a key that got nothing drafts nothing again
    simple = build("ngram-simple", ngram_size_n=2, ngram_size_m=2)
    assert ask(simple, context) == [9, 0]  # where ngram-simple takes the newest (11)


def test_map_needs_its_match_m_plus_one_tokens_back():
    context = [0, 3, 4, 5, 6, 7, 8, 1, 2, 9, 1, 2]  # key (1, 2) earlier only at 7 > 12-2-2-2 = 6
    assert ask(build("ngram-map", ngram_size_n=2, ngram_size_m=2), context) == []
    assert ask(build("ngram-simple", ngram_size_n=2, ngram_size_m=2), context) == [9, 1]


K4V = [3, 1, 2, 5, 6, 1, 2, 5, 6, 1, 2, 7, 8, 4, 4, 4, 4, 1, 2]  # (1, 2) followed by (5, 6) twice, (7, 8) once


def test_k4v_drafts_the_dominant_m_gram_only():
    drafter = build("ngram-map-k4v", ngram_size_n=2, ngram_size_m=2)
    # held start: 9 (newest of 1, 5, 9 up to 19-6 = 13); counted up to it: (5, 6) x2, (7, 8) x1; 2 >= 2 x 1
    assert ask(drafter, K4V) == [5, 6]
    # the match counts again at each hit (llama.cpp): (7, 8) x2 now, and 2 < 2 x 2: no m-gram dominates
    assert ask(drafter, K4V) == []
    tie = K4V[:5] + [9, 9] + K4V[9:]  # (5, 6) once, (7, 8) once: neither dominates
    assert ask(build("ngram-map-k4v", ngram_size_n=2, ngram_size_m=2), tie) == []


def test_k4v_waits_for_min_hits():
    drafter = build("ngram-map-k4v", ngram_size_n=2, ngram_size_m=2, ngram_min_hits=2)
    assert ask(drafter, K4V) == []  # the key's first hit
    assert ask(drafter, K4V) == [5, 6]  # its second: counted now, (5, 6) x2 against (7, 8) x1


# -- ngram-mod ------------------------------------------------------------------------------------------------------
def mod(**options) -> Drafter:
    return build("ngram-mod", **{"ngram_size_n": 2, "ngram_size_m": 4, "ngram_mod_n_min": 2, **options})


def test_mod_chains_lookups_and_drops_a_chain_shorter_than_n_min():
    drafter = mod()
    # own n-grams: (1,2)->3 (2,3)->4 (3,4)->5 (4,5)->1 (5,1)->2; from (1, 2): 3, 4, 5, 1 (n_max = 4)
    assert ask(drafter, [1, 2, 3, 4, 5, 1, 2]) == [3, 4, 5, 1]
    assert ask(drafter, [1, 2, 3, 4, 5, 1, 2], n=2) == [3, 4]
    assert ask(drafter, [6, 7, 8, 9, 1, 2], seq=1) == []  # (1, 2) never followed by anything here
    for n_min, expected in ((2, []), (1, [3])):  # the table knows (1,2)->3, then nothing for (2, 3)
        drafter = mod(ngram_mod_n_min=n_min)
        drafter.begin(0, [7, 7])
        drafter.finished(0, [1, 2, 3])
        drafter.begin(1, [9, 9, 1, 2])
        assert ask(drafter, [9, 9, 1, 2], seq=1) == expected


def test_mod_table_is_lossy_and_bounded():
    drafter = mod(ngram_mod_slots=8, ngram_mod_n_min=1)
    drafter.begin(0, [])
    drafter.finished(0, [1, 2, 3])  # (1, 2) -> 3 in slot hash(1, 2) % 8
    slot = gram_hash([1, 2]) % 8
    other = next((a, b) for a in range(3, 99) for b in range(3, 99) if gram_hash([a, b]) % 8 == slot)
    assert ask(drafter, [0, *other])[:1] == [3]  # an n-gram never seen, in the same slot: the lookup trusts it
    drafter = mod(ngram_mod_slots=64)
    drafter.begin(0, [7, 7])
    drafter.finished(0, [1, 2, 3])  # (7,7)->1 (7,1)->2 (1,2)->3: 3 of 64 slots
    assert drafter.table.used == len({gram_hash(g) % 64 for g in ([7, 7], [7, 1], [1, 2])})
    drafter.finished(0, list(range(10, 30)))  # 20 more n-grams: over 16 slots used, so cleared
    assert drafter.table.used == 0 and drafter.table.entries.nbytes == 64 * 4


def test_mod_clears_its_table_after_five_rounds_of_low_acceptance():
    drafter = mod()
    drafter.begin(0, [5, 6])
    drafter.finished(0, [1, 2, 3, 4, 5])
    for _ in range(5):
        assert ask(drafter, [0, 0, 1, 2], seq=1) == [3, 4, 5]
        drafter.accept(1, 0, out(9))
    assert drafter.table.used == 0 and ask(drafter, [0, 0, 1, 2], seq=1) == []
    drafter.finished(0, [1, 2, 3, 4, 5])
    for _ in range(4):
        assert ask(drafter, [0, 0, 1, 2], seq=1) == [3, 4, 5]
        drafter.accept(1, 0, out(9))
        drafter.accept(1, 0, out(9))  # a round that drafted nothing (N = 0) does not count
    assert drafter.table.used > 0


# -- ngram-cache ----------------------------------------------------------------------------------------------------
def test_cache_drafts_while_the_context_counts_are_confident():
    drafter = build("ngram-cache")
    # the 4..2-grams ending at the last token are unseen, so the 1-gram (1) decides (lax: >= 2 seen, >= 66%)
    assert ask(drafter, [1, 7, 3, 1]) == []  # 7 once: too few
    assert ask(drafter, [1, 7, 1, 8, 3, 1], seq=2) == []  # 7 and 8: 50% < 66%
    assert ask(drafter, [1, 7, 1, 7, 1, 8, 3, 1], n=1, seq=3) == [7]  # 7, 7, 8: 2/3 >= 66%
    # (1, 7) followed by 6 and 5: 2 seen, 50%, ties to the first met; then the context's own 3- and 4-grams
    assert ask(drafter, [2, 1, 7, 6, 1, 7, 5, 1, 8, 4, 1], n=4, seq=4) == [7, 6, 1, 7]
    assert ask(drafter, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], seq=1) == [4, 1, 2, 3, 4, 1, 2, 3]  # n_draft = 8
    assert ask(drafter, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], n=3, seq=1) == [4, 1, 2]


def test_the_shared_corpora_learn_from_finished_outputs():
    output = [1, 2, 3, 4, 5, 6]
    for kind, repeats in (("ngram-mod", 1), ("ngram-cache", 2)):  # the dynamic cache is strict: 2 sightings
        drafter = build(kind, ngram_size_n=3, ngram_size_m=4, ngram_mod_n_min=1)
        prompt = [0, 7, 1, 2, 3]  # another request: its context has never seen the output go on
        assert ask(drafter, prompt) == []
        for i in range(repeats):
            assert ask(drafter, prompt) == [], (kind, i)
            drafter.begin(0, [9, 9])
            drafter.finished(0, output)
        drafter.begin(1, prompt)
        assert ask(drafter, prompt, seq=1) == [4, 5, 6], kind


def test_dynamic_cache_evicts_the_least_recently_used_n_gram():
    cache = DynamicCache(capacity=5)
    cache.add([1, 2, 3], 1)  # (1)->2, (2)->3, (1,2)->3: 3 pairs
    cache.add([4, 5, 6], 1)  # (4)->5, (5)->6, (4,5)->6: 6 > 5, (1) goes
    assert cache.pairs == 5 and (1,) not in cache.counts and (2,) in cache.counts
    cache.touch((2,))  # drafted from: most recent now
    cache.add([7, 8], 1)  # (7)->8: 6 > 5, the least recent is (1, 2)
    assert cache.pairs == 5 and list(cache.counts) == [(4,), (5,), (4, 5), (2,), (7,)]
    drafter = build("ngram-cache", ngram_cache_entries=50)
    for start in range(0, 400, 20):
        drafter.begin(0, [0])
        drafter.finished(0, list(range(start, start + 20)))
        assert drafter.dynamic.pairs <= 50


# -- every kind: state per sequence, re-sync, strict greedy ---------------------------------------------------------
SMALL = {"ngram_size_n": 2, "ngram_size_m": 3, "ngram_mod_n_min": 1}
REPEATS = [5, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]


@pytest.mark.parametrize("kind", NGRAM_KINDS)
def test_a_sequence_never_drafts_from_another_sequences_context(kind):
    drafter = build(kind, **SMALL)
    alone = ask(build(kind, **SMALL), REPEATS)
    assert alone  # something to leak
    drafter.begin(0, REPEATS)
    assert ask(drafter, REPEATS) == alone
    fresh = [9, 8, 7, 6, 9, 8, 7, 6, 0, 1, 2, 3]  # would draft from sequence 0's history, were it shared
    drafter.begin(1, fresh)
    assert ask(drafter, fresh, seq=1) == ask(build(kind, **SMALL), fresh) == []
    assert ask(drafter, REPEATS) == alone  # and sequence 1 changed nothing for sequence 0
    drafter.release(0)
    assert 0 not in drafter.seqs and 1 in drafter.seqs  # released: its memory with it


OTHER = REPEATS[:10] + [4, 1, 2, 3, 4, 4, 1, 2]  # shares 10 tokens with REPEATS


@pytest.mark.parametrize("kind", ["ngram-simple", "ngram-mod", "ngram-cache"])
def test_a_new_context_on_a_sequence_resyncs_by_common_prefix(kind):
    drafter = build(kind, **SMALL)
    drafter.begin(0, REPEATS)
    ask(drafter, REPEATS)
    drafter.begin(0, OTHER)  # a new request: cut back to the 10 shared tokens, then extend
    assert ask(drafter, OTHER) == ask(build(kind, **SMALL), OTHER) == [3, 4, 4]


@pytest.mark.parametrize("kind", ["ngram-map", "ngram-map-k4v"])
def test_a_resynced_map_holds_nothing_past_the_common_prefix(kind):
    """The map keeps what it held in the shared prefix (llama.cpp keeps its map across requests); a start that
    reads a removed token falls back to the key's newest start in the prefix, statistics that did are dropped."""
    drafter = build(kind, **SMALL)
    ask(drafter, REPEATS)  # every start up to 14-2-3-2 = 7 offered newest first: (2, 3) held at 7, (1, 2) at 6
    changed = REPEATS[:8] + [8] * 7 + [2, 3]  # shares 8 tokens: (2, 3) at 7 reads a removed one
    assert ask(drafter, changed) == ask(build(kind, **SMALL), changed) == [4, 0, 1]  # from (2, 3) at 2
    state = drafter.seqs[0]
    assert state.held[gram_hash([2, 3])] == 2 and state.held[gram_hash([1, 2])] == 6
    assert all(state.tokens[j:j + 2] == changed[j:j + 2] and state.hashes[j] == h for h, j in state.held.items())
    assert all(stats.start + 2 <= 8 or stats.start == 2 for stats in state.stats.values())


def test_the_index_after_a_resync_equals_one_built_fresh():
    index, fresh = GramIndex(3), GramIndex(3)
    index.sync(REPEATS * 5)
    index.sync(REPEATS * 2 + [9, 9, 9] + REPEATS)
    fresh.sync(REPEATS * 2 + [9, 9, 9] + REPEATS)
    assert (index.hashes, index.prev, index.newest) == (fresh.hashes, fresh.prev, fresh.newest)
    assert list(index.earlier(len(index.hashes) - 1)) == list(fresh.earlier(len(fresh.hashes) - 1)) != []


@pytest.mark.parametrize("kind", NGRAM_KINDS)
def test_strict_greedy_with_any_ngram_kind_gives_the_verifier_alone_tokens(kind):
    table = random_table(3)
    prompt = [0, 1, 2, 3, 4, 5] * 4 + [0, 1, 2]
    verifier_alone = GenerationConfig(draft_max=0, max_tokens=40, sampling=GREEDY)
    *_, expected = generate(FakeBackend(markov_logits(table), VOCAB), prompt, verifier_alone)
    config = GenerationConfig(draft_max=4, max_tokens=40, sampling=GREEDY)
    verifier = FakeBackend(markov_logits(table), VOCAB)
    *_, alone = generate(verifier, prompt, config, drafter=build(kind, **SMALL), rule=make("strict"))
    many_verifier = FakeBackend(markov_logits(table), VOCAB, n_seq=2)
    jobs = [Job(prompt, config, make("strict"), tag=i) for i in range(2)]
    many = [f for _, f in generate_many(many_verifier, jobs, drafter=build(kind, n_seq=2, **SMALL))]
    assert alone.metrics.drafted > 0 and alone.metrics.accepted < alone.metrics.drafted  # rejections happened
    assert alone.token_ids == expected.token_ids
    assert [f.token_ids for f in many] == [expected.token_ids] * 2


def test_ngram_cache_counts_each_calls_new_tokens_apart_as_speculative_cpp_does():
    """speculative.cpp's ngram-cache counts, at each draft call, the n-grams that lie wholly in the tokens new since
    the last call. The chunks here follow from the calls alone: a growing context adds a chunk; a re-synced one (a
    shared prefix, then its own tokens) drops the chunks past the prefix and its new tokens join the last chunk kept,
    as a fresh drafter would count them. The counts must be exactly those chunks' n-grams, every 1..4-gram before
    each next token inside one chunk."""
    from collections import Counter

    from relaxtui.decoding.ngram_cache import ContextCache

    def chunk_grams(tokens, start, end):  # written out again from the definition above, not the drafter's helper
        return [(tuple(tokens[i - n:i]), tokens[i]) for i in range(start, end) for n in range(1, 5) if i - n >= start]

    rng = np.random.default_rng(5)
    for _ in range(200):
        cache, context, bounds = ContextCache(), [], []
        for _ in range(int(rng.integers(1, 8))):
            previous = context
            if context and rng.random() < 0.3:
                context = context[:int(rng.integers(0, len(context)))]
            context = context + [int(t) for t in rng.integers(0, 4, int(rng.integers(1, 6)))]
            keep = next((i for i, (a, b) in enumerate(zip(previous, context, strict=False)) if a != b),
                        min(len(previous), len(context)))
            if keep < len(previous):
                bounds = [b for b in bounds if b < keep] or [0]
            elif len(context) > len(previous):
                bounds.append(len(previous))
            cache.sync(list(context))
            ends = [*bounds[1:], len(context)]
            want = Counter(pair for start, end in zip(bounds, ends, strict=True)
                           for pair in chunk_grams(context, start, end))
            got = Counter({(gram, token): n for gram, part in cache.counts.items() for token, n in part.items()})
            assert cache.tokens == context and cache.chunks == bounds and got == want
    grown = ContextCache()
    grown.sync([1, 2, 3])
    grown.sync([1, 2, 3, 1, 2])  # the n-grams spanning the two calls ((3, 1), (2, 3, 1), ...) are never counted
    assert (3,) not in grown.counts and (2, 3) not in grown.counts and grown.counts[(1,)] == {2: 2}
