"""A fake model that thinks: a 7-token vocabulary with ``<think>`` and ``</think>`` pieces (each one token) and a
template that writes them, on ``engine/fake.py``'s FakeBackend, and the Markov tables the --relax-scope tests share:
from inside a block the verifier closes it with probability ~0.3 a step, from outside it reopens one rarely."""

from __future__ import annotations

import numpy as np

from relaxtui.decoding.model_drafter import ModelDrafter
from relaxtui.decoding.sampling import softmax
from relaxtui.engine.fake import FakeBackend, markov_logits

PIECES = (b" a", b" b", b" c", b" d", b"<think>", b"</think>", b"\n")
OPEN, CLOSE, NEWLINE = 4, 5, 6
VOCAB = len(PIECES)
TEMPLATE = "{{ '<think>' if enable_thinking is not defined or enable_thinking else '<think>\\n\\n</think>\\n\\n' }}"
THINKING_PROMPT = [NEWLINE, OPEN]  # a template that opens the block in the prompt: the generation starts inside
ANSWER_PROMPT = [NEWLINE, OPEN, NEWLINE, CLOSE, NEWLINE]  # thinking off: an empty block closed in the prompt


def think_tables(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(verifier, drafter) logits, row = previous token. Inside a block (rows of the words and ``<think>``) the
    verifier closes it with probability ~0.3; after ``</think>`` it answers in words; the drafter is the verifier
    plus noise, far from it after ``</think>`` (so a relaxed rule there moves the answer's law visibly)."""
    rng = np.random.default_rng(seed)
    target = rng.normal(scale=1.2, size=(VOCAB, VOCAB))
    target[:, OPEN] = -3.0  # a block reopens rarely
    target[:, NEWLINE] = -1.0
    for row in (0, 1, 2, 3, OPEN):
        target[row, CLOSE] = np.log(0.3 / 0.7 * np.exp(np.delete(target[row], CLOSE)).sum())  # p(close) = 0.3
    target[CLOSE, CLOSE] = -4.0
    draft = target + rng.normal(scale=1.0, size=target.shape)
    draft[CLOSE] = target[CLOSE] + np.array([2.5, -2.0, 1.5, -2.5, 0.0, 0.0, 0.0])
    return target, draft


def think_fake(table: np.ndarray, *, template: str | None = TEMPLATE, pieces: tuple[bytes, ...] = PIECES,
               **kwargs: object) -> FakeBackend:
    return FakeBackend(markov_logits(table), table.shape[1], pieces=pieces, chat_template=template, **kwargs)


def think_pair(seed: int = 3) -> tuple[FakeBackend, ModelDrafter, np.ndarray, np.ndarray]:
    """A verifier that thinks, a model drafter over the noisier table, and both tables."""
    target, draft = think_tables(seed)
    return think_fake(target), ModelDrafter(think_fake(draft), VOCAB), target, draft


def inside_before(prompt: list[int], tokens: list[int], tags: tuple[int, int] = (OPEN, CLOSE)) -> list[bool]:
    """For each emitted token, whether its context (the prompt and the tokens before it) is inside a thinking block
    opened and closed by ``tags`` — written here from the tags, not with the tracker under test."""
    opening, closing = tags
    inside, states = False, []
    for token in prompt:
        inside = True if token == opening else False if token == closing else inside
    for token in tokens:
        states.append(inside)
        inside = True if token == opening else False if token == closing else inside
    return states


def two_step_after(table: np.ndarray, start: int) -> np.ndarray:
    """The verifier's exact law of the two tokens after ``start`` (temperature 1, no top-k/top-p)."""
    first = softmax(table[start])
    return first[:, None] * np.stack([softmax(table[a]) for a in range(table.shape[0])])
