"""What an eval run is asked to run: the grid (rules × knobs × draft lengths, and the verifier alone), repeats and
seeds, sampling and the token budget. ``EvalPlan.points()`` is the grid; ``rule_at`` builds each point's rule."""

from __future__ import annotations

from dataclasses import dataclass

from relaxtui.checks import RELAX_SCOPE
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.evals.run.results import GridPoint
from relaxtui.rules import PAPER_GRID, Rule, make, rule_class, split_spec


@dataclass(frozen=True)
class EvalPlan:
    rules: tuple[str, ...] = ("strict",)
    alphas: tuple[float | None, ...] = ()  # empty: each rule's paper grid (None: a rule without a knob)
    draft_max: tuple[int, ...] = (3,)
    no_spec: bool = True
    repeats: int = 1
    seed: int = 0
    max_tokens: int = 4096
    sampling: SamplingParams = SamplingParams()
    bonus: str = "auto"
    draft_min: int = 0
    adaptive: bool = False
    record_rows: bool = False  # speculative units keep their rounds' rows beside their records, for a replay of
    # other rules on the same drafts (costmodel/replay.py); not part of the run's identity: outputs do not change
    relax_scope: str = "all"  # where every relaxed point of the run relaxes (--relax-scope, decoding/thinking.py)

    def __post_init__(self) -> None:
        RELAX_SCOPE.check(self.relax_scope, "relax_scope")
        if self.repeats < 1:
            raise UserError(f"--repeats must be >= 1 (got {self.repeats})")
        if not self.rules and not self.no_spec:
            raise UserError("nothing to run: give --rule or --no-spec")
        self.points()  # every rule of the grid is built once before anything runs (a bad knob, greedy: one line)

    @property
    def has_spec(self) -> bool:
        return bool(self.rules)

    @staticmethod
    def _name(spec: str) -> str:
        return split_spec(spec)[0]

    def _knobs(self, spec: str) -> tuple[float | None, ...]:
        """``rule:knob`` pins the knob; a bare rule takes --alpha, or else its paper grid."""
        name, knob = split_spec(spec)
        if knob is not None or rule_class(name).knob_name is None:  # an unknown rule: one line
            return (knob,)
        return self.alphas or PAPER_GRID[name]

    def points(self) -> list[GridPoint]:
        points = [GridPoint(None, None, 0)] if self.no_spec else []
        for spec in self.rules:
            name = self._name(spec)
            for knob in self._knobs(spec):
                rule = self.rule_at(GridPoint(name, knob, 0))
                for n in self.draft_max:
                    if rule is not None:
                        rule.check_draft_max(n)  # FLy at N = 1: before any model loads, not at its first round
                    points.append(GridPoint(name, knob, n))
        return points

    def rule_at(self, point: GridPoint) -> Rule | None:
        """The rule a grid point runs (None: the verifier alone), built by the factory, the eval run's one place for
        it: its knob validated, and at temperature 0 a rule that cannot run greedy refused."""
        return make(point.rule, point.knob, temperature=self.sampling.temperature) if point.rule else None
