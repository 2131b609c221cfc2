"""The speculative loop: one verifier batch per round, emitting immutable events (SPEC §2, Algorithm 2).

It reads like llama.cpp's speculative-simple: draft → verify [last, x_1..x_N] in one batch → accept →
commit counters → trim the verifier's KV cache → stop check. One invariant, stated once: the last emitted
token is kept *separate*; it is not in the verifier's cache until the next verify batch decodes it.
Without a drafter (or N = 0) every round is a one-token batch: the autoregressive baseline runs the same
code, so baseline and speculative numbers are comparable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from relaxtui.decoding.acceptance import Emitted, accept_round
from relaxtui.decoding.backend import Backend
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.drafters import Drafter
from relaxtui.decoding.events import Event, Finished, Metrics, RoundTiming, TokenEvent
from relaxtui.decoding.prefill import ReusePolicy, prefill
from relaxtui.decoding.sampling import SamplingParams, spawn_generators
from relaxtui.engine.text import StreamDecoder
from relaxtui.errors import ContextFull, UserError
from relaxtui.rules import Rule
from relaxtui.rules.strict import Strict

MAX_DRAFT = 64
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

    def __post_init__(self) -> None:
        if not 0 <= self.draft_max <= MAX_DRAFT:
            raise UserError(f"--draft-max must be in 0..{MAX_DRAFT} (got {self.draft_max})")
        if self.max_tokens < 1:
            raise UserError(f"--max-tokens must be >= 1 (got {self.max_tokens})")
        if not 0 <= self.draft_min <= max(self.draft_max, 0):
            raise UserError(f"--draft-min must be in 0..--draft-max ({self.draft_max}) (got {self.draft_min})")
        if self.bonus not in BONUS_POLICIES:
            raise UserError(f"--bonus must be one of {', '.join(BONUS_POLICIES)} (got {self.bonus!r})")


@dataclass
class DraftLength:
    """The N of the next round: fixed, or adapted from the last round's acceptance (grow by one after a
    fully accepted draft, shrink by one after a rejection at the first position), within [minimum, maximum]."""

    maximum: int
    minimum: int = 1
    adaptive: bool = False
    current: int = -1

    def __post_init__(self) -> None:
        self.current = self.maximum

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if not self.adaptive or n_drafted == 0:
            return
        if n_accepted == n_drafted:
            self.current = min(self.maximum, self.current + 1)
        elif n_accepted == 0:
            self.current = max(min(self.minimum, self.maximum), self.current - 1)


def _top(row: np.ndarray | None, k: int) -> tuple[tuple[int, float], ...]:
    """The k likeliest ids of a distribution. Processed rows (top-k/top-p) have a few dozen non-zeros: gather
    them first, which is ten times cheaper than partitioning the whole vocabulary (this runs per token)."""
    if row is None or k <= 0:
        return ()
    ids = np.flatnonzero(row)
    if len(ids) > k:
        ids = ids[np.argpartition(row[ids], -k)[-k:]]
    ids = ids[np.argsort(-row[ids], kind="stable")]
    return tuple((int(i), float(row[i])) for i in ids)


def generate(verifier: Backend, prompt: Sequence[int], config: GenerationConfig, *,
             drafter: Drafter | None = None, rule: Rule | None = None,
             should_stop: Callable[[], bool] = lambda: False,
             clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Yield a TokenEvent per emitted token, then one Finished with the SPEC §3 metrics.

    ``should_stop`` is polled once per round (the TUI's stop button, Ctrl-C); ``clock`` is the timer behind
    every timing (a fake clock makes timings deterministic for snapshots)."""
    rule = check_request(verifier, prompt, config, drafter, rule)
    sampling = config.sampling
    prompt = list(prompt)
    draft_rng, accept_rng = spawn_generators(config.seed)
    draft_max = config.draft_max if drafter is not None else 0
    draft_length = DraftLength(draft_max, max(config.draft_min, 1), config.adaptive)
    # a relaxed bonus needs one more drafter step past the draft; only model drafters have one
    can_extend = drafter is not None and getattr(drafter, "model", None) is not None
    extra_steps = 0

    def bonus_draft() -> tuple[np.ndarray, np.ndarray]:
        nonlocal extra_steps
        extra_steps += 1
        return drafter.next_distribution(sampling)  # type: ignore[union-attr]

    started = clock()
    prefill_decoded, prefilled = prefill(verifier, prompt[:-1], reuse=config.reuse, should_stop=should_stop)
    if prefilled and drafter is not None:
        prefilled = drafter.begin(prompt, reuse=config.reuse, should_stop=should_stop)
    prefill_s = clock() - started

    counters = RoundCounters(draft_max)
    decoder = StreamDecoder()
    context = list(prompt)
    last = prompt[-1]
    output: list[int] = []
    text_parts: list[str] = []
    finish = "max_tokens"
    decode_started = clock()
    llama_before = _llama_seconds(verifier, drafter)
    while prefilled and len(output) < config.max_tokens:
        if should_stop():
            finish = "stopped"
            break
        base = verifier.n_past  # = len(context) - 1: everything but `last` is cached
        room = verifier.n_ctx - base - 1  # draft tokens that still fit after `last`
        if room < 0:
            finish = "context"
            break
        n = min(draft_length.current, room, config.max_tokens - len(output) - 1)
        round_llama = _llama_seconds(verifier, drafter)
        t0 = clock()
        draft = drafter.draft(context, n, sampling, draft_rng) if (drafter is not None and n > 0) else None
        draft_tokens = draft.tokens if draft is not None else []
        if len(draft_tokens) < config.draft_min:  # llama.cpp's --draft-min: too short to pay for itself
            draft, draft_tokens = None, []
        t1 = clock()
        try:
            target_logits = verifier.decode([last, *draft_tokens], logits_rows=range(len(draft_tokens) + 1))
        except ContextFull:
            finish = "context"
            break
        t2 = clock()
        emitted = accept_round(draft_tokens, draft.probs if draft else np.empty((0, 0)),
                               draft.logits if draft else None, target_logits, rule, sampling, accept_rng,
                               bonus_draft=bonus_draft if can_extend else None, bonus=config.bonus)
        n_accepted = len(emitted) - 1
        verifier.rollback(base + 1 + n_accepted)  # keep `last` and the accepted drafts
        t3 = clock()
        timing = RoundTiming(counters.rounds, len(draft_tokens), n_accepted, t1 - t0, t2 - t1, t3 - t2,
                             _llama_seconds(verifier, drafter) - round_llama)
        counters.observe_round(timing)
        draft_length.observe(len(draft_tokens), n_accepted)
        stop = False
        for item in emitted:
            if verifier.is_eog(item.token_id):
                finish, stop = "eog", True
                break
            text = decoder.push(verifier.token_piece(item.token_id))
            output.append(item.token_id)
            text_parts.append(text)
            yield _event(len(output) - 1, item, text, timing, config.top_alternatives)
        context.extend(item.token_id for item in emitted)
        last = emitted[-1].token_id
        if stop:
            break
    if not prefilled:
        finish = "stopped"
    tail = decoder.flush()
    text_parts.append(tail)
    decode_s = clock() - decode_started
    metrics = build_metrics(len(prompt), len(output), counters, prefill_s=prefill_s, decode_s=decode_s,
                            llama_s=_llama_seconds(verifier, drafter) - llama_before, finish=finish,
                            extra_draft_steps=extra_steps, prefill_decoded=prefill_decoded)
    yield Finished("".join(text_parts), metrics, tuple(output))


