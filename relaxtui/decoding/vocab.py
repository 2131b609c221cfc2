"""Drafter/verifier vocabulary compatibility, checked the way llama.cpp's speculative example does.

Same vocabulary type, same BOS/EOS, sizes within 128 (padding), identical token text from id 5 on.
Each failure names what differs, because "vocab mismatch" alone sends users hunting.
"""

from __future__ import annotations

from typing import Protocol

from relaxtui.engine.api import Model
from relaxtui.errors import UserError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


class VocabInfo(Protocol):
    """What ``check_vocab`` reads of a model (read-only: an attribute or a property answers)."""

    @property
    def n_vocab(self) -> int: ...
    @property
    def vocab_type(self) -> int: ...
    @property
    def bos(self) -> int: ...
    @property
    def eos(self) -> int: ...
    @property
    def add_bos(self) -> bool: ...
    def token_text(self, token: int) -> bytes: ...


class VocabModel(Model, VocabInfo, Protocol):
    """A model a drafter is built for or with: the loops' protocol plus the vocabulary ``check_vocab`` compares
    (``LlamaModel`` and ``FakeBackend``, engine/conformance.py)."""


def check_vocab(verifier: VocabInfo, drafter: VocabInfo, *, names: tuple[str, str] = ("verifier", "drafter")) -> None:
    """Raise UserError saying how the two vocabularies differ; return quietly when they are compatible."""
    v_name, d_name = names
    if verifier.vocab_type != drafter.vocab_type:
        raise UserError(f"vocabularies differ: {v_name} vocab type {verifier.vocab_type}, "
                        f"{d_name} vocab type {drafter.vocab_type}")
    if verifier.add_bos != drafter.add_bos or (verifier.add_bos and verifier.bos != drafter.bos):
        raise UserError(f"vocabularies differ: BOS token {verifier.bos} (add_bos={verifier.add_bos}) in {v_name}, "
                        f"{drafter.bos} (add_bos={drafter.add_bos}) in {d_name}")
    if verifier.eos != drafter.eos:
        raise UserError(f"vocabularies differ: EOS token {verifier.eos} in {v_name}, {drafter.eos} in {d_name}")
    difference = abs(verifier.n_vocab - drafter.n_vocab)
    if difference > MAX_VOCAB_SIZE_DIFFERENCE:
        raise UserError(f"vocabularies differ: {v_name} has {verifier.n_vocab} tokens, {d_name} "
                        f"{drafter.n_vocab} (more than {MAX_VOCAB_SIZE_DIFFERENCE} apart)")
    for token in range(FIRST_CHECKED_TOKEN, min(verifier.n_vocab, drafter.n_vocab)):
        v_text, d_text = verifier.token_text(token), drafter.token_text(token)
        if v_text != d_text:
            raise UserError(f"vocabularies differ: token {token} is {v_text!r} in {v_name} but {d_text!r} in {d_name}")
