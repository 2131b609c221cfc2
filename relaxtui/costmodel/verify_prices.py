"""The verify prices priced drafting reads (docs/method.md#priced-drafts): v(1..K), what a verify batch of k tokens
costs in single verifier steps, for this verifier on this machine.

Measured where the models run, once: k = 1..``MEASURED_BLOCKS`` timed round-robin after a short prompt (the
self-checking timer: warm-up, outliers dropped, re-measured while too wide), about 15 s on a 2-core CPU. Every N
reads the same measurement, cut or extended (past the measured blocks each further token is priced at the measured
average cost of one), so a seed gives the same drafts in every face and at every N on one machine. Kept in
``$RELAXTUI_CACHE/profiles/`` under everything that changes it (the verifier file, threads, GPU layers, the blocks
and context a small context leaves room for, a recurrent verifier's snapshots, the hardware, the relaxtui and
llama-cpp-python versions), and in the process per loaded verifier. A measurement that
stayed unstable is used, not kept. Measured on one sequence: a batch of K sequences (``--parallel``) is priced as
one sequence's verify blocks.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from relaxtui.costmodel import profile_cache
from relaxtui.costmodel.measure import hardware_description
from relaxtui.costmodel.timing import measure_many, rewinder
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.draft_cut import Pricer, check_prices, cuts_drafts
from relaxtui.decoding.drafting import Drafter
from relaxtui.engine.api import Model
from relaxtui.errors import UserError
from relaxtui.files import read_regular_bytes, write_atomic
from relaxtui.session import LoadedPair, ModelOptions

MEASURED_BLOCKS = 17  # the largest verify block timed (16 drafts); longer ones are extrapolated
CONTEXT = 128  # prompt tokens before the timed blocks (attention over a typical prompt), ids 100.. in the vocabulary
REPEATS = 3
_known: weakref.WeakKeyDictionary[Model, tuple[float, ...]] = weakref.WeakKeyDictionary()


def extend(prices: tuple[float, ...], blocks: int) -> tuple[float, ...]:
    """``prices`` for blocks 1..``blocks``: past the measured ones, each token at the measured average per token."""
    if len(prices) >= blocks or len(prices) < 2:
        return prices[:blocks]
    step = max((prices[-1] - prices[0]) / (len(prices) - 1), 1e-6)
    return prices + tuple(prices[-1] + step * i for i in range(1, blocks - len(prices) + 1))


def measured_shape(verifier: Model, blocks: int) -> tuple[int, int]:
    """(the largest block, the context before it) that a measurement of ``blocks`` blocks times on ``verifier``:
    fewer in a small context, where the context and the largest block must fit."""
    blocks = max(1, min(blocks, verifier.n_ctx - 2))
    return blocks, max(1, min(CONTEXT, verifier.n_ctx - blocks - 1))


def measure_prices(verifier: Model, blocks: int) -> tuple[tuple[float, ...], bool]:
    """(v(1..blocks), stable): each block of k tokens timed after up to ``CONTEXT`` tokens on sequence 0
    (``measured_shape``), left empty."""
    blocks, length = measured_shape(verifier, blocks)
    context = [(100 + i) % verifier.n_vocab for i in range(length)]
    verifier.clear(0)
    verifier.decode(0, context)
    back = rewinder(verifier)

    def block(k: int) -> Callable[[], None]:
        def once() -> None:
            verifier.decode_rows([0], [[context[-1]] * k])
            back()
        return once

    timings = measure_many([block(k) for k in range(1, blocks + 1)], repeats=REPEATS, warmup=1)
    verifier.clear(0)
    single = timings[0].median
    prices = (1.0, *(t.median / single for t in timings[1:]))
    return prices, all(t.stable for t in timings)


def _cached(path: Path) -> tuple[float, ...] | None:
    try:
        data = json.loads(read_regular_bytes(path, 1 << 16, "verify prices"))
        prices = tuple(float(p) for p in data["prices"])
        check_prices(prices)
    except (OSError, UserError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None  # absent, damaged or foreign: measured over
    return prices if len(prices) > 1 else None


def known_prices(pair: LoadedPair) -> tuple[float, ...] | None:
    """The prices this process holds for ``pair``'s verifier (None: not measured or read yet)."""
    return _known.get(pair.verifier)


def verify_prices(pair: LoadedPair, blocks: int, *, threads: int | None, gpu_layers: int,
                  log: Callable[[str], None] = lambda line: None) -> tuple[float, ...]:
    """v(1..``blocks``) for ``pair``'s verifier: this process's, the cache's, or measured now (``log`` says so)."""
    known = _known.get(pair.verifier)
    if known is None:
        measured, context = measured_shape(pair.verifier, MEASURED_BLOCKS)
        key = {"kind": "verify-prices", "verifier": profile_cache.file_identity(pair.verifier_path),
               "threads": threads, "gpu_layers": gpu_layers, "blocks": measured, "context": context,
               "snapshots": pair.verifier.rollback_limit, "hardware": hardware_description(),
               **profile_cache.versions()}
        path = profile_cache.cache_path(key)
        known = _cached(path)
        if known is None:
            log("measuring this machine's verify costs for priced drafting (blocks of 1.."
                f"{measured} tokens, once; about 15 s on a 2-core CPU)…")
            known, stable = measure_prices(pair.verifier, measured)
            if stable:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(path, json.dumps({"prices": list(known), "key": key}, sort_keys=True))
                except OSError:  # a read-only cache only costs the next start its measurement
                    pass
        _known[pair.verifier] = known
    return extend(known, blocks)


def pricer(pair: LoadedPair, options: ModelOptions, log: Callable[[str], None] = lambda line: None, *,
           measure: bool = True) -> Pricer:
    """How a face that loaded ``pair`` with ``options`` prices its generations' drafts: a config whose ``draft_cut``
    resolves to priced for the drafter it runs gets ``verify_prices`` up to its N + 1 (measured at most once).
    ``measure=False``: a face that decodes other sequences meanwhile (serve) never measures here; it measured at
    load (``verify_prices``), and without prices a draft is verified whole."""

    def price(config: GenerationConfig, drafter: Drafter | None) -> GenerationConfig:
        if drafter is None or config.draft_max == 0 or config.verify_prices:
            return config
        if not cuts_drafts(config.draft_cut, drafter.traits.holds_model):
            return config
        if not measure and known_prices(pair) is None:
            return config
        prices = verify_prices(pair, config.draft_max + 1, threads=options.threads, gpu_layers=options.gpu_layers,
                               log=log)
        return replace(config, verify_prices=prices)
    return price
