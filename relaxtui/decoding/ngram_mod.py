"""llama.cpp's ``ngram-mod`` (common/ngram-mod.cpp, PR 19164): a hash table from n-gram to the token that
followed it, kept across requests and shared by every sequence, drafting by chaining lookups."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relaxtui import checks
from relaxtui.decoding.drafting import DrafterTraits, EmittedToken, confirmed
from relaxtui.decoding.ngram_index import LCG, NgramBase, SeqTokens, gram_hash, hash_windows, roll, sizes
from relaxtui.errors import UserError

EMPTY = -1
RESET_OCCUPANCY = 0.25  # a table fuller than this once a request is in is cleared (llama.cpp's f_thold)
LOW_ACCEPTANCE, LOW_STREAK = 0.25, 5  # this many rounds in a row keeping under this fraction clear it too


class ModTable:
    """``size`` slots of one token each (int32: 4 bytes a slot, allocated once). Slot ``hash(n-gram) % size`` holds
    the token that last followed an n-gram hashing there: a newer n-gram overwrites an older one that collides, and
    a lookup does not check the key (a collision drafts a wrong token, which the verifier rejects)."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size
        self.entries = np.full(size, EMPTY, dtype=np.int32)
        self.used = 0
        self.top = pow(LCG, n - 1, 1 << 64)

    def add(self, tokens: Sequence[int], start: int, end: int) -> None:
        """Record the token after each n-gram starting at ``start..end-1`` (in order: the newest wins a slot)."""
        hashes = hash_windows(tokens, start, end, self.n)
        nexts = tokens[start + self.n:end + self.n]
        entries, size = self.entries, self.size
        if len(hashes) < 64:
            for h, token in zip(hashes, nexts, strict=True):
                slot = h % size
                if entries[slot] == EMPTY:
                    self.used += 1
                entries[slot] = token
            return
        slots = np.array(hashes, dtype=np.uint64) % np.uint64(size)
        last, first = np.unique(slots[::-1], return_index=True)  # each slot's newest write
        values = np.asarray(nexts, dtype=np.int32)[::-1][first]
        self.used += int(np.count_nonzero(entries[last] == EMPTY))
        entries[last] = values

    def chain(self, key: Sequence[int], n_max: int, n_min: int, first: dict[int, int]) -> list[int]:
        """Follow ``first`` (exact, by hash), else the table, from ``key`` (n tokens) for up to ``n_max`` tokens;
        nothing when the chain stops before ``n_min``."""
        window = list(key)
        h = gram_hash(window)
        out: list[int] = []
        for i in range(n_max):
            token = first.get(h)
            if token is None:
                token = int(self.entries[h % self.size])
            if token == EMPTY:
                return out if i >= n_min else []
            out.append(token)
            window.append(token)
            h = roll(h, window[i], token, self.top)
        return out

    @property
    def occupancy(self) -> float:
        return self.used / self.size

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.used = 0


