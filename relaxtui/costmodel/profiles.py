"""Cost profiles: the prices of one deployment, joined with measured counters into proxy speed-ups (SPEC §3).

Following the paper's public reproduction: generations are the source of truth for quality, lengths and
acceptance counters; a profile is a small JSON table of what one verifier AR token (t_AR), one drafter
token (t_D) and one verify block of k tokens (t_V(k), k = drafts + 1) cost on some hardware. A run is
priced round by round:

    proxy speed-up = output tokens · t_AR / Σ_rounds (t_V(k_r + 1) + k_r · t_D)   ("measured" pricing)
    round cost     = t_AR + k_r · t_D                                          ("optimistic" pricing:
                                                                                verification memory-bound)

plus t_D for every extra drafter step (a relaxed bonus needs q at N+1). A round with no draft is one AR
step (t_AR). Between measured block sizes t_V is interpolated linearly; below the smallest measured k (but
above 1) it takes the smallest measured value, because on an accelerator a verify block's cost is the
speculative path's fixed overhead, not proportional to k; above the largest it is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from relaxtui.errors import UserError

PRICING_MODES = ("measured", "optimistic")
MEMORY_BOUND_C_REL = 0.1  # default drafter/verifier cost ratio of the `memory-bound` profile


@dataclass(frozen=True)
class CostProfile:
    name: str
    hardware: str
    verifier: str
    drafter: str
    verifier_ar_ms: float  # t_AR
    drafter_ms: float  # t_D
    verify_ms: dict[int, float] = field(default_factory=dict)  # block size k (= drafts + 1) -> t_V(k)
    pricing: str = "measured"
    source: str = ""
    # costs the paper's formula has no term for; 0 in its profiles, measured by relaxtui's calibration
    draft_round_ms: float = 0.0  # per round that drafts: the drafter's re-sync beyond k·t_D
    resync_ms: float = 0.0  # extra re-sync after a fully accepted round (two tokens instead of one)
    emit_ms: float = 0.0  # per emitted token: detokenisation and bookkeeping

    def __post_init__(self) -> None:
        if self.pricing not in PRICING_MODES:
            raise UserError(f"profile {self.name!r}: pricing must be one of {', '.join(PRICING_MODES)} "
                            f"(got {self.pricing!r})")
        numbers = [self.verifier_ar_ms, self.drafter_ms, self.draft_round_ms, self.resync_ms, self.emit_ms,
                   *self.verify_ms.values()]
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers):
            raise UserError(f"profile {self.name!r}: every time must be a finite number of milliseconds")
        if not (self.verifier_ar_ms > 0 and self.drafter_ms >= 0):
            raise UserError(f"profile {self.name!r}: verifier_ar_ms must be > 0 and drafter_ms >= 0")
        if min(self.draft_round_ms, self.resync_ms, self.emit_ms) < 0:
            raise UserError(f"profile {self.name!r}: draft_round_ms, resync_ms and emit_ms must be >= 0")
        if any(k < 1 or not ms > 0 for k, ms in self.verify_ms.items()):
            raise UserError(f"profile {self.name!r}: verify_ms needs block sizes k >= 1 with times > 0")
        if self.pricing == "measured" and not self.verify_ms:
            raise UserError(f"profile {self.name!r}: measured pricing needs verify_ms (block size -> ms)")

    @property
    def c_rel(self) -> float:
        return self.drafter_ms / self.verifier_ar_ms

    def verify_cost_ms(self, k: int) -> float:
        """t_V(k) under this profile's pricing; a k past the measured range is a UserError naming it."""
        if k <= 1 or self.pricing == "optimistic":
            return self.verifier_ar_ms
        if k in self.verify_ms:
            return self.verify_ms[k]
        measured = sorted(self.verify_ms)
        if k > measured[-1]:
            raise UserError(f"profile {self.name!r} has no verify cost for a block of k={k} tokens "
                            f"({k - 1} drafts); it measures k up to {measured[-1]}")
        if k < measured[0]:
            return self.verify_ms[measured[0]]
        upper = next(m for m in measured if m > k)
        lower = max(m for m in measured if m < k)
        weight = (k - lower) / (upper - lower)
        return self.verify_ms[lower] + weight * (self.verify_ms[upper] - self.verify_ms[lower])

    def round_cost_ms(self, drafts: int) -> float:
        """One round that verified ``drafts`` tokens: the verify block plus the drafter steps."""
        if drafts == 0:
            return self.verify_cost_ms(1)
        return self.verify_cost_ms(drafts + 1) + drafts * self.drafter_ms + self.draft_round_ms

    def break_even_length(self, drafts: int) -> float:
        """The mean accepted length (tokens per round) at which rounds of ``drafts`` tokens match the verifier
        alone: below it speculation is slower here."""
        # a round of L tokens costs round + L·emit, the verifier alone L·(t_AR + emit): emission cancels
        return self.round_cost_ms(drafts) / self.verifier_ar_ms

    def to_json(self) -> str:
        data = asdict(self)
        data["verify_ms"] = {str(k): v for k, v in sorted(self.verify_ms.items())}
        return json.dumps(data, indent=2) + "\n"


