"""The **replayed** speed-up (docs/metrics.md#replayed-speed-up): what another rule would have accepted on a strict
run's own drafts, priced, without generating anything.

A strict run that records its rounds (``GenerationConfig.record_rows``, ``decoding/round_rows.py``) keeps, at every
drafted position i of every round, the drafted token x_i and the processed p_i and q_i the acceptance test read.
A rule accepts x_i, given that it reached position i, with probability a_i = min(1, π_rej(x_i)/q_i(x_i)) — its own
``decide`` (or ``pointwise``) on those rows — and positions chain: the round accepts i drafts or more with
probability Π_{j≤i} a_j, so

    E[accepted] = Σ_i Π_{j≤i} a_j        E[emitted] = E[accepted] + 1        P(all N pass) = Π_{j≤N} a_j

exactly, on those drafts. Summed over the recorded rounds these are fractional round counters (``pricing.Rounds``),
priced like any run's (``priced_speedup``): the replayed speed-up of a setting is its expected tokens per priced
cost on these rounds against the verifier alone writing as many. Replaying strict itself gives strict's own
expectation, free of the recorded run's sampling luck: a setting is compared with that.

Pure: rows and rules in, numbers out. It lives beside ``pricing`` because it is a price — of rounds that did not
run — and every face that prices (tune, a script, a report) reads it from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from relaxtui.costmodel.pricing import Rounds, priced_speedup
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.decoding.events import RoundRows, SparseRows, mean_accepted_length
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.display import REPLAYED
from relaxtui.rules import Rule
from relaxtui.rules.base import accept_chance
from relaxtui.rules.strict import Strict

__all__ = ["MIN_GAIN", "RecordedRun", "Replay", "ScreenVerdict", "SettingReplay", "acceptance_chances", "chain",
           "realised_rounds", "replay", "replay_settings", "screen", "why_not_replayable"]

MIN_GAIN = 1.02  # a relaxed setting must be replayed at least 2% faster than the best strict N (docs/metrics.md)


@dataclass(frozen=True)
class RecordedRun:
    """One generation's recorded rounds and what they were sampled with."""

    rounds: tuple[RoundRows, ...]
    sampling: SamplingParams
    draft_max: int  # the N it ran at: a replay may ask for this N or a shorter one, never a longer one
    end_token: bool = False  # it ended on an end-of-generation token (decoded and paid for, not output)
    problem_id: str = ""
    seed: int = 0


@dataclass(frozen=True)
class Replay:
    """A rule replayed on recorded rounds: expected counters, or why it cannot be replayed."""

    rule: str  # the rule as it prints (``mentored(alpha=0.7)``)
    n: int  # the draft length replayed
    rounds: Rounds | None  # expected counters (fractional); None: not replayable
    expected_accepted: float = 0.0
    why_not: str | None = None
    greedy: bool = False  # temperature 0: every rule is argmax matching there, so relaxed = strict

    @property
    def replayable(self) -> bool:
        return self.rounds is not None

    @property
    def mean_accepted_length(self) -> float:
        """1 + E[accepted] per round: tokens per round, as docs/metrics.md's mean accepted length."""
        return mean_accepted_length(self.expected_accepted, self.rounds.rounds if self.rounds is not None else 0.0)

    def speedup(self, profile: CostProfile) -> float | None:
        """The replayed speed-up under ``profile`` against the verifier alone; None when not replayable."""
        return priced_speedup(profile, self.rounds) if self.rounds is not None else None


# -- one round ------------------------------------------------------------------------------------------------------
def acceptance_chances(rule: Rule, rows: RoundRows, sampling: SamplingParams, n: int | None = None) -> np.ndarray:
    """a_i for i = 1..min(n, drafted): the chance the rule accepts x_i given that position i is reached. At
    temperature 0 a rule is argmax matching (``acceptance._greedy``): 1 where x_i is p_i's argmax, else 0 (a rule
    that declares otherwise is not replayable there: ``why_not_replayable``)."""
    count = len(rows.tokens) if n is None else min(n, len(rows.tokens))
    chances = np.zeros(count)
    if sampling.greedy:
        for i in range(count):
            chances[i] = float(rows.p.ids.shape[1] > 0 and rows.tokens[i] == int(rows.p.ids[i, 0]))
        return chances
    whole = rule.pointwise(0.5, 0.5) is None  # (a rule's test reads p(x) and q(x) alone, or it reads whole rows)
    for i in range(count):
        x, p_x, q_x = rows.tokens[i], float(rows.p.at_x[i]), float(rows.q.at_x[i])
        found = None if whole else rule.pointwise(p_x, q_x)
        if found is not None:
            chances[i] = accept_chance(found[0], q_x, x)
            continue
        ids, p_on, q_on, x_at = _union(rows.p, rows.q, i, x)
        chances[i] = rule.decide(p_on, q_on, x_at).accept_prob
    return chances


