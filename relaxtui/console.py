"""Rendering for the plain terminal: verdict colours, the stats block, JSON lines, progress bars. Formatting only."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import fields
from datetime import timedelta
from typing import Any, TextIO

from relaxtui.decoding.events import Finished, Metrics, RoundTiming, TokenEvent, Verdict
from relaxtui.display import one_line
from relaxtui.progress import Step

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


# -- progress of long commands (bench, tune, eval, models pair) ------------------------------------------------------
def is_terminal(stream: TextIO | None) -> bool:
    """Whether progress may be drawn on ``stream``: only a terminal (piped output, CI logs and tests stay clean)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressDisplay:
    """A rich progress bar on stderr (title, bar, done/total, elapsed, ETA, what runs now), fed the events the
    computing code emits (``steps.Step``, or ``show`` from an adapter). Drawn only when ``enabled`` (a face's
    ``--json`` turns it off) and the stream is a terminal; otherwise every call does nothing. Close it (or use it
    as a context manager) so the terminal gets its cursor back."""

    def __init__(self, title: str, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.active = enabled and is_terminal(self.stream)
        self._progress: Any = None
        self._task: Any = None
        self._last = time.monotonic()  # when the work began, then each event: a new phase starts from the last one
        self._done = 0

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def step(self, step: Step) -> None:
        """The callback a computation takes (``OnStep``)."""
        self.show(step.done, step.total, step.what)

    def show(self, done: int, total: int | None, what: str = "", *, restart_at: int | None = None) -> None:
        """``done`` of ``total`` finished, ``what`` runs now. ``restart_at``: a new phase begins (another total),
        with that many finished before this process started on it (a resumed run): elapsed and ETA count anew."""
        if not self.active:
            return
        what = one_line(what)  # file names and labels are outside text
        now, started = time.monotonic(), self._last
        self._last = now
        if self._progress is None:
            self._progress = _new_progress(self.stream)
            self._start()
        if self._task is None:
            self._task = self._progress.add_task(self.title, total=total, completed=done, base=restart_at or 0,
                                                 started=started, done_at=now, status=what)
        elif restart_at is not None:
            self._progress.reset(self._task, total=total, completed=done, base=restart_at, started=started,
                                 done_at=now, status=what)
        else:
            self._progress.update(self._task, total=total, completed=done, status=what,
                                  **({"done_at": now} if done > self._done else {}))  # a step finished now
        self._done = done
        self._refresh()

    def _start(self) -> None:
        """Start drawing the bar (a board draws it inside its own live view instead)."""
        self._progress.start()

    def _refresh(self) -> None:
        self._progress.refresh()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = self._task = None


class RaceBoard(ProgressDisplay):
    """tune's live view on a terminal's stderr: the race's table, redrawn in place, above the progress bar (rich's
    Live over both); nothing when not a terminal or turned off (``--json``), like the bar."""

    def __init__(self, title: str, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        super().__init__(title, enabled=enabled, stream=stream)
        self._text = ""
        self._live: Any = None

    def table(self, text: str) -> None:
        """Show ``text`` (a rendered table, outside text made one line per row already) above the bar."""
        if not self.active:
            return
        self._text = text
        self._ensure_live()
        self._live.update(self._group(), refresh=True)

    def _ensure_live(self) -> None:
        if self._live is not None:
            return
        from rich.live import Live

        if self._progress is None:
            self._progress = _new_progress(self.stream)
        self._live = Live(self._group(), console=self._progress.console, refresh_per_second=2,
                          redirect_stdout=False, redirect_stderr=True)
        self._live.start()

    def _group(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        return Group(Text(self._text), self._progress) if self._progress is not None else Text(self._text)

    def _start(self) -> None:
        self._ensure_live()

    def _refresh(self) -> None:
        self._live.refresh()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._progress = self._task = None
        super().close()


def _new_progress(stream: TextIO) -> Any:
    """rich's Progress on ``stream`` (imported here: generate, which shows none, need not load it). Prints to
    stderr while it is drawn go above the bar; stdout is left alone (it may be piped while stderr is not)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
    from rich.table import Column
    from rich.text import Text

    class Times(ProgressColumn):
        """Elapsed since the phase began, and the ETA: the mean time of the steps this process finished in it
        (``base``: those a resumed run had before it started) for each step left, counting down while one runs."""

        def render(self, task: Any) -> Text:
            now, fields = task.get_time(), task.fields
            ran, left = task.completed - fields["base"], "-:--:--"
            if task.total is not None and ran > 0:
                per_step, steps = (fields["done_at"] - fields["started"]) / ran, max(0, task.total - task.completed)
                seconds = max(per_step * (steps - 1), per_step * steps - (now - fields["done_at"]), 0.0)
                left = str(timedelta(seconds=round(seconds)))
            return Text(f"{timedelta(seconds=int(max(0.0, now - fields['started'])))} ETA {left}",
                        style="progress.remaining")

    class Status(ProgressColumn):
        """What runs now: the one column that gives way (cut with an ellipsis) on a narrow terminal."""

        def render(self, task: Any) -> Text:
            return Text(task.fields["status"], no_wrap=True, overflow="ellipsis")  # text, never markup

    def fixed() -> Column:
        return Column(no_wrap=True)

    console = Console(file=stream, force_terminal=True)
    return Progress(TextColumn("[bold]{task.description}", table_column=fixed()), BarColumn(bar_width=20),
                    MofNCompleteColumn(table_column=fixed()), Times(table_column=fixed()), Status(), console=console,
                    redirect_stdout=False, redirect_stderr=True, refresh_per_second=2)
