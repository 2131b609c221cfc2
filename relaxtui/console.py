"""Rendering for the plain terminal: verdict colours, the stats block, JSON lines. Formatting only."""

from __future__ import annotations

import json
from dataclasses import asdict

from relaxtui.decoding.events import Finished, Metrics, TokenEvent, Verdict

# ANSI styles per verdict; verifier-only tokens keep the terminal's own colour.
VERDICT_STYLE = {
    Verdict.ACCEPTED: "\x1b[32m",  # green: the drafter's token was kept
    Verdict.RESAMPLED: "\x1b[31m",  # red: a draft was rejected, this came from the residual
    Verdict.BONUS: "\x1b[36m",  # cyan: the free token after a fully accepted draft
    Verdict.VERIFIER: "",
}
RESET = "\x1b[0m"


def colour_token(event: TokenEvent, colour: bool) -> str:
    style = VERDICT_STYLE[event.verdict] if colour else ""
    return f"{style}{event.text}{RESET}" if style else event.text


def legend(colour: bool) -> str:
    parts = [f"{VERDICT_STYLE[v]}{v.value}{RESET}" if colour and VERDICT_STYLE[v] else v.value for v in Verdict]
    return "legend: " + "  ".join(parts)


def stats_block(metrics: Metrics, *, c_rel: float | None = None, peak_rss_mb: float | None = None) -> str:
    positions = " ".join(f"{a:.2f}" for a in metrics.per_position_acceptance) or "-"
    lines = [
        f"output tokens      {metrics.output_tokens} ({metrics.finish_reason}"
        f"{', truncated' if metrics.truncated else ''})",
        f"prefill            {metrics.prompt_tokens} tokens in {metrics.prefill_s:.2f} s",
        f"decode             {metrics.decode_s:.2f} s, {metrics.tokens_per_s:.2f} tokens/s",
        f"rounds             {metrics.rounds}",
        f"drafted/accepted   {metrics.drafted}/{metrics.accepted}",
        f"acceptance rate    {metrics.acceptance_rate:.3f}",
        f"mean accepted len  {metrics.mean_accepted_length:.3f}",
        f"per-position acc.  {positions}",
        f"time draft/verify  {metrics.draft_s:.2f} s / {metrics.verify_s:.2f} s",
        f"python share       {metrics.python_share:.1%}",
    ]
    if c_rel is not None:
        lines.append(f"c_rel (measured)   {c_rel:.3f}")
    if peak_rss_mb is not None:
        lines.append(f"peak RSS           {peak_rss_mb:.0f} MiB")
    return "\n".join(lines)


def event_json(event: TokenEvent | Finished) -> str:
    if isinstance(event, TokenEvent):
        data = asdict(event)
        data["verdict"] = event.verdict.value
        data["statistic"] = dict(event.statistic)
        data["type"] = "token"
    else:
        data = {"type": "finished", "text": event.text, "metrics": event.metrics.as_dict()}
    return json.dumps(data, ensure_ascii=False)
