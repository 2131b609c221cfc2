"""The drafter factory: every kind is built here, with every option, and nowhere else.

``make_drafter(options, verifier, openers)`` switches on the kind once (llama.cpp's ``common_speculative_init``):
``model`` is a GGUF LM sharing the verifier's vocabulary (``relaxtui.decoding.model_drafter``, checked before use),
``ngram`` is prompt lookup (``relaxtui.decoding.ngram``), ``ngram-simple``, ``ngram-map``, ``ngram-map-k4v``,
``ngram-mod`` and ``ngram-cache`` llama.cpp's n-gram kinds (``relaxtui.decoding.ngram_map``, ``ngram_mod``,
``ngram_cache``), ``suffix`` SuffixDecoding over the context and earlier outputs (``relaxtui.decoding.suffix``),
``mtp`` the verifier's own MTP head
(``relaxtui.decoding.mtp``; its layers from the verifier's GGUF, or from an MTP-only GGUF named by ``--drafter``).
Files are opened by the ``Openers`` the caller hands in (the engine's, in ``relaxtui.session``; fakes in tests):
``decoding/`` loads nothing itself. A new kind is one entry in ``KINDS`` and one class behind
``relaxtui.decoding.drafting.Drafter``; nothing outside these modules asks which kind it got.

Each kind also has a ``check``: its settings checked together, as its class checks them when built, without building
anything (no table, no model). ``DrafterOptions`` runs its own kind's when it is made; a face that offers other kinds
beside it (``serve``, the chat's drafter switch) runs theirs through ``check_options`` before anything loads, so a
setting no offered kind could take is one line at start, never a refusal of some later request (issue 47).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from relaxtui import checks
from relaxtui.decoding.draft_cut import check_policy, cuts_drafts
from relaxtui.decoding.drafting import Draft, Drafter, DrafterTraits, DraftRequest
from relaxtui.decoding.model_drafter import ModelDrafter
from relaxtui.decoding.mtp import MtpDrafter
from relaxtui.decoding.ngram import NgramDrafter, check_sizes
from relaxtui.decoding.ngram_cache import NgramCacheDrafter
from relaxtui.decoding.ngram_index import sizes
from relaxtui.decoding.ngram_map import NgramMapDrafter, NgramMapK4vDrafter, NgramSimpleDrafter, check_min_hits
from relaxtui.decoding.ngram_mod import NgramModDrafter
from relaxtui.decoding.priced import PricedDrafter, PriceSource
from relaxtui.decoding.suffix import SuffixDrafter, SuffixSettings
from relaxtui.decoding.vocab import VocabModel, check_vocab
from relaxtui.engine.api import DraftHead, Model

__all__ = ["DRAFT_KINDS", "KINDS", "STANDALONE_KINDS", "Draft", "DraftRequest", "Drafter", "DrafterKind",
           "DrafterOptions", "DrafterTraits", "ModelDrafter", "MtpDrafter", "NgramDrafter", "Openers", "check_options",
           "drafter_kind", "make_drafter"]


# -- the factory ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrafterOptions:
    """Everything that shapes a drafter, for every kind: what `make_drafter` builds from."""

    kind: str = "model"
    model: Path | None = None  # the GGUF a model drafter runs
    p_min: float = 0.0  # --draft-p-min (model kinds)
    ngram_min: int = 1
    ngram_max: int = 3
    ngram_size_n: int | None = None  # llama.cpp's n-gram kinds (docs/method.md#drafters): the key n-gram (None: the
    # kind's default)
    ngram_size_m: int | None = None  # ... the longest draft: simple/map's m-gram, ngram-mod's n_max, ngram-cache's
    # n_draft (None: the kind's default)
    ngram_min_hits: int = 1  # ngram-map-k4v: matches of a key before it drafts
    ngram_mod_n_min: int | None = None  # ngram-mod: the shortest chain it drafts (None: its default)
    ngram_mod_slots: int | None = None  # ngram-mod: its shared table, in tokens (4 bytes each; None: 2^22)
    ngram_cache_entries: int | None = None  # ngram-cache: its shared dynamic cache, in (n-gram, token) pairs
    suffix_depth: int = 64  # suffix kind (docs/method.md#suffix): the longest context suffix matched, in tokens
    suffix_factor: float = 1.0  # ... a match of L tokens drafts at most factor × L (SuffixDecoding's max_spec_factor)
    suffix_min_prob: float = 0.1  # ... stop where the draft's estimated probability falls below this
    suffix_corpus_tokens: int = 65_536  # ... the shared corpus of earlier outputs: at most this many tokens
    suffix_corpus_outputs: int = 256  # ... and this many outputs (oldest evicted first)
    n_ctx: int = 4096  # tokens per sequence
    n_seq: int = 1  # sequences per context (--parallel)
    threads: int | None = None
    gpu_layers: int = 0  # llama.cpp's n_gpu_layers
    draft_cut: str = "auto"  # priced drafting (docs/method.md#priced-drafts): which kinds the factory wraps in a
    # PricedDrafter when it is handed the prices ("auto": those that run no model)

    def __post_init__(self) -> None:
        """Every setting of the option table through its check (a refusal names it), then what its own kind checks
        of them together."""
        kind = drafter_kind(self.kind)  # an unknown kind: one line
        check_policy(self.draft_cut)
        checks.DRAFT_P_MIN.check(self.p_min, "draft_p_min")
        for name, check in checks.DRAFTER.items():
            check.check(getattr(self, name), name)
        kind.check(self)


@dataclass(frozen=True)
class Openers:
    """How the factory opens what a kind runs on: the engine's GGUF openers (``relaxtui.session.GGUF``), or fakes.
    ``model``: a model drafter's LM; ``close``: frees it; ``mtp_head``: the verifier's MTP head (None: this set
    cannot make one); ``mtp_files``: refuse, from the GGUF headers alone, files an MTP drafter cannot use."""

    model: Callable[[DrafterOptions], VocabModel]
    close: Callable[[Model], None] = lambda model: None
    mtp_head: Callable[[VocabModel, DrafterOptions], DraftHead] | None = None
    mtp_files: Callable[[Path, Path | None], None] | None = None


Builder = Callable[[DrafterOptions, VocabModel, Openers], Drafter]


def _model(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    model = openers.model(options)
    try:
        names = (Path(str(getattr(verifier, "path", "verifier"))).name,
                 options.model.name if options.model is not None else "drafter")
        check_vocab(verifier, model, names=names)
    except BaseException:
        openers.close(model)
        raise
    return ModelDrafter(model, verifier.n_vocab, p_min=options.p_min, model_path=options.model,
                        close=lambda: openers.close(model))


def _ngram(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramDrafter(n_min=options.ngram_min, n_max=options.ngram_max)


def _ngram_simple(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramSimpleDrafter(options.ngram_size_n, options.ngram_size_m)


def _ngram_map(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramMapDrafter(options.ngram_size_n, options.ngram_size_m)


def _ngram_map_k4v(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramMapK4vDrafter(options.ngram_size_n, options.ngram_size_m, min_hits=options.ngram_min_hits)


def _ngram_mod(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramModDrafter(options.ngram_size_n, options.ngram_size_m, n_min=options.ngram_mod_n_min,
                           slots=options.ngram_mod_slots)


def _ngram_cache(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return NgramCacheDrafter(options.ngram_size_m, entries=options.ngram_cache_entries)


def _suffix(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    return SuffixDrafter(_suffix_settings(options))


def _check_ngram(options: DrafterOptions) -> None:
    check_sizes(options.ngram_min, options.ngram_max)


def _check_sizes(kind: str, defaults: tuple[int, int]) -> Callable[[DrafterOptions], None]:
    def check(options: DrafterOptions) -> None:
        sizes(kind, options.ngram_size_n, options.ngram_size_m, defaults)
    return check


def _check_ngram_map_k4v(options: DrafterOptions) -> None:
    _check_sizes("ngram-map-k4v", NgramMapK4vDrafter.DEFAULTS)(options)
    check_min_hits("ngram-map-k4v", options.ngram_min_hits)


def _check_ngram_mod(options: DrafterOptions) -> None:
    NgramModDrafter.settings(options.ngram_size_n, options.ngram_size_m, n_min=options.ngram_mod_n_min,
                             slots=options.ngram_mod_slots)


def _check_ngram_cache(options: DrafterOptions) -> None:
    NgramCacheDrafter.settings(options.ngram_size_m, entries=options.ngram_cache_entries)


def _suffix_settings(options: DrafterOptions) -> SuffixSettings:
    return SuffixSettings(options.suffix_depth, options.suffix_factor, options.suffix_min_prob,
                          options.suffix_corpus_tokens, options.suffix_corpus_outputs)


def _check_suffix(options: DrafterOptions) -> None:
    _suffix_settings(options)


def _mtp(options: DrafterOptions, verifier: VocabModel, openers: Openers) -> Drafter:
    """The verifier's own MTP head (its layers from ``options.model``, an MTP-only GGUF, when given); the verifier
    must have been loaded keeping its hidden rows (``load_pair`` does)."""
    if openers.mtp_head is None:
        raise checks.BadValue("draft_kind", "mtp drafts with a GGUF verifier's own MTP layers")
    return MtpDrafter(openers.mtp_head(verifier, options), verifier, p_min=options.p_min)


@dataclass(frozen=True)
class DrafterKind:
    """What loading a kind takes, known before anything loads: whether ``--drafter`` names a file it opens,
    whether the verifier must be loaded keeping its hidden rows (the instance's traits say the same), and what the
    model files' headers must say (``check_files``: one line before any model loads)."""

    build: Builder
    model_file: bool = False
    needs_hidden_states: bool = False
    own_name: str | None = None  # the --drafter value meaning "no file: the verifier's own" (the file is optional)
    mtp_files: bool = False  # its files are refused by ``Openers.mtp_files`` (headers: before any model loads)
    has_distribution: bool = False  # its drafts carry q (the instance's traits say the same): a rule that needs the
    # drafter's logits can run on it; False: one-hot drafts
    about: str = ""  # a few words displays put after its name ("prompt lookup"); "" where the name says it
    reads: tuple[str, ...] = ()  # the DrafterOptions fields of its own it is built from (a run's identity names them)
    check: Callable[[DrafterOptions], None] = lambda options: None  # what its class refuses of them, building nothing

    @property
    def standalone(self) -> bool:
        """Whether it needs nothing but the verifier's tokens (no file, no hidden rows): any face can add it at any
        time beside another drafter, and it costs no model step."""
        return not self.model_file and not self.needs_hidden_states

    @property
    def holds_model(self) -> bool:
        """Whether drafting decodes a model (its instance's ``DrafterTraits.holds_model`` says the same): what a run
        decides from it before anything loads (whether ``--draft-cut auto`` cuts) is what the loop then does."""
        return not self.standalone

    def cuts(self, policy: str) -> bool:
        """Whether the factory wraps this kind in a ``PricedDrafter`` under a ``draft_cut`` policy (its instance then
        declares ``DrafterTraits.cut``): what a run's identity names before anything loads."""
        return cuts_drafts(policy, self.holds_model)

    def file_of(self, drafter: str | None) -> str | None:
        """The model file a ``--drafter`` value names for this kind (None: it opens none)."""
        if drafter is None or not self.model_file or drafter == self.own_name:
            return None
        return drafter

    def check_files(self, verifier: Path, drafter: Path | None, openers: Openers) -> None:
        """Refuse, in one line and before anything loads, model files this kind cannot draft with."""
        if self.mtp_files and openers.mtp_files is not None:
            openers.mtp_files(verifier, drafter)


KINDS: dict[str, DrafterKind] = {
    "model": DrafterKind(_model, model_file=True, has_distribution=True),
    # prompt lookup, sizes ngram_min..ngram_max (not llama.cpp's ngram-simple)
    "ngram": DrafterKind(_ngram, about="prompt lookup", reads=("ngram_min", "ngram_max"), check=_check_ngram),
    # llama.cpp's --spec-type kinds of the same names (ngram-map: its ngram-map-k)
    "ngram-simple": DrafterKind(_ngram_simple, reads=("ngram_size_n", "ngram_size_m"),
                                check=_check_sizes("ngram-simple", NgramSimpleDrafter.DEFAULTS)),
    "ngram-map": DrafterKind(_ngram_map, reads=("ngram_size_n", "ngram_size_m"),
                             check=_check_sizes("ngram-map", NgramMapDrafter.DEFAULTS)),
    "ngram-map-k4v": DrafterKind(_ngram_map_k4v, reads=("ngram_size_n", "ngram_size_m", "ngram_min_hits"),
                                 check=_check_ngram_map_k4v),
    "ngram-mod": DrafterKind(_ngram_mod, reads=("ngram_size_n", "ngram_size_m", "ngram_mod_n_min", "ngram_mod_slots"),
                             check=_check_ngram_mod),
    "ngram-cache": DrafterKind(_ngram_cache, reads=("ngram_size_m", "ngram_cache_entries"), check=_check_ngram_cache),
    "suffix": DrafterKind(_suffix, reads=("suffix_depth", "suffix_factor", "suffix_min_prob", "suffix_corpus_tokens",
                                          "suffix_corpus_outputs"), check=_check_suffix),
    "mtp": DrafterKind(_mtp, model_file=True, needs_hidden_states=True, own_name="mtp",  # --drafter: MTP-only GGUF
                       mtp_files=True, has_distribution=True, about="MTP head"),
}
DRAFT_KINDS = tuple(KINDS)
STANDALONE_KINDS = tuple(name for name, kind in KINDS.items() if kind.standalone)
"""The kinds any face may offer beside its own drafter (they open nothing): prompt lookup, the n-gram family, suffix."""


def drafter_kind(kind: str) -> DrafterKind:
    """The factory's kind called ``kind``; any other name is a refusal of the setting (each face spells it)."""
    found = KINDS.get(kind)
    if found is None:
        raise checks.BadValue("draft_kind", f"must be one of {', '.join(DRAFT_KINDS)} (got {checks.quoted(kind)})")
    return found


def check_options(options: DrafterOptions, kinds: Iterable[str]) -> None:
    """Refuse, in one line and building nothing, settings in ``options`` that one of ``kinds`` could not be built
    with (a face that offers those kinds, before anything loads)."""
    for kind in kinds:
        drafter_kind(kind).check(options)


def make_drafter(options: DrafterOptions, verifier: VocabModel, openers: Openers,
                 prices: PriceSource | None = None) -> Drafter:
    """The drafter ``options`` describe, for ``verifier`` (its vocabulary checked first, the model closed on a
    mismatch), its files opened by ``openers``. ``prices``: this machine's verify prices as the pair holds them; given,
    a kind that ``options.draft_cut`` cuts comes wrapped in a ``PricedDrafter`` that reads them."""
    kind = drafter_kind(options.kind)
    drafter = kind.build(options, verifier, openers)
    if prices is not None and kind.cuts(options.draft_cut):
        return PricedDrafter(drafter, prices, verifier.n_vocab)
    return drafter
