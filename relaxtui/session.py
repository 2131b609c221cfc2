"""Loading a verifier/drafter pair and turning a user prompt into tokens: shared by every face.

Nothing here prints; the CLI, TUI and eval runner decide how to show progress and results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.decoding.drafters import DRAFT_KINDS, Drafter, DrafterOptions, Openers, drafter_kind, make_drafter
from relaxtui.engine.capacity import check_parallel
from relaxtui.engine.llama import LlamaModel
from relaxtui.engine.mtp import MtpHead, check_mtp_files
from relaxtui.engine.text import ChatTemplate
from relaxtui.errors import UserError
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.models.store import resolve_model
from relaxtui.options import CTX_SIZE, DRAFT_MAX, DRAFT_P_MIN, DRAFTER_SETTINGS, GPU_LAYERS, PARALLEL, THREADS
from relaxtui.text import Message

__all__ = ["DRAFT_KINDS", "LoadedPair", "ModelOptions", "chat_template", "conversation_tokens", "drafter_options",
           "load_drafter",
           "load_pair", "prompt_tokens"]


@dataclass(frozen=True)
class ModelOptions:
    verifier: str = DEFAULT_VERIFIER
    drafter: str | None = DEFAULT_DRAFTER  # None = verifier alone
    ctx_size: int = 4096
    threads: int | None = None
    gpu_layers: int = 0
    draft_kind: str = "model"  # one of DRAFT_KINDS: "model" (a GGUF drafter), "ngram" (prompt lookup, no model)
    ngram_min: int = 1
    ngram_max: int = 3
    draft_p_min: float = 0.0
    parallel: int = 1  # sequences per context (K): --parallel; ctx_size is per sequence
    # what shapes a drafter that opens no model (relaxtui.options.DRAFTER_SETTINGS; each kind reads its own)
    ngram_size_n: int | None = None
    ngram_size_m: int | None = None
    ngram_min_hits: int = 1
    ngram_mod_n_min: int | None = None
    suffix_depth: int = 64
    suffix_factor: float = 1.0
    suffix_min_prob: float = 0.1
    draft_max: int = 16  # the longest draft the run verifies: a recurrent/hybrid verifier keeps that many
    # recurrent-state snapshots per sequence (a verify batch [last, x_1..x_N] rolls back N at most) and is refused
    # in one line if it cannot; a longer draft later (the chat's settings) runs from a checkpoint, exactly

    def __post_init__(self) -> None:
        """Each field through its check in the option table; a refusal names the setting (the CLI spells it as
        its flag, relaxtui.options)."""
        drafter_kind(self.draft_kind)  # an unknown kind: one line
        for setting in (DRAFT_P_MIN, CTX_SIZE, THREADS, PARALLEL, GPU_LAYERS, DRAFT_MAX, *DRAFTER_SETTINGS):
            setting.check.check(getattr(self, setting.name), setting.name)
        drafter_options(self)  # what its kind refuses of them together (ngram_min > ngram_max): before anything loads

    @property
    def drafter_file(self) -> str | None:
        """The ``--drafter`` value when it names a model file the kind opens (None: ngram, the verifier's own MTP
        heads, or no drafter)."""
        return drafter_kind(self.draft_kind).file_of(self.drafter)


@dataclass
class LoadedPair:
    verifier: LlamaModel
    drafter: Drafter | None
    verifier_path: Path
    drafter_path: Path | None  # the drafter's own GGUF, when its kind loads one

    @property
    def drafter_name(self) -> str:
        """What runs and profiles call the drafter: its model file's name, else its kind; "none" without one."""
        return self.drafter.traits.label if self.drafter is not None else "none"

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.verifier.close()


def _gpu_layers(option: int) -> int:
    """--gpu-layers as llama.cpp's n_gpu_layers (-1 = every layer)."""
    return 10_000 if option == -1 else option


def drafter_options(options: ModelOptions, path: Path | None = None) -> DrafterOptions:
    """What the factory builds the drafter from: the kind, its model file, and every drafter setting."""
    own = {setting.name: getattr(options, setting.name) for setting in DRAFTER_SETTINGS}
    return DrafterOptions(kind=options.draft_kind, model=path, p_min=options.draft_p_min, n_ctx=options.ctx_size,
                          n_seq=options.parallel, threads=options.threads, gpu_layers=_gpu_layers(options.gpu_layers),
                          **own)


def _drafter_path(options: ModelOptions) -> Path | None:
    name = options.drafter_file
    return None if name is None else resolve_model(name)


