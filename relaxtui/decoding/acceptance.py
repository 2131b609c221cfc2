"""Step 3 and 4 of a speculative round (SPEC §2): accept a prefix of the draft, then resample or bonus.

Pure: arrays and a generator in, a list of emitted tokens with their provenance out. The loop owns the
models; this owns the maths, so it can be tested on hand-made distributions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from relaxtui.decoding.events import Verdict
from relaxtui.decoding.sampling import SamplingParams, process, sample
from relaxtui.errors import NumericsError
from relaxtui.rules.base import Rule, require_finite, residual

DraftStep = Callable[[], tuple[np.ndarray, np.ndarray]]  # one extra drafter step: (q, raw logits) at N+1


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
    p_row: np.ndarray | None = None  # the distributions behind the token, for top-alternative lookups
    q_row: np.ndarray | None = None


def accept_round(draft_tokens: list[int], draft_probs: np.ndarray, draft_logits: np.ndarray | None,
                 target_logits: np.ndarray, rule: Rule, sampling: SamplingParams, rng: np.random.Generator,
                 bonus_draft: DraftStep | None = None, bonus: str = "auto") -> list[Emitted]:
    """Emit 1..N+1 tokens for one round.

    draft_probs: [N, vocab] processed q_i; draft_logits: [N, vocab] raw drafter logits (or None);
    target_logits: [N+1, vocab] raw verifier logits of the batch [last, x_1..x_N].
    bonus_draft: returns (q, logits_q) at position N+1 (one extra drafter step), for a relaxed bonus.
    bonus: "auto" (the rule's own policy: relaxed for scd, p otherwise), "target" (always p) or "relaxed"
    (the rule's target at N+1 for every rule); a verifier-only step always samples p.
    """
    num_draft = len(draft_tokens)
    assert target_logits.shape[0] == num_draft + 1, "verifier rows must be N+1"
    if sampling.greedy:
        return _accept_greedy(draft_tokens, draft_logits, target_logits)
    emitted: list[Emitted] = []
    for i, x in enumerate(draft_tokens):
        p = process(target_logits[i], sampling)
        q = draft_probs[i]
        logits_q = draft_logits[i] if draft_logits is not None else None
        try:
            decision = rule.decide(p, q, x, logits_p=target_logits[i], logits_q=logits_q)
        except NumericsError as exc:
            raise NumericsError(f"rule {rule!r} at draft position {i + 1}: {exc}") from None
        require_finite(decision, p, q, x, rule=repr(rule), position=i + 1)
        # uniform in [0, 1) as float64: u < 1 always accepts an accept_prob of 1, never one of 0.
        if rng.random() < decision.accept_prob:
            emitted.append(Emitted(x, Verdict.ACCEPTED, i + 1, float(p[x]), float(q[x]), float(decision.pi_rej[x]),
                                   decision.accept_prob, decision.statistic, p_row=p, q_row=q))
            continue
        y = sample(residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res, rng)
        emitted.append(Emitted(y, Verdict.RESAMPLED, i + 1, float(p[y]), float(q[y]), float(decision.pi_res[y]),
                               decision.accept_prob, decision.statistic, rejected_token=x, p_row=p, q_row=q))
        return emitted
    p = process(target_logits[num_draft], sampling)
    pi_bonus, q_next = _bonus_target(p, target_logits[num_draft], rule, bonus if num_draft else "target",
                                     bonus_draft)
    y = sample(pi_bonus, rng)
    verdict = Verdict.BONUS if num_draft else Verdict.VERIFIER
    q_y = float(q_next[y]) if q_next is not None else None
    emitted.append(Emitted(y, verdict, num_draft + 1 if num_draft else 0, float(p[y]), q_y,
                           float(pi_bonus[y]), None, (), p_row=p, q_row=q_next))
    return emitted


def _bonus_target(p: np.ndarray, logits_p: np.ndarray, rule: Rule, policy: str,
                  bonus_draft: DraftStep | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(π_bonus, q at N+1 or None). The extra drafter step is paid only when the policy needs it."""
    relaxed = policy == "relaxed" or (policy == "auto" and rule.relaxed_bonus)
    if not relaxed or bonus_draft is None:
        return p, None
    q_next, logits_q_next = bonus_draft()
    if policy == "auto":
        return rule.bonus(p, q_next, logits_p=logits_p, logits_q=logits_q_next), q_next
    return rule.relaxed_target(p, q_next, logits_p=logits_p, logits_q=logits_q_next), q_next


def _accept_greedy(draft_tokens: list[int], draft_logits: np.ndarray | None,
                   target_logits: np.ndarray) -> list[Emitted]:
    """Temperature 0: exact argmax matching for every rule (SPEC §2); probabilities reported at T=1."""
    emitted: list[Emitted] = []
    for i, x in enumerate(draft_tokens):
        target = _argmax(target_logits[i])
        p = _shown(target_logits[i])
        q = _shown(draft_logits[i]) if draft_logits is not None else None
        if x == target:
            emitted.append(Emitted(x, Verdict.ACCEPTED, i + 1, float(p[x]), _prob(q, x), 1.0, 1.0,
                                   (("accept_prob", 1.0),), p_row=p, q_row=q))
            continue
        emitted.append(Emitted(target, Verdict.RESAMPLED, i + 1, float(p[target]), _prob(q, target), 1.0, 0.0,
                               (("accept_prob", 0.0),), rejected_token=x, p_row=p, q_row=q))
        return emitted
    last = target_logits[len(draft_tokens)]
    target = _argmax(last)
    p = _shown(last)
    verdict = Verdict.BONUS if draft_tokens else Verdict.VERIFIER
    emitted.append(Emitted(target, verdict, len(draft_tokens) + 1 if draft_tokens else 0, float(p[target]), None,
                           1.0, None, (), p_row=p))
    return emitted


def _shown(logits: np.ndarray) -> np.ndarray:
    """The T=1 distribution a greedy round reports (p(x) in the TUI; no decision reads it). float32 arithmetic
    is ample for a shown probability and several times cheaper than the float64 softmax the rules use — a
    cost paid per sequence per step, K times over when K sequences share a batch."""
    z = np.asarray(logits, dtype=np.float32) - np.max(logits)
    np.exp(z, out=z)
    z /= z.sum(dtype=np.float64)
    return z


def _argmax(logits: np.ndarray) -> int:
    """argmax that refuses NaN/+inf (numpy's argmax returns the first NaN, as if it were the best token)."""
    best = int(np.argmax(logits))
    if not np.isfinite(logits[best]):
        raise NumericsError(f"the verifier's logits hold a non-finite value ({logits[best]}) at token {best}")
    return best


def _prob(row: np.ndarray | None, token: int) -> float | None:
    return float(row[token]) if row is not None else None
