"""Write a tiny verifier/drafter pair (two dense Qwen3s of a few hundred KB, tests/support/tiny_models.py) to a folder:
a pair whose weights stay in the CPU's caches, to time the loop's own host time as a GPU-run model leaves it
(docs/method.md).

    .venv/bin/python scripts/tiny_pair.py DIR
    .venv/bin/relaxtui bench --verifier DIR/verifier.gguf --drafter DIR/drafter.gguf --draft-max 3 --json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (tests/support: run from the checkout)

from tests.support.tiny_models import write_dense  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    folder.mkdir(parents=True, exist_ok=True)
    for path in (write_dense(folder / "verifier.gguf", n_layer=2), write_dense(folder / "drafter.gguf", n_layer=1)):
        print(path)


if __name__ == "__main__":
    main()
