"""What a response shows of the loop's events: text held back for stop strings, the per-token verdicts, the
verifier's log-probabilities, llama-server's ``timings`` and relaxtui's statistics, in OpenAI's JSON shapes.

Vocabulary as in the loop's events, with one rename the API makes: a draft the rule refused, replaced by a
token resampled from the residual, is ``"rejected"`` (what a client colours red); ``"accepted"`` drafts,
``"bonus"`` tokens after a fully accepted draft, and ``"verifier"`` tokens from a round without a draft.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaxtui.costmodel.pricing import END_REASON, Rounds, priced_speedup
from relaxtui.costmodel.profiles import CostProfile
from relaxtui.decoding.events import (
    Finished,
    Metrics,
    TokenEvent,
    Verdict,
    acceptance_rate,
    mean_accepted_length,
)
from relaxtui.errors import UserError
from relaxtui.options import Speculative

VERDICTS = {Verdict.ACCEPTED: "accepted", Verdict.RESAMPLED: "rejected", Verdict.BONUS: "bonus",
            Verdict.VERIFIER: "verifier"}
MIN_LOGPROB = -9999.0  # OpenAI's floor: a token outside the verifier's kept set (a relaxed accept) has p = 0


@dataclass(frozen=True, slots=True)
class Piece:
    """One emitted token as a response shows it (``token_id`` -1: trailing text with no token of its own)."""

    text: str
    token_id: int
    verdict: str
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprob(p: float) -> float:
    return max(math.log(p), MIN_LOGPROB) if p > 0 else MIN_LOGPROB


def piece(event: TokenEvent, top_k: int | None) -> Piece:
    top = tuple((i, logprob(p)) for i, p in event.top_p[:top_k]) if top_k else ()
    return Piece(event.text, event.token_id, VERDICTS[event.verdict], logprob(event.p_x), top)


class StopText:
    """A choice's output as it may be sent: text that could still grow into a stop string is held back (whole
    tokens), and at a stop string the text ends there — the token that holds it cut, the ones after dropped."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(stops)
        self.pending: list[Piece] = []
        self.stopped = False

    def push(self, pieces: Sequence[Piece]) -> list[Piece]:
        """Take new tokens; return the ones that can be sent now."""
        if self.stopped:
            return []
        self.pending.extend(pieces)
        if not self.stops:
            return self._release(len(self.pending))
        text = "".join(p.text for p in self.pending)
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            return self._cut(min(found))
        hold = max((n for s in self.stops for n in range(min(len(s) - 1, len(text)), 0, -1)
                    if text.endswith(s[:n])), default=0)
        end, count = 0, 0
        for p in self.pending:
            if end + len(p.text) > len(text) - hold:
                break
            end += len(p.text)
            count += 1
        return self._release(count)

    def finish(self, tail: str = "") -> list[Piece]:
        """The generation ended: everything held back goes out (no stop string can complete any more)."""
        if self.stopped:
            return []
        if tail:
            self.pending.append(Piece(tail, -1, "", MIN_LOGPROB))
        if self.stops:
            text = "".join(p.text for p in self.pending)
            found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
            if found:
                return self._cut(min(found))
        return self._release(len(self.pending))

    def _release(self, count: int) -> list[Piece]:
        out, self.pending = self.pending[:count], self.pending[count:]
        return out

    def _cut(self, at: int) -> list[Piece]:
        out, start = [], 0
        for p in self.pending:
            if start + len(p.text) <= at:
                out.append(p)
            elif start < at:
                out.append(Piece(p.text[:at - start], p.token_id, p.verdict, p.logprob, p.top))
            start += len(p.text)
        self.pending, self.stopped = [], True
        return out


# -- statistics ----------------------------------------------------------------------------------------------
@dataclass
class Totals:
    """Counters summed over a response's choices (or over the server's life, for /metrics)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0  # the longest choice's: choices run side by side
    cached_tokens: int = 0
    rounds: int = 0
    drafts: int = 0  # rounds that verified a draft (vLLM's num_drafts)
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    output_tokens: int = 0  # every token the loop emitted (with those past a stop string): what the rounds made
    extra_draft_steps: int = 0
    full_rounds: int = 0
    draft_lengths: list[int] = field(default_factory=list)
    end_tokens: int = 0  # choices that ended on an end-of-generation token (its round is priced on both sides)

    def add(self, metrics: Metrics, shown_tokens: int, *, prompt: bool = True) -> None:
        if prompt:
            self.prompt_tokens += metrics.prompt_tokens
            self.cached_tokens += max(metrics.prompt_tokens - 1 - metrics.prefill_decoded, 0)
        self.prompt_s = max(self.prompt_s, metrics.prefill_s)
        self.decode_s = max(self.decode_s, metrics.decode_s)
        self.completion_tokens += shown_tokens
        self.rounds += metrics.rounds
        self.drafts += sum(1 for k in metrics.draft_lengths if k > 0)
        self.draft_tokens += metrics.drafted
        self.accepted_tokens += metrics.accepted
        per = metrics.per_position_accepted
        if len(per) > len(self.accepted_per_position):
            self.accepted_per_position += [0] * (len(per) - len(self.accepted_per_position))
        for i, count in enumerate(per):
            self.accepted_per_position[i] += count
        self.output_tokens += metrics.output_tokens
        self.extra_draft_steps += metrics.extra_draft_steps
        self.full_rounds += metrics.full_accept_rounds
        self.draft_lengths += metrics.draft_lengths
        self.end_tokens += metrics.finish_reason == END_REASON


def timings(totals: Totals) -> dict[str, Any]:
    """llama-server's ``timings`` object (same names and meaning)."""
    prompt_n = totals.prompt_tokens - totals.cached_tokens
    prompt_ms, predicted_ms = totals.prompt_s * 1e3, totals.decode_s * 1e3
    n = totals.output_tokens
    return {
        "cache_n": totals.cached_tokens, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / totals.prompt_s if totals.prompt_s > 0 else 0.0,
        "predicted_n": n, "predicted_ms": predicted_ms, "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": n / totals.decode_s if totals.decode_s > 0 else 0.0,
        "draft_n": totals.draft_tokens, "draft_n_accepted": totals.accepted_tokens,
    }


