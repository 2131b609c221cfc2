"""Checked by mypy only (``scripts/dev test``; nothing imports this at run time): every model and head the engine
builds satisfies the protocol the loops see (``engine/api.py``). A protocol is structural, so without these
assignments a method whose signature drifts from ``Model`` would go unnoticed until a loop called it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relaxtui.engine.api import DraftHead, Model
    from relaxtui.engine.fake import FakeBackend
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.engine.mtp import MtpHead

    def _models(llama: LlamaModel, fake: FakeBackend) -> list[Model]:
        return [llama, fake]

    def _heads(mtp: MtpHead) -> list[DraftHead]:
        return [mtp]
