"""Suffix drafting (SuffixDecoding, Oliaro et al., arXiv 2411.04975): draft what most often followed the context's
longest matching suffix, in this sequence's own context or in a shared corpus of earlier outputs.

Two indexes, as SuffixDecoding keeps two suffix trees (``relaxtui.decoding.suffix_index``: suffix automata with
occurrence counts):

- **per sequence**, the context itself (prompt and what has been generated so far), extended with the tokens since
  the last call; a context that no longer extends what the index holds (another request on that sequence) is
  re-synced by common prefix: extended when it still starts with it, rebuilt otherwise;
- **shared by every sequence**, the earlier outputs this drafter instance saw end (``finished``: a server's earlier
  requests, a chat's earlier turns), at most ``corpus_tokens`` tokens and ``corpus_outputs`` outputs, oldest out
  first, a quarter at a time (``Corpus``). An output joins it when it ends, so sequences still running draft from
  it too (SuffixDecoding feeds its global tree even sooner, token by token).

Each draft call matches the context's longest suffix (at most ``depth`` tokens) in each index, walks the most
frequent continuation from it while the estimated probability (the product of each step's share of the
occurrences) stays at least ``min_prob``, for at most ``factor × match length`` tokens (SuffixDecoding's
``max_spec_factor``) and the request's ``n_max``, and keeps the path with the highest score (the sum of its tokens'
probabilities; the context's own on a tie; each corpus segment counts its own occurrences). Nothing matched: an
empty draft, and the round is a plain verifier step. Like prompt lookup, the draft carries no distribution (the
loop makes q one-hot).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from relaxtui.checks import MAX_SUFFIX_DEPTH
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest
from relaxtui.decoding.prefill import ReusePolicy, common_prefix
from relaxtui.decoding.suffix_index import ROOT, SEPARATOR, SuffixAutomaton
from relaxtui.errors import UserError


@dataclass(frozen=True)
class SuffixSettings:
    """What shapes a suffix drafter (defaults: Arctic Inference's tree depth 64; vLLM's spec factor 1.0 and minimum
    token probability 0.1; a corpus of at most 65,536 tokens in 256 outputs)."""

    depth: int = 64  # the longest context suffix matched, in tokens
    factor: float = 1.0  # a match of L tokens drafts at most floor(factor × L) tokens
    min_prob: float = 0.1  # stop where the draft's estimated probability falls below this
    corpus_tokens: int = 65_536  # the shared corpus of earlier outputs holds at most this many tokens (0: no corpus)
    corpus_outputs: int = 256  # ... and at most this many outputs

    MAX_CORPUS_TOKENS: ClassVar[int] = 1 << 22  # 64 times the default (about 40 bytes a token)
    MAX_CORPUS_OUTPUTS: ClassVar[int] = 1 << 16

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= MAX_SUFFIX_DEPTH:
            raise UserError(f"the suffix drafter's match depth must be in 1..{MAX_SUFFIX_DEPTH} (got {self.depth})")
        if not 0.0 < self.factor <= 64.0:
            raise UserError(f"the suffix drafter's spec factor must be in (0, 64] (got {self.factor})")
        if not 0.0 <= self.min_prob <= 1.0:
            raise UserError(f"the suffix drafter's minimum probability must be in [0, 1] (got {self.min_prob})")
        if not (0 <= self.corpus_tokens <= self.MAX_CORPUS_TOKENS
                and 0 <= self.corpus_outputs <= self.MAX_CORPUS_OUTPUTS):
            raise UserError(f"the suffix drafter's corpus bounds must be in 0..{self.MAX_CORPUS_TOKENS} tokens and "
                            f"0..{self.MAX_CORPUS_OUTPUTS} outputs (got {self.corpus_tokens}, {self.corpus_outputs})")

    @property
    def index_depth(self) -> int:
        """How long a pattern the indexes count exactly: the longest match and the longest draft after it."""
        return self.depth + math.ceil(self.factor * self.depth)

    def budget(self, matched: int, n_max: int) -> int:
        """SuffixDecoding's adaptive length: at most factor × match length tokens, and the request's n_max."""
        return max(0, min(n_max, int(self.factor * matched + 1e-6)))


SEGMENTS = 4  # the corpus is kept in segments of about 1/SEGMENTS of its bounds: eviction drops the oldest whole


@dataclass(eq=False)
class Segment:
    """A run of consecutive outputs in one index (each followed by ``SEPARATOR``)."""

    index: SuffixAutomaton
    serial: int  # never reused: a sequence's match in it is keyed by this
    outputs: int = 0
    tokens: int = 0


class Corpus:
    """The earlier outputs every sequence drafts from, bounded: at most ``corpus_tokens`` tokens and
    ``corpus_outputs`` outputs (the last ``corpus_tokens`` of an output longer than that). New outputs extend the
    youngest segment until it holds a quarter of either bound; past a bound, the oldest segment (the oldest quarter
    of the corpus) is dropped whole. SuffixDecoding evicts cached requests oldest first one at a time; an automaton
    cannot forget one text, and rebuilding it would stall the loop, so relaxtui evicts a quarter at a time."""

    def __init__(self, settings: SuffixSettings) -> None:
        self.settings = settings
        self.segments: deque[Segment] = deque()
        self._serials = 0

    @property
    def tokens(self) -> int:
        return sum(segment.tokens for segment in self.segments)

    @property
    def outputs(self) -> int:
        return sum(segment.outputs for segment in self.segments)

    def add(self, output: Sequence[int]) -> None:
        most, count = self.settings.corpus_tokens, self.settings.corpus_outputs
        if not output or most == 0 or count == 0:
            return
        kept = output[-most:]
        young = self.segments[-1] if self.segments else None
        if young is None or young.outputs >= max(1, count // SEGMENTS) or \
                young.tokens + len(kept) > max(1, most // SEGMENTS):
            self._serials += 1
            young = Segment(SuffixAutomaton(self.settings.index_depth), self._serials)
            self.segments.append(young)
        young.index.extend(kept)
        young.index.append(SEPARATOR)
        young.outputs += 1
        young.tokens += len(kept)
        while len(self.segments) > 1 and (self.tokens > most or self.outputs > count):
            self.segments.popleft()


@dataclass(eq=False)
class _Sequence:
    """One sequence's index of its own context, and where its context's suffix stands in each corpus segment."""

    index: SuffixAutomaton
    tokens: list[int]  # what ``index`` holds
    context: Sequence[int] | None = None  # the caller's context at the last call (it only grows)
    # segment serial -> (its size then, context tokens matched, state, match length)
    matches: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)


class SuffixDrafter(BaseDrafter):
    """SuffixDecoding behind the one drafter interface: per-sequence indexes keyed by ``seq``, one shared corpus."""

    traits = DrafterTraits("suffix", has_distribution=False, learns=True)

    def __init__(self, settings: SuffixSettings | None = None) -> None:
        self.settings = settings or SuffixSettings()
        self.corpus = Corpus(self.settings)
        self._seqs: dict[int, _Sequence] = {}

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Index the prompt now (prefill time), not in the first round."""
        self._sync(seq, prompt)
        return True

    def _sync(self, seq: int, context: Sequence[int]) -> _Sequence:
        """Make ``seq``'s index hold ``context``: append what is new; rebuild when the context left what it holds."""
        state = self._seqs.get(seq)
        if state is None:
            state = self._seqs[seq] = _Sequence(SuffixAutomaton(self.settings.index_depth), [])
        held = len(state.tokens)
        same = context is state.context and len(context) >= held  # the caller's list, grown: its start is kept
        if not same and common_prefix(state.tokens, context) < held:
            state = self._seqs[seq] = _Sequence(SuffixAutomaton(self.settings.index_depth), [])
            held = 0
        if len(context) > held:
            new = context[held:]
            state.index.extend(new)
            state.tokens.extend(new)
        if not same:
            state.matches.clear()  # another context: find its matches in the corpus again
        state.context = context
        return state

    def _match_in(self, state: _Sequence, segment: Segment, context: Sequence[int]) -> tuple[int, int]:
        """The context's longest suffix (at most ``depth`` tokens) in a corpus segment: carried forward over the
        tokens since the last call, found again over the last ``depth`` tokens when the segment grew."""
        depth, index = self.settings.depth, segment.index
        size, at, node, matched = state.matches.get(segment.serial, (-1, 0, ROOT, 0))
        if size != index.size or len(context) - at > depth:
            node, matched = index.match(context[-depth:], depth)
        else:
            for token in context[at:]:
                node, matched = index.follow(node, matched, token, depth)
        state.matches[segment.serial] = (index.size, len(context), node, matched)
        return node, matched

    def propose(self, seq: int, context: Sequence[int], n_max: int) -> tuple[list[int], dict[str, object]]:
        """The draft for ``seq`` after ``context`` and what it came from (source, match length): the best-scoring
        path from the context's own index and each corpus segment (the context's own on a tie)."""
        settings, state = self.settings, self._sync(seq, context)
        candidates = [("context", state.index, *state.index.repeated_suffix(settings.depth))]
        candidates += [("corpus", segment.index, *self._match_in(state, segment, context))
                       for segment in self.corpus.segments]
        if len(state.matches) > len(self.corpus.segments):  # forget the segments evicted since
            live = {segment.serial for segment in self.corpus.segments}
            state.matches = {serial: match for serial, match in state.matches.items() if serial in live}
        best: tuple[list[int], float] = ([], 0.0)
        found: dict[str, object] = {}
        for source, index, node, matched in candidates:
            if matched:
                tokens, score = index.path(node, settings.budget(matched, n_max), settings.min_prob)
                if score > best[1]:
                    best, found = (tokens, score), {"suffix_source": source, "suffix_match": matched}
        return best[0], found

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return self.timed_drafts(requests, lambda request: self.propose(request.seq, request.context, request.n_max))

    def finished(self, seq: int, output: Sequence[int]) -> None:
        """Keep the output in the shared corpus (the sequence's own index keeps its context for a next turn)."""
        self.corpus.add(output)

    def release(self, seq: int) -> None:
        self._seqs.pop(seq, None)
