"""The steps of a speculative round, written once: ``loop.py`` runs them on one sequence, ``batched.py`` on many.

A sequence in flight is a ``Slot`` (llama.cpp's word): its rows in the verifier, its context, seed streams, draft
length, counters and text. One round over a list of slots:

    plan      room in the context and this round's N          (stop: "context")
    draft     one drafter call for every slot that drafts     (--draft-min drops short drafts; one-hot q when
                                                               the drafter has no distribution)
    verify    the caller's verifier batch over [last, x_1..x_N] per slot
    accept    the rule over the rows, the bonus (q at N+1 only from a drafter that declares it can), trim the
              verifier back to `last` + accepted drafts, tell the drafter
    observe   round counters and the adaptive N
    commit    emit up to an end-of-generation token or a stop string (recording each token's verifier
              log p(x) at temperature 1, from its verify row), stop at the budget

The loops own the clock and the verifier call (one decode, or one batch for all); everything else is here, so
the two cannot drift apart. The invariant both keep: `last` is not in the verifier's cache until the next
verify batch decodes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from relaxtui.checks import BadValue
from relaxtui.decoding.acceptance import Acceptance, DraftStep, Emitted, accept_draft, row_spec
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.counters import RoundCounters
from relaxtui.decoding.drafting import Draft, Drafter, DraftRequest
from relaxtui.decoding.events import Finished, Metrics, RoundRows, RoundTiming, TokenEvent
from relaxtui.decoding.prefill import copy_cached_prompt, prefill
from relaxtui.decoding.round_rows import record_round
from relaxtui.decoding.sampling import one_hot, spawn_generators
from relaxtui.decoding.thinking import ScopeTracker, check_scope_on, scope_tracker
from relaxtui.engine.api import Model
from relaxtui.errors import UserError
from relaxtui.rules import Rule, refuse_greedy
from relaxtui.rules.strict import Strict
from relaxtui.text import StreamDecoder


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


@dataclass(eq=False)
class Slot:
    """One sequence in flight."""

    seq: int
    verifier: Model  # the verifier's context; this slot's rows are sequence ``seq`` of it
    drafter: Drafter | None  # None: the verifier alone
    rule: Rule
    config: GenerationConfig
    prompt_tokens: int
    context: list[int]  # prompt + emitted tokens; its last one is `last`
    draft_rng: np.random.Generator
    accept_rng: np.random.Generator
    draft_length: DraftLength
    counters: RoundCounters
    tag: Any = None  # the caller's handle (a batched Job)
    prefill_s: float = 0.0
    prefill_decoded: int = 0
    started: float = 0.0  # decode clock
    llama_before: float = 0.0
    copied_before: int = 0  # bytes the models had copied out of llama.cpp when decoding started
    decoder: StreamDecoder = field(default_factory=StreamDecoder)
    output: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish: str | None = None
    extra_steps: int = 0
    base: int = 0  # this round: cached tokens before the verify batch (everything but `last`)
    n: int = 0  # this round: draft tokens asked for
    draft: Draft | None = None  # this round's draft (None: a verifier-only step)
    logprobs: list[float | None] = field(default_factory=list)  # per emitted token: log p(x) at T=1 (verifier)
    probs: list[float] = field(default_factory=list)  # per emitted token: processed p(x), as the sampler saw it
    round_logprobs: list[float | None] = field(default_factory=list)  # this round's, one per token accept() returned
    stop_tail: str = ""  # the end of the text, long enough to find a stop string that spans tokens
    saved: object | None = None  # this round: the verifier's state before the verify batch, when its drafts are
    # longer than its recurrent-state snapshots reach (restored and the kept tokens decoded again on a rejection)
    recorded: list[RoundRows] = field(default_factory=list)  # every round's rows (config.record_rows), for a replay
    scope: ScopeTracker | None = None  # --relax-scope thinking/answer: which rounds the rule judges (None: every one)
    inside: bool = False  # the context (`last` included) is inside a thinking block (read only with a scope)

    @cached_property
    def acceptance(self) -> Acceptance:
        """How this slot's rounds accept (the rule, its sampling, bonus and row paths): made once, read per round.
        A look-ahead rule sizes its window from the N the generation asked for, not each round's draft length."""
        return self._acceptance(self.rule)

    @cached_property
    def strict_acceptance(self) -> Acceptance:
        """How a round outside the rule's scope accepts (``scope``): strict, with the same sampling and rows."""
        return self._acceptance(Strict())

    def _acceptance(self, rule: Rule) -> Acceptance:
        return Acceptance(rule, self.config.sampling, self.config.bonus, self.config.dense_rows,
                          show=self.config.top_alternatives > 0, draft_max=self.config.draft_max)

    @property
    def draft_tokens(self) -> list[int]:
        return self.draft.tokens if self.draft is not None else []

    @property
    def verify_tokens(self) -> list[int]:
        """Step 2's block for this sequence: ``[last, x_1..x_N]``."""
        return [self.context[-1], *self.draft_tokens]


