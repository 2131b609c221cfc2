"""Strict (lossless) speculative sampling: π_rej = π_res = π_bonus = p (Leviathan et al. 2023)."""

from __future__ import annotations

import numpy as np

from relaxtui.rules.base import Rule


class Strict(Rule):
    name = "strict"
    may_leave_support = False  # accepts x with probability min(1, p/q), resamples (p - q)+, bonuses from p

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        return p, p, {}

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]]:
        return p_x, ()
