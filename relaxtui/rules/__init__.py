"""Acceptance rules of the unified framework (Xia, Ribar & Balanca 2026, arXiv 2607.08690; docs/method.md).

Vocabulary: the drafter proposes *draft* tokens x_1..x_N with processed probabilities q; the verifier's
processed distribution is p. A draft is *accepted* when u < min(1, π_rej(x)/q(x)); the first rejection
emits a *resampled* token from norm((π_res − q)+); when all N are accepted a *bonus* token comes from
π_bonus. Strict speculative sampling is π_rej = π_res = π_bonus = p; every relaxed rule swaps in its own
targets. Each rule is a small pure-numpy module; the loop only calls ``Rule.decide`` and ``Rule.bonus``.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

from relaxtui import checks
from relaxtui.checks import BadValue
from relaxtui.errors import UserError
from relaxtui.rules.base import Decision, Rule, acceptance_probability, residual
from relaxtui.rules.cactus import Cactus
from relaxtui.rules.cascades import CascOpt, CascTok
from relaxtui.rules.ensemble import Ensemble
from relaxtui.rules.fly import Fly
from relaxtui.rules.mars import Mars
from relaxtui.rules.mentored import Mentored
from relaxtui.rules.rfuzzy import RFuzzy
from relaxtui.rules.scd import Contrastive
from relaxtui.rules.strict import Strict
from relaxtui.rules.threshold import Threshold
from relaxtui.rules.topk import TopkDelta, TopkRatio
from relaxtui.rules.typical import Typical

SECOND_KNOB = re.compile(r"(?P<name>[^\[\]:]+)\[(?P<key>[^\[\]=]+)=(?P<value>[^\[\]]+)\]")  # NAME[KNOB2NAME=VALUE]
V = TypeVar("V")


def base_name(name: str) -> str:
    """The rule a name names: ``topk-delta[k=15]`` (a second knob riding in the name, ``split_spec``) is topk-delta."""
    return name.partition("[")[0]


class ByRule(dict[str, V]):
    """A table keyed by rule name that answers for a name with a second knob in it (``topk-delta[k=15]``) as for the
    rule's own, by ``[]`` and by ``get``: a face that looks a rule up by the name it was given finds it."""

    def __missing__(self, name: str) -> V:
        if base_name(name) == name:
            raise KeyError(name)
        return self[base_name(name)]

    def get(self, name: str, default: Any = None) -> Any:  # (the base name's entry too)
        return self[name] if name in self or base_name(name) in self else default


RULES: dict[str, type[Rule]] = ByRule({
    cls.name: cls for cls in (Strict, Mentored, Cactus, Ensemble, RFuzzy, CascOpt, CascTok, Contrastive, Typical,
                              Fly, TopkDelta, TopkRatio, Threshold, Mars)
})


# The paper's grid per rule (docs/method.md), used by benchmarks and `tune`; the rules since the paper carry their
# engine's or authors' settings (fly: the paper's τ sweep; topk-*: TensorRT-LLM's and vLLM's examples; mars: the
# authors' sweep). threshold has none published (SGLang's default, 1 and 1, is exact): relaxtui's two settings.
PAPER_GRID: dict[str, tuple[float | None, ...]] = ByRule({
    "strict": (None,),
    "mentored": (0.3, 0.7, 0.95),
    "cactus": (0.1, 0.25, 1.0, 10.0),
    "ensemble": (0.95, 0.9, 0.8),
    "rfuzzy": (0.05, 0.2, 0.3),
    "casc-opt": (-0.1, 0.0, 0.05),
    "casc-tok": (0.0, 0.35, 0.8),
    "scd": (0.1, 0.5, 1.0),
    "typical": (0.09,),
    "fly": (0.3, 0.5, 0.8),
    "topk-delta": (0.6, 0.5),
    "topk-ratio": (0.5,),
    "threshold": (0.5, 0.3),
    "mars": (0.9, 0.84, 0.98),
})


def split_spec(spec: str, knob: float | None = None) -> tuple[str, float | None]:
    """``NAME``, ``NAME:KNOB`` or ``NAME:KNOB:KNOB2`` (how the eval grid pins a knob, accepted wherever a rule is named)
    into the rule name and its knob; a knob pinned in the spec and one given apart (``alpha``) must agree. A rule's
    second knob (``topk-delta:0.5:15``; ``NAME::KNOB2`` leaves the first to ``alpha`` or its default) rides in the name
    as ``NAME[KNOB2NAME=VALUE]`` (``topk-delta[k=15]``), which ``make``, ``rule_class`` and this function read too, so
    every face carries it as it carries a name. A refusal names the setting (a BadValue: each face spells it,
    relaxtui.options)."""
    name, pinned, text = spec.partition(":")
    parts = text.split(":") if pinned else []
    if len(parts) > 2:
        raise BadValue("rule", f"{spec!r}: give at most two knobs, NAME:KNOB:KNOB2")
    if len(parts) == 2:
        name = _with_second_knob(name, parts[1], spec)
        if not parts[0]:
            return name, knob
    if not parts:
        return name, knob
    value = _number(parts[0], spec, "the knob after ':'")
    if knob is not None and knob != value:
        raise BadValue("alpha", f"{knob:g} and the knob pinned in rule {spec!r} disagree; give the knob once")
    return name, value


