"""Step 3 and 4 of a speculative round (SPEC §2): accept a prefix of the draft, then resample or bonus.

Pure: arrays and a generator in, a list of emitted tokens with their provenance out. The loop owns the
models; this owns the maths, so it can be tested on hand-made distributions.

Two paths give the same law and, from the same generator, the same tokens. The *dense* one hands each rule whole
rows over the vocabulary. The *support* one — taken when top-k/top-p bound the support and the rule does not
declare ``needs_logits`` — hands it p and q on the union of their supports (a few dozen ids): every rule but the
logit-reading ones computes elementwise over p and q, and both are zero elsewhere, so nothing changes but the cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from relaxtui.decoding.events import Verdict
from relaxtui.decoding.sampling import (
    Candidates,
    SamplingParams,
    bounds_support,
    candidate_count,
    candidates,
    process,
    sample,
    scatter,
)
from relaxtui.engine.api import Row, RowSpec, TopLogits, position
from relaxtui.errors import NumericsError
from relaxtui.rules.base import Rule, accept_chance, require_finite, require_finite_values, residual

DraftStep = Callable[[], tuple[np.ndarray, np.ndarray | None]]  # one extra drafter step: (q, raw logits) at N+1


@dataclass(frozen=True, slots=True)
class Emitted:
    token_id: int
    verdict: Verdict
    draft_position: int
    p_x: float
    q_x: float | None
    pi_x: float
    accept_prob: float | None
    statistic: tuple[tuple[str, float], ...]
    rejected_token: int | None = None
    # the distributions behind the token, for top-alternative lookups (arrays, or plain numbers where an accepted
    # draft's test read only p(x) and q(x): none were built)
    p_row: np.ndarray | Sequence[float] | None = None
    q_row: np.ndarray | Sequence[float] | None = None
    row_ids: np.ndarray | Sequence[int] | None = None  # the token ids p_row/q_row are over (support path); None: the
    # vocabulary
    q_ids: np.ndarray | Sequence[int] | None = None  # the ids q_row is over when they are not row_ids
    logp_x: float | None = None  # log p(x) under the verifier's raw row at temperature 1 (the drift signal)


def takes_support(rule: Rule, sampling: SamplingParams, vocab_size: int) -> bool:
    """Whether a round can run on candidate rows: sampling bounds the support and the rule, by its own
    declaration, reads only p and q (``needs_logits`` rules get whole rows)."""
    return not sampling.greedy and not rule.needs_logits and bounds_support(sampling, vocab_size)


def row_spec(rule: Rule, sampling: SamplingParams, vocab_size: int, *, dense: bool = False, logprobs: bool = False,
             alternatives: int = 0) -> RowSpec | None:
    """The verifier rows a generation can run on: candidates from the engine (its top k) when the support path
    applies and top-k bounds it (top-p alone needs the whole row sorted), or the argmax at greedy; None: whole rows.
    ``logprobs``/``alternatives``: a consumer reads log p(x) at T=1 or the top alternatives' probabilities, so the
    engine adds the row's normaliser (a pass over the vocabulary, in the graph); log p(x) of every token from a rule
    that may emit outside p's support (so outside the top k) needs whole rows."""
    k = candidate_count(sampling, vocab_size, alternatives)
    if dense or rule.needs_logits or k is None:
        return None
    if sampling.greedy:
        return RowSpec(k, logprobs or alternatives > 0)
    return None if logprobs and rule.may_leave_support else RowSpec(k, logprobs)


