"""The floors of the house, read from the source: ``engine/`` is the bottom and never imports ``decoding/``;
``decoding/`` sees the engine only through its protocol module (``relaxtui.engine.api``), never the llama.cpp
wrapper, so a new backend or a fake plugs in below the loops without touching them; ``costmodel/`` stands on one floor,
below the pair (``session.py``) and the faces; the round never sees priced drafting; and the faces ask the pair for
their drafters."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "relaxtui"


def imports_of(folder: str) -> dict[str, set[str]]:
    """Module path -> every ``relaxtui.*`` module it imports (at any level: lazy imports count too)."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[str(path.relative_to(PACKAGE))] = {n for n in names if n.startswith("relaxtui")}
    return found


def test_engine_imports_nothing_above_it():
    above = ("relaxtui.decoding", "relaxtui.evals", "relaxtui.tui", "relaxtui.serve", "relaxtui.commands",
             "relaxtui.costmodel", "relaxtui.session", "relaxtui.models", "relaxtui.rules")
    bad = {path: sorted(n for n in names if n.startswith(above)) for path, names in imports_of("engine").items()}
    assert {path: names for path, names in bad.items() if names} == {}


def test_decoding_sees_the_engine_only_through_its_protocol_module():
    bad = {path: sorted(n for n in names if n.startswith("relaxtui.engine") and n != "relaxtui.engine.api")
           for path, names in imports_of("decoding").items()}
    assert {path: names for path, names in bad.items() if names} == {}


def test_the_evals_wings_point_one_way():
    """Task files are read by the run and by the analysis, and the run writes the analysis's signals into each record
    (``run/units.py``); neither task files nor the analysis import the run, and task files import neither."""
    imports = {path: names for wing in ("taskfiles", "analysis") for path, names in imports_of(f"evals/{wing}").items()}
    bad = {path: sorted(n for n in names if n.startswith("relaxtui.evals.run")
                        or (path.startswith("evals/taskfiles") and n.startswith("relaxtui.evals.analysis")))
           for path, names in imports.items()}
    assert imports and {path: names for path, names in bad.items() if names} == {}


def test_costmodel_imports_nothing_above_it():
    """The cost model times and prices what the loops run: it may read decoding/, the engine and the rules, never the
    pair that loads models (session.py), the models store, nor a face (evals, serve, tui, commands)."""
    above = ("relaxtui.session", "relaxtui.pair", "relaxtui.models", "relaxtui.evals", "relaxtui.serve", "relaxtui.tui",
             "relaxtui.commands")
    found = imports_of("costmodel")
    bad = {path: sorted(n for n in names if n.startswith(above)) for path, names in found.items()}
    assert found and {path: names for path, names in bad.items() if names} == {}


def test_the_round_does_not_import_the_cut():
    """Priced drafting is a drafter (``decoding/priced.py``): the round's steps know nothing of it."""
    names = imports_of("decoding")["decoding/round.py"]
    assert "relaxtui.decoding.drafting" in names  # the scan reads the round
    assert not names & {"relaxtui.decoding.draft_cut", "relaxtui.decoding.priced"}


def faces_building_drafters() -> tuple[set[str], dict[str, list[str]]]:
    """(what builds a drafter: the factory, every drafter class, the wrapper that prices one; every module outside
    decoding/ and session.py that imports one of them): only the pair (``session.Pair``) builds drafters for the
    faces."""
    builders = {"make_drafter", "PricedDrafter"}
    for path in sorted((PACKAGE / "decoding").glob("*.py")):  # every class that drafts: it declares ``traits``
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef) or any(getattr(b, "id", "") == "Protocol" for b in node.bases):
                continue  # (the interface itself, ``Drafter``, is what every face types against)
            declares = any("traits" in ast.unparse(s).split("=")[0].split(":")[0] for s in node.body
                           if isinstance(s, ast.AnnAssign | ast.Assign))
            if declares or any(getattr(b, "id", "") == "BaseDrafter" for b in node.bases):
                builders.add(node.name)
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name.startswith("decoding/") or name == "session.py":
            continue
        hits = [alias.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("relaxtui.decoding") for alias in node.names
                if alias.name in builders]
        if hits:
            found[name] = hits
    return builders, found


def test_only_the_pair_builds_drafters_for_faces():
    builders, found = faces_building_drafters()
    assert {"ModelDrafter", "NgramDrafter", "SuffixDrafter", "PricedDrafter", "make_drafter"} <= builders
    assert "Drafter" not in builders and found == {}


def test_the_scan_sees_imports_at_every_level(tmp_path):
    """The checks above would pass on an empty scan: this one proves the scan finds top-level and lazy imports."""
    found = imports_of("decoding")
    assert "relaxtui.engine.api" in found["decoding/loop.py"]
    assert any("relaxtui.rules" in names for names in found.values())
    assert "relaxtui.decoding.drafters" in imports_of("")["session.py"]  # (the pair's own import: the scan sees it)


def test_the_option_table_stands_above_the_rules_and_the_factory():
    """``options.py`` lists the rules' and the drafter kinds' names, so it imports them; nothing it stands on imports it
    back (a lower layer names a setting by its name and checks it with ``relaxtui.checks``), and it imports no face."""
    table = imports_of("")["options.py"]
    assert {"relaxtui.rules", "relaxtui.decoding.drafters"} <= table
    assert not {n for n in table if n.startswith(("relaxtui.session", "relaxtui.pair", "relaxtui.commands",
                                                  "relaxtui.serve", "relaxtui.tui", "relaxtui.evals"))}
    below = {path: names for folder in ("decoding", "rules", "engine", "costmodel") for path, names in
             imports_of(folder).items()}
    assert below and {path for path, names in below.items() if "relaxtui.options" in names} == set()


LOWER = ("decoding", "rules", "engine", "costmodel")


def lower_raises() -> list[tuple[str, ast.Raise]]:
    """Every ``raise`` of the floors under the faces (and of the pair), with the module it is in."""
    paths = [p for folder in LOWER for p in sorted((PACKAGE / folder).rglob("*.py"))]
    paths += [PACKAGE / "session.py", PACKAGE / "pair.py"]
    return [(str(path.relative_to(PACKAGE)), node) for path in paths for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Raise) and node.exc is not None]


def test_lower_layers_name_settings_never_flags():
    """A refusal under the faces names the setting (``BadValue("draft_max", ...)``, a setting it advises as
    ``{ctx_size}``) and each face spells it (issue 45: about 14 messages named command-line flags, which a server
    request then had to answer with): no text of a raise there holds a flag, and each setting a BadValue names is
    one the option table knows."""
    import re

    from relaxtui.options import SETTINGS

    flag = re.compile(r"(^|[\s(`'\"])--[a-z]")
    found = lower_raises()
    flags = [(path, node.lineno) for path, node in found for text in ast.walk(node)
             if isinstance(text, ast.Constant) and isinstance(text.value, str) and flag.search(text.value)]
    assert len(found) > 50 and flags == []
    named = {(path, call.args[0].value) for path, node in found for call in ast.walk(node)
             if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "BadValue"
             and call.args and isinstance(call.args[0], ast.Constant)}
    assert {"ctx_size", "parallel", "draft_kind", "bonus", "alpha"} <= {name for _, name in named}
    assert {(path, name) for path, name in named if name not in SETTINGS} == set()