def _union(p: SparseRows, q: SparseRows, i: int, x: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """p_i and q_i in float64 over the union of their kept ids and x (as the acceptance step's support path builds
    them), the drafted token's entries its exact probabilities."""
    p_ids, q_ids = p.ids[i][p.ids[i] >= 0], q.ids[i][q.ids[i] >= 0]
    ids = np.unique(np.concatenate((p_ids, q_ids, [x])).astype(np.int64))
    p_on, q_on = np.zeros(len(ids)), np.zeros(len(ids))
    p_on[ids.searchsorted(p_ids)] = p.probs[i][:len(p_ids)]
    q_on[ids.searchsorted(q_ids)] = q.probs[i][:len(q_ids)]
    x_at = int(ids.searchsorted(x))
    p_on[x_at], q_on[x_at] = p.at_x[i], q.at_x[i]
    return ids, p_on, q_on, x_at


def chain(chances: np.ndarray) -> tuple[float, float]:
    """(E[accepted], P(every draft accepted)) of one round from its a_i: Σ_i Π_{j≤i} a_j and Π_j a_j (0 for a
    round with no draft, which no rule can accept fully: a verifier step)."""
    if len(chances) == 0:
        return 0.0, 0.0
    reached = np.cumprod(chances)
    return float(reached.sum()), float(reached[-1])


# -- many rounds ----------------------------------------------------------------------------------------------------
def why_not_replayable(rule: Rule, runs: Sequence[RecordedRun], n: int | None = None, *,
                       scope: str = "all") -> str | None:
    """Why ``rule`` cannot be replayed on these runs (None: it can, exactly); ``scope``: where it relaxes
    (--relax-scope: a scoped rule is strict on the other side of a thinking tag)."""
    if not runs:
        return "no recorded rounds"
    if scope != "all" and rule.name != "strict":
        return (f"{rule.name} relaxes only {'inside' if scope == 'thinking' else 'outside'} thinking blocks "
                f"(--relax-scope {scope}), and the recorded rounds do not say which side of a tag each was on")
    if n is not None and n > min(run.draft_max for run in runs):
        return f"rounds recorded at N={min(run.draft_max for run in runs)} cannot replay N={n}"
    if getattr(rule, "lookahead", False):  # (a trait of rules/base.py's newer rules; absent: none has it)
        return f"{rule.name} keeps a draft by the drafts after it (a look-ahead rule), so positions do not chain"
    if runs[0].sampling.greedy:  # argmax matching, whatever the rule reads — unless it declares otherwise
        if not rule.greedy_ok:
            return f"{rule.name} cannot run greedy (temperature 0)"
        if _greedy_top(rule):
            return (f"{rule.name} keeps its relaxation at temperature 0, reading each row's likeliest tokens at T = 1, "
                    "which a greedy round's rows (one-hot) do not keep")
        return None
    if rule.needs_logits:
        return f"{rule.name} reads raw logits over the whole vocabulary, which the recorded rows do not keep"
    one_hot = any(not r.has_distribution for run in runs for r in run.rounds if r.tokens)
    if one_hot and rule.needs_draft_logits:
        return f"{rule.name} needs the drafter's distribution, and these drafts had none"
    if rule.pointwise(0.5, 0.5) is None and _truncated(runs, n):
        return (f"{rule.name} reads whole rows of p and q, and these kept only their likeliest entries (the sampling "
                "left a wider support)")
    return None


def _greedy_top(rule: Rule) -> int:
    """How many of a row's likeliest tokens at T = 1 the rule reads at temperature 0 (0: argmax matching)."""
    top = getattr(rule, "greedy_top", None)
    return int(top()) if callable(top) else 0


def _truncated(runs: Sequence[RecordedRun], n: int | None) -> bool:
    return any(float(side.rest[:n].max(initial=0.0)) > 0.0 for run in runs for r in run.rounds
               for side in (r.p, r.q))


def replay(runs: Sequence[RecordedRun], rule: Rule, *, n: int | None = None, bonus_steps: float = 0.0,
           scope: str = "all") -> Replay:
    """The rule's expected counters on the recorded rounds (at draft length ``n`` ≤ the recorded N: each round's
    first n drafts; None: as recorded). ``bonus_steps``: drafter steps a fully accepted round pays for a relaxed bonus
    (the drafter's ``bonus_steps`` where the rule's bonus policy draws from its target at N+1; else 0)."""
    shown = repr(rule)
    n_replayed = n if n is not None else max((run.draft_max for run in runs), default=0)
    why = why_not_replayable(rule, runs, n, scope=scope)
    if why is not None:
        return Replay(shown, n_replayed, None, why_not=why)
    lengths: dict[int, float] = {}
    accepted = full = tokens = ends = 0.0
    for run in runs:
        for rows in run.rounds:
            expected, all_pass = chain(acceptance_chances(rule, rows, run.sampling, n))
            drafted = len(rows.tokens) if n is None else min(n, len(rows.tokens))
            lengths[drafted] = lengths.get(drafted, 0.0) + 1.0
            accepted += expected
            full += all_pass
            tokens += expected + 1.0
        ends += float(run.end_token)
    greedy = bool(runs) and runs[0].sampling.greedy
    counters = Rounds(lengths, tokens - ends, full, full * bonus_steps, ends)
    return Replay(shown, n_replayed, counters, accepted, greedy=greedy)


def realised_rounds(runs: Iterable[RecordedRun]) -> Rounds:
    """The counters the recorded rounds actually had (each round's own ``n_accepted``): what the run's priced
    speed-up priced, when every emitted token was output (no tokens past an end token or a stop string)."""
    lengths: dict[int, float] = {}
    tokens = full = ends = 0.0
    for run in runs:
        for rows in run.rounds:
            drafted = len(rows.tokens)
            lengths[drafted] = lengths.get(drafted, 0.0) + 1.0
            tokens += rows.n_accepted + 1
            full += float(drafted > 0 and rows.n_accepted == drafted)
        ends += float(run.end_token)
    return Rounds(lengths, tokens - ends, full, 0.0, ends)


# -- the screen -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScreenVerdict:
    """Whether a relaxed setting is worth generating: ``pays`` False is "does not pay here" (never generated)."""

    pays: bool
    replayed: float | None  # its replayed speed-up (None: not replayable, so it runs unscreened)
    bar: float  # the replayed speed-up it had to reach
    reason: str  # one line for the user

    def __str__(self) -> str:
        return self.reason


def screen(replayed: float | None, best_strict: float, *, min_gain: float = MIN_GAIN,
           why_not: str | None = None) -> ScreenVerdict:
    """A setting pays when its replayed speed-up reaches ``min_gain`` × the best strict N's (and ``min_gain`` × the
    verifier alone's 1.0: "faster" means faster than both, docs/metrics.md); a setting that cannot be replayed is
    not screened out."""
    if not (math.isfinite(min_gain) and min_gain > 0):
        raise ValueError(f"min_gain must be a positive number (got {min_gain})")
    bar = min_gain * max(best_strict, 1.0)
    gain = f"{(min_gain - 1) * 100:+.0f}%"
    if replayed is None:
        return ScreenVerdict(True, None, bar, f"not replayable ({why_not or 'no recorded rounds'}): runs unscreened")
    if replayed >= bar:
        return ScreenVerdict(True, replayed, bar, f"{REPLAYED} {replayed:.3f}x reaches {bar:.3f}x (best strict "
                             f"{best_strict:.3f}x, verifier alone 1.000x, {gain})")
    return ScreenVerdict(False, replayed, bar, f"does not pay here: {REPLAYED} {replayed:.3f}x is below the "
                         f"{bar:.3f}x it needs (best strict {best_strict:.3f}x, verifier alone 1.000x, {gain})")


@dataclass(frozen=True)
class SettingReplay:
    """One relaxed setting's line of the screen: its replay, its replayed speed-up, strict's at the same N on the
    same rounds, and the verdict."""

    rule: Rule
    n: int
    replay: Replay
    speedup: float | None
    strict_speedup: float | None  # strict replayed at this N on the same rounds
    verdict: ScreenVerdict

    @property
    def vs_strict(self) -> float | None:
        """Replayed speed-up over strict's at the same N on the same rounds (sampling luck removed from both)."""
        if self.speedup is None or not self.strict_speedup:
            return None
        return self.speedup / self.strict_speedup


def replay_settings(recorded: Mapping[int, Sequence[RecordedRun]], settings: Iterable[tuple[Rule, int]],
                    profile: CostProfile, *, min_gain: float = MIN_GAIN,
                    bonus_steps: Mapping[str, float] | None = None,
                    scope: str = "all") -> tuple[float, list[SettingReplay]]:
    """Screen every (rule, N) on the strict runs recorded per N: (best strict N's replayed speed-up, one line per
    setting). A setting at N replays the runs recorded at N, else the shortest recorded N above it, cut to N. The
    best strict N is strict replayed on each recorded N's own rounds, the best of them. ``scope``: where the settings
    relax (--relax-scope: other than all, none of them replays)."""
    strict = Strict()
    strict_at = {n: replay(runs, strict).speedup(profile) or 0.0 for n, runs in recorded.items() if runs}
    best = max(strict_at.values(), default=0.0)
    lines = []
    for rule, n in settings:
        source = n if n in recorded and recorded[n] else min((m for m in recorded if m > n and recorded[m]),
                                                              default=None)
        runs = recorded[source] if source is not None else ()
        cut = None if source == n else n
        steps = (bonus_steps or {}).get(rule.name, 0.0)
        found = replay(runs, rule, n=cut, bonus_steps=steps, scope=scope) if runs else \
            Replay(repr(rule), n, None, why_not=f"no strict run at N >= {n} was recorded")
        speedup = found.speedup(profile)
        strict_speedup = strict_at.get(n) if source == n else (replay(runs, strict, n=n).speedup(profile)
                                                               if runs else None)
        lines.append(SettingReplay(rule, n, found, speedup, strict_speedup,
                                   screen(speedup, best, min_gain=min_gain, why_not=found.why_not)))
    return best, lines
