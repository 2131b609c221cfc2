"""Loading a verifier/drafter pair and turning a user prompt into tokens: shared by every face.

Nothing here prints; the CLI, TUI and eval runner decide how to show progress and results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaxtui.decoding.drafters import Drafter, ModelDrafter
from relaxtui.decoding.ngram import NgramDrafter
from relaxtui.decoding.vocab import check_vocab
from relaxtui.engine.capacity import check_parallel
from relaxtui.engine.llama import LlamaModel
from relaxtui.engine.text import ChatTemplate, Message
from relaxtui.errors import UserError
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.models.store import resolve_model

DRAFT_KINDS = ("model", "ngram")


@dataclass(frozen=True)
class ModelOptions:
    verifier: str = DEFAULT_VERIFIER
    drafter: str | None = DEFAULT_DRAFTER  # None = verifier alone
    ctx_size: int = 4096
    threads: int | None = None
    gpu_layers: int = 0
    draft_kind: str = "model"  # "model" (a GGUF drafter) or "ngram" (prompt lookup, no model)
    ngram_min: int = 1
    ngram_max: int = 3
    draft_p_min: float = 0.0
    parallel: int = 1  # sequences per context (K): --parallel; ctx_size is per sequence

    def __post_init__(self) -> None:
        if self.draft_kind not in DRAFT_KINDS:
            raise UserError(f"unknown drafter kind {self.draft_kind!r}; known: {', '.join(DRAFT_KINDS)}")
        if not 0.0 <= self.draft_p_min < 1.0:
            raise UserError(f"--draft-p-min must be in [0, 1) (got {self.draft_p_min})")
        if self.ctx_size < 16:
            raise UserError(f"--ctx-size must be at least 16 (got {self.ctx_size})")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be >= 1 (got {self.threads})")
        if self.parallel < 1:
            raise UserError(f"--parallel must be >= 1 (got {self.parallel})")
        if self.gpu_layers < -1:
            raise UserError(f"--gpu-layers must be >= -1, -1 = all (got {self.gpu_layers})")


@dataclass
class LoadedPair:
    verifier: LlamaModel
    drafter: Drafter | None
    verifier_path: Path
    drafter_path: Path | None

    def close(self) -> None:
        model = getattr(self.drafter, "model", None)
        if model is not None and model is not self.verifier:
            model.close()
        self.verifier.close()


def load_pair(options: ModelOptions) -> LoadedPair:
    """Resolve and load both models, then check their vocabularies before anything runs."""
    verifier_path = resolve_model(options.verifier)
    use_model = options.drafter is not None and options.draft_kind == "model"
    drafter_path = resolve_model(options.drafter) if use_model else None
    gpu_layers = 10_000 if options.gpu_layers == -1 else options.gpu_layers
    check_parallel(options.parallel, [verifier_path, *([drafter_path] if drafter_path else [])], options.ctx_size)
    verifier = LlamaModel(verifier_path, n_ctx=options.ctx_size, n_threads=options.threads, n_gpu_layers=gpu_layers,
                          n_seq=options.parallel)
    drafter: Drafter | None = None
    if options.drafter is not None and options.draft_kind == "ngram":
        try:
            drafter = NgramDrafter(verifier.n_vocab, n_min=options.ngram_min, n_max=options.ngram_max)
        except BaseException:
            verifier.close()
            raise
    if drafter_path is not None:
        try:
            draft_model = LlamaModel(drafter_path, n_ctx=options.ctx_size, n_threads=options.threads,
                                     n_gpu_layers=gpu_layers, n_seq=options.parallel)
            check_vocab(verifier, draft_model, names=(verifier_path.name, drafter_path.name))
        except BaseException:
            verifier.close()
            raise
        drafter = ModelDrafter(draft_model, verifier.n_vocab, p_min=options.draft_p_min)
    return LoadedPair(verifier, drafter, verifier_path, drafter_path)


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
