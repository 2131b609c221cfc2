"""What a loaded pair keeps beside its models (``relaxtui.session.Pair``): its drafters by kind and scope, and the
stand-in verify prices of a fake pair.

``KindDrafters`` is the one cache of drafters by kind every face asks through the pair (chat's drafter switch, the
server's per-request ``draft_kind``). Nothing here loads a model: the pair hands it the factory call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from relaxtui.checks import BadValue
from relaxtui.costmodel.background import Background
from relaxtui.costmodel.timing import Slices
from relaxtui.decoding.draft_cut import check_prices
from relaxtui.decoding.drafters import drafter_kind
from relaxtui.decoding.drafting import Drafter
from relaxtui.errors import UserError

__all__ = ["DEFAULT_SCOPES", "KindDrafters", "StandInPrices"]

DEFAULT_SCOPES = 16  # scopes (API keys) that keep learning drafters at once (serve's --learning-scopes default)


class KindDrafters:
    """The drafters a face picks by kind, per scope (a tenant: an API key, a user of it).

    A kind that runs a model (the pair's own) is one instance for everyone: it learns nothing across sequences, and
    the batched loop empties a sequence that passes to another scope. A standalone kind (prompt lookup, the n-gram
    family, suffix: no model file) is built by the factory on the first request that asks for it; one that
    ``learns`` (its corpus of earlier prompts and outputs: suffix, ngram-cache, ngram-mod) gets an instance per scope,
    so what one tenant generated never drafts for another, and is kept for the scope's next requests (a chat is one
    scope: its corpus of earlier turns survives a switch away and back). Memory: each instance is bounded by its
    kind's own caps (suffix's corpus, ngram-cache's entries, ngram-mod's table); at most ``max_scopes`` scopes keep
    instances, the least recently used evicted first (a request of an evicted scope starts a fresh one; a live request
    keeps the instance it holds). Which kinds a request may name is the face's (serve's ``Defaults.draft_kinds``)."""

    def __init__(self, own: Drafter | None, build: Callable[[str], Drafter], max_scopes: int = DEFAULT_SCOPES) -> None:
        self.own, self.build, self.max_scopes = own, build, max_scopes
        self.shared: dict[str, Drafter] = {}  # kinds that learn nothing across sequences
        self.scoped: OrderedDict[object, dict[str, Drafter]] = OrderedDict()  # scope -> its learning kinds, LRU first
        self.evicted = 0  # scopes dropped to stay within max_scopes (a metric, and what tests read)
        self.lock = threading.Lock()  # request handlers ask from several threads

    def get(self, kind: str, scope: object = None) -> Drafter:
        if self.own is not None and self.own.traits.kind == kind and not self.own.traits.learns:
            return self.own
        if not drafter_kind(kind).standalone:
            raise BadValue("draft_kind", f"this pair holds no {kind!r} drafter")
        with self.lock:
            if kind in self.shared:
                return self.shared[kind]
            drafters = self.scoped.get(scope)
            if drafters is not None:
                self.scoped.move_to_end(scope)
                if kind in drafters:
                    return drafters[kind]
            drafter = self.build(kind)
            if not drafter.traits.learns:
                self.shared[kind] = drafter
                return drafter
            if drafters is None:
                drafters = self.scoped[scope] = {}
                while len(self.scoped) > self.max_scopes:
                    _, dropped = self.scoped.popitem(last=False)
                    self.evicted += 1
                    for old in dropped.values():
                        old.close()
            drafters[kind] = drafter
            return drafter

    def held(self) -> list[Drafter]:
        """Every drafter built and kept so far."""
        with self.lock:
            return [*self.shared.values(), *(d for kinds in self.scoped.values() for d in kinds.values())]

    @property
    def scopes(self) -> int:
        return len(self.scoped)

    def close(self) -> None:
        with self.lock:
            for drafter in [*self.shared.values(), *(d for kinds in self.scoped.values() for d in kinds.values())]:
                drafter.close()
            self.shared.clear()
            self.scoped.clear()


class StandInPrices:
    """A fake pair's verify prices: given, not measured. ``gate`` (tests) stands for a measurement that has not
    ended: the prices are known only once it is set, and ``start`` queues a background stand-in that waits for it a
    slice at a time, as a real measurement would run; without a gate they are known at once."""

    def __init__(self, prices: Sequence[float] | None = None, gate: threading.Event | None = None) -> None:
        if prices is not None:
            try:
                check_prices(prices)
            except ValueError as exc:
                raise UserError(str(exc)) from None
        self.prices = tuple(prices) if prices is not None else None
        self.gate = gate
        self._known = self.prices if gate is None else None
        self._queued = False

    def known(self) -> tuple[float, ...] | None:
        return self._known

    def start(self, background: Background, log: Callable[[str], None] = lambda line: None,
              done: Callable[[tuple[float, ...]], None] = lambda prices: None) -> bool:
        if self._known is not None or self.prices is None or self._queued:
            return self._known is not None
        self._queued = True

        def measured(prices: tuple[float, ...]) -> None:
            self._known = prices
            done(prices)

        background.add("verify prices", self._slices(), measured)
        return False

    def _slices(self) -> Slices[tuple[float, ...]]:
        assert self.prices is not None and self.gate is not None
        while not self.gate.wait(0.01):  # a slice: a hundredth of a second, then the face may go first
            yield
        return self.prices

    def wait(self, log: Callable[[str], None] = lambda line: None) -> tuple[float, ...]:
        if self._known is None and self.prices is not None:
            if self.gate is not None:
                self.gate.wait(60)  # never hang a test run forever
            self._known = self.prices
        return self._known or (1.0,)
