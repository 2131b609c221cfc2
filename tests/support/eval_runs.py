"""Eval runs made by hand: the pieces of a fake run (digit tokens, a small plan), constructed records as the runner
writes them (with or without drift signals), and config summaries as the report hands them to `tune`."""

from __future__ import annotations

from relaxtui.decoding.sampling import SamplingParams
from relaxtui.evals.analysis.report import ConfigSummary
from relaxtui.evals.analysis.stats import paired_proportion_difference
from relaxtui.evals.run.plan import EvalPlan

DIGITS = [f"{d}".encode() for d in range(10)]

PLAN = EvalPlan(rules=("strict", "mentored"), alphas=(0.5,), draft_max=(2,), no_spec=True, repeats=2,
                max_tokens=3, sampling=SamplingParams(1.0, 0, 1.0))


def record(config: str, rule, n: int, problem: str, seed: int, correct: bool, *, tokens: int = 10,
           tps: float = 10.0, lengths=None, knob=None, full: int = 0) -> dict:  # type: ignore[no-untyped-def]
    lengths = lengths if lengths is not None else ([n] * 4 if n else [0] * tokens)
    label = "no-spec" if rule is None else f"{rule}{'' if knob is None else f'({knob:g})'} N={n}"
    return {"config_id": config, "config": {"rule": rule, "knob": knob, "draft_max": n, "label": label},
            "problem_id": problem, "seed": seed, "correct": correct, "output_tokens": tokens, "tokens_per_s": tps,
            "decode_s": tokens / tps, "truncated": False, "degenerate": False, "rounds": len(lengths),
            "drafted": sum(lengths), "accepted": sum(lengths) // 2, "draft_lengths": lengths,
            "extra_draft_steps": 0, "full_accept_rounds": full}


def constructed_run() -> list[dict]:
    rows = []
    for p, problem in enumerate(["p1", "p2", "p3", "p4"]):
        rows.append(record("base", None, 0, problem, 0, p < 2, tokens=100, tps=10.0))
        rows.append(record("strict3", "strict", 3, problem, 0, p < 2, tokens=100, tps=9.0, lengths=[3] * 25))
        rows.append(record("cactus3", "cactus", 3, problem, 0, p < 3, tokens=120, tps=12.0, lengths=[3] * 24 + [1],
                           knob=1.0))
    return rows


def with_signals(row: dict, logprob: float, oos: float = 0.0, rep: float = 0.0) -> dict:
    return {**row, "verifier_logprob": logprob, "verifier_logprob_processed": logprob + 0.2,
            "out_of_support_rate": oos, "repetition_rate": rep}


def drift_run(scored: bool = True) -> list[dict]:
    """Six problems: strict matches the verifier alone, ensemble drifts (log-prob −0.3 ± a little, 10% of its
    tokens off the verifier's support, 20% longer)."""
    rows = []
    for p in range(6):
        problem = f"p{p}"
        rows.append(with_signals(record("base", None, 0, problem, 0, True, tokens=100), -0.8 - 0.01 * p))
        rows.append(with_signals(record("strict3", "strict", 3, problem, 0, True, tokens=100, lengths=[3] * 25),
                                 -0.8 - 0.01 * p + 0.001 * (p % 2)))
        rows.append(with_signals(record("ens3", "ensemble", 3, problem, 0, p != 0, tokens=120 + p,
                                        lengths=[3] * 25, knob=0.8), -1.1 - 0.02 * p, oos=0.1, rep=0.05))
    for row in rows:
        row["scored"] = scored
    return rows


def summary(label, rule, speed, accuracy, *, problems=400, losses=0, wins=0, knob=None, n=3):
    """A config run on ``problems`` problems (one seed each) against its reference: ``wins``/``losses``
    pairs differ, the rest tie. ``speed`` is its proxy speed-up under the profile named ``unit`` (and its measured
    one)."""
    scores = {(f"p{i}", 0): 0.0 for i in range(problems)}
    mine = dict(scores)
    for i in range(wins):
        mine[(f"p{i}", 0)] = 1.0
    for i in range(wins, wins + losses):
        scores[(f"p{i}", 0)] = 1.0
    delta = None if rule is None else paired_proportion_difference(mine, scores)
    reference = None if rule is None else ("no-spec" if rule == "strict" else f"strict N={n}")
    return ConfigSummary(label, rule, knob, n, problems, problems, accuracy, 0.05, 300.0, 0.0, 0.0, 0.8, 3.0,
                         10.0 * speed, proxy={"unit": speed}, reference=reference, delta=delta)
