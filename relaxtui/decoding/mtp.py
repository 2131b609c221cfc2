"""The verifier's own MTP (nextn) head as a drafter: ``--draft-kind mtp`` (llama.cpp's ``--spec-type draft-mtp``).

The head (``relaxtui.engine.mtp.MtpHead``) runs on an MTP context beside the verifier's and reads the verifier's
hidden rows, so it follows the verifier's cache by itself: ``accept`` has nothing to do, a rejected draft is never
decoded by it. A draft call batches every request: ``first`` for all of them (catching each sequence up with what
the verifier kept), then one chained ``step`` per further draft position. Its logits are q, so every relaxed
rule runs on it; one more ``step`` past the draft is the relaxed bonus's q at N+1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from relaxtui.decoding.draft_steps import draw_uniforms, fit_vocab, make_draft, propose
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest, Extension
from relaxtui.decoding.prefill import ReusePolicy
from relaxtui.decoding.sampling import Candidates, SamplingParams, process
from relaxtui.engine.api import DraftHead, Model


class MtpDrafter(BaseDrafter):
    """Drafts with ``head`` for the verifier it was built on (sequence ``seq`` of the verifier = of the head)."""

    def __init__(self, head: DraftHead, verifier: Model, *, p_min: float = 0.0) -> None:
        self.head = head
        self.target_vocab = verifier.n_vocab
        self.p_min = p_min
        self._last: dict[int, int] = {}  # seq -> the last token of its last draft (extend feeds it to the head)
        self._pending: dict[int, np.ndarray] = {}  # seq -> logits already computed one past its draft (p_min cut)
        self.traits = DrafterTraits("mtp", has_distribution=True, bonus_steps=1, needs_hidden_states=True,
                                    holds_model=True, model_path=head.path, n_seq=verifier.n_seq,
                                    n_ctx=verifier.n_ctx)

    @property
    def decode_seconds(self) -> float:
        return self.head.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.head.copied_bytes

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Nothing to prefill: the head catches up from the verifier's hidden rows at the first draft (and keeps what
        it holds of a prompt the verifier reused: it follows the verifier's cache by itself)."""
        self._forget(seq)
        return True

    def _forget(self, seq: int) -> None:
        self._last.pop(seq, None)
        self._pending.pop(seq, None)

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        return fit_vocab(logits, self.target_vocab)

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        started = time.perf_counter()
        limits = [max(0, min(r.n_max, self.head.n_ctx - len(r.context))) for r in requests]
        made: list[tuple[list[int], list[Candidates | None], list[np.ndarray]]] = [([], [], []) for _ in requests]
        for r in requests:
            self._forget(r.seq)
        live = [i for i, limit in enumerate(limits) if limit > 0]
        uniforms = [draw_uniforms(request, limit, self.p_min) for request, limit in zip(requests, limits, strict=True)]
        rows: np.ndarray | list[np.ndarray] = []
        if live:
            rows = self.head.first([(requests[i].seq, requests[i].context[-1]) for i in live])
        while live:
            following = []
            for i, logits in zip(live, rows, strict=True):
                fitted = self._fit(logits)
                request = requests[i]
                drawn = uniforms[i]
                step = propose(fitted, request.sampling, request.rng, self.p_min,
                               drawn[len(made[i][0])] if drawn else None)
                if step is None:
                    self._pending[request.seq] = fitted  # q one past the draft: what extend would compute
                    continue
                tokens, probs, raw = made[i]
                tokens.append(step[0])
                probs.append(step[1])
                raw.append(fitted)
                self._last[request.seq] = step[0]
                if len(tokens) < limits[i]:
                    following.append(i)
            live = following
            if live:
                rows = self.head.step([(requests[i].seq, made[i][0][-1]) for i in live])
        seconds = time.perf_counter() - started
        return [make_draft(tokens, probs, raw, self.target_vocab, seconds) for tokens, probs, raw in made]

    def extend(self, seq: int, sampling: SamplingParams) -> Extension:
        """q and raw logits one step past the sequence's last draft: one chained head step (counted as the
        one step its traits declare)."""
        logits = self._pending.pop(seq, None)
        if logits is None:
            logits = self._fit(self.head.step([(seq, self._last[seq])])[0])
        return Extension(process(logits, sampling), logits, 1)

    def step(self, seq: int, context: Sequence[int]) -> None:
        """One raw head step after the verifier's cache of ``seq`` (for c_rel): a first draft step."""
        self.head.first([(seq, context[-1])])
        self._forget(seq)

    def release(self, seq: int) -> None:
        self._forget(seq)  # the head follows the verifier's own clear of the sequence

    def close(self) -> None:
        self.head.close()