class ModState(SeqTokens):
    """A sequence's own n-grams (hash -> the token that last followed it in its context, exactly), looked up before
    the shared table; the last draft's length and the streak of low-acceptance rounds (llama.cpp's
    ``seq_info``). Bounded by the sequence's length."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.own: dict[int, int] = {}
        self.indexed = 0  # n-grams starting before this are in ``own``
        self.prompt_len = 0
        self.drafted: list[int] = []  # the last draft
        self.low = 0

    def extend(self, new: list[int]) -> None:
        super().extend(new)
        end = len(self.tokens) - self.n  # every n-gram whose next token the sequence holds
        if end > self.indexed:
            hashes = hash_windows(self.tokens, self.indexed, end, self.n)
            self.own.update(zip(hashes, self.tokens[self.indexed + self.n:end + self.n], strict=True))
            self.indexed = end

    def truncate(self, keep: int) -> None:
        """Rebuilt from the kept tokens (a dict that keeps the newest cannot take one back)."""
        kept = self.tokens[:keep]
        super().truncate(0)
        self.own.clear()
        self.indexed = 0
        self.extend(kept)


class NgramModDrafter(NgramBase[ModState]):
    """``ngram-mod``: the key is the context's last ``size_n`` tokens (llama.cpp's ``n_match``); the draft chains
    lookups, up to ``size_m`` tokens (``n_max``), and is dropped when the chain breaks before ``n_min`` tokens. A
    lookup reads the sequence's own n-grams first, then the shared table. Keeps: per sequence, its own n-grams
    (bounded by its length, to ``release``); per drafter, one table of ``slots`` tokens fed with each request's
    prompt and output when it finishes. Eviction: the table's memory is fixed (``slots`` × 4 bytes); a colliding
    n-gram overwrites the slot; the whole table is cleared when more than a quarter of it is used after adding a
    request, and when a sequence keeps under a quarter of its drafts 5 rounds in a row. Unlike llama.cpp, whose one
    table also takes each running context as it grows (in chunks of 32 tokens), a sequence's drafts never depend on
    the sequences running beside it, only on its own context and on requests that finished; and acceptance is
    measured against the draft as proposed (cut to the round's N), not the chain before the cut."""

    traits = DrafterTraits("ngram-mod", has_distribution=False, learns=True)
    DEFAULTS, DEFAULT_MIN = (24, 64), 48  # llama.cpp's n_match, n_max; n_min
    DEFAULT_SLOTS = 1 << 22  # llama.cpp's 4 Mi entries (16 MiB)
    MAX_SLOTS = 1 << 24  # 64 MiB, four times llama.cpp's fixed table (a server may hold one per tenant)

    def __init__(self, size_n: int | None = None, size_m: int | None = None, *, n_min: int | None = None,
                 slots: int | None = None) -> None:
        super().__init__()
        self.size_n, self.size_m, self.n_min, slots = self.settings(size_n, size_m, n_min=n_min, slots=slots)
        self.table = ModTable(self.size_n, slots)

    @classmethod
    def settings(cls, size_n: int | None = None, size_m: int | None = None, *, n_min: int | None = None,
                 slots: int | None = None) -> tuple[int, int, int, int]:
        """(n_match, n_max, n_min, slots), each defaulted when None and checked, before any table is allocated."""
        size_n, size_m = sizes(cls.traits.kind, size_n, size_m, cls.DEFAULTS)
        n_min = min(cls.DEFAULT_MIN, size_m) if n_min is None else n_min  # a shorter n_max lowers it
        slots = cls.DEFAULT_SLOTS if slots is None else slots
        if not 0 <= n_min <= size_m:
            raise checks.BadValue("ngram_mod_n_min", f"must be in 0..{{ngram_size_m}} (got {n_min}, {{ngram_size_m}} "
                                  f"{size_m})", ("ngram_size_m",))
        if not 1 <= slots <= cls.MAX_SLOTS:
            raise UserError(f"the ngram-mod drafter needs 1..{cls.MAX_SLOTS} slots (got {slots})")
        return size_n, size_m, n_min, slots

    def new_state(self) -> ModState:
        return ModState(self.size_n)

    def begin(self, seq: int, prompt: Sequence[int], **_: object) -> bool:
        state = self.state(seq)
        state.sync(prompt)
        state.prompt_len = len(prompt)
        return True

    def propose(self, state: ModState, n: int) -> list[int]:
        tokens = state.tokens
        state.drafted = []
        if len(tokens) - 1 < self.size_n:
            return []
        limit = min(self.size_m, max(self.n_min, n))  # past this the answer is the same
        draft = self.table.chain(tokens[len(tokens) - self.size_n:], limit, self.n_min, state.own)[:n]
        state.drafted = draft
        return draft

    def accept(self, seq: int, n_accepted: int, emitted: Sequence[EmittedToken]) -> None:
        """A round whose draft the output confirmed less than LOW_ACCEPTANCE of (verified or not: a price may have
        verified less) counts towards the table's reset."""
        state = self.seqs.get(seq)
        if state is None or not state.drafted:
            return
        drafted, state.drafted = state.drafted, []  # a round that did not draft is not counted
        if confirmed(drafted, emitted) / len(drafted) < LOW_ACCEPTANCE:
            state.low += 1
            if state.low >= LOW_STREAK:
                self.table.reset()
                state.low = 0
        else:
            state.low = 0

    def finished(self, seq: int, output: Sequence[int]) -> None:
        """The request's prompt and output go into the shared table (the next requests can draft them)."""
        state = self.seqs.get(seq)
        lead = state.tokens[:state.prompt_len] if state is not None else []
        tokens = [*lead, *(int(t) for t in output)]
        self.table.add(tokens, 0, len(tokens) - self.size_n)
        if self.table.occupancy > RESET_OCCUPANCY:
            self.table.reset()
