"""What each part of a speculative round costs on this machine, timed with the loop's own functions.

llama_decode is most of a round, not all of it: the drafter re-syncs on the accepted tokens (two tokens after a
fully accepted round), every drafted token is processed (softmax, top-k/top-p) and drawn, every verified
position goes through the rule and a draw, every emitted token is detokenised and wrapped in an event. A model
that prices only decodes over-predicts the speed-up (0.98x predicted against 0.79x measured on a 2-core EPYC).
Each part here is timed by calling the functions the loop calls, on real logits, so the priced round is the
round the loop runs; bench checks the prediction against measured runs side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from relaxtui.costmodel.profiles import THIS_MACHINE, CostProfile
from relaxtui.costmodel.timing import Slices, Timing, c_rel_problem, rewinder, run_slices, size_ratio, timing_slices
from relaxtui.decoding.acceptance import Acceptance, Emitted, accept_draft, row_spec
from relaxtui.decoding.drafting import Draft, Drafter, DraftRequest
from relaxtui.decoding.events import RoundTiming, Verdict
from relaxtui.decoding.round import token_event
from relaxtui.decoding.sampling import SamplingParams, argmax, process
from relaxtui.engine.api import Model
from relaxtui.rules import Rule
from relaxtui.rules.strict import Strict
from relaxtui.text import StreamDecoder

DEFAULT_CONTEXT = tuple(range(100, 132))  # 32 ordinary token ids: a short, warm context


def typical_context(prompt: Sequence[int], max_tokens: int) -> list[int]:
    """A context as long as a generation's average one (the prompt plus half the budget), made of the prompt's
    own tokens: attention and cache costs grow with it, so a 32-token toy context under-prices real rounds."""
    length = len(prompt) + max_tokens // 2
    return (list(prompt) * (length // max(len(prompt), 1) + 1))[:length]


@dataclass(frozen=True)
class LoopCosts:
    """Seconds per part of the loop, for one verifier/drafter pair and sampling setting on this machine."""

    verify_s: tuple[float, ...]  # block of k = 1..K tokens: decode k rows, accept the k-1 drafts, draw, roll back
    draft_s: tuple[float, ...]  # drafting n = 1..K-1 tokens in one round: re-sync, n-1 more steps, n draws
    resync_extra_s: float  # a fully accepted round makes the next re-sync decode 2 tokens instead of 1
    emit_s: float  # per emitted token: end-of-generation check, detokenisation, the event
    verifier_decode_s: float  # one raw verifier decode: docs/metrics.md's c_rel and v(k) are defined on these
    drafter_decode_s: float
    # how far to trust the numbers above (`costmodel.timing`): the widest relative range of any part's kept
    # samples, whether every part passed the checks, and why not
    spread: float = 0.0
    stable: bool = True
    unstable_reason: str | None = None

    @property
    def ar_step_s(self) -> float:
        """One verifier-alone token: a one-token verify block plus its emission."""
        return self.verify_s[0] + self.emit_s

    @property
    def draft_step_s(self) -> float:
        """The marginal cost of one more drafted token (slope of draft_s)."""
        if len(self.draft_s) >= 2:
            return max(0.0, (self.draft_s[-1] - self.draft_s[0]) / (len(self.draft_s) - 1))
        return self.draft_s[0] if self.draft_s else 0.0

    @property
    def c_rel(self) -> float:
        return self.drafter_decode_s / self.verifier_decode_s if self.verifier_decode_s else 0.0

    @property
    def max_block(self) -> int:
        return len(self.verify_s)

    def profile(self, name: str = THIS_MACHINE, *, verifier: str = "", drafter: str = "",
                hardware: str = "this machine", blocks: int = 0) -> CostProfile:
        """This machine as a cost profile: the verify block and drafter step the paper's formula prices, plus
        the costs it has no term for (per drafting round, re-sync, emission). Every price of these costs is this
        profile's (`costmodel.pricing`). ``blocks``: price verify blocks up to that size too, the measured curve
        continued linearly past the calibrated sizes (never below its last value) — a chat's N may outgrow them."""
        step = self.draft_step_s
        first = self.draft_s[0] if self.draft_s else 0.0
        verify = list(self.verify_s)
        verify += [max(_extend(self.verify_s, index), self.verify_s[-1]) for index in range(len(verify), blocks)]
        return CostProfile(
            name=name, hardware=hardware, verifier=verifier, drafter=drafter,
            verifier_ar_ms=self.verify_s[0] * 1e3, drafter_ms=step * 1e3,
            verify_ms={k: s * 1e3 for k, s in enumerate(verify, start=1)}, pricing="measured",
            source="relaxtui calibration: the loop's own functions timed on this machine",
            draft_round_ms=max(0.0, first - step) * 1e3, resync_ms=self.resync_extra_s * 1e3,
            emit_ms=self.emit_s * 1e3, timing_spread=self.spread, timing_stable=self.stable)


