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
one sequence's verify blocks. A kept file is read back only when it can be what it claims (``cached``): stored under
this very key, one price per measured block, each within what a stable timing of a verify batch can give; any other
is measured over, with one warning line (a cache is not the user's to repair).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from relaxtui.costmodel import profile_cache
from relaxtui.costmodel.measure import hardware_description
from relaxtui.costmodel.profile_cache import block_price_problem
from relaxtui.costmodel.timing import measure_many, rewinder
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.draft_cut import Pricer, cuts_drafts
from relaxtui.decoding.drafting import Drafter
from relaxtui.engine.api import Model
from relaxtui.files import FileMissing, FileRefused, read_regular_bytes, write_atomic
from relaxtui.session import LoadedPair, ModelOptions

MEASURED_BLOCKS = 17  # the largest verify block timed (16 drafts); longer ones are extrapolated
CONTEXT = 128  # prompt tokens before the timed blocks (attention over a typical prompt), ids 100.. in the vocabulary
REPEATS = 3
MAX_FILE_BYTES = 1 << 16  # a kept measurement is well under 1 KiB
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


def price_problem(prices: Sequence[object], blocks: int) -> str | None:
    """Why ``prices`` cannot be a measurement of v(1..``blocks``) on this machine (None: they can): one per block,
    v(1) = 1 (each is a ratio to it), each v(k) within what a verify block can cost (``block_price_problem``). Not
    required monotone: a real one is not, and the cut (``draft_cut.priced_length``) needs no order."""
    if len(prices) != blocks:
        return f"{len(prices)} prices where {blocks} blocks were measured"
    if prices[0] != 1.0 or isinstance(prices[0], bool):
        return f"v(1) is {json.dumps(prices[0])[:40]}, not 1"
    return next(filter(None, (block_price_problem(k, price) for k, price in enumerate(prices, start=1))), None)


def cached(path: Path, key: Mapping[str, object], blocks: int) -> tuple[tuple[float, ...] | None, str | None]:
    """(the prices of ``blocks`` blocks kept at ``path`` for ``key``, None), or (None, why they cannot be used) for
    a file that is there but is damaged, edited or another key's; (None, None) for no file."""
    try:
        raw = read_regular_bytes(path, MAX_FILE_BYTES, "verify prices")
    except FileMissing:
        return None, None
    except FileRefused as exc:
        return None, exc.reason
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not UTF-8 or not JSON
        return None, "not a JSON measurement"
    if not isinstance(data, dict) or not isinstance(data.get("prices"), list):
        return None, "not a JSON measurement"
    if data.get("key") != json.loads(json.dumps(dict(key), sort_keys=True, default=str)):
        return None, "measured for another verifier, setting or machine than the one it is named for"
    problem = price_problem(data["prices"], blocks)
    return (None, problem) if problem is not None else (tuple(float(p) for p in data["prices"]), None)


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
        known, problem = cached(path, key, measured)
        if problem is not None:
            log(f"warning: ignoring the kept verify prices {path}: {problem}; measuring them again")
        if known is None:
            log("measuring this machine's verify costs for priced drafting (blocks of 1.."
                f"{measured} tokens, once; about 15 s on a 2-core CPU)…")
            known, stable = measure_prices(pair.verifier, measured)
            try:
                if stable:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(path, json.dumps({"prices": list(known), "key": key}, sort_keys=True, default=str))
                elif problem is not None:
                    path.unlink(missing_ok=True)  # not warned about again at every start
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