def _number(text: str, spec: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadValue("rule", f"{spec!r}: {what} must be a number") from None
    if math.isnan(value) or value == math.inf:
        raise BadValue("rule", f"{spec!r}: {what} must be a number, not {text}")
    return value


def _with_second_knob(name: str, text: str, spec: str) -> str:
    """``name`` with its second knob in it (``topk-delta[k=15]``), checked against the rule's range now."""
    if base_name(name) != name:
        raise BadValue("rule", f"{spec!r}: the second knob is given twice")
    cls = rule_class(name)
    if cls.knob2_name is None:
        raise BadValue("rule", f"{spec!r}: rule {name!r} takes no second knob")
    value = cls.check_knob2(_number(text, spec, "the second knob"))
    return f"{name}[{cls.knob2_name}={value:g}]"


def second_knob(name: str) -> tuple[str, float | None]:
    """(the rule's name, the second knob riding in ``name``, or None); a malformed or foreign one is one line."""
    found = SECOND_KNOB.fullmatch(name)
    if found is None:
        if "[" in name or "]" in name:
            raise BadValue("rule", f"{name!r}: a second knob is written NAME[KNOB2NAME=VALUE], or NAME:KNOB:KNOB2")
        return name, None
    cls = rule_class(found["name"])
    if found["key"] != cls.knob2_name:
        known = f"its second knob is {cls.knob2_name!r}" if cls.knob2_name else "it takes no second knob"
        raise BadValue("rule", f"{name!r}: rule {found['name']!r} has no knob {found['key']!r} ({known})")
    return found["name"], _number(found["value"], name, f"{found['key']}")


def rule_class(name: str) -> type[Rule]:
    """The rule called ``name`` (a second knob in it aside); an unknown name is one line listing the known ones."""
    try:
        return RULES[name]
    except KeyError:
        raise UserError(f"unknown rule {base_name(name)!r}; known rules: {', '.join(RULES)}") from None


def make(name: str, knob: float | None = None, *, temperature: float = 1.0) -> Rule:
    """Build a rule by its name: the factory every face calls once per request or config. The knob is validated
    (range and orientation in the message), and a second knob riding in the name (``split_spec``) too;
    ``temperature`` is the run's, 0 = greedy, which a rule that cannot run greedy refuses here, the one place that
    says so (the loop only re-checks it). ``scd`` divides its contrast by the temperature (by 1 at greedy, where p is
    the T = 1 softmax); other rules ignore it."""
    base, knob2 = second_knob(name)
    cls = rule_class(base)
    if temperature == 0 and not cls.greedy_ok:
        raise refuse_greedy(base)
    return cls(knob, knob2=knob2, temperature=temperature or 1.0)


class RuleSpec(checks.Text):
    """The rule setting's check (relaxtui.options.RULE): text that names a known rule as ``NAME``, ``NAME:KNOB`` or
    ``NAME:KNOB:KNOB2`` (or ``NAME[KNOB2NAME=VALUE]``, how the second knob rides in a name), each knob pinned in it
    within the rule's range. Whether a rule without a pinned knob has one to run with depends on the knob given
    apart (``alpha``): ``make`` says that. The spec is kept as it was given."""

    def check(self, value: object, name: str) -> str:
        spec = super().check(value, name)
        try:
            rule, knob = split_spec(spec)
            cls = rule_class(second_knob(rule)[0])
            if knob is not None:
                cls.check_knob(knob)
        except BadValue as exc:  # a knob's own refusal names alpha: here it is the knob pinned in the rule
            raise BadValue(name, exc.problem if exc.name == "rule" else f"{spec!r}: the knob {exc.problem}") from None
        except UserError:  # an unknown name
            raise BadValue(name, f"must name a known rule (got {base_name(spec.partition(':')[0])!r}; known: "
                                 f"{', '.join(RULES)})") from None
        return spec


RULE_SPEC = RuleSpec()


def refuse_greedy(name: str) -> BadValue:
    """The one refusal of a rule that cannot run greedy: the factory raises it, the loop's re-check too."""
    return BadValue("rule", f"{name!r} cannot run greedy (temperature 0); give a temperature above 0")


__all__ = ["PAPER_GRID", "RULES", "RULE_SPEC", "Decision", "Rule", "RuleSpec", "acceptance_probability", "base_name",
           "make", "refuse_greedy", "residual", "rule_class", "second_knob", "split_spec"]
