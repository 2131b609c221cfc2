"""Saving a chat: a readable Markdown transcript and the raw token events as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from relaxtui.decoding.events import TokenEvent
from relaxtui.engine.text import Message
from relaxtui.tui.engine import ChatSettings


def transcript_markdown(conversation: Sequence[Message], settings: ChatSettings) -> str:
    knob = "" if settings.knob is None else f" (knob {settings.knob:g})"
    lines = ["# relaxtui chat", "", f"rule {settings.rule}{knob}, N={settings.draft_max}, T={settings.temperature:g},"
             f" top-k {settings.top_k}, top-p {settings.top_p:g}, drafter {settings.drafter}", ""]
    for message in conversation:
        lines += [f"## {message.role}", "", message.content, ""]
    return "\n".join(lines)


def event_record(event: TokenEvent) -> dict[str, object]:
    record = asdict(event)
    record["verdict"] = event.verdict.value
    record["statistic"] = dict(event.statistic)
    return record


def save_transcript(stem: Path, conversation: Sequence[Message], events: Sequence[TokenEvent],
                    settings: ChatSettings) -> tuple[Path, Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    markdown, jsonl = stem.with_suffix(".md"), stem.with_suffix(".jsonl")
    markdown.write_text(transcript_markdown(conversation, settings), encoding="utf-8")
    with jsonl.open("w", encoding="utf-8") as stream:
        stream.write(json.dumps({"type": "settings", **asdict(settings)}) + "\n")
        for event in events:
            stream.write(json.dumps({"type": "token", **event_record(event)}, ensure_ascii=False) + "\n")
    return markdown, jsonl
