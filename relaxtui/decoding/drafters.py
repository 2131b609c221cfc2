"""The drafter factory and the model drafter: every kind is built here, with every option, and nowhere else.

``make_drafter(options, verifier)`` switches on the kind once (llama.cpp's ``common_speculative_init``): ``model``
loads a GGUF LM sharing the verifier's vocabulary (checked before use), ``ngram`` is prompt lookup
(``relaxtui.decoding.ngram``), ``mtp`` the verifier's own MTP head (``relaxtui.decoding.mtp``; its layers from the
verifier's GGUF, or from an MTP-only GGUF named by ``--drafter``). A new kind is one entry in ``KINDS`` and one
class behind ``relaxtui.decoding.drafting.Drafter``; nothing outside these modules asks which kind it got.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from relaxtui.decoding.backend import Backend, SequenceView, as_multi, sequence_of, set_candidates
from relaxtui.decoding.drafting import BaseDrafter, Draft, Drafter, DrafterTraits, DraftRequest
from relaxtui.decoding.mtp import MtpDrafter
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.prefill import ReusePolicy, common_prefix, copy_cached_prompt, prefill
from relaxtui.decoding.sampling import (
    Candidates,
    SamplingParams,
    argmax,
    candidate_count,
    candidates,
    one_hot,
    process,
    scatter,
)
from relaxtui.decoding.vocab import VocabInfo, check_vocab
from relaxtui.engine.api import Row, RowSpec, TopLogits
from relaxtui.errors import UserError

if TYPE_CHECKING:
    from relaxtui.engine.llama import LlamaModel

__all__ = ["DRAFT_KINDS", "KINDS", "Draft", "DraftRequest", "Drafter", "DrafterKind", "DrafterOptions",
           "DrafterTraits", "ModelDrafter", "MtpDrafter", "NgramDrafter", "drafter_kind", "fit_vocab", "make_drafter",
           "open_gguf", "propose"]


def _greedy_confidence(logits: Row) -> float:
    """The drafter's top probability at greedy, where q is one-hot: the raw softmax (T=1) instead."""
    if isinstance(logits, TopLogits):  # the engine's argmax and normaliser (asked for when p_min is on)
        return math.exp(max(logits.as_lists()[1]) - logits.log_norm)  # type: ignore[operator]
    top = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - top).sum())


def fit_vocab(logits: Row, target_vocab: int) -> Row:
    """Drafter and verifier vocabularies may differ by ≤128 padding entries: pad or cut to the target's,
    with -inf so padded ids are never proposed."""
    if isinstance(logits, TopLogits):
        return logits.fitted(target_vocab)
    size = logits.shape[-1]
    if size == target_vocab:
        return logits
    if size > target_vocab:
        return logits[..., :target_vocab]
    pad = np.full(logits.shape[:-1] + (target_vocab - size,), -np.inf, dtype=logits.dtype)
    return np.concatenate([logits, pad], axis=-1)


def propose(logits: Row, sampling: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
            uniform: float | None = None) -> tuple[int, Candidates | None] | None:
    """One draft step from the drafter's (fitted) logits: (token, processed q on its support), or None when the
    drafter's top probability is below ``p_min`` (llama.cpp's --draft-p-min: an unsure drafter wastes verify
    width). The draw takes ``uniform`` when the caller drew it before the draft's first decode (``draw_uniforms``),
    else ``rng``'s next, and needs only the support: no pass over a whole row, no numpy on candidate rows; greedy
    needs no draw at all, and its q (the one-hot of the token) is left None for ``make_draft`` to make once the draft
    is done. This runs between two decodes, where each first call into numpy costs tens of microseconds."""
    if sampling.greedy:
        token = argmax(logits)
        if p_min > 0 and _greedy_confidence(logits) < p_min:
            return None
        return token, None
    q = candidates(logits, sampling)
    if p_min > 0 and q.top_prob() < p_min:
        return None
    return q.pick(rng if uniform is None else uniform), q


def draw_uniforms(request: DraftRequest, n: int, p_min: float = 0.0) -> list[float] | None:
    """The uniforms a sampled draft of ``n`` tokens draws with, taken from the request's generator before its first
    decode: the values one draw per step takes, in the same order. None — one draw per step — where the draft may
    end early (--draft-p-min: drawing ahead would take uniforms no step uses) and at greedy, which draws nothing."""
    if request.sampling.greedy or n <= 0 or p_min > 0:
        return None
    drawn = []
    for _ in range(n):  # (one at a time: the acceptance's draws warmed this path, an array of n would not be)
        drawn.append(request.rng.random())
    return drawn