def accept_round(draft_tokens: list[int], draft_probs: np.ndarray | None, draft_logits: np.ndarray | None,
                 target_logits: np.ndarray | Sequence[TopLogits], rule: Rule, sampling: SamplingParams,
                 rng: np.random.Generator,
                 bonus_draft: DraftStep | None = None, bonus: str = "auto", dense: bool = False,
                 draft_q: Sequence[Candidates] = ()) -> list[Emitted]:
    """Emit 1..N+1 tokens for one round.

    draft_probs: [N, vocab] processed q_i; draft_logits: [N, vocab] raw drafter logits (or None);
    target_logits: [N+1, vocab] raw verifier logits of the batch [last, x_1..x_N], or N+1 ``TopLogits`` (the
    engine's candidate rows, ``row_spec``).
    bonus_draft: returns (q, logits_q) at position N+1 (one extra drafter step), for a relaxed bonus.
    bonus: "auto" (the rule's own policy: relaxed for scd, p otherwise), "target" (always p) or "relaxed"
    (the rule's target at N+1 for every rule); a verifier-only step always samples p.
    dense: whole rows even where the support path applies (``takes_support``).
    draft_q: per position, q_i on its support (a drafter on candidate rows hands only these: ``draft_probs`` is
    then None, and whole rows are built from them where a path needs them).
    """
    num_draft = len(draft_tokens)
    assert len(target_logits) == num_draft + 1, "verifier rows must be N+1"
    if sampling.greedy:
        return _accept_greedy(draft_tokens, draft_logits, target_logits)
    top = isinstance(target_logits[0], TopLogits)  # candidate rows from the engine (row_spec chose them)
    vocab_size = target_logits[0].vocab_size if top else target_logits.shape[-1]
    on_support = not dense and takes_support(rule, sampling, vocab_size)
    if top and not on_support:
        raise ValueError(f"rule {rule.name!r} was handed candidate rows but needs whole ones")
    if draft_probs is None:  # only q on its support came: whole rows where this round's path needs them
        draft_probs = scatter(draft_q, vocab_size) if not on_support else None
    emitted: list[Emitted] = []
    for i, x in enumerate(draft_tokens):
        q_full = draft_probs[i] if draft_probs is not None else None
        tested = False  # the acceptance test drew its uniform already (and rejected)
        if on_support:
            p_at, q_at = candidates(target_logits[i], sampling), _q_on_support(i, draft_q, q_full)
            point = _pointwise(rule, p_at, q_at, x, i + 1)
            if point is not None:  # the test needs p(x) and q(x) alone: arrays only for a rejection's residual
                tested = True
                p_x, q_x, pi_x, chance, statistic = point
                if rng.random() < chance:
                    (p_ids, p_row), (q_ids, q_row) = p_at.held(), q_at.held()
                    emitted.append(Emitted(x, Verdict.ACCEPTED, i + 1, p_x, q_x, pi_x, chance, statistic,
                                           p_row=p_row, q_row=q_row, row_ids=p_ids, q_ids=q_ids,
                                           logp_x=log_prob(target_logits[i], x)))
                    continue  # (rejected: the arrays below, for the residual; decide gives the same numbers again)
            ids, p, q, x_at = _on_support(p_at, q_at, x)
            logits_p = logits_q = None  # a support-path rule reads no logits (it declared so)
        else:
            ids, p, q, x_at = None, process(target_logits[i], sampling), q_full, x
            logits_p, logits_q = target_logits[i], draft_logits[i] if draft_logits is not None else None
        try:
            decision = rule.decide(p, q, x_at, logits_p=logits_p, logits_q=logits_q)
        except NumericsError as exc:
            raise NumericsError(f"rule {rule!r} at draft position {i + 1}: {exc}") from None
        require_finite(decision, p, q, x_at, rule=repr(rule), position=i + 1)
        # uniform in [0, 1) as float64: u < 1 always accepts an accept_prob of 1, never one of 0.
        if not tested and rng.random() < decision.accept_prob:
            emitted.append(Emitted(x, Verdict.ACCEPTED, i + 1, float(p[x_at]), float(q[x_at]),
                                   float(decision.pi_rej[x_at]), decision.accept_prob, decision.statistic,
                                   p_row=p, q_row=q, row_ids=ids, logp_x=log_prob(target_logits[i], x)))
            continue
        y_at = sample(residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res, rng)
        y = int(ids[y_at]) if ids is not None else y_at
        emitted.append(Emitted(y, Verdict.RESAMPLED, i + 1, float(p[y_at]), float(q[y_at]),
                               float(decision.pi_res[y_at]), decision.accept_prob, decision.statistic,
                               rejected_token=x, p_row=p, q_row=q, row_ids=ids,
                               logp_x=log_prob(target_logits[i], y)))
        return emitted
    last = target_logits[num_draft]
    verdict = Verdict.BONUS if num_draft else Verdict.VERIFIER
    position = num_draft + 1 if num_draft else 0
    policy = bonus if num_draft else "target"
    if on_support and not _relaxed(rule, policy, bonus_draft):  # π_bonus = p: one draw from its candidates
        found = candidates(last, sampling)
        found_ids, found_probs = found.held()
        at = found.index_at(rng)
        y, p_y = int(found_ids[at]), float(found_probs[at])
        emitted.append(Emitted(y, verdict, position, p_y, None, p_y, None, (), p_row=found_probs, row_ids=found_ids,
                               logp_x=log_prob(last, y)))
        return emitted
    p = process(last, sampling)
    pi_bonus, q_next = _bonus_target(p, None if top else last, rule, policy, bonus_draft)
    y = sample(pi_bonus, rng)
    q_y = float(q_next[y]) if q_next is not None else None
    emitted.append(Emitted(y, verdict, position, float(p[y]), q_y, float(pi_bonus[y]), None, (), p_row=p,
                           q_row=q_next, logp_x=log_prob(last, y)))
    return emitted