def check_request(verifier: Model, prompt: Sequence[int], config: GenerationConfig, drafter: Drafter | None,
                  rule: Rule | None) -> Rule:
    """The checks every generation passes before anything is decoded; returns the rule (strict by default)."""
    rule = rule or Strict()
    if config.sampling.greedy and not rule.greedy_ok:
        raise refuse_greedy(rule.name)
    if not prompt:
        raise UserError("the prompt is empty")
    if len(prompt) >= verifier.n_ctx:
        raise BadValue("ctx_size", f"{verifier.n_ctx} is too small for a prompt of {len(prompt)} tokens: raise it or "
                                   "shorten the prompt")
    if drafter is not None:
        traits = drafter.traits
        if rule.needs_draft_logits and not traits.has_distribution:
            raise UserError(f"rule {rule.name!r} needs the drafter's logits; use a model drafter, not {traits.kind!r}, "
                            "whose drafts are tokens without a distribution")
        rule.check_draft_max(config.draft_max)  # (FLy at N = 1: one line naming draft_max)
    check_scope_on(verifier, config.relax_scope)  # a verifier that marks no thinking block: one line
    return rule


def open_scope(verifier: Model, prompt: Sequence[int], config: GenerationConfig,
               rule: Rule) -> tuple[ScopeTracker | None, bool]:
    """A generation's scope tracker (None: the rule judges every round — scope ``all``, or strict, which every scope
    leaves as it is) and whether its context starts inside a thinking block, read from the prompt's tokens."""
    if config.relax_scope == "all" or isinstance(rule, Strict):
        return None, False
    scope = scope_tracker(config.relax_scope, verifier.thinking)
    assert scope is not None  # (a scope other than all)
    return scope, scope.inside_after(prompt, False)


def open_slot(verifier: Model, seq: int, prompt: Sequence[int], config: GenerationConfig, rule: Rule | None,
              drafter: Drafter | None, *, should_stop: Callable[[], bool], clock: Callable[[], float],
              share_prompt: bool = False, tag: Any = None, sources: Sequence[int] | None = None) -> Slot:
    """Check the request, prefill both models' rows of this sequence, start its decode clock. ``share_prompt``
    (a context of several sequences): a prompt another sequence holds (one of ``sources``, None: any) is copied,
    not prefilled."""
    rule = check_request(verifier, prompt, config, drafter, rule)
    # candidate rows from the engine where the rule and the sampling allow (else, or where it cannot, whole rows)
    verifier.set_candidates(seq, row_spec(rule, config.sampling, verifier.n_vocab, dense=config.dense_rows,
                                 logprobs=config.logprobs, alternatives=config.top_alternatives))
    draft_rng, accept_rng = spawn_generators(config.seed)
    draft_max = config.draft_max if drafter is not None else 0
    started = clock()
    try:
        if share_prompt:
            copy_cached_prompt(verifier, seq, prompt[:-1], sources=sources)
        decoded, prefilled = prefill(verifier, seq, prompt[:-1], reuse=config.reuse, should_stop=should_stop)
        if prefilled and drafter is not None:
            prefilled = drafter.begin(seq, prompt, reuse=config.reuse, should_stop=should_stop)
    except BaseException:
        verifier.set_candidates(seq, None)  # no generation runs on them: whole rows again
        raise
    now = clock()
    scope, inside = open_scope(verifier, prompt, config, rule)
    return Slot(seq, verifier, drafter, rule, config, len(prompt), list(prompt), draft_rng, accept_rng,
                DraftLength(draft_max, max(config.draft_min, 1), config.adaptive), RoundCounters(draft_max), tag,
                prefill_s=now - started, prefill_decoded=decoded, started=now,
                llama_before=llama_seconds(verifier, drafter), copied_before=copied_bytes(verifier, drafter),
                finish=None if prefilled else "stopped", scope=scope, inside=inside)