def priced_ms(profile: CostProfile, draft_lengths: Iterable[int], *, extra_draft_steps: int = 0,
              full_rounds: int = 0, output_tokens: int = 0) -> float:
    """Σ over rounds of the profile's round cost, plus drafter steps past the draft, re-syncs after fully
    accepted rounds, and per-token emission (the last two are 0 in the paper's profiles)."""
    rounds = sum(profile.round_cost_ms(k) for k in draft_lengths)
    return (rounds + extra_draft_steps * profile.drafter_ms + full_rounds * profile.resync_ms
            + output_tokens * profile.emit_ms)


def proxy_speedup(profile: CostProfile, output_tokens: int, draft_lengths: Sequence[int], *,
                  extra_draft_steps: int = 0, full_rounds: int = 0) -> float:
    """Output tokens priced as verifier AR steps, over the priced rounds that produced them."""
    cost = priced_ms(profile, draft_lengths, extra_draft_steps=extra_draft_steps, full_rounds=full_rounds,
                     output_tokens=output_tokens)
    return output_tokens * (profile.verifier_ar_ms + profile.emit_ms) / cost if cost > 0 else 0.0


# -- shipped profiles ---------------------------------------------------------------------------------------------
PAPER_SOURCE = ("Xia, Ribar & Balanca 2026 (arXiv 2607.08690), public reproduction: Qwen3-32B verifier, "
                "Qwen3-0.6B drafter, one NVIDIA GB200, batch 1, bf16, vLLM 0.20.1")
_PAPER = dict(hardware="NVIDIA GB200 (batch 1, bf16, vLLM 0.20.1)", verifier="Qwen3-32B", drafter="Qwen3-0.6B",
              verifier_ar_ms=12.448, drafter_ms=3.929,
              verify_ms={4: 30.503, 6: 30.448, 11: 30.905, 21: 32.270}, source=PAPER_SOURCE)


def memory_bound(c_rel: float = MEMORY_BOUND_C_REL) -> CostProfile:
    """An idealised accelerator: verifying any block costs one AR step (v(k) = 1); the drafter costs c_rel."""
    if not 0 <= c_rel:
        raise UserError(f"memory-bound: c_rel must be >= 0 (got {c_rel:g})")
    return CostProfile(f"memory-bound:{c_rel:g}", "idealised (verification memory-bound)", "any", "any", 1.0,
                       c_rel, {}, "optimistic", "v(k) = 1 for every k; drafter = c_rel verifier steps")


SHIPPED: dict[str, CostProfile] = {
    "paper-gb200": CostProfile("paper-gb200", pricing="measured", **_PAPER),  # type: ignore[arg-type]
    "paper-gb200-optimistic": CostProfile("paper-gb200-optimistic", pricing="optimistic",
                                          **_PAPER),  # type: ignore[arg-type]
    "memory-bound": memory_bound(),
}


def from_dict(data: object, where: str) -> CostProfile:
    """Validate a profile read from JSON; every problem is one UserError naming the file and the field."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: a cost profile is a JSON object")
    required = ("name", "verifier_ar_ms", "drafter_ms")
    missing = [key for key in required if key not in data]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)}")
    try:
        verify = {int(k): float(v) for k, v in dict(data.get("verify_ms") or {}).items()}
        return CostProfile(
            name=str(data["name"]), hardware=str(data.get("hardware", "")), verifier=str(data.get("verifier", "")),
            drafter=str(data.get("drafter", "")), verifier_ar_ms=float(data["verifier_ar_ms"]),
            drafter_ms=float(data["drafter_ms"]), verify_ms=verify, pricing=str(data.get("pricing", "measured")),
            source=str(data.get("source", "")), draft_round_ms=float(data.get("draft_round_ms", 0.0)),
            resync_ms=float(data.get("resync_ms", 0.0)), emit_ms=float(data.get("emit_ms", 0.0)))
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: malformed cost profile ({exc})") from None


def load_profile(spec: str) -> CostProfile:
    """A shipped name (``memory-bound:C`` sets its c_rel) or a JSON file."""
    name, _, parameter = spec.partition(":")
    if name == "memory-bound":
        try:
            return memory_bound(float(parameter)) if parameter else SHIPPED[name]
        except ValueError:
            raise UserError(f"memory-bound:C takes a number for c_rel (got {parameter!r})") from None
    if spec in SHIPPED:
        return SHIPPED[spec]
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"unknown cost profile {spec!r}: not one of {', '.join(SHIPPED)} (or memory-bound:C), "
                        "nor a profile file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a valid JSON cost profile ({exc})") from None
    return from_dict(data, str(path))