def make_draft(tokens: list[int], q: list[Candidates | None], raw: Sequence[Row], vocab: int,
               seconds: float) -> Draft:
    """A drafter's Draft from its steps: q on its support (what the support path reads; greedy's one-hot where a
    step left it None) and, from whole rows, as whole rows with the raw logits (what every rule can read); a
    candidate-row draft keeps the engine's rows."""
    q = [step if step is not None else one_hot(token) for token, step in zip(tokens, q, strict=True)]
    whole = not raw or not isinstance(raw[0], TopLogits)
    if whole:
        return Draft(tokens, scatter(q, vocab), np.stack(raw) if raw else np.empty((0, vocab)), seconds, q=tuple(q))
    return Draft(tokens, None, list(raw), seconds, q=tuple(q))


def drafter_rows(request: DraftRequest, p_min: float, vocab_size: int, drafter_vocab: int) -> RowSpec | None:
    """The rows a model drafter asks its engine for on this request: candidates (the top k; the argmax, or the
    alternatives shown, at greedy; with the normaliser where --draft-p-min or a shown q(x) reads the raw
    probability) unless the rule reads raw logits or the sampling leaves the whole vocabulary. A drafter with
    padding ids past the verifier's vocabulary asks for as many more (cut off, they leave the top k)."""
    k = candidate_count(request.sampling, vocab_size, request.alternatives)
    if request.whole_rows or k is None:
        return None
    extra = max(0, drafter_vocab - vocab_size)
    normaliser = request.sampling.greedy and (p_min > 0 or request.alternatives > 0)
    if normaliser and extra:
        return None  # the normaliser would count the padding ids the whole-row path cuts first
    return RowSpec(k + extra, normaliser)


