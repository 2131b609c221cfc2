"""Acceptance rules of the unified framework (Xia, Ribar & Balanca 2026, arXiv 2607.08690; SPEC §2).

Vocabulary: the drafter proposes *draft* tokens x_1..x_N with processed probabilities q; the verifier's
processed distribution is p. A draft is *accepted* when u < min(1, π_rej(x)/q(x)); the first rejection
emits a *resampled* token from norm((π_res − q)+); when all N are accepted a *bonus* token comes from
π_bonus. Strict speculative sampling is π_rej = π_res = π_bonus = p; every relaxed rule swaps in its own
targets. Each rule is a small pure-numpy module; the loop only calls ``Rule.decide`` and ``Rule.bonus``.
"""

from __future__ import annotations

import math

from relaxtui.errors import UserError
from relaxtui.rules.base import Decision, Rule, acceptance_probability, residual
from relaxtui.rules.cactus import Cactus
from relaxtui.rules.cascades import CascOpt, CascTok
from relaxtui.rules.ensemble import Ensemble
from relaxtui.rules.mentored import Mentored
from relaxtui.rules.rfuzzy import RFuzzy
from relaxtui.rules.scd import Contrastive
from relaxtui.rules.strict import Strict
from relaxtui.rules.typical import Typical

RULES: dict[str, type[Rule]] = {
    cls.name: cls for cls in (Strict, Mentored, Cactus, Ensemble, RFuzzy, CascOpt, CascTok, Contrastive, Typical)
}

# The paper's grid per rule (SPEC §2), used by benchmarks and `tune`.
PAPER_GRID: dict[str, tuple[float | None, ...]] = {
    "strict": (None,),
    "mentored": (0.3, 0.7, 0.95),
    "cactus": (0.1, 0.25, 1.0, 10.0),
    "ensemble": (0.95, 0.9, 0.8),
    "rfuzzy": (0.05, 0.2, 0.3),
    "casc-opt": (-0.1, 0.0, 0.05),
    "casc-tok": (0.0, 0.35, 0.8),
    "scd": (0.1, 0.5, 1.0),
    "typical": (0.09,),
}


def split_spec(spec: str, knob: float | None = None) -> tuple[str, float | None]:
    """``NAME`` or ``NAME:KNOB`` (how the eval grid pins a knob, accepted wherever a rule is named) into the rule
    name and its knob; a knob pinned in the spec and one given apart (``--alpha``) must agree."""
    name, pinned, text = spec.partition(":")
    if not pinned:
        return name, knob
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--rule {spec!r}: the knob after ':' must be a number") from None
    if math.isnan(value) or value == math.inf:
        raise UserError(f"--rule {spec!r}: the knob after ':' must be a number, not {text}")
    if knob is not None and knob != value:
        raise UserError(f"--rule {spec!r} and --alpha {knob:g} disagree; give the knob once")
    return name, value


def make(name: str, knob: float | None = None, *, temperature: float = 1.0) -> Rule:
    """Build a rule by its CLI name; the knob is validated (range and orientation in the message).

    ``temperature`` is what ``scd`` divides its contrast by; other rules ignore it."""
    try:
        cls = RULES[name]
    except KeyError:
        raise UserError(f"unknown rule {name!r}; known rules: {', '.join(RULES)}") from None
    return cls(knob, temperature=temperature)


__all__ = ["PAPER_GRID", "RULES", "Decision", "Rule", "acceptance_probability", "make", "residual", "split_spec"]
