"""Rendering for the plain terminal: verdict colours, the stats block, JSON lines. Formatting only."""

from __future__ import annotations

import json
from dataclasses import fields

from relaxtui.decoding.events import Finished, Metrics, RoundTiming, TokenEvent, Verdict

# ANSI styles per verdict; verifier-only tokens keep the terminal's own colour.
VERDICT_STYLE = {
    Verdict.ACCEPTED: "\x1b[32m",  # green: the drafter's token was kept
    Verdict.RESAMPLED: "\x1b[31m",  # red: a draft was rejected, this came from the residual
    Verdict.BONUS: "\x1b[38;5;214m",  # amber (as in the TUI): the free token after a fully accepted draft
    Verdict.VERIFIER: "",
}
RESET = "\x1b[0m"
NOT_MEASURED = "–"


def colour_token(event: TokenEvent, colour: bool) -> str:
    style = VERDICT_STYLE[event.verdict] if colour else ""
    return f"{style}{event.text}{RESET}" if style else event.text


def legend(colour: bool) -> str:
    parts = [f"{VERDICT_STYLE[v]}{v.value}{RESET}" if colour and VERDICT_STYLE[v] else v.value for v in Verdict]
    return "legend: " + "  ".join(parts)


def stats_block(metrics: Metrics, *, c_rel: float | None = None, peak_rss_mb: float | None = None) -> str:
    """The stats after a completion; what was not measured (no drafts, a prompt reused from the cache) is "–"
    or said in words, never a zero that reads as a measurement."""
    drafted = metrics.drafted > 0
    positions = " ".join(f"{a:.2f}" for a in metrics.per_position_acceptance) if drafted else NOT_MEASURED
    prefill = (f"{metrics.prompt_tokens} tokens, all reused from the cache" if metrics.prefill_decoded == 0 else
               f"{metrics.prompt_tokens} tokens in {metrics.prefill_s:.2f} s")
    lines = [
        f"output tokens      {metrics.output_tokens} ({metrics.finish_reason}"
        f"{', truncated' if metrics.truncated else ''})",
        f"prefill            {prefill}",
        f"decode             {metrics.decode_s:.2f} s, {metrics.tokens_per_s:.2f} tokens/s",
        f"rounds             {metrics.rounds}",
        f"drafted/accepted   {metrics.drafted}/{metrics.accepted}" if drafted else
        f"drafted/accepted   {NOT_MEASURED} (verifier alone)",
        f"acceptance rate    {metrics.acceptance_rate:.3f}" if drafted else f"acceptance rate    {NOT_MEASURED}",
        f"mean accepted len  {metrics.mean_accepted_length:.3f}" if drafted else f"mean accepted len  {NOT_MEASURED}",
        f"per-position acc.  {positions}",
        f"time draft/verify  {metrics.draft_s:.2f} s / {metrics.verify_s:.2f} s",
        f"python share       {metrics.python_share:.1%}",
    ]
    if c_rel is not None:
        lines.append(f"c_rel (this machine) {c_rel:.3f}")
    if peak_rss_mb is not None:
        lines.append(f"peak RSS           {peak_rss_mb:.0f} MiB")
    return "\n".join(lines)


_TOKEN_FIELDS = tuple(field.name for field in fields(TokenEvent))
_ROUND_FIELDS = tuple(field.name for field in fields(RoundTiming))


def event_json(event: TokenEvent | Finished) -> str:
    """One JSON line per event. Fields are read directly, not through ``dataclasses.asdict`` (a deep copy that cost
    ~40 µs a token, 3× this: inside generate's clock, where a script piping ``--json`` would see it as lost speed)."""
    if isinstance(event, TokenEvent):
        data = {name: getattr(event, name) for name in _TOKEN_FIELDS}
        data["verdict"] = event.verdict.value
        data["statistic"] = dict(event.statistic)
        data["round"] = {name: getattr(event.round, name) for name in _ROUND_FIELDS}
        data["type"] = "token"
    else:
        data = {"type": "finished", "text": event.text, "metrics": event.metrics.as_dict()}
    return json.dumps(data, ensure_ascii=False)