def plan(slot: Slot) -> bool:
    """Room and N for this round; False (finish "context") when not even `last` fits."""
    slot.draft = None
    slot.base = len(slot.verifier.tokens_of(slot.seq))  # = len(context) - 1: everything but `last` is cached
    room = slot.verifier.n_ctx - slot.base - 1  # draft tokens that still fit after `last`
    if room < 0:
        slot.finish = "context"
        return False
    slot.n = min(slot.draft_length.current, room, slot.config.max_tokens - len(slot.output) - 1)
    return True


def draft_all(slots: Sequence[Slot]) -> None:
    """Step 1: one call per drafter for every slot that drafts with it (a model drafter batches them, one row per
    sequence per draft step). Drafts shorter than --draft-min are dropped (too short to pay for themselves); model
    steps a drafter decoded past its draft (a proposal cut by price) count as extra draft steps."""
    groups: dict[int, tuple[Drafter, list[Slot]]] = {}
    for slot in slots:
        if slot.drafter is not None and slot.n > 0:
            groups.setdefault(id(slot.drafter), (slot.drafter, []))[1].append(slot)
    for drafter, drafting in groups.values():
        requests = [DraftRequest(s.seq, s.context, s.n, s.config.sampling, s.draft_rng, whole_rows=_whole_rows(s),
                                 alternatives=s.config.top_alternatives) for s in drafting]
        for slot, draft in zip(drafting, drafter.draft(requests), strict=True):
            if slot.scope is not None:  # a round never straddles a thinking block's tag
                draft = _cut_at_tag(draft, slot.scope, drafter.traits.holds_model)
            if draft.tokens and len(draft.tokens) >= slot.config.draft_min:
                slot.draft = draft if drafter.traits.has_distribution else _one_hot(draft, slot.verifier.n_vocab)
            slot.extra_steps += draft.extra_steps
    for slot in slots:
        _checkpoint(slot)


def _cut_at_tag(draft: Draft, scope: ScopeTracker, holds_model: bool) -> Draft:
    """The draft up to and including its first thinking tag (``ScopeTracker.cut``); a model's steps past it count as
    extra draft steps, as a price cut's do."""
    keep = scope.cut(draft.tokens)
    if keep == len(draft.tokens):
        return draft
    return draft.first(keep, draft.extra_steps + (len(draft.tokens) - keep if holds_model else 0))


def _whole_rows(slot: Slot) -> bool:
    """Whether the drafter must hand whole rows: the rule reads raw logits, or the run asked for whole rows."""
    return slot.config.dense_rows or slot.rule.needs_logits


def _checkpoint(slot: Slot) -> None:
    """Before the verify batch: save the verifier's state when a rejection could need a rollback deeper than its
    recurrent-state snapshots (a KV cache, or drafts within the snapshots, need none)."""
    limit = slot.verifier.rollback_limit  # None: a KV cache
    slot.saved = slot.verifier.checkpoint(slot.seq) if limit is not None and len(slot.draft_tokens) > limit else None


def _one_hot(draft: Draft, vocab: int) -> Draft:
    """q of a drafter without a distribution: all its mass on the token it proposed; no logits (whole rows are
    built from it only on the dense path)."""
    return Draft(draft.tokens, None, None, draft.seconds, draft.extra,
                 q=tuple(one_hot(token) for token in draft.tokens), extra_steps=draft.extra_steps)


