"""What every acceptance rule shares: the Rule base class, the decision it returns, the residual.

A rule maps (p, q, x, raw logits, knob) to two replacement targets for p: π_rej, used in the acceptance
test min(1, π_rej(x)/q(x)), and π_res, from which the residual norm((π_res − q)+) is drawn after a
rejection. π_bonus (the token after N accepted drafts) is p unless the rule says otherwise.
All arrays are 1-D float64 over the verifier's vocabulary; nothing here does I/O or draws randomness.

Two hooks reach past one position (docs/method.md "Rules that see more than one position"): a rule that keeps its
relaxation at temperature 0 reads each verifier row's largest probabilities at T = 1 (``greedy_top``), and a
look-ahead rule (``lookahead``: FLy) may keep a draft its own test rejects when the drafts after it pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from relaxtui.checks import BadValue
from relaxtui.errors import NumericsError


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule's verdict material for one draft position."""

    pi_rej: np.ndarray  # [vocab]
    pi_res: np.ndarray  # [vocab]
    accept_prob: float
    statistic: tuple[tuple[str, float], ...] = ()


def acceptance_probability(pi_rej: np.ndarray, q: np.ndarray, x: int) -> float:
    """min(1, π_rej(x)/q(x)); q(x) = 0 rejects (the draft could not have come from q).

    Non-finite inputs raise: Python's ``min(1, nan)`` is 1, so an unguarded NaN would silently accept."""
    return accept_chance(float(pi_rej[x]), float(q[x]), x)


def accept_chance(pi_x: float, q_x: float, x: int) -> float:
    """``acceptance_probability`` from the two numbers it reads (token ``x``'s, named in the error)."""
    if not (math.isfinite(q_x) and math.isfinite(pi_x)):  # (math's: numpy's costs a microsecond a call)
        raise NumericsError(f"non-finite acceptance input for token {x}: pi_rej(x)={pi_x}, q(x)={q_x}")
    if q_x <= 0.0:
        return 0.0
    return min(1.0, pi_x / q_x)


def require_finite(decision: Decision, p: np.ndarray, q: np.ndarray, x: int, *, rule: str, position: int) -> None:
    """Every number an acceptance decision rests on must be finite: a NaN compares False everywhere, so it
    would silently turn into "accept" (min(1, NaN) = 1) or "defer" depending on how a test is written."""
    require_finite_values(float(p[x]), float(q[x]), float(decision.pi_rej[x]), decision.statistic, x, rule=rule,
                          position=position)


def require_finite_values(p_x: float, q_x: float, pi_x: float, statistic: tuple[tuple[str, float], ...], x: int, *,
                          rule: str, position: int) -> None:
    """``require_finite`` on the numbers themselves (a pointwise decision has no arrays)."""
    values = (("p(x)", p_x), ("q(x)", q_x), ("pi_rej(x)", pi_x), *statistic)
    for _, value in values:  # (a plain loop: this runs per draft position, right after the verify batch)
        if not math.isfinite(value):
            shown = ", ".join(f"{name}={value}" for name, value in values if not math.isfinite(value))
            raise NumericsError(f"rule {rule} at draft position {position}, token {x}: non-finite {shown} "
                                "(a broken model output or a bug in the rule; nothing was accepted)")