def check_request(verifier: Backend, prompt: Sequence[int], config: GenerationConfig, drafter: Drafter | None,
                  rule: Rule | None) -> Rule:
    """The checks every generation passes before anything is decoded; returns the rule (strict by default)."""
    rule = rule or Strict()
    if config.sampling.greedy and not rule.greedy_ok:
        raise UserError(f"rule {rule.name!r} cannot run greedy (temperature 0); use --temperature > 0")
    if not prompt:
        raise UserError("the prompt is empty")
    if len(prompt) >= verifier.n_ctx:
        raise UserError(f"the prompt has {len(prompt)} tokens but the context holds {verifier.n_ctx}; "
                        "raise --ctx-size or shorten the prompt")
    if drafter is not None and rule.needs_draft_logits and getattr(drafter, "model", None) is None:
        raise UserError(f"rule {rule.name!r} needs the drafter's logits; use a model drafter, not {drafter.kind!r}")
    return rule


def build_metrics(prompt_tokens: int, output_tokens: int, counters: RoundCounters, *, prefill_s: float,
                  decode_s: float, llama_s: float, finish: str, extra_draft_steps: int,
                  prefill_decoded: int) -> Metrics:
    """SPEC §3 metrics of one finished generation from its round counters (shared with the batched loop)."""
    return Metrics(
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, rounds=counters.rounds, drafted=counters.drafted,
        accepted=counters.accepted, per_position_reached=tuple(counters.reached),
        per_position_accepted=tuple(counters.accepted_at), prefill_s=prefill_s, decode_s=decode_s,
        draft_s=counters.draft_s, verify_s=counters.verify_s, llama_s=llama_s,
        truncated=finish in {"context", "max_tokens"}, finish_reason=finish,
        draft_lengths=tuple(counters.draft_lengths), extra_draft_steps=extra_draft_steps,
        prefill_decoded=prefill_decoded, full_accept_rounds=counters.full_rounds,
    )


def _llama_seconds(verifier: Backend, drafter: Drafter | None) -> float:
    total = verifier.decode_seconds
    model = getattr(drafter, "model", None)
    return total + (model.decode_seconds if model is not None else 0.0)


def _event(index: int, item: Emitted, text: str, timing: RoundTiming, top_k: int) -> TokenEvent:
    return TokenEvent(
        index=index, token_id=item.token_id, text=text, verdict=item.verdict, draft_position=item.draft_position,
        p_x=item.p_x, q_x=item.q_x, pi_x=item.pi_x, accept_prob=item.accept_prob, statistic=item.statistic,
        rejected_token=item.rejected_token, round=timing,
        top_p=_top(item.p_row, top_k), top_q=_top(item.q_row, top_k),
    )
