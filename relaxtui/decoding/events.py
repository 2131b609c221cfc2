"""The immutable event stream every face consumes (chat TUI, eval runner, benchmarks).

Vocabulary (as in vLLM's rejection sampler): each verifier batch is a *round*. Of the N *drafted* tokens a
prefix is *accepted*; the first rejection emits a *resampled* token from the residual; when all N are
accepted a *bonus* token comes from the verifier's last row. Output per round = accepted + (resampled or
bonus). Without a drafter every token is *verifier*-only, through the same code path.

The acceptance step hands the loops ``Emitted`` tokens (what every consumer reads), the rows behind each in an
optional ``Shown`` (only for the faces that show alternatives); the loops turn them into ``TokenEvent``s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np


class Verdict(str, Enum):
    ACCEPTED = "accepted"
    RESAMPLED = "resampled"
    BONUS = "bonus"
    VERIFIER = "verifier"


@dataclass(frozen=True, slots=True)
class Shown:
    """The distributions behind one emitted token, kept only for the alternatives a face shows (the inspector's top
    p and top q, the server's top_logprobs): arrays, or plain numbers where an accepted draft's test read only p(x)
    and q(x) and built none. Attached to an ``Emitted`` only when asked for (``Acceptance.show``)."""

    p: np.ndarray | Sequence[float] | None
    q: np.ndarray | Sequence[float] | None = None
    ids: np.ndarray | Sequence[int] | None = None  # the token ids p and q are over (the support path); None: the
    # vocabulary
    q_ids: np.ndarray | Sequence[int] | None = None  # the ids q is over when they are not ``ids``

    def top_p(self, k: int) -> tuple[tuple[int, float], ...]:
        """The k likeliest ids of p with their probabilities, likeliest first."""
        return likeliest(self.p, k, self.ids)

    def top_q(self, k: int) -> tuple[tuple[int, float], ...]:
        return likeliest(self.q, k, self.q_ids if self.q_ids is not None else self.ids)


def likeliest(row: np.ndarray | Sequence[float] | None, k: int,
              ids: np.ndarray | Sequence[int] | None = None) -> tuple[tuple[int, float], ...]:
    """The k likeliest ids of a distribution (over ``ids`` on the support path, else the vocabulary). Processed
    rows (top-k/top-p) have a few dozen non-zeros: gather them first, which is ten times cheaper than partitioning
    the whole vocabulary (this runs per token)."""
    if row is None or k <= 0:
        return ()
    row = np.asarray(row)
    ids = np.asarray(ids) if ids is not None else None
    at = np.flatnonzero(row)
    if len(at) > k:
        at = at[np.argpartition(row[at], -k)[-k:]]
    at = at[np.argsort(-row[at], kind="stable")]
    named = at if ids is None else ids[at]
    return tuple((int(token), float(row[i])) for token, i in zip(named, at, strict=True))


@dataclass(frozen=True, slots=True)
class Emitted:
    """One token the acceptance step emitted, and why: what every consumer of a round reads (the loops turn it into
    a ``TokenEvent``, its ``logp_x`` into the drift signal); the rows behind it only in ``shown``, when asked for."""

    token_id: int
    verdict: Verdict
    draft_position: int
    p_x: float
    q_x: float | None
    pi_x: float
    accept_prob: float | None
    statistic: tuple[tuple[str, float], ...]
    rejected_token: int | None = None
    logp_x: float | None = None  # log p(x) under the verifier's raw row at temperature 1 (the drift signal)
    shown: Shown | None = None


@dataclass(frozen=True, slots=True)
class RoundTiming:
    """Wall seconds of one round's phases; ``llama_s`` is the part spent inside llama_decode."""

    index: int
    n_drafted: int
    n_accepted: int
    draft_s: float
    verify_s: float
    accept_s: float
    llama_s: float

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.accept_s


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One emitted token and why it was emitted.

    ``p_x``/``q_x``/``pi_x`` are the processed verifier, drafter and rule-target probabilities of the
    emitted token (raw softmax at greedy, or the processed one-hot's 1 on candidate rows without the normaliser);
    ``logp_x`` is log p(x) under the verifier's raw logits row at temperature 1 (the label-free drift signal; None
    on candidate rows without the normaliser, docs/method.md); ``accept_prob`` is min(1, π_rej(x)/q(x)) for drafted
    tokens. For a resampled token, ``rejected_token`` is the draft it replaced and ``draft_position`` where it stood.
    """

    index: int
    token_id: int
    text: str
    verdict: Verdict
    draft_position: int  # 1..N for drafted/resampled, N+1 for bonus, 0 for verifier-only
    p_x: float
    q_x: float | None
    pi_x: float
    accept_prob: float | None
    statistic: tuple[tuple[str, float], ...]
    rejected_token: int | None
    round: RoundTiming
    top_p: tuple[tuple[int, float], ...] = ()  # top alternatives of p, filled when asked for
    top_q: tuple[tuple[int, float], ...] = ()
    logp_x: float | None = None


def acceptance_rate(accepted: float, drafted: float) -> float:
    """Accepted drafts over drafted ones (docs/metrics.md); 0 before anything was drafted. The one definition: a
    generation's metrics, the live counters, the server's stats and a replay read it."""
    return accepted / drafted if drafted else 0.0


def mean_accepted_length(accepted: float, rounds: float) -> float:
    """Tokens per round, 1 + accepted drafts per round (docs/metrics.md): each round emits its accepted drafts and one
    more; 1 before any round."""
    return 1.0 + (accepted / rounds if rounds else 0.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    """docs/metrics.md metrics of one generation."""

    prompt_tokens: int
    output_tokens: int
    rounds: int
    drafted: int
    accepted: int
    per_position_reached: tuple[int, ...]
    per_position_accepted: tuple[int, ...]
    prefill_s: float
    decode_s: float
    draft_s: float
    verify_s: float
    llama_s: float
    truncated: bool
    finish_reason: str  # "eog", "max_tokens", "context", "stop" (a stop string), "stopped"
    draft_lengths: tuple[int, ...] = ()  # drafts verified in each round, in order (0 = a verifier-only step)
    extra_draft_steps: int = 0  # drafter steps past the draft (a relaxed bonus needs q at N+1)
    prefill_decoded: int = -1  # prompt tokens the verifier decoded (the rest was reused from its cache)
    full_accept_rounds: int = 0  # rounds whose every draft was accepted
    copied_bytes: int = 0  # logits/hidden rows both models copied out of llama.cpp while decoding

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.accepted, self.drafted)

    @property
    def l_accept(self) -> float:
        return self.mean_accepted_length - 1.0

    @property
    def mean_accepted_length(self) -> float:
        return mean_accepted_length(self.accepted, self.rounds)

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        pairs = zip(self.per_position_accepted, self.per_position_reached, strict=True)
        return tuple(a / r if r else 0.0 for a, r in pairs)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def host_ms_per_round(self) -> float:
        """The loop's own time per round outside llama.cpp (Python, numpy, ctypes), in ms: on a GPU this stays
        the same size while the models' work shrinks, so it bounds the speed-up there."""
        return 1e3 * max(0.0, self.decode_s - self.llama_s) / self.rounds if self.rounds else 0.0

    @property
    def copied_bytes_per_round(self) -> float:
        return self.copied_bytes / self.rounds if self.rounds else 0.0

    @property
    def python_share(self) -> float:
        """Share of decode time spent outside llama_decode (Python, numpy, ctypes)."""
        return max(0.0, 1.0 - self.llama_s / self.decode_s) if self.decode_s > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        names = ("acceptance_rate", "l_accept", "mean_accepted_length", "per_position_acceptance",
                 "tokens_per_s", "python_share", "host_ms_per_round", "copied_bytes_per_round")
        data: dict[str, object] = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data.update({name: getattr(self, name) for name in names})
        return data


@dataclass(frozen=True, slots=True, repr=False)
class SparseRows:
    """One side (p or q) of a round's processed distributions at its drafted positions, as a few entries per row:
    the support where top-k/top-p bound it to at most ``K_MAX`` ids (``decoding/round_rows.py``), else the ``K_MAX``
    likeliest ids with the mass left out in ``rest``. Arrays are read-only (an event is immutable)."""

    ids: np.ndarray  # [n, K] int32, likeliest first; -1 pads a row with fewer entries
    probs: np.ndarray  # [n, K] float32, aligned with ids; 0 in the pads
    rest: np.ndarray  # [n] float32: processed mass outside the kept ids (0 when the support fits)
    at_x: np.ndarray  # [n] float64: the probability of the drafted token, exact even when it is not kept

    def __repr__(self) -> str:
        return f"SparseRows({self.ids.shape[0]} rows of {self.ids.shape[1]} entries)"


@dataclass(frozen=True, slots=True)
class RoundRows:
    """What one round's drafts were judged on, kept (``GenerationConfig.record_rows``) so that another rule can be
    replayed on the same drafts without generating (``costmodel/replay.py``, docs/metrics.md#replayed-speed-up): the
    drafted tokens, p_i (the verifier's) and q_i (the drafter's) at each drafted position i = 1..n — all of them, the
    ones past the first rejection too: the verify batch computed them — and how many the round's own rule accepted."""

    index: int  # the round's number in its generation (RoundTiming.index)
    tokens: tuple[int, ...]  # x_1..x_n as verified (after --draft-min and priced drafting's cut); () a verifier step
    n_accepted: int
    p: SparseRows
    q: SparseRows
    has_distribution: bool = True  # False: the drafter hands no q (n-gram, suffix): q is one-hot on each x_i


@dataclass(frozen=True, slots=True)
class Finished:
    """Last event of a stream: the full text and the metrics. Per emitted token, ``verifier_logprobs`` holds
    its ``logp_x`` and ``verifier_probs`` its processed p(x) as the sampler saw it (1.0 at greedy, which emits
    the argmax): what the eval's drift signals are computed from, in either loop."""

    text: str
    metrics: Metrics
    token_ids: tuple[int, ...] = field(repr=False, default=())
    verifier_logprobs: tuple[float | None, ...] = field(repr=False, default=())
    verifier_probs: tuple[float, ...] = field(repr=False, default=())
    round_rows: tuple[RoundRows, ...] = field(repr=False, default=())  # every round's rows, in order, when the
    # config asked for them (``record_rows``); empty otherwise


Event = TokenEvent | Finished