def _knob(knob: float | None) -> float | str | None:
    """A knob as JSON: -inf (casc-opt and casc-tok's strict setting) as the string "-inf", not -Infinity."""
    return knob if knob is None or math.isfinite(knob) else str(knob)


def stats(totals: Totals, speculative: Speculative, profile: CostProfile | None) -> dict[str, Any]:
    """relaxtui's view: what ran, acceptance, mean accepted length, and the speed-up priced by the profile (null with
    ``priced_by`` null while there is none: this machine's is being measured)."""
    speedup: float | None = None
    try:
        if profile is not None:
            speedup = priced_speedup(profile, Rounds.of(
                totals.draft_lengths, totals.output_tokens, full_rounds=totals.full_rounds,
                extra_draft_steps=totals.extra_draft_steps, end_tokens=totals.end_tokens))
    except UserError:  # a block longer than the profile measures
        speedup = None
    return {
        "rule": speculative.rule, "alpha": _knob(speculative.knob), "draft_max": speculative.draft_max,
        "draft_kind": speculative.drafter, "relax_scope": speculative.relax_scope,
        "rounds": totals.rounds, "num_drafts": totals.drafts,
        "num_draft_tokens": totals.draft_tokens, "num_accepted_tokens": totals.accepted_tokens,
        "num_accepted_tokens_per_pos": list(totals.accepted_per_position),
        "acceptance_rate": acceptance_rate(totals.accepted_tokens, totals.draft_tokens),
        "mean_accepted_length": mean_accepted_length(totals.accepted_tokens, totals.rounds),
        "priced_speedup": speedup, "priced_by": profile.name if profile is not None else None,
    }


ACCEPTANCE_TIMINGS = ("draft_n", "draft_n_accepted")
ACCEPTANCE_STATS = ("rounds", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
                    "acceptance_rate", "mean_accepted_length", "priced_speedup")


def without_acceptance(timings: dict[str, Any], stats: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``timings`` and ``stats`` without what counts drafted and accepted tokens (``--verdicts off``): how many of a
    reply's tokens a drafter proposed tells whether the drafter had seen the text before."""
    return ({k: v for k, v in timings.items() if k not in ACCEPTANCE_TIMINGS},
            {k: v for k, v in stats.items() if k not in ACCEPTANCE_STATS})


def usage(totals: Totals) -> dict[str, Any]:
    return {"prompt_tokens": totals.prompt_tokens, "completion_tokens": totals.completion_tokens,
            "total_tokens": totals.prompt_tokens + totals.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": totals.cached_tokens}}


# -- JSON shapes -----------------------------------------------------------------------------------------------
PieceText = Callable[[int], str]  # token id -> its text, for top alternatives
PieceBytes = Callable[[int], bytes]


def verdict_tokens(pieces: Sequence[Piece]) -> list[dict[str, Any]]:
    return [{"text": p.text, "verdict": p.verdict, "id": p.token_id} for p in pieces if p.token_id >= 0]


def chat_logprobs(pieces: Sequence[Piece], token_bytes: PieceBytes) -> dict[str, Any]:
    def entry(token_id: int, value: float) -> dict[str, Any]:
        raw = token_bytes(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": value, "bytes": list(raw)}
    return {"content": [{**entry(p.token_id, p.logprob), "top_logprobs": [entry(i, v) for i, v in p.top]}
                        for p in pieces if p.token_id >= 0]}


def completion_logprobs(pieces: Sequence[Piece], token_bytes: PieceBytes, offset: int) -> dict[str, Any]:
    """The legacy completions shape: tokens, token_logprobs, top_logprobs (dicts), text_offset."""
    tokens, values, tops, offsets = [], [], [], []
    for p in pieces:
        if p.token_id < 0:
            continue
        tokens.append(token_bytes(p.token_id).decode("utf-8", errors="replace"))
        values.append(p.logprob)
        tops.append({token_bytes(i).decode("utf-8", errors="replace"): v for i, v in p.top})
        offsets.append(offset)
        offset += len(p.text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def finish_reason(finished: Finished, stopped_by: str | None) -> str:
    """OpenAI's reason: "stop" at an end-of-generation token or a stop string, else "length"."""
    if stopped_by == "stop":
        return "stop"
    return "stop" if finished.metrics.finish_reason in ("eog", "stop") else "length"


def envelope(kind: str, request_id: str, model: str, created: int | None = None, *,
             fingerprint: str | None = None) -> dict[str, Any]:
    return {"id": request_id, "object": kind, "created": created or int(time.time()), "model": model,
            "system_fingerprint": fingerprint}
