"""What one generation is asked to do: draft length, budget, sampling, seed, bonus policy, KV reuse.

Shared by the one-sequence loop (``loop.generate``) and the batched one (a ``Job`` carries one); checked once,
when it is made, so every face refuses a bad value with the same one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relaxtui import checks
from relaxtui.decoding.prefill import ReusePolicy
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError

BONUS_POLICIES = ("auto", "target", "relaxed")


@dataclass(frozen=True)
class GenerationConfig:
    draft_max: int = 3  # N; 0 = verifier alone
    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    top_alternatives: int = 0  # >0: attach top-k of p and q to each event (for the inspector)
    bonus: str = "auto"  # "auto" (the rule's policy), "target" (p) or "relaxed" (the rule's target at N+1)
    draft_min: int = 0  # drafts shorter than this are dropped (the round runs verifier-only)
    adaptive: bool = False  # grow N after a fully accepted round, shrink it after an early rejection
    reuse: ReusePolicy = "exact"  # KV reuse across calls: "exact" (same prompt only) or "longest" (chat turns)
    stop: tuple[str, ...] = ()  # stop strings: generation ends with the token whose text completes one ("stop")
    dense_rows: bool = False  # True: every rule gets whole rows (the reference the support path is checked against)
    learn: bool = True  # hand the finished output to the drafter (suffix, ngram-mod and ngram-cache learn from it:
    # a server's later requests, a chat's later turns); eval and bench turn it off, so that no run drafts from another
    # run's output of the same prompt and a measurement does not depend on the order its runs went in
    logprobs: bool = False  # a consumer reads T=1 probabilities: each token's log p(x) (eval's drift) or greedy's p(x)
    # (serve's logprobs): candidate rows then carry the row's normaliser (whole rows always give it)
    record_rows: bool = False  # keep each round's drafts and sparse p/q rows (``Finished.round_rows``) for a replay
    # of other rules on the same drafts (costmodel/replay.py); off: one attribute check per round, nothing kept
    relax_scope: str = "all"  # where the rule relaxes: "all", "thinking" (inside <think>…</think> only) or "answer"
    # (outside it only); the rounds outside the scope are strict's (decoding/thinking.py)

    def __post_init__(self) -> None:
        checks.DRAFT_MAX.check(self.draft_max, "draft_max")  # (named as the option table names them)
        checks.MAX_TOKENS.check(self.max_tokens, "max_tokens")
        checks.DRAFT_MIN.check(self.draft_min, "draft_min")
        if self.draft_min > self.draft_max:
            raise checks.BadValue("draft_min",
                                  f"must be in 0..{self.draft_max}, the draft length (got {self.draft_min})")
        if any(not text for text in self.stop):
            raise UserError("a stop string must not be empty")
        if self.bonus not in BONUS_POLICIES:
            raise checks.BadValue("bonus", f"must be one of {', '.join(BONUS_POLICIES)} (got {self.bonus!r})")
        checks.RELAX_SCOPE.check(self.relax_scope, "relax_scope")
