"""What the rule tests check rules with: each rule's exact first-token law (the independent reference the Monte
Carlo tests compare with), the paper-grid settings that run on supports, random logit rows, and a spy rule."""

from __future__ import annotations

import numpy as np

from relaxtui.rules import PAPER_GRID, make
from relaxtui.rules.base import Rule, residual

SUPPORT_RULES = [(name, knob) for name, knobs in PAPER_GRID.items() for knob in knobs
                 if not make(name, knob).needs_logits]


def exact_first_token_law(rule, p, q, logits_p, logits_q) -> np.ndarray:
    """P(first emitted = y) = Σ_x q(x)[a(x)·1{y=x} + (1−a(x))·R_x(y)], R_x the normalised residual of π_res(x).

    Exact for every rule, x-dependent (cactus) or not; equals π when π_rej = π_res."""
    law = np.zeros_like(p)
    for x in range(len(p)):
        decision = rule.decide(p, q, x, logits_p=logits_p, logits_q=logits_q)
        fallback = residual(decision.pi_res, q) if rule.subtract_draft else decision.pi_res
        law[x] += q[x] * decision.accept_prob
        law += q[x] * (1 - decision.accept_prob) * fallback / fallback.sum()
    return law


def rows(seed: int, n: int, vocab: int, scale: float = 3.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=scale, size=(n, vocab)).astype(np.float32)


class Spy(Rule):
    """Strict, recording the length of the rows it is handed and whether logits came with them."""

    name = "spy"

    def __init__(self, needs_logits: bool) -> None:
        super().__init__()
        self.needs_logits = needs_logits  # type: ignore[misc]
        self.seen: list[tuple[int, bool]] = []

    def evaluate(self, p, q, x, *, logits_p=None, logits_q=None):
        self.seen.append((len(p), logits_p is not None))
        return p, p, {}