def open_gguf(options: DrafterOptions) -> LlamaModel:
    """The model a ``model`` drafter runs, loaded with every option."""
    if options.model is None:
        raise UserError("--draft-kind model needs a drafter GGUF (--drafter)")
    # no recurrent-state snapshots: a hybrid drafter drafts, extends and times from a checkpoint restored after it,
    # so its snapshots would never be rolled back to (each is a copy of the state, paid on every decode)
    return LlamaModel(options.model, n_ctx=options.n_ctx, n_threads=options.threads, n_gpu_layers=options.gpu_layers,
                      n_seq=options.n_seq, rollback_depth=0)


def open_mtp_head(verifier: object, options: DrafterOptions) -> MtpHead:
    """The verifier's MTP head (layers from ``options.model``, an MTP-only GGUF, when given)."""
    if not isinstance(verifier, LlamaModel):
        raise UserError("--draft-kind mtp drafts with a GGUF verifier's own MTP layers")
    return MtpHead(verifier, options.model, n_threads=options.threads, n_gpu_layers=options.gpu_layers)


def _close(model: object) -> None:
    assert isinstance(model, LlamaModel), "the GGUF openers open LlamaModels only"
    model.close()


GGUF = Openers(model=open_gguf, close=_close, mtp_head=open_mtp_head, mtp_files=check_mtp_files)
"""The factory's openers for GGUF files through llama.cpp: what every face drafts with."""


def load_pair(options: ModelOptions) -> LoadedPair:
    """Resolve and load both models (the drafter through the one factory, with every option), checking their
    vocabularies before anything runs."""
    verifier_path = resolve_model(options.verifier)
    drafter_path = _drafter_path(options)
    check_parallel(options.parallel, [verifier_path, *([drafter_path] if drafter_path else [])], options.ctx_size,
                   rollback_depth=options.draft_max)
    speculative = options.drafter is not None
    if speculative:
        drafter_kind(options.draft_kind).check_files(verifier_path, drafter_path, GGUF)  # headers, before any load
    # a kind that drafts from the verifier's hidden rows (an MTP head) needs a verifier that keeps them
    keep_hidden = {"mtp": True} if speculative and drafter_kind(options.draft_kind).needs_hidden_states else {}
    verifier = LlamaModel(verifier_path, n_ctx=options.ctx_size, n_threads=options.threads,
                          n_gpu_layers=_gpu_layers(options.gpu_layers), n_seq=options.parallel,
                          rollback_depth=options.draft_max, **keep_hidden)
    try:
        if speculative and options.draft_max > 0:
            verifier.require_rollback(options.draft_max)  # a hybrid model that cannot: one line, before decoding
        drafter = make_drafter(drafter_options(options, drafter_path), verifier, GGUF) if speculative else None
    except BaseException:
        verifier.close()
        raise
    return LoadedPair(verifier, drafter, verifier_path, drafter_path)


def load_drafter(options: ModelOptions, verifier: LlamaModel) -> Drafter | None:
    """The drafter ``options`` name for an already loaded verifier (None = the verifier alone): the chat's drafter
    switch, built by the same factory as ``load_pair`` with the same options (GPU layers, p-min, n-gram sizes)."""
    if options.drafter is None:
        return None
    return make_drafter(drafter_options(options, _drafter_path(options)), verifier, GGUF)


def chat_template(model: LlamaModel) -> ChatTemplate:
    def text(token: int) -> str:
        return model.token_piece(token, special=True).decode("utf-8", errors="replace") if token >= 0 else ""
    return ChatTemplate(model.header.chat_template, bos_token=text(model.bos), eos_token=text(model.eos))


def prompt_tokens(model: LlamaModel, prompt: str, *, chat: bool = True, thinking: bool | None = None,
                  system: str | None = None) -> list[int]:
    """Render through the model's chat template (default) or take the text raw, then tokenise."""
    if not chat:
        return model.tokenize(prompt, add_special=True, parse_special=False)
    messages = ([Message("system", system)] if system else []) + [Message("user", prompt)]
    return conversation_tokens(model, chat_template(model), messages, thinking=thinking)


def conversation_tokens(model: LlamaModel, template: ChatTemplate, messages: Sequence[Message], *,
                        thinking: bool | None = None) -> list[int]:
    """Render a conversation with the template and tokenise it; the template writes BOS itself where the
    model wants one, so no special tokens are added here."""
    rendered = template.render(messages, thinking=thinking)
    return model.tokenize(rendered, add_special=False, parse_special=True)