def _pointwise(rule: Rule, p: Candidates, q: Candidates, x: int,
               position: int) -> tuple[float, float, float, float, tuple[tuple[str, float], ...]] | None:
    """(p(x), q(x), π_rej(x), acceptance probability, statistic) from p's and q's candidates, for a rule whose
    test reads p(x) and q(x) alone (``Rule.pointwise``), with ``decide``'s checks; None for any other rule."""
    p_x, q_x = p.prob_of(x), q.prob_of(x)
    found = rule.pointwise(p_x, q_x)
    if found is None:
        return None
    pi_x, statistic = found
    try:
        chance = accept_chance(pi_x, q_x, x)
    except NumericsError as exc:
        raise NumericsError(f"rule {rule!r} at draft position {position}: {exc}") from None
    statistic = (("accept_prob", chance), *statistic)
    require_finite_values(p_x, q_x, pi_x, statistic, x, rule=repr(rule), position=position)
    return p_x, q_x, pi_x, chance, statistic


def _q_on_support(i: int, draft_q: Sequence[Candidates], q_full: np.ndarray | None) -> Candidates:
    """q_i on its support: as the drafter handed it, else gathered from its whole row (where it is non-zero)."""
    if i < len(draft_q):
        return draft_q[i]
    ids = np.flatnonzero(q_full)
    return Candidates(ids, q_full[ids])  # type: ignore[index]


