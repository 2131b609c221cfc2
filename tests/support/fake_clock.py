"""A clock that only moves when told, and a model that stands in for LlamaModel in `models pair`, timed on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path


class FakeClock:
    """A clock that only moves when an action says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeModel:
    """Stands in for LlamaModel in `pair`: each decode advances the fake clock by what ``cost`` says."""

    clock = FakeClock()
    cost: Callable[[str, int], float] = staticmethod(lambda name, index: 0.0)

    # what check_vocab reads: the same vocabulary for every fake
    vocab_type, add_bos, bos, eos, n_vocab = 2, False, 1, 2, 8

    def __init__(self, path: Path, **_: object) -> None:
        self.path, self.cache, self.calls = Path(path), [], 0

    def token_text(self, token: int) -> str:
        return f"t{token}"

    def __enter__(self) -> FakeModel:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    rollback_limit = None  # a KV cache

    def tokens_of(self, seq: int) -> list[int]:
        return self.cache

    def decode(self, seq: int, tokens: Sequence[int], logits_rows: Sequence[int] = ()) -> None:
        FakeModel.clock.now += FakeModel.cost(self.path.name, self.calls)
        self.calls += 1
        self.cache.extend(tokens)

    def decode_rows(self, seqs: Sequence[int], blocks: Sequence[Sequence[int]], *, last: bool = False) -> None:
        self.decode(seqs[0], blocks[0])

    def rollback(self, seq: int, position: int) -> None:
        del self.cache[position:]

    def clear(self, seq: int) -> None:
        self.cache.clear()
