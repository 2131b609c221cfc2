"""Priced drafting as a drafter (docs/method.md#priced-drafts): any drafter, each of its drafts cut to the prefix that
pays for its verify width at this machine's prices.

``PricedDrafter`` wraps the drafter the factory built (``drafters.make_drafter``, where the pair's ``--draft-cut``
resolves to priced for its kind) and holds what the cut needs, per sequence: how its proposals fared
(``draft_cut.KeepOdds``) and the last whole proposal. The round sees only the cut draft, as from any drafter:

    draft     the inner drafter proposes; the cut keeps the prefix with the most expected tokens per verifier step.
              A drafter with a distribution may stop early on what it drew (--draft-p-min), so its cut is chosen for
              the N asked and then bounded by the draft: whether a position is verified never depends on the token
              drawn there (strict's law). A model drafter's steps past the cut are reported as extra steps.
    extend    q at N+1 after a cut is the proposal's own next row (already decoded: no step); else the inner's
    accept    every proposed token up to the first the round's output contradicts is an outcome, verified or not

The prices come from the pair that built it (``session.Pair.prices``), read at each sequence's ``begin``: a generation
that starts before they are measured verifies its drafts whole, and says so only through its draft lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from relaxtui.decoding.draft_cut import KeepOdds, check_prices, extend
from relaxtui.decoding.drafting import Draft, Drafter, DrafterTraits, DraftRequest, EmittedToken, Extension
from relaxtui.decoding.prefill import ReusePolicy
from relaxtui.decoding.sampling import SamplingParams

__all__ = ["PRICED_BLOCKS", "PricedDrafter", "PriceSource"]

PRICED_BLOCKS = 65  # prices extended to the longest verify block any N asks for (--draft-max 64, and `last`)
PriceSource = Callable[[], Sequence[float] | None]
"""v(1..K) in verifier steps as measured where the models run, or None while they are not known yet."""


class PricedDrafter:
    """``inner``'s drafts cut by price (module docstring); it declares itself as ``inner`` does, with ``cut``."""

    traits: DrafterTraits

    def __init__(self, inner: Drafter, prices: PriceSource, vocab: int) -> None:
        self.inner, self.vocab = inner, vocab
        self.traits = replace(inner.traits, cut="priced")
        self._source = prices
        self._prices: tuple[float, ...] | None = None
        self._odds: dict[int, KeepOdds | None] = {}  # per sequence: None for a generation begun without prices
        self._proposals: dict[int, tuple[Draft, int]] = {}  # this round's whole proposal and how much was verified

    @property
    def decode_seconds(self) -> float:
        return self.inner.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.inner.copied_bytes

    def prices(self) -> tuple[float, ...] | None:
        """The prices its cuts read (None: not measured yet), extended once to every block a round can verify."""
        if self._prices is None:
            found = self._source()
            if found is not None:
                check_prices(found)
                self._prices = extend(found, PRICED_BLOCKS)
        return self._prices

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """A new generation on ``seq``: its record starts from the prior; cut only when the prices are known now."""
        self._odds[seq] = KeepOdds() if self.prices() is not None else None
        self._proposals.pop(seq, None)
        return self.inner.begin(seq, prompt, reuse=reuse, should_stop=should_stop)

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = self.inner.draft(requests)
        prices = self._prices
        if prices is None:
            return drafts
        holds_model = self.traits.holds_model
        sampled = self.traits.has_distribution
        out = []
        for request, draft in zip(requests, drafts, strict=True):
            odds = self._odds.get(request.seq)
            if odds is None:
                out.append(draft)
                continue
            proposed = len(draft.tokens)
            n = min(odds.cut(request.n_max if sampled else proposed, prices), proposed)
            self._proposals[request.seq] = (draft, n)
            out.append(draft if n == proposed else draft.first(n, proposed - n if holds_model else 0))
        return out

    def accept(self, seq: int, n_accepted: int, emitted: Sequence[EmittedToken]) -> None:
        odds = self._odds.get(seq)
        if odds is not None:
            proposal = self._proposals.pop(seq, None)
            odds.observe(proposal[0].tokens if proposal is not None else (), [e.token_id for e in emitted])
        self.inner.accept(seq, n_accepted, emitted)

    def extend(self, seq: int, sampling: SamplingParams) -> Extension:
        proposal = self._proposals.get(seq)
        if proposal is not None and len(proposal[0].tokens) > proposal[1]:  # cut: the next row is the proposal's
            q, raw = proposal[0].row(proposal[1], self.vocab)
            return Extension(q, raw, 0)
        return self.inner.extend(seq, sampling)

    def step(self, seq: int, context: Sequence[int]) -> None:
        self.inner.step(seq, context)

    def finished(self, seq: int, output: Sequence[int]) -> None:
        self.inner.finished(seq, output)

    def release(self, seq: int) -> None:
        self._odds.pop(seq, None)
        self._proposals.pop(seq, None)
        self.inner.release(seq)

    def close(self) -> None:
        self.inner.close()
