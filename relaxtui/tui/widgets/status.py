"""The one-line status under the transcript: what the next reply will run with, or how the last one ended."""

from __future__ import annotations

from textual.widgets import Static

from relaxtui.decoding.events import Metrics
from relaxtui.tui.engine import KIND_WORDS, ChatSettings

ENDINGS = {"eog": "done", "max_tokens": "hit max tokens", "context": "context full (truncated)", "stopped": "stopped"}


class StatusLine(Static):
    def idle(self, settings: ChatSettings, drafter: str, kind: str = "model") -> None:
        knob = "" if settings.knob is None else f" {settings.knob:g}"
        what = f" ({KIND_WORDS[kind]})" if kind in KIND_WORDS else ""  # an LM drafter: its file's name says it
        self.update(f"{settings.rule}{knob} · N={settings.draft_max} · T={settings.temperature:g} · "
                    f"drafter {drafter}{what} · F2 settings")

    def finished(self, metrics: Metrics) -> None:
        acceptance = f"{metrics.acceptance_rate:.2f}" if metrics.drafted else "–"
        self.update(f"{ENDINGS[metrics.finish_reason]}: {metrics.output_tokens} tokens, "
                    f"{metrics.tokens_per_s:.1f} tok/s, acceptance {acceptance}")
