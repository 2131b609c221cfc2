"""Options shared by every command that runs models, and their translation into configs."""

from __future__ import annotations

import argparse

from relaxtui.decoding.loop import BONUS_POLICIES, GenerationConfig
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.models.registry import DEFAULT_DRAFTER, DEFAULT_VERIFIER
from relaxtui.session import DRAFT_KINDS, ModelOptions


def draft_length(text: str) -> int | str:
    """An integer draft length, or the word ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid draft length: {text!r} (a whole number or auto)") from None


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--verifier", "-m", default=DEFAULT_VERIFIER, help="GGUF path or name in ggml_models/")
    group.add_argument("--drafter", "-md", default=DEFAULT_DRAFTER,
                       help="GGUF path or name in ggml_models/ ('none' = verifier alone)")
    group.add_argument("--draft-kind", default="model", help=f"drafter kind: {', '.join(DRAFT_KINDS)}")
    group.add_argument("--ngram-min", type=int, default=1, help="smallest n-gram the ngram drafter matches")
    group.add_argument("--ngram-max", type=int, default=3, help="largest n-gram the ngram drafter matches")
    group.add_argument("--ctx-size", "-c", type=int, default=4096, help="context window, in tokens (default 4096)")
    group.add_argument("--threads", "-t", type=int, default=None,
                       help="CPU threads for llama.cpp (default: every core)")
    group.add_argument("--gpu-layers", "-ngl", type=int, default=0, help="layers to offload (-1 = all)")


def add_parallel_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--parallel", type=int, default=1, metavar="K",
                        help="work units run at once, one sequence each in one context per model (--ctx-size is "
                             "per sequence; default 1)")


def add_sampling_options(parser: argparse.ArgumentParser, *, temperature: float = 0.6) -> None:
    group = parser.add_argument_group("sampling (applied to both models)")
    group.add_argument("--temperature", "--temp", type=float, default=temperature,
                       help=f"sampling temperature (0 = greedy; default {temperature:g})")
    group.add_argument("--top-k", type=int, default=20, help="keep the k likeliest tokens (0 = off)")
    group.add_argument("--top-p", type=float, default=0.95, help="nucleus mass to keep (1 = off)")
    group.add_argument("--seed", type=int, default=0, help="random seed (drafting and acceptance draws)")


def add_draft_options(parser: argparse.ArgumentParser, *, with_length: bool = True) -> None:
    group = parser.add_argument_group("speculation")
    if with_length:
        group.add_argument("--draft-max", "--spec-draft-n-max", "--draft", type=draft_length, default=3,
                           dest="draft_max", help="draft length N, or `auto`: the N this machine's costs and a short "
                           "acceptance estimate predict fastest (0 when speculation does not pay)")
    group.add_argument("--draft-min", type=int, default=0, help="drop drafts shorter than this")
    group.add_argument("--draft-p-min", type=float, default=0.0,
                       help="stop drafting when the drafter's top probability is below this")
    group.add_argument("--draft-adapt", action="store_true", help="grow/shrink N from recent acceptance")
    group.add_argument("--bonus", choices=BONUS_POLICIES, default="auto",
                       help="bonus token from p (target), the rule's target at N+1 (relaxed), or the rule's policy")


def model_options(args: argparse.Namespace, *, speculative: bool = True) -> ModelOptions:
    drafter = args.drafter if speculative and str(args.drafter).lower() != "none" else None
    return ModelOptions(args.verifier, drafter, args.ctx_size, args.threads, args.gpu_layers,
                        draft_kind=args.draft_kind, ngram_min=args.ngram_min, ngram_max=args.ngram_max,
                        draft_p_min=getattr(args, "draft_p_min", 0.0), parallel=getattr(args, "parallel", 1))


def sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(args.temperature, args.top_k, args.top_p)


def generation_config(args: argparse.Namespace, *, draft_max: int | None = None, seed: int | None = None,
                      top_alternatives: int = 0) -> GenerationConfig:
    return GenerationConfig(
        draft_max=args.draft_max if draft_max is None else draft_max, max_tokens=args.max_tokens,
        sampling=sampling(args), seed=args.seed if seed is None else seed, top_alternatives=top_alternatives,
        bonus=args.bonus, draft_min=args.draft_min, adaptive=args.draft_adapt,
    )
