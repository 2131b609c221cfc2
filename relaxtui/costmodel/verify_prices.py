"""The verify prices priced drafting reads (docs/method.md#priced-drafts): v(1..K), what a verify batch of k tokens
costs in single verifier steps, for this verifier on this machine.

Measured where the models run, once: k = 1..``MEASURED_BLOCKS`` timed round-robin after a short prompt (the
self-checking timer: warm-up, outliers dropped, re-measured while too wide), about 15 s on a 2-core CPU; a face that
must not wait for it (chat, serve) runs it a timed block at a time on its own model thread while idle
(``costmodel.background``), and its drafts are verified whole until it ends. Every N
reads the same measurement, cut or extended (past the measured blocks each further token is priced at the measured
average cost of one), so a seed gives the same drafts in every face and at every N on one machine. Kept in
``$RELAXTUI_CACHE/profiles/`` under everything that changes it (the verifier file, threads, GPU layers, the blocks
and context a small context leaves room for, a recurrent verifier's snapshots, the hardware, the relaxtui and
llama-cpp-python versions), and by the pair that holds the verifier (``VerifyPrices``). A measurement that
stayed unstable is used, not kept. Measured on one sequence: a batch of K sequences (``--parallel``) is priced as
one sequence's verify blocks. A kept file is read back only when it can be what it claims (``cached``): stored under
this very key, one price per measured block, each within what a stable timing of a verify batch can give; any other
is measured over, with one warning line (a cache is not the user's to repair).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from relaxtui.costmodel import profile_cache
from relaxtui.costmodel.background import Background
from relaxtui.costmodel.measure import hardware_description
from relaxtui.costmodel.profile_cache import block_price_problem
from relaxtui.costmodel.timing import Slices, rewinder, run_slices, timing_slices
from relaxtui.decoding.draft_cut import extend
from relaxtui.engine.api import Model
from relaxtui.files import FileMissing, FileRefused, read_regular_bytes, write_atomic

__all__ = ["MEASURED_BLOCKS", "VerifyPrices", "cached", "extend", "measure_prices", "measured_shape", "price_problem",
           "price_slices"]

MEASURED_BLOCKS = 17  # the largest verify block timed (16 drafts); longer ones are extrapolated
CONTEXT = 128  # prompt tokens before the timed blocks (attention over a typical prompt), ids 100.. in the vocabulary
REPEATS = 3
MAX_FILE_BYTES = 1 << 16  # a kept measurement is well under 1 KiB
Log = Callable[[str], None]


def measured_shape(verifier: Model, blocks: int) -> tuple[int, int]:
    """(the largest block, the context before it) that a measurement of ``blocks`` blocks times on ``verifier``:
    fewer in a small context, where the context and the largest block must fit."""
    blocks = max(1, min(blocks, verifier.n_ctx - 2))
    return blocks, max(1, min(CONTEXT, verifier.n_ctx - blocks - 1))


def price_slices(verifier: Model, blocks: int, seq: int = 0) -> Slices[tuple[tuple[float, ...], bool]]:
    """(v(1..blocks), stable), a timed block a slice (``timing.Slices``): each block of k tokens after at least
    ``CONTEXT`` tokens of sequence ``seq`` (``measured_shape``). The context goes after what the sequence holds (a
    chat's conversation, a server's cached prompt: the face's next prefill keeps its own prefix and drops the rest),
    or in an emptied sequence where they would not fit; made again after a face used the models; rolled back at the
    end."""
    blocks, length = measured_shape(verifier, blocks)
    filler = [(100 + i) % verifier.n_vocab for i in range(length)]
    state: dict[str, object] = {}

    def setup() -> None:
        held = len(verifier.tokens_of(seq))
        if held and (held + length + blocks + 1 > verifier.n_ctx or not verifier.can_rollback(seq, held)):
            verifier.clear(seq)
            held = 0
        state["held"] = held
        verifier.decode(seq, filler)
        state["back"] = rewinder(verifier, seq)

    def block(k: int) -> Callable[[], None]:
        def once() -> None:
            verifier.decode_rows([seq], [[filler[-1]] * k])
            back = state["back"]
            assert callable(back)
            back()
        return once

    setup()
    timings = yield from timing_slices([block(k) for k in range(1, blocks + 1)], repeats=REPEATS, warmup=1,
                                       resume=setup)
    held = state["held"]
    assert isinstance(held, int)
    if held and verifier.can_rollback(seq, held):
        verifier.rollback(seq, held)
    else:
        verifier.clear(seq)
    single = timings[0].median
    prices = (1.0, *(t.median / single for t in timings[1:]))
    return prices, all(t.stable for t in timings)


def measure_prices(verifier: Model, blocks: int) -> tuple[tuple[float, ...], bool]:
    """(v(1..blocks), stable), measured now on sequence 0 (``price_slices``, every slice at once)."""
    return run_slices(price_slices(verifier, blocks))


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


MEASURING = ("measuring this machine's verify costs for priced drafting (blocks of 1..{blocks} tokens, once; about "
             "15 s on a 2-core CPU)")


class VerifyPrices:
    """One loaded verifier's v(1..K) on this machine: read from the cache, or measured (at most once). ``known()`` is
    what a ``PricedDrafter`` reads (None until then); ``start`` measures in the background, ``wait`` now."""

    def __init__(self, verifier: Model, verifier_path: Path, *, threads: int | None, gpu_layers: int) -> None:
        self.verifier = verifier
        self.blocks, context = measured_shape(verifier, MEASURED_BLOCKS)
        self.key = {"kind": "verify-prices", "verifier": profile_cache.file_identity(verifier_path),
                    "threads": threads, "gpu_layers": gpu_layers, "blocks": self.blocks, "context": context,
                    "snapshots": verifier.rollback_limit, "hardware": hardware_description(),
                    **profile_cache.versions()}
        self.path = profile_cache.cache_path(self.key)
        self._known: tuple[float, ...] | None = None
        self._problem: str | None = None
        self._read = self._queued = False

    def known(self) -> tuple[float, ...] | None:
        return self._known

    def _from_cache(self, log: Log) -> bool:
        """Read the kept measurement once (a damaged or foreign file: one warning line); whether prices are known."""
        if not self._read:
            self._read = True
            self._known, self._problem = cached(self.path, self.key, self.blocks)
            if self._problem is not None:
                log(f"warning: ignoring the kept verify prices {self.path}: {self._problem}; measuring them again")
        return self._known is not None

    def start(self, background: Background, log: Log = lambda line: None,
              done: Callable[[tuple[float, ...]], None] = lambda prices: None) -> bool:
        """The kept prices now, else their measurement queued on ``background`` (``done`` is told when it ends);
        whether they are known now."""
        if self._from_cache(log) or self._queued:
            return self._known is not None
        self._queued = True
        log(MEASURING.format(blocks=self.blocks) + " in the background; drafts are verified whole until then…")

        def measured(result: tuple[tuple[float, ...], bool]) -> None:
            self._keep(*result)
            done(result[0])

        background.add("verify prices", price_slices(self.verifier, self.blocks), measured)
        return False

    def wait(self, log: Log = lambda line: None) -> tuple[float, ...]:
        """The prices, measured now where they are neither kept nor known (on the caller's thread: nothing else may
        decode on the verifier meanwhile)."""
        if not self._from_cache(log) and self._known is None:
            log(MEASURING.format(blocks=self.blocks) + "…")
            self._keep(*measure_prices(self.verifier, self.blocks))
        assert self._known is not None
        return self._known

    def _keep(self, prices: tuple[float, ...], stable: bool) -> None:
        """Use them from now on; kept on disk when their timings were stable (an unstable one is used, not kept)."""
        self._known = prices
        try:
            if stable:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.path, json.dumps({"prices": list(prices), "key": self.key}, sort_keys=True,
                                                   default=str))
            elif self._problem is not None:
                self.path.unlink(missing_ok=True)  # not warned about again at every start
        except OSError:  # a read-only cache only costs the next start its measurement
            pass