def accept(slot: Slot, target_logits: Any) -> list[Emitted]:
    """Steps 3 and 5: accept a prefix of the draft (resample or bonus), keep `last` and the accepted drafts in
    the verifier's cache, tell the drafter how many it got and what the round emitted (before the verifier decodes
    again: a drafter that reads the verifier's hidden rows finds this batch's)."""
    drafter = slot.drafter
    acceptance, bonus_step = slot.acceptance, _bonus_step(slot)
    if slot.scope is not None:  # scoped: the rule judges this round only inside its scope, strict does elsewhere
        relaxed = slot.scope.relaxes(slot.inside)
        acceptance = acceptance if relaxed else slot.strict_acceptance
        # the bonus follows the drafts, in the state after them: the rule's own only where no tag moved it out
        if not relaxed or slot.scope.inside_after(slot.draft_tokens, slot.inside) != slot.inside:
            bonus_step = None
    emitted = accept_draft(slot.draft, target_logits, acceptance, slot.accept_rng, bonus_step)
    n_accepted = len(emitted) - 1
    if slot.config.record_rows:  # (before the trim: an engine's rows are views of a buffer the next decode reuses)
        slot.recorded.append(record_round(slot.counters.rounds, slot.draft, target_logits, slot.config.sampling,
                                          n_accepted, drafter is None or drafter.traits.has_distribution))
    slot.round_logprobs = [item.logp_x for item in emitted]  # from the rows the rule already read
    _keep(slot, slot.base + 1 + n_accepted)
    if drafter is not None:
        drafter.accept(slot.seq, n_accepted, emitted)
    return emitted


def _keep(slot: Slot, position: int) -> None:
    """Trim the verifier to ``position`` tokens: a rollback where it is exact, else (recurrent memory, deeper than
    its snapshots) back to the round's checkpoint and decode `last` and the accepted drafts again. A rollback that
    can be neither raises in the engine: never a silently wrong state."""
    saved, slot.saved = slot.saved, None
    if saved is not None and not slot.verifier.can_rollback(slot.seq, position):
        slot.verifier.restore(saved)
        slot.verifier.decode(slot.seq, slot.verify_tokens[:position - slot.base])
    else:
        slot.verifier.rollback(slot.seq, position)


def _bonus_step(slot: Slot) -> DraftStep | None:
    """A relaxed bonus needs q at N+1: asked of a drafter that declares it can give it (only in the fully accepted
    rounds of rules that ask for it); the steps it cost count as extra draft steps."""
    drafter = slot.drafter
    if drafter is None or drafter.traits.bonus_steps is None:
        return None

    def step() -> tuple[np.ndarray, np.ndarray | None]:
        extension = drafter.extend(slot.seq, slot.config.sampling)
        slot.extra_steps += extension.steps
        return extension.q, extension.raw
    return step


def observe(slot: Slot, timing: RoundTiming) -> None:
    """Step 4: the round's counters, and the next round's N."""
    slot.counters.observe_round(timing)
    slot.draft_length.observe(timing.n_drafted, timing.n_accepted)


def commit(slot: Slot, emitted: list[Emitted]) -> list[tuple[int, Emitted, str]]:
    """Step 6: append the round's tokens (stopping at an end-of-generation token, which is not emitted), decide
    whether the sequence is done; returns (output index, token, text) of each emitted token."""
    shown = []
    greedy = slot.config.sampling.greedy
    for position, item in enumerate(emitted):
        if slot.verifier.is_eog(item.token_id):
            slot.finish = "eog"
            break
        text = slot.decoder.push(slot.verifier.token_piece(item.token_id))
        slot.output.append(item.token_id)
        slot.text_parts.append(text)
        slot.logprobs.append(slot.round_logprobs[position] if position < len(slot.round_logprobs) else None)
        slot.probs.append(1.0 if greedy else item.p_x)
        shown.append((len(slot.output) - 1, item, text))
        if slot.config.stop and _completes_stop(slot, text):
            slot.finish = "stop"
            break
    for item in emitted:  # (every token the round emitted: the verifier's cache holds them, EOG included)
        slot.context.append(item.token_id)
    if slot.scope is not None:
        slot.inside = slot.scope.inside_after([item.token_id for item in emitted], slot.inside)
    if slot.finish is None and len(slot.output) >= slot.config.max_tokens:
        slot.finish = "max_tokens"
    return shown