def _extend(curve: Sequence[float], index: int) -> float:
    """curve[index], or its linear continuation past the end."""
    if index < len(curve):
        return curve[index]
    if not curve:
        return 0.0
    slope = curve[-1] - curve[-2] if len(curve) >= 2 else curve[-1]
    return curve[-1] + slope * (index - len(curve) + 1)


def _verify_block(verifier: Model, k: int, sampling: SamplingParams, rule: Rule,
                  rng: np.random.Generator) -> None:
    """Decode a k-token block, accept its k-1 drafts as the loop would, roll back."""
    back = rewinder(verifier)  # a rollback, or on recurrent memory a checkpoint restored
    block = list(verifier.tokens_of(0)[-k:])  # real, distinct tokens, as a draft block would be
    logits = verifier.decode_rows([0], [block])[0]  # whole rows or the engine's candidates, as the loop's
    drafts = [argmax(row) for row in logits[: k - 1]]  # likely accepted: the costly path
    probs = np.stack([process(row, sampling) for row in logits[: k - 1]]) if k > 1 else np.empty((0, 0))
    accept_draft(Draft(drafts, probs, logits[: k - 1]), logits, Acceptance(rule, sampling), rng)
    back()


def _emit_seconds(verifier: Model, tokens: Sequence[int], repeats: int = 200) -> float:
    decoder = StreamDecoder()
    timing = RoundTiming(0, 0, 0, 0.0, 0.0, 0.0, 0.0)
    item = Emitted(tokens[0], Verdict.VERIFIER, 0, 0.5, None, 0.5, None, ())
    started = time.perf_counter()
    for index in range(repeats):
        token = tokens[index % len(tokens)]
        verifier.is_eog(token)
        text = decoder.push(verifier.token_piece(token))
        token_event(index, item, text, timing, 0)
    return (time.perf_counter() - started) / repeats


def calibrate(verifier: Model, drafter: Drafter | None, *, max_block: int, sampling: SamplingParams,
              rule: Rule | None = None, context: Sequence[int] = DEFAULT_CONTEXT, repeats: int = 5,
              seed: int = 0, whole_rows: bool = False) -> LoopCosts:
    """Time every part of a round for blocks of 1..max_block tokens (drafts of 0..max_block-1); drafting is timed
    for a drafter that declares it runs a model (sequence 0), else priced at nothing. Leaves both caches empty, as
    a fresh generation expects (its prefill decodes the prompt again)."""
    return run_slices(calibration_slices(verifier, drafter, max_block=max_block, sampling=sampling, rule=rule,
                                         context=context, repeats=repeats, seed=seed, whole_rows=whole_rows))


