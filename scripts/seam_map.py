"""Print the folder-level import map of relaxtui/ and the seam counts issue 32 tracks, for a tree (default: here).

    python scripts/seam_map.py [ROOT]

Reads source only (ast), imports nothing of the package: run it on a worktree of an older commit to compare.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "(top)"


def scan(root: Path) -> tuple[dict[str, set[str]], dict[str, int]]:
    imports: dict[str, set[str]] = defaultdict(set)
    counts = dict.fromkeys(("--draft-max definitions", "isinstance on rows", "kind-string compares",
                            "getattr probes", "type: ignore", "function-level imports"), 0)
    for path in sorted((root / "relaxtui").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        text = path.read_text()
        tree = ast.parse(text)
        counts["type: ignore"] += text.count("# type: ignore")
        counts["--draft-max definitions"] += len(re.findall(r"add_argument\(\s*\"--draft-max\"", text))
        counts["--draft-max definitions"] += len(re.findall(r"\.option\(\s*\"--draft-max\"", text))
        counts["isinstance on rows"] += len(re.findall(r"isinstance\([^)]*(TopLogits|np\.ndarray)", text))
        counts["kind-string compares"] += len(re.findall(
            r"kind\s*(==|!=|in)\s*\(?\s*\"(model|ngram|mtp)", text)) if "drafters" not in path.name else 0
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) == 3:
                counts["getattr probes"] += 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                counts["function-level imports"] += sum(isinstance(n, (ast.Import, ast.ImportFrom))
                                                        for n in ast.walk(node))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("relaxtui."):
                src, dst = folder(module), folder(node.module)
                if src != dst:
                    imports[src].add(dst)
    return imports, counts


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    imports, counts = scan(root)
    for src in sorted(imports):
        print(f"{src:>10} -> {', '.join(sorted(imports[src]))}")
    print()
    for name, value in counts.items():
        print(f"{name:>24}: {value}")


if __name__ == "__main__":
    main()
