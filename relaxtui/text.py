"""Text every floor shares: a chat message, and streaming detokenisation (pieces of bytes in, text out).

Below ``engine/`` and ``decoding/`` alike (it imports nothing of relaxtui), so the loop can stream text and the
chat template can read messages without either importing the other.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    role: str
    content: str


class StreamDecoder:
    """Turns token pieces (bytes) into text as they stream, holding back split UTF-8 sequences."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