def _on_support(p: Candidates, q: Candidates, x: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(ids, p, q, index of x) on the union of p's and q's supports (and x: a draft q gives no mass is still
    judged, and rejected, as on the dense path). Sorted ids keep the residual's draw identical to the dense one."""
    ids = np.concatenate((p.ids, q.ids, (x,)))
    ids.sort()  # (array methods, not np.unique: a few dozen ids, where each numpy wrapper costs more than the work)
    ids = ids[np.concatenate(((True,), ids[1:] != ids[:-1]))]
    p_on, q_on = np.zeros(len(ids)), np.zeros(len(ids))
    p_on[ids.searchsorted(p.ids)] = p.probs
    q_on[ids.searchsorted(q.ids)] = q.probs
    return ids, p_on, q_on, int(ids.searchsorted(x))


def _relaxed(rule: Rule, policy: str, bonus_draft: DraftStep | None) -> bool:
    """Whether the bonus draws from the rule's target at N+1 (which needs q there) rather than from p."""
    return bonus_draft is not None and (policy == "relaxed" or (policy == "auto" and rule.relaxed_bonus))


def log_prob(logits: Row, token: int) -> float | None:
    """log p(token) under a raw logits row at temperature 1: one exp pass in float32 with a float64 sum (1e-7
    relative, far inside what the drift signals resolve), cheaper than a float64 softmax of the row. A candidate
    row answers from the engine's normaliser (None without one, or for a token outside its top k)."""
    if isinstance(logits, TopLogits):
        return logits.log_prob(token)
    top = float(np.max(logits))
    total = float(np.exp(np.asarray(logits, dtype=np.float32) - np.float32(top)).sum(dtype=np.float64))
    return float(logits[token]) - top - math.log(total)


def _bonus_target(p: np.ndarray, logits_p: np.ndarray | None, rule: Rule, policy: str,
                  bonus_draft: DraftStep | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(π_bonus, q at N+1 or None). The extra drafter step is paid only when the policy needs it."""
    if not _relaxed(rule, policy, bonus_draft):
        return p, None
    q_next, logits_q_next = bonus_draft()  # type: ignore[misc]
    if policy == "auto":
        return rule.bonus(p, q_next, logits_p=logits_p, logits_q=logits_q_next), q_next
    return rule.relaxed_target(p, q_next, logits_p=logits_p, logits_q=logits_q_next), q_next


def _accept_greedy(draft_tokens: list[int], draft_logits: np.ndarray | Sequence[TopLogits] | None,
                   target_logits: np.ndarray | Sequence[TopLogits]) -> list[Emitted]:
    """Temperature 0: exact argmax matching for every rule (SPEC §2); probabilities reported at T=1 (the pass
    that shows p(x) also gives log p(x), so the drift signal costs nothing more here). Candidate rows bring the
    argmax from the engine, and p(x) and q(x) at T=1 only when it added the normaliser (else the processed
    one-hot's: 1 for the argmax)."""
    emitted: list[Emitted] = []
    for i, x in enumerate(draft_tokens):
        target, p, ids, lse = _greedy_row(target_logits[i])
        # the emitted token is the argmax either way (x itself when accepted): q and p are shown at it
        q, q_ids, q_x = _greedy_q(draft_logits[i], ids, target) if draft_logits is not None else (None, None, None)
        accepted = x == target
        chance = 1.0 if accepted else 0.0
        emitted.append(Emitted(target, Verdict.ACCEPTED if accepted else Verdict.RESAMPLED, i + 1,
                               _p_at(p, ids, target), q_x, 1.0, chance, (("accept_prob", chance),),
                               rejected_token=None if accepted else x, p_row=p, q_row=q, row_ids=ids, q_ids=q_ids,
                               logp_x=_logp(target_logits[i], target, lse)))
        if not accepted:
            return emitted
    last = target_logits[len(draft_tokens)]
    target, p, ids, lse = _greedy_row(last)
    verdict = Verdict.BONUS if draft_tokens else Verdict.VERIFIER
    emitted.append(Emitted(target, verdict, len(draft_tokens) + 1 if draft_tokens else 0, _p_at(p, ids, target),
                           None, 1.0, None, (), p_row=p, row_ids=ids, logp_x=_logp(last, target, lse)))
    return emitted


def _greedy_q(row: Row, p_ids: np.ndarray | None, token: int) -> tuple[np.ndarray | None, np.ndarray | None,
                                                                       float | None]:
    """(q to show, the ids it is over (None: those p is over), q(token)) of a greedy draft row: at T=1 from a whole
    row or from candidates with the normaliser; from candidates without (asked only when no alternatives are shown),
    nothing to show and q(token) the processed one-hot's. A whole q beside a candidate p (an MTP head's rows) is
    shown on as many of its likeliest ids as p is."""
    if isinstance(row, TopLogits):
        probs = row.probs()
        if probs is None:  # the processed one-hot: exact everywhere (nothing shown: no alternatives were asked)
            return None, None, float(token == row.argmax())
        at = position(row.ids, token)
        return probs, row.ids, float(probs[at]) if at is not None else None  # (below its top k: not guessed)
    whole = _shown(row)[0]
    if p_ids is None:
        return whole, None, float(whole[token])
    top = np.argpartition(whole, -len(p_ids))[-len(p_ids):] if len(p_ids) < len(whole) else np.arange(len(whole))
    return whole[top], top, float(whole[token])


def _greedy_row(row: Row) -> tuple[int, np.ndarray | None, np.ndarray | None, float | None]:
    """(argmax, p at T=1 to show, the ids it is over (None: the vocabulary), log-normaliser) of a greedy row."""
    if isinstance(row, TopLogits):  # (no normaliser: nothing shown, so no ids either — they stay plain numbers)
        probs = row.probs()
        return row.argmax(), probs, row.ids if probs is not None else None, row.log_norm
    target = _argmax(row)
    p, lse = _shown(row)
    return target, p, None, lse


def _p_at(p: np.ndarray | None, ids: np.ndarray | None, token: int) -> float:
    """p(token) from a greedy row's shown distribution; 1 (the processed one-hot's) where none was computed."""
    if p is None:
        return 1.0
    if ids is None:
        return float(p[token])
    return float(p[position(ids, token)])  # type: ignore[index]


def _logp(row: Row, token: int, lse: float | None) -> float | None:
    if isinstance(row, TopLogits):
        return row.log_prob(token)
    return float(row[token]) - lse  # type: ignore[operator]


def _shown(logits: np.ndarray) -> tuple[np.ndarray, float]:
    """The T=1 distribution a greedy round reports (p(x) in the TUI; no decision reads it) and the row's
    log-normaliser (log p(x) = logit(x) − it). float32 arithmetic with a float64 sum is ample for both and several
    times cheaper than the float64 softmax the rules use — a cost paid per sequence per step, K times over when K
    sequences share a batch."""
    top = np.max(logits)
    z = np.asarray(logits, dtype=np.float32) - top
    np.exp(z, out=z)
    total = z.sum(dtype=np.float64)
    z /= total
    return z, float(top) + math.log(float(total))


def _argmax(logits: np.ndarray) -> int:
    """argmax that refuses NaN/+inf (numpy's argmax returns the first NaN, as if it were the best token)."""
    best = int(np.argmax(logits))
    if not np.isfinite(logits[best]):
        raise NumericsError(f"the verifier's logits hold a non-finite value ({logits[best]}) at token {best}")
    return best

