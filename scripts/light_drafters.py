"""The light-drafter table (issue 33; docs/results/light_drafters/): each rule (strict, CACTUS, mentored, typical)
with each drafter (the 0.5B model, an n-gram kind, suffix) on the edit task and an open-ended task, through
`relaxtui eval` — one run folder per (task, drafter), each with its own verifier-alone baseline — then one table of
accuracy and drift, acceptance, mean accepted length, wall-clock and priced speed-up.

Why a script: the paper warns that the lightest drafters degenerate under relaxed rules; n-gram and suffix drafts
are the lightest there are (no q at all), so the table must be rebuilt whenever a rule or a drafter changes.

Usage, from the project root after set-up:
    .venv/bin/python scripts/light_drafters.py [--limit K] [--draft-max N] [--ngram-kind KIND]
                                               [--ngram-size-n KEY] [--out DIR] [--only-table]
Run folders go under DIR (default docs/results/light_drafters; resumable: a finished config is not run again); the
table is written to DIR/table.md and printed (DIR/README.md says what it shows: docs/results/light_drafters/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"edit": ROOT / "evals/examples/edit_code.toml", "open-ended": ROOT / "evals/examples/open_ended.toml"}
RULES = ["strict", "cactus:1", "mentored:0.7", "typical:0.09"]  # the paper's knobs


KEYED = ("ngram-simple", "ngram-map", "ngram-map-k4v", "ngram-mod")  # the kinds --ngram-size-n keys


def drafters(ngram_kind: str, key: int, draft_max: int) -> dict[str, tuple[list[str], int]]:
    """Each drafter with its flags and N: the model at 3 (bench's best N for this pair), the model-free ones at
    --draft-max with their drafts cut by price (the default --draft-cut auto: N is the longest a round verifies),
    a keyed n-gram kind with a key of ``key`` tokens (llama.cpp's 12 finds little in a short function)."""
    if ngram_kind in KEYED:
        ngram, label = ["--draft-kind", ngram_kind, "--ngram-size-n", str(key)], f"{ngram_kind} (n={key})"
    else:
        ngram, label = ["--draft-kind", ngram_kind], ngram_kind
    return {"0.5B model": (["--draft-kind", "model"], 3), label: (ngram, draft_max),
            "suffix": (["--draft-kind", "suffix"], draft_max)}


def run_eval(task: Path, flags: list[str], folder: Path, limit: int, draft_max: int) -> None:
    cmd = [str(ROOT / ".venv/bin/relaxtui"), "eval", str(task), "--rule", *RULES, "--draft-max", str(draft_max),
           "--no-spec", "--limit", str(limit), "--out", str(folder), *flags]
    print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def report(folder: Path) -> list[dict]:
    done = subprocess.run([str(ROOT / ".venv/bin/relaxtui"), "eval", "report", str(folder), "--json"], check=True,
                          cwd=ROOT, capture_output=True, text=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def delta(signal: dict) -> str:
    if signal.get("delta") is None:
        return "-"
    low, high = signal.get("ci_low"), signal.get("ci_high")
    interval = f" [{low:+.3f}, {high:+.3f}]" if low is not None and high is not None else ""
    return f"{signal['delta']:+.3f}{interval}"


def table(rows: list[tuple[str, str, dict]]) -> list[str]:
    lines = ["| task | drafter | config | acc | Δlogp vs ref [95%] | repetition | len ratio | accept | mean len | "
             "wall-clock [95%] | priced |", "|" + "---|" * 11]
    for task, drafter, row in rows:
        wall = row.get("wall_clock_speedup")
        ci = row.get("wall_clock_speedup_ci95") or [None, None]
        wall_text = "-" if wall is None else f"{wall:.2f}x" + (
            f" [{ci[0]:.2f}, {ci[1]:.2f}]" if None not in ci and row["config"] != "no-spec" else "")
        priced = next(iter((row.get("priced_speedup") or {}).values()), None)
        accuracy = row.get("accuracy")
        length = row.get("length_ratio", {}).get("value")
        lines.append(
            f"| {task} | {drafter} | {row['config']} | {cell(accuracy, '.1%') if row.get('scored') else 'n/a'} | "
            f"{delta(row.get('verifier_logprob', {}))} | {cell(row.get('repetition_rate', {}).get('value'), '.1%')} | "
            f"{cell(length, '.2f')} | {cell(row.get('acceptance_rate'), '.3f')} | "
            f"{cell(row.get('mean_accepted_length'), '.2f')} | {wall_text} | "
            f"{'-' if priced is None else f'{priced:.3f}x'} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=8, help="problems per task (default 8)")
    parser.add_argument("--draft-max", type=int, default=8,
                        help="N for the model-free drafters, the longest draft a round verifies (default 8)")
    parser.add_argument("--ngram-size-n", type=int, default=4, help="a keyed n-gram kind's key (default 4)")
    parser.add_argument("--ngram-kind", default="ngram-cache", help="the n-gram kind (default ngram-cache, the "
                        "best on the edit workload here)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/light_drafters")
    parser.add_argument("--only-table", action="store_true", help="run nothing: rebuild the table from --out")
    args = parser.parse_args()
    rows = []
    for task_name, task in TASKS.items():
        for drafter, (flags, draft_max) in drafters(args.ngram_kind, args.ngram_size_n, args.draft_max).items():
            slug = drafter.replace("0.5B model", "05B").replace(" (n=", "-n").replace(")", "")
            folder = args.out / f"{task_name}-{slug}"  # edit-05B, edit-ngram-cache, edit-suffix
            if not args.only_table:
                try:
                    run_eval(task, flags, folder, args.limit, draft_max)
                except subprocess.CalledProcessError as exc:
                    print(f"light_drafters: eval failed for {folder} (exit {exc.returncode}); see its message above",
                          file=sys.stderr)
                    return 1
            rows += [(task_name, drafter, row) for row in report(folder)
                     if row["config"] != "no-spec" or drafter == "0.5B model"]
    out = args.out / "table.md"
    text = "\n".join(table(rows))
    out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