def _completes_stop(slot: Slot, text: str) -> bool:
    """Whether ``text`` completes one of the stop strings (which may span several tokens)."""
    window = slot.stop_tail + text
    longest = max(len(stop) for stop in slot.config.stop)
    slot.stop_tail = window[-(longest - 1):] if longest > 1 else ""
    return any(stop in window for stop in slot.config.stop)


def whole_rows_again(slot: Slot) -> None:
    """Hand the verifier's rows of this sequence whole again (its next user — a calibration, another request's
    settings, a caller decoding by hand — asks for what it needs; candidate rows are this generation's choice)."""
    slot.verifier.set_candidates(slot.seq, None)


def finished(slot: Slot, clock: Callable[[], float]) -> Finished:
    """The last event of a sequence: its text and docs/metrics.md metrics."""
    whole_rows_again(slot)
    if slot.drafter is not None and slot.config.learn:
        slot.drafter.finished(slot.seq, slot.output)
    slot.text_parts.append(slot.decoder.flush())
    metrics = build_metrics(slot.prompt_tokens, len(slot.output), slot.counters, prefill_s=slot.prefill_s,
                            decode_s=clock() - slot.started,
                            llama_s=llama_seconds(slot.verifier, slot.drafter) - slot.llama_before,
                            finish=slot.finish or "stopped", extra_draft_steps=slot.extra_steps,
                            prefill_decoded=slot.prefill_decoded,
                            copied_bytes=copied_bytes(slot.verifier, slot.drafter) - slot.copied_before)
    return Finished("".join(slot.text_parts), metrics, tuple(slot.output), tuple(slot.logprobs), tuple(slot.probs),
                    tuple(slot.recorded))


def build_metrics(prompt_tokens: int, output_tokens: int, counters: RoundCounters, *, prefill_s: float,
                  decode_s: float, llama_s: float, finish: str, extra_draft_steps: int,
                  prefill_decoded: int, copied_bytes: int = 0) -> Metrics:
    """docs/metrics.md metrics of one finished generation from its round counters."""
    return Metrics(
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, rounds=counters.rounds, drafted=counters.drafted,
        accepted=counters.accepted, per_position_reached=tuple(counters.reached),
        per_position_accepted=tuple(counters.accepted_at), prefill_s=prefill_s, decode_s=decode_s,
        draft_s=counters.draft_s, verify_s=counters.verify_s, llama_s=llama_s,
        truncated=finish in {"context", "max_tokens"}, finish_reason=finish,
        draft_lengths=tuple(counters.draft_lengths), extra_draft_steps=extra_draft_steps,
        prefill_decoded=prefill_decoded, full_accept_rounds=counters.full_rounds, copied_bytes=copied_bytes,
    )


def llama_seconds(verifier: Model, *drafters: Drafter | None) -> float:
    """Seconds inside llama_decode of the verifier's and the drafters' contexts (shared by every sequence in them)."""
    return verifier.decode_seconds + sum(d.decode_seconds for d in drafters if d is not None)


def copied_bytes(verifier: Model, *drafters: Drafter | None) -> int:
    """Bytes the verifier's and the drafters' contexts copied out of llama.cpp (logits and hidden rows)."""
    return verifier.copied_bytes + sum(d.copied_bytes for d in drafters if d is not None)


def token_event(index: int, item: Emitted, text: str, timing: RoundTiming, top_k: int, *,
                logp: float | None = None) -> TokenEvent:
    """The event of one emitted token (with the top ``top_k`` alternatives of p and q, for the inspector)."""
    return TokenEvent(
        index=index, token_id=item.token_id, text=text, verdict=item.verdict, draft_position=item.draft_position,
        p_x=item.p_x, q_x=item.q_x, pi_x=item.pi_x, accept_prob=item.accept_prob, statistic=item.statistic,
        rejected_token=item.rejected_token, round=timing,
        top_p=item.shown.top_p(top_k) if item.shown is not None else (),
        top_q=item.shown.top_q(top_k) if item.shown is not None else (),
        logp_x=logp,
    )
