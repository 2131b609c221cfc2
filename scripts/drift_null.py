#!/usr/bin/env python3
"""Does the race's drift sequence hold strict against the verifier alone at zero? (issue 44, Found 6)

Strict speculative sampling is lossless: the verifier's mean log-prob per token of its outputs is the verifier
alone's in expectation, so the paired Δ (strict − verifier alone) per problem must be centred on 0 and its
confidence sequence must keep 0 inside. This reads an eval folder that ran the verifier alone (``--no-spec``) and
strict at one N on the same problems and seeds, feeds the per-problem Δ mean log-prob (repeats averaged) to the
race's own drift sequence in the race's order (its clipping window and level, as `tune` runs it with
--max-drift D), and prints the interval after every batch of problems, then at the end.

    .venv/bin/relaxtui eval math500 --limit 45 --no-spec --rule strict --draft-max 3 --max-tokens 256 --out F
    .venv/bin/python scripts/drift_null.py F [--max-drift 0.1] [--confidence 0.95]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relaxtui.evals.analysis.confseq import ConfidenceSequence  # noqa: E402
from relaxtui.evals.analysis.race import RaceRules  # noqa: E402
from relaxtui.evals.run.race_run import race_order  # noqa: E402
from relaxtui.evals.run.results import ResultsStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--max-drift", type=float, default=0.1)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rules = RaceRules(confidence=args.confidence, max_drop=None, max_drift=args.max_drift)
    by: dict[tuple[str, str], list[float]] = {}
    for record in ResultsStore(args.folder).records():
        rule = record["config"]["rule"]
        if rule in (None, "strict") and record.get("verifier_logprob") is not None:
            by.setdefault(("alone" if rule is None else "strict", record["problem_id"]), []).append(
                float(record["verifier_logprob"]))
    problems = sorted({pid for side, pid in by if (("alone", pid) in by and ("strict", pid) in by)})
    if not problems:
        raise SystemExit(f"{args.folder}: no problem ran both the verifier alone and strict")
    sequence = ConfidenceSequence(rules.sequence_alpha, *rules.value_range("drift"),
                                  watch=(rules.threshold("drift", 1.0),))
    # the race's window is lopsided (clipping above the threshold only makes "holds" harder); a symmetric one
    # of the same level reads "centred on zero" without that tilt
    symmetric = ConfidenceSequence(rules.sequence_alpha, -1.0, 1.0)
    raw = []
    print(f"{args.folder}: {len(problems)} problems, drift window {rules.value_range('drift')} nats/token, "
          f"each side at {rules.sequence_alpha / 2:.4f} (as tune judges drift alone at {args.confidence:.0%})")
    print("| problems | mean Δlogp (raw) | race's sequence (window) | 0 inside | symmetric [-1, 1] | 0 inside |")
    print("|---:|---:|---|---|---|---|")
    for i, pid in enumerate(race_order(problems, args.seed), start=1):
        delta = (sum(by[("strict", pid)]) / len(by[("strict", pid)])
                 - sum(by[("alone", pid)]) / len(by[("alone", pid)]))
        raw.append(delta)
        sequence.update(rules.bounded("drift", delta))
        symmetric.update(min(max(delta, -1.0), 1.0))
        if i % 5 == 0 or i == len(problems):
            low, high = sequence.interval()
            s_low, s_high = symmetric.interval()
            print(f"| {i} | {sum(raw) / len(raw):+.4f} | {sequence.mean:+.4f} [{low:+.4f}, {high:+.4f}] | "
                  f"{'yes' if low <= 0 <= high else 'NO'} | {symmetric.mean:+.4f} [{s_low:+.4f}, {s_high:+.4f}] | "
                  f"{'yes' if s_low <= 0 <= s_high else 'NO'} |")
    spread = math.sqrt(sum((x - sum(raw) / len(raw)) ** 2 for x in raw) / max(len(raw) - 1, 1))
    print(f"\nper-problem Δ: mean {sum(raw) / len(raw):+.4f}, sd {spread:.4f}, "
          f"{sum(x < 0 for x in raw)} of {len(raw)} below 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
