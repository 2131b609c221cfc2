"""Saved chats: a readable Markdown transcript, and a JSON file that `relaxtui chat --resume FILE` reopens.

The JSON file (format ``relaxtui-chat``, version 1) holds everything a chat needs to continue::

    {"format": "relaxtui-chat", "version": 1, "saved_at": "2025-01-31T12:00:00",
     "models": {"verifier": {"name", "path", "kind"}, "drafter": {"name", "path", "kind"}},
     "settings": {rule, knob, draft_max, drafter, relax_scope, temperature, top_k, top_p, thinking, max_tokens,
                  seed},
     "messages": [{"role": "user", "content": "..."},
                  {"role": "assistant", "content": "...", "events": [TokenEvent, ...],
                   "metrics": Metrics | null, "settings": {... the settings this reply ran with}}]}

Events and metrics are the loop's own dataclasses, field for field (tuples as arrays, the verdict as its name).
The loader checks as it reads — a JSON object, the format and version, every field's type — so a foreign or
damaged file is one clear line (UserError), never a traceback or a half-restored screen.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from relaxtui.checks import BadValue, utf8_problem
from relaxtui.decoding.events import Metrics, TokenEvent
from relaxtui.errors import UserError
from relaxtui.files import FileRefused, FileTooBig, read_regular_bytes
from relaxtui.text import Message
from relaxtui.tui.engine import ChatSettings, ModelInfo

FORMAT = "relaxtui-chat"
VERSION = 1
MAX_BYTES = 64 * 1024 * 1024  # a long chat with per-token alternatives is a few MiB; anything far larger is foreign
ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Turn:
    """One message of the conversation; an assistant turn also keeps its tokens, metrics and settings."""

    role: str
    content: str
    events: tuple[TokenEvent, ...] = ()
    metrics: Metrics | None = None  # None: the reply failed part-way (its tokens are kept)
    settings: ChatSettings | None = None

    @property
    def message(self) -> Message:
        return Message(self.role, self.content)


@dataclass(frozen=True)
class SavedChat:
    settings: ChatSettings
    verifier: ModelInfo
    drafter: ModelInfo
    turns: tuple[Turn, ...]
    saved_at: str = ""


# -- writing -----------------------------------------------------------------------------------------------------
def transcript_markdown(chat: SavedChat) -> str:
    s = chat.settings
    knob = "" if s.knob is None else f" (knob {s.knob:g})"
    lines = ["# relaxtui chat", "", f"verifier {chat.verifier.name}, drafter {chat.drafter.name}", "",
             f"rule {s.rule}{knob}, N={s.draft_max}, T={s.temperature:g}, top-k {s.top_k}, top-p {s.top_p:g}, "
             f"seed {s.seed}", ""]
    for turn in chat.turns:
        lines += [f"## {turn.role}", "", turn.content, ""]
    return "\n".join(lines)


def chat_document(chat: SavedChat) -> dict[str, object]:
    messages: list[dict[str, object]] = []
    for turn in chat.turns:
        record = asdict(turn)
        if turn.role == "user":
            record = {"role": turn.role, "content": turn.content}
        messages.append(record)
    return {"format": FORMAT, "version": VERSION, "saved_at": chat.saved_at,
            "models": {"verifier": asdict(chat.verifier), "drafter": asdict(chat.drafter)},
            "settings": asdict(chat.settings), "messages": messages}


def save_chat(stem: Path, chat: SavedChat) -> tuple[Path, Path]:
    """Write STEM.md and STEM.json (through a temporary file, so a failed save never leaves half a chat)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    markdown, saved = stem.with_suffix(".md"), stem.with_suffix(".json")
    markdown.write_text(transcript_markdown(chat), encoding="utf-8")
    partial = stem.with_suffix(".json.partial")
    partial.write_text(json.dumps(chat_document(chat), ensure_ascii=False), encoding="utf-8")
    os.replace(partial, saved)
    return markdown, saved


def saved_notice(markdown: Path, saved: Path) -> str:
    """What ctrl+s says: the folder as an absolute path (``transcripts/`` is relative to the folder the chat was
    started from, easy to lose) and the command that reopens the chat from anywhere."""
    folder = saved.parent.resolve()
    return f"saved {markdown.name} and {saved.name} in {folder} (reopen: relaxtui chat --resume {folder / saved.name})"


# -- reading -----------------------------------------------------------------------------------------------------
class _Invalid(Exception):
    """A field of the document that does not have the type it must have (turned into one UserError line)."""


