"""The model drafter: a small GGUF LM sharing the verifier's vocabulary, drafting on its own context.

Built only by the factory (``relaxtui.decoding.drafters``), which checks the vocabulary before this runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from relaxtui.decoding.draft_steps import drafter_rows, draw_uniforms, fit_vocab, make_draft, propose
from relaxtui.decoding.drafting import BaseDrafter, Draft, DrafterTraits, DraftRequest, Extension
from relaxtui.decoding.prefill import ReusePolicy, common_prefix, copy_cached_prompt, prefill
from relaxtui.decoding.sampling import Candidates, SamplingParams, process
from relaxtui.engine.api import ChainSampling, Model, Row, as_row


class ModelDrafter(BaseDrafter):
    """A GGUF LM sharing the verifier's vocabulary (checked before use by ``check_vocab``).

    Sequence ``seq`` drafts on sequence ``seq`` of the model's context; one draft call decodes one batch per
    draft step across every request (the first step also re-syncs each sequence). It re-syncs by common prefix
    with the context each request carries, so ``accept`` has nothing to do, and the model's own record of
    cached tokens is the one source of truth: anything else that uses the model (a timing) cannot desync it."""

    def __init__(self, model: Model, target_vocab: int, *, p_min: float = 0.0, model_path: Path | None = None,
                 close: Callable[[], None] | None = None) -> None:
        """``model_path``: the file it runs (for the run's identity); ``close``: what frees it (the opener's)."""
        self.model = model
        self.target_vocab = target_vocab
        self._close = close
        self._same_vocab = model.n_vocab == target_vocab  # (else each row is fitted: padding ids cut)
        self.p_min = p_min  # stop drafting when the drafter's top probability falls below this
        # recurrent/hybrid memory: drafting one token per decode leaves no snapshot to roll back to, so each draft
        # (and extend, and timing step) runs from a checkpoint taken after the re-sync and restored after it
        self._recurrent = model.rollback_limit is not None
        # seq -> (context, its length, draft) of its last draft: extend continues it (the context is the caller's,
        # which only grows: its first tokens stay; no copy of a long chat per round)
        self._drafted: dict[int, tuple[Sequence[int], int, tuple[int, ...]]] = {}
        self.traits = DrafterTraits("model", has_distribution=True, bonus_steps=1, holds_model=True,
                                    model_path=model_path, n_seq=model.n_seq, n_ctx=model.n_ctx)

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.model.copied_bytes

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Prefill everything but the last prompt token (the first draft step decodes it), copying it from another
        sequence that holds it; False if stopped."""
        if self.model.n_seq > 1:
            copy_cached_prompt(self.model, seq, prompt[:-1])
        return prefill(self.model, seq, prompt[:-1], reuse=reuse, should_stop=should_stop)[1]

    def _resync(self, seq: int, context: Sequence[int]) -> list[int]:
        """Roll back to the common prefix with ``context``; return the tokens still to decode (at least the
        last one, whose logits give the first draft position)."""
        keep = min(common_prefix(self.model.tokens_of(seq), context), len(context) - 1)
        if keep and not self.model.can_rollback(seq, keep):
            keep = 0  # recurrent memory past its snapshots: decode the whole context again, exactly
        self.model.rollback(seq, keep)
        return list(context[keep:])

    def _saved(self, seqs: Sequence[int]) -> list[object]:
        return [self.model.checkpoint(seq) for seq in seqs] if self._recurrent else []

    def _restore(self, saved: list[object]) -> None:
        for checkpoint in saved:
            self.model.restore(checkpoint)

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        """One batch per draft step: the first re-syncs each sequence and decodes its last token, the next ones
        (``decode_rows``) one token per sequence still drafting."""
        started = time.perf_counter()
        made: list[tuple[list[int], list[Candidates | None], list[Row | np.ndarray]]] = []  # per request
        limits, uniforms, live, seqs, blocks = [], [], [], [], []  # (plain loops: see decode_rows)
        for i, request in enumerate(requests):
            limit = max(0, min(request.n_max, self.model.n_ctx - len(request.context)))
            limits.append(limit)
            made.append(([], [], []))
            uniforms.append(draw_uniforms(request, limit, self.p_min))
            if limit > 0:
                live.append(i)
                seqs.append(request.seq)
                blocks.append(self._resync(request.seq, request.context))
                self._rows(request)
        saved = self._saved(seqs)
        if len(live) == 1:  # one request: its whole draft in one engine call where the engine can
            chained = self._chain(requests[live[0]], blocks[0], limits[live[0]], uniforms[live[0]])
            if chained is not None:
                tokens, probs, raw, goes_on = chained
                made[live[0]] = (tokens, probs, raw)
                if goes_on:  # the Python step picked where the chain stopped: its steps take the draft on
                    blocks = [tokens[-1:]]
                else:
                    live = []
        rows = self.model.decode_rows(seqs, blocks, last=True) if live else []
        while live:
            following, seqs, blocks = [], [], []
            for i, logits in zip(live, rows, strict=True):
                tokens, probs, raw = made[i]
                fitted = logits[0] if self._same_vocab else fit_vocab(logits[0], self.target_vocab)
                drawn = uniforms[i]
                step = propose(fitted, requests[i].sampling, requests[i].rng, self.p_min,
                               drawn[len(tokens)] if drawn else None)
                if step is None:
                    continue
                tokens.append(step[0])
                probs.append(step[1])
                raw.append(fitted)
                if len(tokens) < limits[i]:
                    following.append(i)
                    seqs.append(requests[i].seq)
                    blocks.append(tokens[-1:])
            live = following
            if live:
                rows = self.model.decode_rows(seqs, blocks, last=True)
        self._restore(saved)  # the draft decoded nothing the next re-sync keeps: back to the checkpoint
        seconds = time.perf_counter() - started
        drafts = []
        for request, (tokens, probs, raw) in zip(requests, made, strict=True):
            self._drafted[request.seq] = (request.context, len(request.context), tuple(tokens))
            drafts.append(make_draft(tokens, probs, raw, self.target_vocab, seconds))
        return drafts

    def _chain(self, request: DraftRequest, block: list[int], limit: int, drawn: list[float] | None
               ) -> tuple[list[int], list[Candidates | None], list[Row | np.ndarray], bool] | None:
        """One request's whole draft in one engine call where the engine can (``Model.decode_chain``: the same tokens,
        q and rows as the steps in ``draft``, without a Python step between the decodes, where each costs ~0.15 ms
        on a CPU whose caches the weights have just flushed), and whether the steps go on from its last token (the
        Python step picked from a row the chain handed back, short of the limit); None: the steps."""
        if not self._same_vocab:
            return None
        sampling = request.sampling
        chain = self.model.decode_chain(request.seq, block, limit, ChainSampling(
            sampling.temperature, sampling.top_k, sampling.top_p, drawn or ()))
        if chain is None:
            return None
        tokens, raw = chain.tokens, list[Row | np.ndarray](chain.rows)
        probs: list[Candidates | None] = [None if kept is None else Candidates(*kept) for kept in chain.kept]
        if chain.stopped is not None:  # a row it would not pick from (a mass that is not finite): the step says why
            step = propose(chain.stopped, sampling, request.rng, self.p_min, drawn[len(tokens)] if drawn else None)
            if step is not None:  # it picked after all (a NaN that its top-k cut drops, where top-k < k)
                tokens.append(step[0])
                probs.append(step[1])
                raw.append(chain.stopped)
                return tokens, probs, raw, len(tokens) < limit
        return tokens, probs, raw, False

    def _rows(self, request: DraftRequest) -> None:
        """Candidate rows from the engine for this request's sequence where they suffice (whole rows otherwise)."""
        self.model.set_candidates(request.seq, drafter_rows(request, self.p_min, self.target_vocab,
                                                            self.model.n_vocab))  # (False: whole rows stay)

    def extend(self, seq: int, sampling: SamplingParams) -> Extension:
        """q and raw logits one step past the sequence's last draft (the relaxed-bonus rules need it); no raw
        logits from candidate rows (a rule that reads them gets whole rows). One model step."""
        context, length, drafted = self._drafted[seq]
        tokens = self._resync(seq, [*context[:length], *drafted])
        saved = self._saved([seq])
        logits = fit_vocab(self.model.decode_rows([seq], [tokens], last=True)[0][0], self.target_vocab)
        self._restore(saved)
        return Extension(process(logits, sampling), as_row(logits).vocab_logits(), 1)

    def step(self, seq: int, context: Sequence[int]) -> None:
        """Decode ``context[-1]`` after ``context[:-1]`` (which the sequence holds): one raw step, for c_rel."""
        tokens = self._resync(seq, context)
        saved = self._saved([seq])
        self.model.decode_rows([seq], [tokens], last=True)  # (as a draft step decodes)
        self._restore(saved)

    def release(self, seq: int) -> None:
        self.model.clear(seq)
        self._drafted.pop(seq, None)
        self.model.set_candidates(seq, None)  # whole rows again for whatever decodes this sequence next

    def close(self) -> None:
        if self._close is not None:
            self._close()