def calibration_slices(verifier: Model, drafter: Drafter | None, *, max_block: int, sampling: SamplingParams,
                       rule: Rule | None = None, context: Sequence[int] = DEFAULT_CONTEXT, repeats: int = 5,
                       seed: int = 0, whole_rows: bool = False) -> Slices[LoopCosts]:
    """``calibrate`` a timed step a slice (``timing.Slices``, for a face that runs it in the background): sequence 0
    of both models is set up again after a face used them, and emptied at the end."""
    rule = rule or Strict()
    rng = np.random.default_rng(seed)
    timed_drafter = drafter if drafter is not None and drafter.traits.holds_model else None
    held = timed_drafter.traits.n_ctx if timed_drafter is not None else None
    room = min(verifier.n_ctx, held if held is not None else verifier.n_ctx) - max_block - 4
    context = list(context)[-max(room, 2):]  # a small --ctx-size still calibrates (on a shorter context)
    extended = [*context, context[0], context[1]]
    rewind: list[Callable[[], None]] = []

    def setup() -> None:
        """Both models' sequence 0 as the timed steps expect it: the context, on the rows a generation with this rule
        and sampling runs on (row_spec)."""
        verifier.set_candidates(0, row_spec(rule, sampling, verifier.n_vocab, dense=whole_rows))
        verifier.clear(0)
        verifier.decode(0, context)
        rewind[:] = [rewinder(verifier)]
        if timed_drafter is not None:
            timed_drafter.release(0)
            draft(1)()  # prefill the drafter's cache

    def verify(k: int) -> Callable[[], None]:
        return lambda: _verify_block(verifier, k, sampling, rule, rng)

    def single_verifier() -> None:
        verifier.decode(0, [context[-1]], [0])
        rewind[0]()

    def draft(n: int, tokens: Sequence[int] = context) -> Callable[[], object]:
        # the cache holds the context (and the last draft): a round's re-sync decodes one token, as after a
        # rejection; then n - 1 more steps
        if timed_drafter is None:  # (drafting is timed only for a drafter that runs a model)
            raise RuntimeError("calibrate: a draft step timed without a drafter that runs a model")
        request = DraftRequest(0, tokens, n, sampling, rng, whole_rows=whole_rows or rule.needs_logits)
        return lambda: timed_drafter.draft([request])

    # Named actions, timed round-robin in the order a round runs them (draft n, then verify n + 1): the two
    # models' weights and buffers evict each other from the caches as they do in the loop.
    named: list[tuple[str, Callable[[], object]]] = [("verify1", verify(1)), ("single_verifier", single_verifier)]
    if timed_drafter is not None:
        draft_extended = draft(1, extended)

        def resync_two() -> None:
            timed_drafter.begin(0, [*context, context[0]], reuse="longest")  # holds the context
            draft_extended()

        def single_drafter() -> None:
            timed_drafter.step(0, context)

        named += [("one", draft(1)), ("resync", resync_two), ("single_drafter", single_drafter)]
    for n in range(1, max_block):
        if timed_drafter is not None:
            named.append((f"draft{n}", draft(n)))
        named.append((f"verify{n + 1}", verify(n + 1)))
    setup()
    # warm-up (the first decode of each size allocates buffers), outliers dropped, re-measured while implausible
    names = [name for name, _ in named]
    timings = yield from timing_slices(
        [a for _, a in named], repeats=repeats, warmup=1, resume=setup,
        check=lambda found: _calibration_problem(dict(zip(names, found, strict=True)), verifier, timed_drafter))
    medians = {name: t.median for name, t in zip(names, timings, strict=True)}
    emit = _emit_seconds(verifier, context)
    verifier.clear(0)
    verifier.set_candidates(0, None)
    verify_s = tuple(medians[f"verify{k}"] for k in range(1, max_block + 1))
    draft_s: tuple[float, ...] = (0.0,) * (max_block - 1)  # a drafter with no model (n-gram) costs ~nothing
    resync = drafter_single = 0.0
    if timed_drafter is not None:
        draft_s = tuple(medians[f"draft{n}"] for n in range(1, max_block))
        resync = max(0.0, medians["resync"] - medians["one"])
        drafter_single = medians["single_drafter"]
        timed_drafter.release(0)
    single = medians["single_verifier"]
    unstable = next((f"{name}: {t.reason}" for name, t in zip(names, timings, strict=True) if not t.stable), None)
    return LoopCosts(verify_s, draft_s, resync, emit, single, drafter_single, spread=max(t.spread for t in timings),
                     stable=unstable is None, unstable_reason=unstable)


def profile_slices(verifier: Model, drafter: Drafter | None, *, verifier_name: str, drafter_name: str,
                   max_block: int, sampling: SamplingParams, prompt: Sequence[int], max_tokens: int,
                   seed: int = 0) -> Slices[CostProfile]:
    """This machine's cost profile for the pair (the default pricing of eval's reports and serve's responses): a
    calibration on a context as long as a typical generation of ``prompt``, a slice at a time."""
    from relaxtui.costmodel.measure import hardware_description

    costs = yield from calibration_slices(verifier, drafter, max_block=max_block, sampling=sampling,
                                          context=typical_context(prompt, min(max_tokens, 512)), repeats=5, seed=seed)
    return costs.profile(THIS_MACHINE, verifier=verifier_name, drafter=drafter_name, hardware=hardware_description())


def measure_profile(verifier: Model, drafter: Drafter | None, *, verifier_name: str, drafter_name: str,
                    max_block: int, sampling: SamplingParams, prompt: Sequence[int], max_tokens: int,
                    seed: int = 0) -> CostProfile:
    """``profile_slices`` now: where the models run (a Ray actor measures its own node's), saved by the caller."""
    return run_slices(profile_slices(verifier, drafter, verifier_name=verifier_name, drafter_name=drafter_name,
                                     max_block=max_block, sampling=sampling, prompt=prompt, max_tokens=max_tokens,
                                     seed=seed))


def _calibration_problem(timings: dict[str, Timing], verifier: Model, drafter: Drafter | None) -> str | None:
    """A calibration whose implied c_rel no steady machine gives (`timing.c_rel_problem`) is measured again."""
    if drafter is None or "single_drafter" not in timings:
        return None
    verifier_s = timings["single_verifier"].median
    c_rel = timings["single_drafter"].median / verifier_s if verifier_s > 0 else float("inf")
    return c_rel_problem(c_rel, size_ratio(SimpleNamespace(path=drafter.traits.model_path), verifier))
