"""Acceptance rules of the unified framework (Xia, Ribar & Balanca 2026, arXiv 2607.08690; docs/method.md).

Vocabulary: the drafter proposes *draft* tokens x_1..x_N with processed probabilities q; the verifier's
processed distribution is p. A draft is *accepted* when u < min(1, π_rej(x)/q(x)); the first rejection
emits a *resampled* token from norm((π_res − q)+); when all N are accepted a *bonus* token comes from
π_bonus. Strict speculative sampling is π_rej = π_res = π_bonus = p; every relaxed rule swaps in its own
targets. Each rule is a small pure-numpy module; the loop only calls ``Rule.decide`` and ``Rule.bonus``.
"""

from __future__ import annotations

import math

from relaxtui.checks import BadValue
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

# The paper's grid per rule (docs/method.md), used by benchmarks and `tune`.
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
    name and its knob; a knob pinned in the spec and one given apart (``alpha``) must agree. A refusal names the
    setting (a BadValue: each face spells it, relaxtui.options)."""
    name, pinned, text = spec.partition(":")
    if not pinned:
        return name, knob
    try:
        value = float(text)
    except ValueError:
        raise BadValue("rule", f"{spec!r}: the knob after ':' must be a number") from None
    if math.isnan(value) or value == math.inf:
        raise BadValue("rule", f"{spec!r}: the knob after ':' must be a number, not {text}")
    if knob is not None and knob != value:
        raise BadValue("alpha", f"{knob:g} and the knob pinned in rule {spec!r} disagree; give the knob once")
    return name, value


def rule_class(name: str) -> type[Rule]:
    """The rule called ``name``; an unknown name is one line listing the known ones."""
    try:
        return RULES[name]
    except KeyError:
        raise UserError(f"unknown rule {name!r}; known rules: {', '.join(RULES)}") from None


def make(name: str, knob: float | None = None, *, temperature: float = 1.0) -> Rule:
    """Build a rule by its name: the factory every face calls once per request or config. The knob is validated
    (range and orientation in the message); ``temperature`` is the run's, 0 = greedy, which a rule that cannot run
    greedy refuses here, the one place that says so (the loop only re-checks it). ``scd`` divides its contrast by
    the temperature (by 1 at greedy, where p is the T = 1 softmax); other rules ignore it."""
    cls = rule_class(name)
    if temperature == 0 and not cls.greedy_ok:
        raise refuse_greedy(name)
    return cls(knob, temperature=temperature or 1.0)


def refuse_greedy(name: str) -> BadValue:
    """The one refusal of a rule that cannot run greedy: the factory raises it, the loop's re-check too."""
    return BadValue("rule", f"{name!r} cannot run greedy (temperature 0); give a temperature above 0")


__all__ = ["PAPER_GRID", "RULES", "Decision", "Rule", "acceptance_probability", "make", "refuse_greedy", "residual",
           "rule_class", "split_spec"]
