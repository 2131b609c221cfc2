"""Step 3 and 4 of a speculative round (docs/method.md): accept a prefix of the draft, then resample or bonus.

Pure: rows and a generator in, a list of emitted tokens with their provenance out. The loop owns the models; this
owns the maths, so it can be tested on hand-made distributions.

``accept_draft`` picks one of three paths. *Greedy* matches argmaxes (every rule, docs/method.md). The *support*
path — taken when top-k/top-p bound the support and the rule does not declare ``needs_logits`` — hands the rule p
and q on the union of their supports (a few dozen ids): every rule but the logit-reading ones computes elementwise
over p and q, and both are zero elsewhere, so nothing changes but the cost. The *dense* path hands it whole rows
over the vocabulary. The support and dense paths give the same law and, from the same generator, the same tokens.

Two rules' traits take them off those one-position paths (docs/method.md "Rules that see more than one position"),
each with one check per round: a rule that keeps its relaxation at temperature 0 (``Rule.greedy_top``: FLy, the
top-k rules) is judged greedy from each row's largest probabilities at T = 1, and a look-ahead rule (``Rule.lookahead``:
FLy) on the look-ahead path, which may keep a draft its test rejects when the drafts after it pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from relaxtui.decoding.drafting import Draft
from relaxtui.decoding.events import Emitted, Shown, Verdict
from relaxtui.decoding.sampling import (
    Candidates,
    SamplingParams,
    bounds_support,
    candidate_count,
    candidates,
    process,
    sample,
)
from relaxtui.engine.api import Row, Rows, RowSpec, as_rows
from relaxtui.errors import NumericsError
from relaxtui.rules.base import Decision, Rule, accept_chance, require_finite, require_finite_values, residual

DraftStep = Callable[[], tuple[np.ndarray, np.ndarray | None]]  # one extra drafter step: (q, raw logits) at N+1
Point = tuple[float, float, float, float, tuple[tuple[str, float], ...]]  # p(x), q(x), π(x), chance, statistic
NO_DRAFT = Draft([], None, None)  # a verifier-only step's


@dataclass(frozen=True, slots=True)
class Acceptance:
    """How a generation judges every round's draft (the same for all its rounds).

    bonus: "auto" (the rule's own policy: relaxed for scd, p otherwise), "target" (always p) or "relaxed" (the
    rule's target at N+1 for every rule); a verifier-only step always samples p. dense: whole rows even where the
    support path applies (``takes_support``). show: attach the distributions behind each token (``Shown``), for a
    face that shows alternatives. draft_max: the generation's N, from which a look-ahead rule sizes its window (None:
    each round's own draft length stands in)."""

    rule: Rule
    sampling: SamplingParams
    bonus: str = "auto"
    dense: bool = False
    show: bool = False
    draft_max: int | None = None
    relaxed_greedy: bool = field(init=False)  # the rule keeps a relaxation at temperature 0 (read once, not per round)

    def __post_init__(self) -> None:
        object.__setattr__(self, "relaxed_greedy", self.rule.lookahead or self.rule.greedy_top() > 0)

    def on_support(self, vocab_size: int) -> bool:
        return not self.dense and takes_support(self.rule, self.sampling, vocab_size)


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
        top = rule.greedy_top()
        if top:  # it reads the row's top at T = 1 and may keep a token outside it: every log p(x) needs whole rows
            return None if logprobs else RowSpec(max(k, top), True)
        return RowSpec(k, logprobs or alternatives > 0)
    return None if logprobs and rule.may_leave_support else RowSpec(k, logprobs)


def accept_draft(draft: Draft | None, rows: Rows, acceptance: Acceptance, rng: np.random.Generator,
                 bonus_draft: DraftStep | None = None) -> list[Emitted]:
    """Emit 1..N+1 tokens for one round.

    draft: the N drafted tokens with q (``Draft.probs`` whole, or ``Draft.q`` on its support) and the drafter's raw
    rows; None: a verifier-only step. rows: the verifier's N+1 raw rows of the batch [last, x_1..x_N], whole or the
    engine's candidates (``row_spec``). bonus_draft: (q, raw logits) at N+1, one extra drafter step, paid only for a
    relaxed bonus."""
    rows, draft = as_rows(rows), draft if draft is not None else NO_DRAFT
    assert len(rows) == len(draft.tokens) + 1, "verifier rows must be N+1"
    rule = acceptance.rule
    if acceptance.sampling.greedy:
        if acceptance.relaxed_greedy:
            return _greedy_relaxed(draft, rows, acceptance)
        return _greedy(draft, rows, acceptance.show)
    if rule.lookahead:
        return _lookahead(draft, rows, acceptance, rng, bonus_draft)
    if acceptance.on_support(rows[0].vocab_size):
        return _on_support(draft, rows, acceptance, rng, bonus_draft)
    if not rows[0].complete:
        raise ValueError(f"rule {acceptance.rule.name!r} was handed candidate rows but needs whole ones")
    return _dense(draft, rows, acceptance, rng, bonus_draft)


# -- the support path ---------------------------------------------------------------------------------------------
def _on_support(draft: Draft, rows: Sequence[Row], acceptance: Acceptance, rng: np.random.Generator,
                bonus_draft: DraftStep | None) -> list[Emitted]:
    """p and q on their candidates: a rule whose test reads p(x) and q(x) alone (``Rule.pointwise``) builds no
    arrays unless it rejects; the others, and every residual, see p and q on the union of the two supports."""
    emitted: list[Emitted] = []
    rule, show = acceptance.rule, acceptance.show
    for i, x in enumerate(draft.tokens):
        row = rows[i]
        p, q = candidates(row, acceptance.sampling), _q_on_support(draft, i)
        point = _pointwise(rule, p, q, x, i + 1)
        if point is not None and rng.random() < point[3]:
            emitted.append(_accepted(x, i + 1, point, row, _shown_held(p, q) if show else None))
            continue  # (rejected: the arrays below, for the residual; decide gives the same numbers again)
        ids, p_on, q_on, x_at = _union(p, q, x)
        item = _judge(rule, _Judged(p_on, q_on, x, x_at, i + 1, ids), row, rng, show, tested=point is not None)
        emitted.append(item)
        if item.verdict is Verdict.RESAMPLED:
            return emitted
    n = len(draft.tokens)
    emitted.append(_bonus(rows[n], n, acceptance, rng, bonus_draft, on_support=True))
    return emitted


def _pointwise(rule: Rule, p: Candidates, q: Candidates, x: int, position: int) -> Point | None:
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


def _accepted(x: int, position: int, point: Point, row: Row, shown: Shown | None) -> Emitted:
    p_x, q_x, pi_x, chance, statistic = point
    return Emitted(x, Verdict.ACCEPTED, position, p_x, q_x, pi_x, chance, statistic, logp_x=row.log_prob(x),
                   shown=shown)


def _shown_held(p: Candidates, q: Candidates) -> Shown:
    """p and q as their candidates hold them (plain numbers stay plain: an accepted pointwise test built nothing)."""
    (p_ids, p_probs), (q_ids, q_probs) = p.held(), q.held()
    return Shown(p_probs, q_probs, p_ids, q_ids)


def _q_on_support(draft: Draft, i: int) -> Candidates:
    """q_i on its support: as the drafter handed it, else gathered from its whole row (where it is non-zero)."""
    if i < len(draft.q):
        return draft.q[i]
    if draft.probs is None:  # (a drafter hands q on its support, or whole rows of it: Draft)
        raise ValueError(f"draft position {i} has no q: neither on its support nor as a whole row")
    q_full = draft.probs[i]
    ids = np.flatnonzero(q_full)
    return Candidates(ids, q_full[ids])


def _union(p: Candidates, q: Candidates, x: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(ids, p, q, index of x) on the union of p's and q's supports (and x: a draft q gives no mass is still
    judged, and rejected, as on the dense path). Sorted ids keep the residual's draw identical to the dense one."""
    (p_ids, p_probs), (q_ids, q_probs) = p.as_lists(), q.as_lists()
    ids = sorted({*p_ids, *q_ids, x})  # (plain numbers, three arrays at the end: a few dozen ids, right after a decode,
    at = {token: i for i, token in enumerate(ids)}  # where each numpy call costs more than the work)
    p_on, q_on = [0.0] * len(ids), [0.0] * len(ids)
    for token, prob in zip(p_ids, p_probs, strict=True):
        p_on[at[token]] = prob
    for token, prob in zip(q_ids, q_probs, strict=True):
        q_on[at[token]] = prob
    return np.array(ids, dtype=np.int64), np.array(p_on), np.array(q_on), at[x]


# -- the dense path -----------------------------------------------------------------------------------------------
def _dense(draft: Draft, rows: Sequence[Row], acceptance: Acceptance, rng: np.random.Generator,
           bonus_draft: DraftStep | None) -> list[Emitted]:
    """Whole rows over the vocabulary, with the raw logits of both models for a rule that reads them."""
    emitted: list[Emitted] = []
    n = len(draft.tokens)
    q_rows = draft.dense_probs(rows[0].vocab_size)
    q_logits = as_rows(draft.logits) if draft.logits is not None else None
    for i, x in enumerate(draft.tokens):
        row = rows[i]
        judged = _Judged(process(row, acceptance.sampling), q_rows[i], x, x, i + 1, None, row.vocab_logits(),
                         q_logits[i].vocab_logits() if q_logits is not None else None)
        item = _judge(acceptance.rule, judged, row, rng, acceptance.show)
        emitted.append(item)
        if item.verdict is Verdict.RESAMPLED:
            return emitted
    emitted.append(_bonus(rows[n], n, acceptance, rng, bonus_draft, on_support=False))
    return emitted


# -- shared by the sampled paths ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Judged:
    """What the rule decides on at one draft position: p and q as arrays (over ``ids``; None: the vocabulary), the
    drafted token and its index in them, and the raw logits a rule that reads them gets."""

    p: np.ndarray
    q: np.ndarray
    x: int
    x_at: int
    position: int
    ids: np.ndarray | None = None
    logits_p: np.ndarray | None = None
    logits_q: np.ndarray | None = None


def _judge(rule: Rule, at: _Judged, row: Row, rng: np.random.Generator, show: bool, *,
           tested: bool = False) -> Emitted:
    """The rule's decision: accept x with its probability (unless a pointwise test already drew and rejected it:
    ``tested``), else emit a draw from the residual (π_res − q)+ (or π_res for a rule that does not subtract q)."""
    p, q, x_at = at.p, at.q, at.x_at
    try:
        decision = rule.decide(p, q, x_at, logits_p=at.logits_p, logits_q=at.logits_q)
    except NumericsError as exc:
        raise NumericsError(f"rule {rule!r} at draft position {at.position}: {exc}") from None
    require_finite(decision, p, q, x_at, rule=repr(rule), position=at.position)
    shown = Shown(p, q, at.ids) if show else None
    # uniform in [0, 1) as float64: u < 1 always accepts an accept_prob of 1, never one of 0.
    if not tested and rng.random() < decision.accept_prob:
        return Emitted(at.x, Verdict.ACCEPTED, at.position, float(p[x_at]), float(q[x_at]),
                       float(decision.pi_rej[x_at]), decision.accept_prob, decision.statistic,
                       logp_x=row.log_prob(at.x), shown=shown)
    y_at = sample(residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res, rng)
    y = int(at.ids[y_at]) if at.ids is not None else y_at
    return Emitted(y, Verdict.RESAMPLED, at.position, float(p[y_at]), float(q[y_at]), float(decision.pi_res[y_at]),
                   decision.accept_prob, decision.statistic, rejected_token=at.x, logp_x=row.log_prob(y), shown=shown)


def _bonus(last: Row, n: int, acceptance: Acceptance, rng: np.random.Generator, bonus_draft: DraftStep | None, *,
           on_support: bool) -> Emitted:
    """The token after N accepted drafts (N = 0: a verifier-only step): from p — on the support path one draw from
    its candidates — or, for a relaxed bonus, from the rule's target at N+1 (which needs q there)."""
    verdict, position, policy = (Verdict.BONUS, n + 1, acceptance.bonus) if n else (Verdict.VERIFIER, 0, "target")
    rule, show = acceptance.rule, acceptance.show
    relaxed = _relaxed(rule, policy, bonus_draft)
    if on_support and not relaxed:  # π_bonus = p: one draw from its candidates
        found = candidates(last, acceptance.sampling)
        found_ids, found_probs = found.held()
        at = found.index_at(rng)
        y, p_y = int(found_ids[at]), float(found_probs[at])
        return Emitted(y, verdict, position, p_y, None, p_y, None, (), logp_x=last.log_prob(y),
                       shown=Shown(found_probs, None, found_ids) if show else None)
    p = process(last, acceptance.sampling)
    pi_bonus, q_next = p, None
    if relaxed and bonus_draft is not None:  # the extra drafter step, paid only when the policy needs it
        q_next, logits_q_next = bonus_draft()
        target = rule.bonus if policy == "auto" else rule.relaxed_target
        pi_bonus = target(p, q_next, logits_p=last.vocab_logits(), logits_q=logits_q_next)
    y = sample(pi_bonus, rng)
    q_y = float(q_next[y]) if q_next is not None else None
    return Emitted(y, verdict, position, float(p[y]), q_y, float(pi_bonus[y]), None, (), logp_x=last.log_prob(y),
                   shown=Shown(p, q_next) if show else None)


def _relaxed(rule: Rule, policy: str, bonus_draft: DraftStep | None) -> bool:
    """Whether the bonus draws from the rule's target at N+1 (which needs q there) rather than from p."""
    return bonus_draft is not None and (policy == "relaxed" or (policy == "auto" and rule.relaxed_bonus))


# -- the greedy path ----------------------------------------------------------------------------------------------
def _greedy(draft: Draft, rows: Sequence[Row], show: bool) -> list[Emitted]:
    """Temperature 0: exact argmax matching for every rule (docs/method.md); p(x) and q(x) reported at T=1 (the pass
    that gives p(x) also gives log p(x), so the drift signal costs nothing more here). Candidate rows bring the argmax
    from the engine, and p(x) and q(x) at T=1 only when it added the normaliser (else the processed one-hot's: 1 for
    the argmax)."""
    emitted: list[Emitted] = []
    tokens, drafted = draft.tokens, as_rows(draft.logits) if draft.logits is not None else None
    for i, x in enumerate(tokens):
        row, q_row = rows[i], drafted[i] if drafted is not None else None
        target = row.argmax()  # the emitted token either way (x itself when accepted): q and p are shown at it
        shown = _greedy_shown(row, q_row) if show else None  # (first: a whole row's pass sets its normaliser)
        logp = row.log_prob(target)
        accepted = x == target
        chance = 1.0 if accepted else 0.0
        emitted.append(Emitted(target, Verdict.ACCEPTED if accepted else Verdict.RESAMPLED, i + 1, _p_of(logp),
                               _greedy_q(q_row, target), 1.0, chance, (("accept_prob", chance),),
                               rejected_token=None if accepted else x, logp_x=logp, shown=shown))
        if not accepted:
            return emitted
    last = rows[len(tokens)]
    target = last.argmax()
    shown = _greedy_shown(last, None) if show else None
    logp = last.log_prob(target)
    emitted.append(Emitted(target, Verdict.BONUS if tokens else Verdict.VERIFIER, len(tokens) + 1 if tokens else 0,
                           _p_of(logp), None, 1.0, None, (), logp_x=logp, shown=shown))
    return emitted


def _p_of(logp: float | None) -> float:
    """p at T=1 from log p; 1 (the processed one-hot's) where the row has no normaliser."""
    return math.exp(logp) if logp is not None else 1.0


def _greedy_q(row: Row | None, token: int) -> float | None:
    """q(token) at T=1 of a greedy draft row: from a whole row, or from candidates with the normaliser (None below
    its top k: not guessed); from candidates without, the processed one-hot's."""
    if row is None:
        return None
    if row.log_norm is None:
        return float(token == row.argmax())
    logq = row.log_prob(token)
    return math.exp(logq) if logq is not None else None


def _greedy_shown(row: Row, q_row: Row | None) -> Shown | None:
    """p and q at T=1 to show (each over its candidates, or the vocabulary; None: candidates without the normaliser,
    nothing to show). A whole q beside a candidate p (an MTP head's rows) is shown on as many of its likeliest ids as
    p is."""
    p, ids = row.shown()
    q, q_ids = q_row.shown() if q_row is not None else (None, None)
    if p is None and q is None:
        return None
    if q is not None and q_ids is None and ids is not None:
        q_ids = np.argpartition(q, -len(ids))[-len(ids):] if len(ids) < len(q) else np.arange(len(q))
        q = q[q_ids]
    return Shown(p, q, ids, q_ids)


# -- rules that see more than one position -------------------------------------------------------------------------
@dataclass(slots=True)
class _Position:
    """One draft position as the look-ahead path judged it: its arrays, the rule's decision, and whether the draft
    passed the rule's own test with the uniform drawn for it."""

    judged: _Judged
    decision: Decision
    passes: bool


def _lookahead(draft: Draft, rows: Sequence[Row], acceptance: Acceptance, rng: np.random.Generator,
               bonus_draft: DraftStep | None) -> list[Emitted]:
    """A look-ahead rule (``Rule.lookahead``: FLy). Each position is judged by the rule's own test with its own
    uniform, drawn in position order as far as the round reads; a draft that fails it is kept when the verifier and
    the drafter both give it mass, the rule ``defers`` on the verifier's distribution there, and the ``window``
    drafts after it all pass (a window past the draft's end keeps nothing); else the rule's residual is drawn there.
    The same arrays as the one-position paths (supports, or whole rows with logits), so both give the same tokens."""
    rule, n = acceptance.rule, len(draft.tokens)
    on_support = acceptance.on_support(rows[0].vocab_size)
    if not on_support and not rows[0].complete:
        raise ValueError(f"rule {rule.name!r} was handed candidate rows but needs whole ones")
    window = rule.window(n, acceptance.draft_max)
    position = _positions(draft, rows, acceptance, on_support, rng)
    emitted: list[Emitted] = []
    for i in range(n):
        at = position(i)
        waited = not at.passes
        if waited and not _kept_after_all(rule, at, i, n, window, position):
            emitted.append(_judge(rule, at.judged, rows[i], rng, acceptance.show, tested=True))
            return emitted
        judged, decision = at.judged, at.decision
        p, q, x_at = judged.p, judged.q, judged.x_at
        emitted.append(Emitted(judged.x, Verdict.ACCEPTED, judged.position, float(p[x_at]), float(q[x_at]),
                               float(decision.pi_rej[x_at]), decision.accept_prob,
                               (*decision.statistic, ("deferred", 1.0)) if waited else decision.statistic,
                               logp_x=rows[i].log_prob(judged.x),
                               shown=Shown(p, q, judged.ids) if acceptance.show else None))
    emitted.append(_bonus(rows[n], n, acceptance, rng, bonus_draft, on_support=on_support))
    return emitted


def _kept_after_all(rule: Rule, at: _Position, i: int, n: int, window: int,
                    position: Callable[[int], _Position]) -> bool:
    """Whether a draft the rule's test rejected at index ``i`` is kept: mass on both sides, the rule's gate open,
    and the whole window inside the draft and passing (read only as far as the first failure)."""
    p, q, x_at = at.judged.p, at.judged.q, at.judged.x_at
    if window < 1 or i + window >= n or not (p[x_at] > 0 and q[x_at] > 0) or not rule.defers(p):
        return False
    return all(position(j).passes for j in range(i + 1, i + window + 1))


def _positions(draft: Draft, rows: Sequence[Row], acceptance: Acceptance, on_support: bool,
               rng: np.random.Generator) -> Callable[[int], _Position]:
    """Position i of the round, judged once when first asked for (positions in order: each uniform drawn once)."""
    rule, sampling = acceptance.rule, acceptance.sampling
    q_rows = None if on_support else draft.dense_probs(rows[0].vocab_size)
    q_logits = as_rows(draft.logits) if not on_support and draft.logits is not None else None
    made: list[_Position] = []

    def position(i: int) -> _Position:
        while len(made) <= i:
            j = len(made)
            x, row = draft.tokens[j], rows[j]
            if q_rows is None:
                ids, p_on, q_on, x_at = _union(candidates(row, sampling), _q_on_support(draft, j), x)
                judged = _Judged(p_on, q_on, x, x_at, j + 1, ids)
            else:
                judged = _Judged(process(row, sampling), q_rows[j], x, x, j + 1, None, row.vocab_logits(),
                                 q_logits[j].vocab_logits() if q_logits is not None else None)
            try:
                decision = rule.decide(judged.p, judged.q, judged.x_at, logits_p=judged.logits_p,
                                       logits_q=judged.logits_q)
            except NumericsError as exc:
                raise NumericsError(f"rule {rule!r} at draft position {j + 1}: {exc}") from None
            require_finite(decision, judged.p, judged.q, judged.x_at, rule=repr(rule), position=j + 1)
            made.append(_Position(judged, decision, rng.random() < decision.accept_prob))
        return made[i]

    return position


def _greedy_relaxed(draft: Draft, rows: Sequence[Row], acceptance: Acceptance) -> list[Emitted]:
    """Temperature 0 for a rule that keeps its relaxation there (``Rule.greedy_top``: FLy, topk-delta, topk-ratio, as
    their engines run them): a draft other than the argmax is kept when the rule says so from the row's
    ``greedy_top()`` largest probabilities at T = 1 — at once (``greedy_keeps``), or, for a look-ahead rule, when it
    ``defers`` and the ``window`` drafts after it are their rows' argmaxes. A rejection emits the argmax, as every
    greedy round does; the numbers reported are ``_greedy``'s (p(x) at T = 1; without a normaliser, the processed
    one-hot's: 1 for the argmax, 0 for another token)."""
    rule, tokens, show = acceptance.rule, draft.tokens, acceptance.show
    n, top = len(tokens), rule.greedy_top()
    window = rule.window(n, acceptance.draft_max) if rule.lookahead else 0
    drafted = as_rows(draft.logits) if draft.logits is not None else None
    argmaxes: list[int] = []

    def argmax_at(j: int) -> int:
        while len(argmaxes) <= j:
            argmaxes.append(rows[len(argmaxes)].argmax())
        return argmaxes[j]

    emitted: list[Emitted] = []
    for i, x in enumerate(tokens):
        row, best = rows[i], argmax_at(i)
        kept = relaxed = False
        if x == best:
            kept = True
        elif rule.lookahead:
            relaxed = kept = 0 < window and i + window < n and rule.defers(_top_at_t1(row, top)[1]) and \
                all(tokens[j] == argmax_at(j) for j in range(i + 1, i + window + 1))
        else:
            relaxed = kept = rule.greedy_keeps(*_top_at_t1(row, top), x)
        token = x if kept else best
        shown = _greedy_shown(row, drafted[i] if drafted is not None else None) if show else None
        logp = row.log_prob(token)
        p_x = math.exp(logp) if logp is not None else float(token == best)
        chance = 1.0 if kept else 0.0
        statistic = (("accept_prob", chance), ("relaxed", 1.0)) if relaxed else (("accept_prob", chance),)
        emitted.append(Emitted(token, Verdict.ACCEPTED if kept else Verdict.RESAMPLED, i + 1, p_x,
                               _greedy_q(drafted[i] if drafted is not None else None, token), 1.0, chance, statistic,
                               rejected_token=None if kept else x, logp_x=logp, shown=shown))
        if not kept:
            return emitted
    last = rows[n]
    target = last.argmax()
    logp = last.log_prob(target)
    emitted.append(Emitted(target, Verdict.BONUS if tokens else Verdict.VERIFIER, n + 1 if tokens else 0, _p_of(logp),
                           None, 1.0, None, (), logp_x=logp, shown=_greedy_shown(last, None) if show else None))
    return emitted


def _top_at_t1(row: Row, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The row's k largest probabilities at T = 1, descending (equal ones: the lower id first), and their ids: from a
    whole row's logits and its normaliser, or from the engine's candidates with theirs (row_spec asks for it)."""
    if row.log_norm is None:
        raise ValueError("a rule that relaxes at temperature 0 reads each row's normaliser; this row has none")
    whole = row.vocab_logits()
    if whole is None:  # the engine's candidates: their probabilities at T = 1, from its normaliser
        probs, ids = row.shown()
        assert probs is not None and ids is not None  # (a row with a normaliser shows its candidates)
    else:
        ids = np.argpartition(whole, len(whole) - k)[-k:] if k < len(whole) else np.arange(len(whole))
        probs = np.exp(whole[ids].astype(np.float64) - row.log_norm)
    order = np.lexsort((ids, -probs))[:k]
    return ids[order], probs[order]
