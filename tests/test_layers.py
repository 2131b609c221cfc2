"""The floors of the house, read from the source: ``engine/`` is the bottom and never imports ``decoding/``;
``decoding/`` sees the engine only through its protocol module (``relaxtui.engine.api``), never the llama.cpp
wrapper, so a new backend or a fake plugs in below the loops without touching them."""

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


def test_the_scan_sees_imports_at_every_level(tmp_path):
    """The checks above would pass on an empty scan: this one proves the scan finds top-level and lazy imports."""
    found = imports_of("decoding")
    assert "relaxtui.engine.api" in found["decoding/loop.py"]
    assert any("relaxtui.rules" in names for names in found.values())