def residual(pi_res: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Unnormalised (π_res − q)+; when it has no mass (π_res ≤ q everywhere, i.e. π_res == q) fall back
    to π_res itself, so the caller never normalises an all-zero row."""
    mass = np.maximum(pi_res - q, 0.0)
    if mass.sum() > 0.0:
        return mass
    return pi_res


class Rule:
    """Base class: subclasses implement ``evaluate``; they may also relax the bonus or replace ``decide``."""

    name: ClassVar[str] = "?"
    knob_name: ClassVar[str | None] = None
    greedy_ok: ClassVar[bool] = True  # False: refuses temperature 0 (rfuzzy, scd)
    # True: reads raw logits over the whole vocabulary (casc-tok, scd), so it always gets whole rows; False: it
    # reads only p and q, and where top-k/top-p bound them gets them on their support (decoding/acceptance.py)
    needs_logits: ClassVar[bool] = False
    # True: reads what only a drafter with a distribution has — its raw logits (scd) or its confidence, max q (casc-opt)
    # — so a drafter without one (an n-gram draft: q one-hot on its token, docs/method.md "Drafts without a
    # distribution") is refused; False: the rule reads p, q(x) and the draft's law, which one-hot q gives exactly
    needs_draft_logits: ClassVar[bool] = False
    # True: may emit a token the processed p gives no mass (a relaxed target mixes in q), so a report of every token's
    # log p(x) needs whole rows (outside p's support is outside the engine's top-k candidates); strict never does
    may_leave_support: ClassVar[bool] = True
    relaxed_bonus: ClassVar[bool] = False  # True: π_bonus is the rule's target at N+1 (scd)
    x_dependent: ClassVar[bool] = False  # True: the targets depend on the drafted token (cactus)
    subtract_draft: ClassVar[bool] = True  # False: after a rejection emit from π_res itself (typical)
    knob_default: ClassVar[float | None] = None  # used when the knob is optional
    knob_help: ClassVar[str] = ""  # range and orientation, shown when a knob is out of range
    relaxes_upward: ClassVar[bool] = True  # a bigger knob relaxes more (False: a smaller one does — ensemble's w,
    # typical's ε): what a bound on "the most relaxed knob allowed" compares against (serve's --allow-rules)
    # A second knob (topk-delta's k, fly's window W, threshold's t_single), set as NAME:KNOB:KNOB2 wherever a rule is
    # named; it rides in the rule's name as NAME[KNOB2NAME=VALUE] (rules.split_spec). None: the rule has one knob
    knob2_name: ClassVar[str | None] = None
    knob2_default: ClassVar[float | None] = None  # None with a knob2_name: the rule works its default out (fly's W)
    knob2_help: ClassVar[str] = ""  # range and orientation, shown when the second knob is out of range
    # True: a draft the rule's test rejects may still be kept when the drafts after it in the same round pass that
    # test (FLy): decoding/acceptance.py judges such a rule on its look-ahead path (``window``, ``defers``); every
    # other rule is judged one position at a time
    lookahead: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that changes its test (its own ``evaluate``, ``targets`` or ``decide``) but has no
        ``pointwise`` of its own reads whole supports: one inherited from the rule it refines would answer for a
        test it no longer makes."""
        super().__init_subclass__(**kwargs)
        changes_test = any(name in cls.__dict__ for name in ("evaluate", "targets", "decide"))
        if changes_test and "pointwise" not in cls.__dict__:
            cls.pointwise = Rule.pointwise  # type: ignore[method-assign]  # replacing the inherited one is the point

    def __init__(self, knob: float | None = None, *, knob2: float | None = None, temperature: float = 1.0) -> None:
        self.knob = self.check_knob(knob)
        self.knob2 = self.check_knob2(knob2)
        self.temperature = temperature

    @classmethod
    def check_knob(cls, knob: float | None) -> float | None:
        """Validate the knob; subclasses override ``knob_ok``. Raises a BadValue naming the setting (``alpha``: each
        face spells it, relaxtui.options) with range and orientation."""
        if cls.knob_name is None:
            if knob is not None:
                raise BadValue("alpha", f"must not be given: rule {cls.name!r} takes no knob (got {knob:g})")
            return None
        if knob is None:
            if cls.knob_default is None:
                raise BadValue("alpha", f"is missing: rule {cls.name!r} needs a knob, {cls.knob_name} "
                                        f"({cls.knob_help})")
            return cls.knob_default
        if not (np.isfinite(knob) or knob == -np.inf) or not cls.knob_ok(knob):
            raise BadValue("alpha", f"{knob:g} is out of range for {cls.name!r}: {cls.knob_name} {cls.knob_help}")
        return float(knob)

    @classmethod
    def knob_ok(cls, knob: float) -> bool:
        return True

    @classmethod
    def check_knob2(cls, knob2: float | None) -> float | None:
        """Validate the second knob (``knob2_ok``); it has no flag of its own, so a refusal names the ``rule``."""
        if cls.knob2_name is None:
            if knob2 is not None:
                raise BadValue("rule", f"{cls.name!r} takes no second knob (got {knob2:g})")
            return None
        if knob2 is None:
            return cls.knob2_default
        if not np.isfinite(knob2) or not cls.knob2_ok(knob2):
            raise BadValue("rule", f"{cls.name!r}: {knob2:g} is out of range for {cls.knob2_name}, {cls.knob2_help}")
        return float(knob2)

    @classmethod
    def knob2_ok(cls, knob2: float) -> bool:
        return True

    def check_draft_max(self, draft_max: int) -> None:
        """Refuse a draft length the rule cannot run with, in one line naming ``draft_max`` (each face spells it);
        every rule but FLy runs at any."""

    def greedy_top(self) -> int:
        """How many of each verifier row's largest probabilities at T = 1 the rule reads at temperature 0. 0, every
        paper rule: exact argmax matching (docs/method.md "Temperature 0"). k > 0: the rule keeps its relaxation
        there, and the greedy round hands it those k (``greedy_keeps``, or ``defers`` for a look-ahead rule)."""
        return 0

    def greedy_keeps(self, top_ids: np.ndarray, top_probs: np.ndarray, x: int) -> bool:
        """At temperature 0, whether a draft ``x`` other than the argmax is kept, from the row's ``greedy_top()``
        largest probabilities at T = 1 (descending) and their ids."""
        return False

    def window(self, n: int, draft_max: int | None = None) -> int:
        """A look-ahead rule: how many drafts after a deferred rejection must pass for it to be kept, in a round of
        ``n`` drafts of a generation asking for ``draft_max`` (None: not told; the round's own n stands in)."""
        return 0

    def defers(self, probs: np.ndarray) -> bool:
        """A look-ahead rule: whether a draft its test rejects may wait for the drafts after it, from the verifier's
        distribution there (processed when sampling; at temperature 0 its ``greedy_top()`` largest at T = 1)."""
        return False

    def evaluate(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                 logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """(π_rej, π_res, statistic): each rule computes its targets and the number behind them once."""
        raise NotImplementedError

    def pointwise(self, p_x: float, q_x: float) -> tuple[float, tuple[tuple[str, float], ...]] | None:
        """(π_rej(x), statistic) from p(x) and q(x) alone, for a rule whose acceptance test reads nothing else: the
        support path then tests a draft without building p and q over their supports (arrays are built only for a
        rejection's residual). The same numbers ``decide`` gives (tests/rules/test_rules.py checks every registered
        rule; a subclass that changes its test and has no ``pointwise`` of its own gets None). None: the rule reads
        more."""
        return None

    def targets(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
                logits_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        pi_rej, pi_res, _ = self.evaluate(p, q, x, logits_p=logits_p, logits_q=logits_q)
        return pi_rej, pi_res

    def decide(self, p: np.ndarray, q: np.ndarray, x: int, *, logits_p: np.ndarray | None = None,
               logits_q: np.ndarray | None = None) -> Decision:
        pi_rej, pi_res, stats = self.evaluate(p, q, x, logits_p=logits_p, logits_q=logits_q)
        accept = acceptance_probability(pi_rej, q, x)
        return Decision(pi_rej, pi_res, accept, (("accept_prob", accept), *stats.items()))

    def bonus(self, p: np.ndarray, q: np.ndarray | None = None, *, logits_p: np.ndarray | None = None,
              logits_q: np.ndarray | None = None) -> np.ndarray:
        """π_bonus under the rule's own policy: p, unless the rule relaxes its bonus (scd)."""
        return p

    def relaxed_target(self, p: np.ndarray, q: np.ndarray, *, logits_p: np.ndarray | None = None,
                       logits_q: np.ndarray | None = None) -> np.ndarray:
        """The rule's target at a position with no draft (``--bonus relaxed``): π_res, which does not depend
        on x for every rule but CACTUS — whose target needs a drafted token, so it keeps p."""
        if self.x_dependent:
            return p
        return self.evaluate(p, q, int(np.argmax(q)), logits_p=logits_p, logits_q=logits_q)[1]

    def __repr__(self) -> str:
        knobs = [f"{name}={value:g}" for name, value in ((self.knob_name, self.knob), (self.knob2_name, self.knob2))
                 if value is not None]
        return f"{self.name}({', '.join(knobs)})" if knobs else self.name
