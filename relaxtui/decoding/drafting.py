"""What a drafter is to the loops: one interface for every kind, keyed by sequence (llama.cpp's common_speculative).

Lifecycle per sequence ``seq``: ``begin(seq, prompt)`` → each round ``draft([requests])`` (every sequence that
drafts this round, in one call, so a model drafter batches them) → ``accept(seq, n_accepted, emitted)`` after the
verify batch, before the verifier decodes anything else → ``release(seq)`` to forget it → ``close()`` once. A relaxed
bonus asks for q at N+1 with ``extend(seq)``, which says what it cost. The drafter keeps its own cost accounting
(``decode_seconds``, and ``step``, one raw model step for calibration to time).

What the loops need to know about a drafter it *declares* in ``traits`` — whether its drafts carry a
distribution, whether and at what cost it can extend a draft for the bonus, whether it needs the verifier's
hidden states — so no caller ever asks which class it is (tests/decoding/test_drafter_interface.py checks that).
Kinds and their options are built in one place, ``relaxtui.decoding.drafters.make_drafter`` (a drafter whose drafts
are cut by price is one more drafter around it: ``relaxtui.decoding.priced``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from relaxtui.checks import BadValue
from relaxtui.decoding.prefill import ReusePolicy
from relaxtui.decoding.sampling import Candidates, SamplingParams, scatter
from relaxtui.engine.api import Rows, as_rows


@dataclass(frozen=True, slots=True)
class DrafterTraits:
    """What a drafter declares, as data: the loops, calibration, loaders and run records read this and nothing
    else about it."""

    kind: str  # "model", "ngram", "mtp": shown in displays and run manifests
    has_distribution: bool  # drafts carry q and raw logits; False: q is one-hot on each token (the loop builds it)
    bonus_steps: int | None = None  # q at N+1 for a relaxed bonus costs this many drafter steps; None = cannot
    needs_hidden_states: bool = False  # drafts from the verifier's hidden rows (an MTP head): the verifier must keep
    # them (loaded so, see drafters.DrafterKind); the drafter reads each verify batch's rows from the verifier it was
    # built with, in accept()
    holds_model: bool = False  # drafting decodes a model: calibration times it, close() frees it
    model_path: Path | None = None  # the model file it runs (run identity); None when it runs none
    n_seq: int | None = None  # sequences it can hold at once; None = any
    n_ctx: int | None = None  # tokens per sequence; None = unbounded
    learns: bool = False  # keeps what one sequence saw for the others (earlier outputs, prompts: ``finished``), so
    # whoever shares an instance shares what it learned: a server gives each tenant (API key) an instance of its own
    cut: str | None = None  # "priced": its drafts are cut by this machine's verify prices (decoding/priced.py), what
    # a run's settings name; None: every draft is verified whole

    @property
    def can_extend(self) -> bool:
        return self.bonus_steps is not None

    @property
    def label(self) -> str:
        """Its model file's name, else its kind: what a run or a profile names the drafter by."""
        return self.model_path.name if self.model_path is not None else self.kind


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """One sequence's part of a draft call (llama.cpp's per-sequence request): up to ``n_max`` tokens after
    ``context`` (the whole sequence so far, its last token not yet verified), drawn from ``rng``. The context is
    read, not copied, and may only grow after the call (``extend`` continues from its first tokens); ``rng`` is this
    sequence's own (a sampled draft may take its uniforms before its first decode)."""

    seq: int
    context: Sequence[int]
    n_max: int
    sampling: SamplingParams
    rng: np.random.Generator
    whole_rows: bool = False  # the rule reads the drafter's raw logits (or the run asked for whole rows): no
    # candidate rows from the engine for this request
    alternatives: int = 0  # the consumer shows this many alternatives of q per token (greedy: q at T=1 too)


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    probs: np.ndarray | None  # [n, target vocab] processed q_i, where a drafter built them; None: q is in ``q``
    # (whole rows of it are built only where the dense path needs them, ``dense_probs``)
    logits: Rows | None  # per position the drafter's raw row over the target vocabulary, as the engine handed it
    # (whole, or its candidates); None without a distribution
    seconds: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)
    q: tuple[Candidates, ...] = ()  # per position, processed q on its support: what the support path reads (spares
    # it a pass over each row; ``probs`` is then None: no drafter builds whole rows of q up front); empty: not known,
    # found from ``probs``
    extra_steps: int = 0  # model steps the drafter decoded for it past its tokens (a proposal cut by price): the round
    # counts them as extra draft steps

    def dense_probs(self, vocab: int) -> np.ndarray:
        """[n, vocab] processed q: ``probs``, or built from ``q`` (the dense path of a draft that handed only q on its
        support)."""
        if self.probs is not None:
            return self.probs
        return scatter(self.q, vocab) if self.q else np.empty((0, vocab))

    def first(self, n: int, extra_steps: int = 0) -> Draft:
        """Its first ``n`` tokens, with their distributions and rows (priced drafting verifies only those);
        ``extra_steps``: the model steps decoded past them."""
        return Draft(self.tokens[:n], None if self.probs is None else self.probs[:n],
                     None if self.logits is None else self.logits[:n], self.seconds, self.extra, self.q[:n],
                     extra_steps)

    def row(self, position: int, vocab: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(q, raw logits or None) at ``position`` (0-based): what ``Drafter.extend`` would hand for a draft cut
        to ``position`` tokens, read from this longer one."""
        q = self.probs[position] if self.probs is not None else scatter(self.q[position:position + 1], vocab)[0]
        raw = as_rows(self.logits)[position].vocab_logits() if self.logits is not None else None
        return q, raw


class Extension(NamedTuple):
    """q at N+1 for a relaxed bonus (``Drafter.extend``): processed q, the raw logits (None where the drafter's rows
    were candidates), and the drafter steps it cost (counted as extra draft steps; 0: already decoded)."""

    q: np.ndarray
    raw: np.ndarray | None
    steps: int


class EmittedToken(Protocol):
    """What a drafter reads of a token the round emitted (``decoding.acceptance.Emitted``)."""

    @property
    def token_id(self) -> int: ...


def confirmed(proposal: Sequence[int], emitted: Sequence[EmittedToken]) -> int:
    """How many of a proposal's tokens the round confirmed: those up to the first that differs from what it emitted
    (verified or not: a token a price cut left out is judged by the token the round emitted in its place)."""
    right = 0
    for token, out in zip(proposal, emitted, strict=False):
        if token != out.token_id:
            break
        right += 1
    return right


class Drafter(Protocol):
    """The contract the loops rely on. Every method takes the sequence it concerns; a drafter holding one
    sequence is called with ``seq = 0``."""

    traits: DrafterTraits

    @property
    def decode_seconds(self) -> float: ...  # inside its model's llama_decode, all sequences (0 without a model)
    @property
    def copied_bytes(self) -> int: ...  # rows its model copied out of llama.cpp, all sequences

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = ...) -> bool: ...  # False: stopped during its prefill
    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]: ...  # one Draft per request, in order
    # the last verify batch kept n_accepted of the drafts verified, and the round emitted ``emitted`` (those kept, then
    # the resampled or bonus token): a drafter that learns from its whole proposal compares it with them (``confirmed``)
    def accept(self, seq: int, n_accepted: int, emitted: Sequence[EmittedToken]) -> None: ...
    def extend(self, seq: int, sampling: SamplingParams) -> Extension: ...  # q at N+1, and what it cost
    def step(self, seq: int, context: Sequence[int]) -> None: ...  # one raw model step after context (timed: c_rel)
    def finished(self, seq: int, output: Sequence[int]) -> None: ...  # a generation on seq ended with this output
    def release(self, seq: int) -> None: ...  # forget a sequence (its cache emptied)
    def close(self) -> None: ...


class BaseDrafter:
    """Defaults for a drafter with nothing to accept, release, time or free; kinds override what they use."""

    traits: DrafterTraits

    @property
    def decode_seconds(self) -> float:
        return 0.0

    @property
    def copied_bytes(self) -> int:
        return 0

    def accept(self, seq: int, n_accepted: int, emitted: Sequence[EmittedToken]) -> None:
        """Told after each verify batch (before the verifier decodes again): ``n_accepted`` of the verified drafts
        were kept (the verifier's cache holds `last` and them), and the round emitted ``emitted``. Nothing to do by
        default."""

    def extend(self, seq: int, sampling: SamplingParams) -> Extension:
        raise BadValue("bonus", f"must be target or auto with the {self.traits.kind} drafter: it has no distribution "
                                "past its draft")

    def step(self, seq: int, context: Sequence[int]) -> None:
        """Nothing to time without a model."""

    @staticmethod
    def timed_drafts(requests: Sequence[DraftRequest],
                     propose: Callable[[DraftRequest], list[int] | tuple[list[int], dict[str, object]]]) -> list[Draft]:
        """The drafts of a drafter without a model (tokens only, no distribution), each timed as it is proposed:
        ``propose`` gives a request's tokens (and what it found, where it says: a suffix match); a request for no
        tokens is answered empty without asking."""
        drafts = []
        for request in requests:
            started = time.perf_counter()
            proposed = propose(request) if request.n_max > 0 else []
            tokens, extra = proposed if isinstance(proposed, tuple) else (proposed, {})
            drafts.append(Draft(tokens, None, None, time.perf_counter() - started, extra))
        return drafts

    def finished(self, seq: int, output: Sequence[int]) -> None:
        """A generation on ``seq`` ended with ``output`` (its tokens after the prompt): a drafter that learns from
        earlier outputs (across a chat's turns, a server's requests) keeps them. Nothing to do by default."""

    def release(self, seq: int) -> None:
        pass

    def close(self) -> None:
        pass
