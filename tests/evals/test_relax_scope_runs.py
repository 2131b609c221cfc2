"""--relax-scope in an eval run: the plan carries it to every unit's generation, the run's identity names it where it
is not 'all' (so folders never mix scopes), and a bad scope is one line naming the setting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from relaxtui.checks import BadValue
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.results import GridPoint
from relaxtui.evals.run.units import WorkUnit, unit_config
from relaxtui.evals.tasks import get
from relaxtui.session import ModelOptions
from tests.support.eval_runs import PLAN


def identity(plan) -> dict:
    options = ModelOptions(verifier="v.gguf", drafter="d.gguf")
    return dict(RunIdentity.of(get("aime"), options, plan, thinking=None, data=None).settings)


def test_a_scope_other_than_all_is_part_of_the_run_identity():
    everywhere = identity(PLAN)
    assert "relax_scope" not in everywhere  # folders from before keep resuming
    for scope in ("thinking", "answer"):
        assert identity(replace(PLAN, relax_scope=scope)) == {**everywhere, "relax_scope": scope}
    point = GridPoint("mentored", 0.5, 2)
    ids = {RunIdentity(identity(replace(PLAN, relax_scope=s))).config_id(point) for s in ("all", "thinking", "answer")}
    assert len(ids) == 3


def test_every_unit_generates_under_the_plans_scope():
    sample = get("aime").load()[0]
    unit = WorkUnit(sample, GridPoint("mentored", 0.5, 2), "c", 0, 0)
    assert unit_config(PLAN, unit)[0].relax_scope == "all"
    assert unit_config(replace(PLAN, relax_scope="thinking"), unit)[0].relax_scope == "thinking"


def test_a_bad_scope_is_one_line():
    with pytest.raises(BadValue, match=r"^relax_scope must be one of all, thinking, answer \(got 'both'\)$"):
        replace(PLAN, relax_scope="both")