def _convert(value: object, hint: object, where: str) -> object:
    """JSON ``value`` as the type ``hint`` (a dataclass, an enum, X | None, tuple[X, ...], a fixed tuple or a
    scalar), checked on the way: bools are not numbers, ints are accepted where a float is expected."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(value, inner, where)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise _Invalid(f"{where} must be an array")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(item, args[0], f"{where}[{i}]") for i, item in enumerate(value))
        if len(value) != len(args):
            raise _Invalid(f"{where} must have {len(args)} items")
        pairs = enumerate(zip(value, args, strict=True))
        return tuple(_convert(item, arg, f"{where}[{i}]") for i, (item, arg) in pairs)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(value, hint, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            raise _Invalid(f"{where} must be one of {', '.join(str(m.value) for m in hint)}") from None
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)  # ±Infinity stays (casc-opt's strict knob is -inf); NaN is never a saved value
    if hint is str and isinstance(value, str):
        if problem := utf8_problem(value):  # a JSON "\ud800" escape: taken now, it would break the next save
            raise _Invalid(f"{where} {problem}")
        return value
    names: dict[object, str] = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    raise _Invalid(f"{where} must be {names.get(hint, hint)}")


def _dataclass(value: object, cls: type, where: str) -> object:
    """An object whose known fields become ``cls``; a field with no default must be there."""
    if not isinstance(value, dict):
        raise _Invalid(f"{where} must be an object")
    hints = typing.get_type_hints(cls)
    fields = {}
    for field in dataclasses.fields(cls):
        if field.name in value:
            fields[field.name] = _convert(value[field.name], hints[field.name], f"{where}.{field.name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise _Invalid(f"{where}.{field.name} is missing")
    return cls(**fields)


def _turn(value: object, where: str) -> Turn:
    turn = typing.cast(Turn, _dataclass(value, Turn, where))
    if turn.role not in ROLES:
        raise _Invalid(f"{where}.role must be user or assistant (got {turn.role!r})")
    if turn.role == "user" and (turn.events or turn.metrics or turn.settings):
        raise _Invalid(f"{where}: a user message carries no tokens, metrics or settings")
    return turn


def chat_from_document(document: object) -> SavedChat:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _Invalid(f'not a relaxtui saved chat (no "format": "{FORMAT}")')
    if document.get("version") != VERSION:
        raise _Invalid(f"format version {document.get('version')!r}; this relaxtui reads version {VERSION}")
    models = document.get("models")
    if not isinstance(models, dict):
        raise _Invalid("models must be an object")
    messages = document.get("messages")
    if not isinstance(messages, list):
        raise _Invalid("messages must be an array")
    saved_at = document.get("saved_at", "")
    return SavedChat(
        settings=typing.cast(ChatSettings, _dataclass(document.get("settings"), ChatSettings, "settings")),
        verifier=typing.cast(ModelInfo, _dataclass(models.get("verifier"), ModelInfo, "models.verifier")),
        drafter=typing.cast(ModelInfo, _dataclass(models.get("drafter"), ModelInfo, "models.drafter")),
        turns=tuple(_turn(message, f"messages[{i}]") for i, message in enumerate(messages)),
        saved_at=saved_at if isinstance(saved_at, str) else "",
    )


def load_chat(path: Path) -> SavedChat:
    """Read a saved chat; anything else (too big, not JSON, another format, a wrong field) is a UserError."""
    try:  # a FIFO, a device or a folder: one line, never a hang (relaxtui.files)
        data = read_regular_bytes(path, MAX_BYTES, "saved chat")
    except FileTooBig:
        raise UserError(f"cannot resume {path}: larger than {MAX_BYTES >> 20} MiB, not a saved chat") from None
    except FileRefused as exc:
        raise UserError(f"cannot resume {path}: {exc.reason}") from None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"cannot resume {path}: not a saved chat (not JSON: {reason})") from None
    try:  # each setting through the check its flag uses (relaxtui.checks): `--seed -1` and a saved -1 alike
        chat = chat_from_document(document)
        for i, turn in enumerate(chat.turns):
            if turn.settings is not None:
                turn.settings.checked(f"messages[{i}].settings.")
        chat.settings.validated("settings.")
    except (_Invalid, BadValue) as exc:
        raise UserError(f"cannot resume {path}: {exc}") from None
    except UserError as exc:
        raise UserError(f"cannot resume {path}: settings: {exc}") from None
    return chat


def conversation(turns: Sequence[Turn]) -> list[Message]:
    return [turn.message for turn in turns]


def model_changes(saved: SavedChat, verifier: ModelInfo, drafter: ModelInfo) -> list[str]:
    """One line per model of a resumed chat that is not the one it continues with (compared by file name)."""
    return [f"this chat was saved with {role} {then.file_name}; it continues with {now.file_name}"
            for role, then, now in (("verifier", saved.verifier, verifier), ("drafter", saved.drafter, drafter))
            if then.file_name != now.file_name]