class ModelDrafter(BaseDrafter):
    """A GGUF LM sharing the verifier's vocabulary (checked before use by ``check_vocab``).

    Sequence ``seq`` drafts on sequence ``seq`` of the model's context; one draft call decodes one batch per
    draft step across every request (the first step also re-syncs each sequence). It re-syncs by common prefix
    with the context each request carries, so ``accept`` has nothing to do, and the model's own record of
    cached tokens is the one source of truth: anything else that uses the model (a timing) cannot desync it."""

    kind = "model"  # read by tui/engine.py until it reads traits

    def __init__(self, model: Backend, target_vocab: int, *, p_min: float = 0.0) -> None:
        self.model = model  # tests and tui/engine.py (until converted) still reach for it
        self._model = as_multi(model)
        self.target_vocab = target_vocab
        self._same_vocab = model.n_vocab == target_vocab  # (else each row is fitted: padding ids cut)
        self.p_min = p_min  # stop drafting when the drafter's top probability falls below this
        # recurrent/hybrid memory: drafting one token per decode leaves no snapshot to roll back to, so each draft
        # (and extend, and timing step) runs from a checkpoint taken after the re-sync and restored after it
        self._recurrent = getattr(self._model, "rollback_limit", None) is not None
        # seq -> (context, its length, draft) of its last draft: extend continues it (the context is the caller's,
        # which only grows: its first tokens stay; no copy of a long chat per round)
        self._drafted: dict[int, tuple[Sequence[int], int, tuple[int, ...]]] = {}
        path = getattr(model, "path", None)
        self.traits = DrafterTraits("model", has_distribution=True, bonus_steps=1, holds_model=True,
                                    model_path=Path(path) if path is not None else None, n_seq=self._model.n_seq,
                                    n_ctx=model.n_ctx)

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    @property
    def copied_bytes(self) -> int:
        return self.model.copied_bytes

    def _view(self, seq: int) -> Backend:
        """Sequence ``seq`` as a one-sequence backend (the model itself when it holds only one)."""
        return self.model if self._model.n_seq == 1 and seq == 0 else SequenceView(self._model, seq)

    def begin(self, seq: int, prompt: Sequence[int], *, reuse: ReusePolicy = "exact",
              should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Prefill everything but the last prompt token (the first draft step decodes it), copying it from another
        sequence that holds it; False if stopped."""
        view = self._view(seq)
        if self._model.n_seq > 1:
            copy_cached_prompt(view, prompt[:-1])  # type: ignore[arg-type]
        return prefill(view, prompt[:-1], reuse=reuse, should_stop=should_stop)[1]

    def _resync(self, seq: int, context: Sequence[int]) -> list[int]:
        """Roll back to the common prefix with ``context``; return the tokens still to decode (at least the
        last one, whose logits give the first draft position)."""
        view = self._view(seq)
        keep = min(common_prefix(view.cached_tokens, context), len(context) - 1)
        if keep and not sequence_of(view).can_rollback(keep):
            keep = 0  # recurrent memory past its snapshots: decode the whole context again, exactly
        view.rollback(keep)
        return list(context[keep:])

    def _saved(self, seqs: Sequence[int]) -> list[object]:
        return [SequenceView(self._model, seq).checkpoint() for seq in seqs] if self._recurrent else []

    def _restore(self, saved: list[object]) -> None:
        for checkpoint in saved:
            self._model.restore(checkpoint)

    def draft(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        """One batch per draft step: the first re-syncs each sequence and decodes its last token, the next ones
        (``decode_rows``) one token per sequence still drafting."""
        started = time.perf_counter()
        limits, made, uniforms, live, seqs, blocks = [], [], [], [], [], []  # (plain loops: see decode_rows)
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
        rows = self._model.decode_rows(seqs, blocks, last=True) if live else []
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
                rows = self._model.decode_rows(seqs, blocks, last=True)
        self._restore(saved)  # the draft decoded nothing the next re-sync keeps: back to the checkpoint
        seconds = time.perf_counter() - started
        drafts = []
        for request, (tokens, probs, raw) in zip(requests, made, strict=True):
            self._drafted[request.seq] = (request.context, len(request.context), tuple(tokens))
            drafts.append(make_draft(tokens, probs, raw, self.target_vocab, seconds))
        return drafts

    def _rows(self, request: DraftRequest) -> None:
        """Candidate rows from the engine for this request's sequence where they suffice (whole rows otherwise)."""
        set_candidates(self._model, request.seq, drafter_rows(request, self.p_min, self.target_vocab,
                                                              self.model.n_vocab))  # (False: whole rows stay)

    def extend(self, seq: int, sampling: SamplingParams) -> tuple[np.ndarray, np.ndarray | None]:
        """q and raw logits one step past the sequence's last draft (the relaxed-bonus rules need it); no raw
        logits from candidate rows (a rule that reads them gets whole rows)."""
        context, length, drafted = self._drafted[seq]
        tokens = self._resync(seq, [*context[:length], *drafted])
        saved = self._saved([seq])
        logits = fit_vocab(self._model.decode_rows([seq], [tokens], last=True)[0][0], self.target_vocab)
        self._restore(saved)
        return process(logits, sampling), None if isinstance(logits, TopLogits) else logits

    def step(self, seq: int, context: Sequence[int]) -> None:
        """Decode ``context[-1]`` after ``context[:-1]`` (which the sequence holds): one raw step, for c_rel."""
        tokens = self._resync(seq, context)
        saved = self._saved([seq])
        self._model.decode_rows([seq], [tokens], last=True)  # (as a draft step decodes)
        self._restore(saved)

    def release(self, seq: int) -> None:
        self._view(seq).reset()
        self._drafted.pop(seq, None)
        set_candidates(self._model, seq, None)  # whole rows again for whatever decodes this sequence next

    def close(self) -> None:
        close = getattr(self.model, "close", None)
        if close is not None:
            close()


# -- the factory ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrafterOptions:
    """Everything that shapes a drafter, for every kind: what `make_drafter` builds from."""

    kind: str = "model"
    model: Path | None = None  # the GGUF a model drafter runs
    p_min: float = 0.0  # --draft-p-min (model kinds)
    ngram_min: int = 1
    ngram_max: int = 3
    n_ctx: int = 4096  # tokens per sequence
    n_seq: int = 1  # sequences per context (--parallel)
    threads: int | None = None
    gpu_layers: int = 0  # llama.cpp's n_gpu_layers

    def __post_init__(self) -> None:
        drafter_kind(self.kind)  # an unknown kind: one line
        if not 0.0 <= self.p_min < 1.0:
            raise UserError(f"--draft-p-min must be in [0, 1) (got {self.p_min})")


def open_gguf(options: DrafterOptions) -> LlamaModel:
    """The model a ``model`` drafter runs, loaded with every option."""
    from relaxtui.engine.llama import LlamaModel

    if options.model is None:
        raise UserError("--draft-kind model needs a drafter GGUF (--drafter)")
    # no recurrent-state snapshots: a hybrid drafter drafts, extends and times from a checkpoint restored after it,
    # so its snapshots would never be rolled back to (each is a copy of the state, paid on every decode)
    return LlamaModel(options.model, n_ctx=options.n_ctx, n_threads=options.threads, n_gpu_layers=options.gpu_layers,
                      n_seq=options.n_seq, rollback_depth=0)


OpenModel = Callable[[DrafterOptions], Backend]
Builder = Callable[[DrafterOptions, VocabInfo, OpenModel], Drafter]


def _model(options: DrafterOptions, verifier: VocabInfo, open_model: OpenModel) -> Drafter:
    model = open_model(options)
    try:
        names = (Path(str(getattr(verifier, "path", "verifier"))).name,
                 options.model.name if options.model is not None else "drafter")
        check_vocab(verifier, model, names=names)  # type: ignore[arg-type]
    except BaseException:
        close = getattr(model, "close", None)
        if close is not None:
            close()
        raise
    return ModelDrafter(model, verifier.n_vocab, p_min=options.p_min)


def _ngram(options: DrafterOptions, verifier: VocabInfo, open_model: OpenModel) -> Drafter:
    return NgramDrafter(n_min=options.ngram_min, n_max=options.ngram_max)


def _mtp(options: DrafterOptions, verifier: VocabInfo, open_model: OpenModel) -> Drafter:
    """The verifier's own MTP head (its layers from ``options.model``, an MTP-only GGUF, when given); the verifier
    must have been loaded keeping its hidden rows (``LlamaModel(mtp=True)``: ``load_pair`` does)."""
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.engine.mtp import MtpHead

    if not isinstance(verifier, LlamaModel):
        raise UserError("--draft-kind mtp drafts with a GGUF verifier's own MTP layers")
    head = MtpHead(verifier, options.model, n_threads=options.threads, n_gpu_layers=options.gpu_layers)
    return MtpDrafter(head, verifier, p_min=options.p_min)


def _mtp_headers(verifier: Path, drafter: Path | None) -> None:
    """The MTP layers a run drafts with, from the GGUF headers alone (before any model loads): the verifier's own,
    or an MTP-only GGUF's for the verifier's architecture."""
    from relaxtui.engine.gguf import read_header
    from relaxtui.engine.gguf_check import mtp_layers
    from relaxtui.engine.mtp import MTP_ARCHS

    target = read_header(verifier)
    if drafter is None:
        if not mtp_layers(target):
            hint = ("an MTP-only GGUF for it goes in --drafter" if target.architecture in MTP_ARCHS else
                    f"llama.cpp has no MTP head for {target.architecture} models")
            raise UserError(f"{verifier.name} has no MTP layers ({target.architecture}.nextn_predict_layers is 0): "
                            f"it cannot draft for itself ({hint})")
        return
    head = read_header(drafter)
    if not mtp_layers(head):
        raise UserError(f"{drafter.name} has no MTP layers ({head.architecture}.nextn_predict_layers is 0): it is "
                        "no MTP drafter (a small LM drafts with --draft-kind model)")
    if head.architecture != target.architecture:
        raise UserError(f"the MTP layers in {drafter.name} are for {head.architecture}, the verifier {verifier.name} "
                        f"is {target.architecture}")


@dataclass(frozen=True)
class DrafterKind:
    """What loading a kind takes, known before anything loads: whether ``--drafter`` names a file it opens,
    whether the verifier must be loaded keeping its hidden rows (the instance's traits say the same), and what the
    model files' headers must say (``check_files``: one line before any model loads)."""

    build: Builder
    model_file: bool = False
    needs_hidden_states: bool = False
    own_name: str | None = None  # the --drafter value meaning "no file: the verifier's own" (the file is optional)
    headers: Callable[[Path, Path | None], None] | None = None  # (verifier GGUF, drafter GGUF or None) -> refuse

    def file_of(self, drafter: str | None) -> str | None:
        """The model file a ``--drafter`` value names for this kind (None: it opens none)."""
        if drafter is None or not self.model_file or drafter == self.own_name:
            return None
        return drafter

    def check_files(self, verifier: Path, drafter: Path | None) -> None:
        """Refuse, in one line and before anything loads, model files this kind cannot draft with."""
        if self.headers is not None:
            self.headers(verifier, drafter)


KINDS: dict[str, DrafterKind] = {
    "model": DrafterKind(_model, model_file=True),
    "ngram": DrafterKind(_ngram),
    "mtp": DrafterKind(_mtp, model_file=True, needs_hidden_states=True, own_name="mtp",  # --drafter: MTP-only GGUF
                       headers=_mtp_headers),
}
DRAFT_KINDS = tuple(KINDS)


def drafter_kind(kind: str) -> DrafterKind:
    try:
        return KINDS[kind]
    except KeyError:
        raise UserError(f"unknown drafter kind {kind!r}; known: {', '.join(DRAFT_KINDS)}") from None


def make_drafter(options: DrafterOptions, verifier: VocabInfo, *, open_model: OpenModel = open_gguf) -> Drafter:
    """The drafter ``options`` describe, for ``verifier`` (its vocabulary checked first, the model closed on a
    mismatch). ``open_model`` loads a model kind's file: a GGUF through llama.cpp, a fake in tests."""
    return drafter_kind(options.kind).build(options, verifier, open_model)
