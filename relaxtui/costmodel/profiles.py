"""Cost profiles: the prices of one deployment (docs/metrics.md), which `pricing` joins with measured counters.

Following the paper's public reproduction: generations are the source of truth for quality, lengths and
acceptance counters; a profile is a small JSON table of what one verifier AR token (t_AR), one drafter
token (t_D) and one verify block of k tokens (t_V(k), k = drafts + 1) cost on some hardware. A round costs

    round(k) = t_V(k + 1) + k · t_D (+ draft_round_ms)     ("measured" pricing)
    round(k) = t_AR + k · t_D                              ("optimistic" pricing: verification memory-bound)

and a round with no draft is one AR step (t_AR). Between measured block sizes t_V is interpolated linearly;
below the smallest measured k (but above 1) it takes the smallest measured value, because on an accelerator a
verify block's cost is the speculative path's fixed overhead, not proportional to k; above the largest it is
refused. The priced speed-up and the break-even length are `costmodel.pricing`'s, and only there.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relaxtui.errors import UserError
from relaxtui.files import FileTooBig, read_regular_bytes

PRICING_MODES = ("measured", "optimistic")
THIS_MACHINE = "this-machine"  # the name of the profile a run measures where its models run
MEMORY_BOUND_C_REL = 0.1  # default drafter/verifier cost ratio of the `memory-bound` profile
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few hundred bytes; anything past 1 MiB is not one
MAX_BLOCK = 4096  # largest verify block size k a profile may price
MIN_TIME_MS, MAX_TIME_MS = 1e-6, 1e9  # 1 ns .. 11.6 days: a divisor this small or a cost this big is not a profile
_TEXT_FIELDS = {"name": 200, "hardware": 500, "verifier": 500, "drafter": 500, "source": 2000}  # -> max length
_POSITIVE_TIMES = ("verifier_ar_ms",)
_NON_NEGATIVE_TIMES = ("drafter_ms", "draft_round_ms", "resync_ms", "emit_ms")
_FIELDS = ("name", "hardware", "verifier", "drafter", "verifier_ar_ms", "drafter_ms", "verify_ms", "pricing",
           "source", "draft_round_ms", "resync_ms", "emit_ms", "timing_spread", "timing_stable")
MAX_SPREAD_RECORDED = 1e6  # a relative spread is a ratio of times; anything past this is not one
_BLOCK_KEY = re.compile(r"[1-9][0-9]{0,3}")  # ASCII digits only: int() would also take " 3", "+3", "3_0", "٣"


def _timing_problem(spread: object, stable: object) -> str | None:
    """What is wrong with a profile's timing fields: a spread is null or a finite number >= 0, stable null or a bool."""
    if spread is not None and not (isinstance(spread, (int, float)) and not isinstance(spread, bool)
                                   and math.isfinite(spread) and 0 <= spread <= MAX_SPREAD_RECORDED):
        return (f"timing_spread is {_shown(spread)}; it must be null or a finite ratio in "
                f"[0, {MAX_SPREAD_RECORDED:g}]")
    if stable is not None and not isinstance(stable, bool):
        return f"timing_stable is {_shown(stable)}; it must be null, true or false"
    return None


@dataclass(frozen=True)
class CostProfile:
    name: str
    hardware: str
    verifier: str
    drafter: str
    verifier_ar_ms: float  # t_AR
    drafter_ms: float  # t_D
    verify_ms: dict[int, float] = field(default_factory=dict)  # block size k (= drafts + 1) -> t_V(k)
    pricing: str = "measured"
    source: str = ""
    # costs the paper's formula has no term for; 0 in its profiles, measured by relaxtui's calibration
    draft_round_ms: float = 0.0  # per round that drafts: the drafter's re-sync beyond k·t_D
    resync_ms: float = 0.0  # extra re-sync after a fully accepted round (two tokens instead of one)
    emit_ms: float = 0.0  # per emitted token: detokenisation and bookkeeping
    # how far a calibrated profile's times can be trusted (`costmodel.timing`); None in profiles from elsewhere
    timing_spread: float | None = None  # widest (max - min) / median of a calibrated part's kept samples
    timing_stable: bool | None = None  # False: some part stayed implausible after re-measuring

    def __post_init__(self) -> None:
        """The same bounds as a profile file's (see ``from_dict``), for profiles built in code."""
        if self.pricing not in PRICING_MODES:
            raise UserError(f"profile {self.name!r}: pricing must be one of {', '.join(PRICING_MODES)} "
                            f"(got {self.pricing!r})")
        numbers = [self.verifier_ar_ms, self.drafter_ms, self.draft_round_ms, self.resync_ms, self.emit_ms,
                   *self.verify_ms.values()]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                   and x <= MAX_TIME_MS for x in numbers):
            raise UserError(f"profile {self.name!r}: every time must be a finite number of milliseconds "
                            f"(at most {MAX_TIME_MS:g})")
        if not (self.verifier_ar_ms >= MIN_TIME_MS and self.drafter_ms >= 0):
            raise UserError(f"profile {self.name!r}: verifier_ar_ms must be >= {MIN_TIME_MS:g} and drafter_ms >= 0")
        if min(self.draft_round_ms, self.resync_ms, self.emit_ms) < 0:
            raise UserError(f"profile {self.name!r}: draft_round_ms, resync_ms and emit_ms must be >= 0")
        if any(not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_BLOCK or not ms >= MIN_TIME_MS
               for k, ms in self.verify_ms.items()):
            raise UserError(f"profile {self.name!r}: verify_ms needs block sizes k in 1..{MAX_BLOCK} with times "
                            f">= {MIN_TIME_MS:g} ms")
        if self.pricing == "measured" and not self.verify_ms:
            raise UserError(f"profile {self.name!r}: measured pricing needs verify_ms (block size -> ms)")
        if problem := _timing_problem(self.timing_spread, self.timing_stable):
            raise UserError(f"profile {self.name!r}: {problem}")

    @property
    def c_rel(self) -> float:
        return self.drafter_ms / self.verifier_ar_ms

    def verify_cost_ms(self, k: int) -> float:
        """t_V(k) under this profile's pricing; a k past the measured range is a UserError naming it."""
        if k <= 1 or self.pricing == "optimistic":
            return self.verifier_ar_ms
        if k in self.verify_ms:
            return self.verify_ms[k]
        measured = sorted(self.verify_ms)
        if k > measured[-1]:
            raise UserError(f"profile {self.name!r} has no verify cost for a block of k={k} tokens "
                            f"({k - 1} drafts); it measures k up to {measured[-1]}")
        if k < measured[0]:
            return self.verify_ms[measured[0]]
        upper = next(m for m in measured if m > k)
        lower = max(m for m in measured if m < k)
        weight = (k - lower) / (upper - lower)
        return self.verify_ms[lower] + weight * (self.verify_ms[upper] - self.verify_ms[lower])

    def round_cost_ms(self, drafts: int) -> float:
        """One round that verified ``drafts`` tokens: the verify block plus the drafter steps."""
        if drafts == 0:
            return self.verify_cost_ms(1)
        return self.verify_cost_ms(drafts + 1) + drafts * self.drafter_ms + self.draft_round_ms

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v is not None or not k.startswith("timing_")}
        data["verify_ms"] = {str(k): v for k, v in sorted(self.verify_ms.items())}
        return json.dumps(data, indent=2) + "\n"


# -- shipped profiles ---------------------------------------------------------------------------------------------
PAPER_SOURCE = ("Xia, Ribar & Balanca 2026 (arXiv 2607.08690), public reproduction: Qwen3-32B verifier, "
                "Qwen3-0.6B drafter, one NVIDIA GB200, batch 1, bf16, vLLM 0.20.1")
_PAPER: dict[str, Any] = dict(  # CostProfile's keyword arguments
    hardware="NVIDIA GB200 (batch 1, bf16, vLLM 0.20.1)", verifier="Qwen3-32B", drafter="Qwen3-0.6B",
    verifier_ar_ms=12.448, drafter_ms=3.929, verify_ms={4: 30.503, 6: 30.448, 11: 30.905, 21: 32.270},
    source=PAPER_SOURCE)


def memory_bound(c_rel: float = MEMORY_BOUND_C_REL) -> CostProfile:
    """An idealised accelerator: verifying any block costs one AR step (v(k) = 1); the drafter costs c_rel."""
    if not (math.isfinite(c_rel) and 0 <= c_rel <= MAX_TIME_MS):
        raise UserError(f"memory-bound: c_rel must be a finite number >= 0 (got {c_rel:g})")
    return CostProfile(f"memory-bound:{c_rel:g}", "idealised (verification memory-bound)", "any", "any", 1.0,
                       c_rel, {}, "optimistic", "v(k) = 1 for every k; drafter = c_rel verifier steps")


SHIPPED: dict[str, CostProfile] = {
    "paper-gb200": CostProfile("paper-gb200", pricing="measured", **_PAPER),
    "paper-gb200-optimistic": CostProfile("paper-gb200-optimistic", pricing="optimistic", **_PAPER),
    "memory-bound": memory_bound(),
}


# -- profile files: every byte may be hostile ---------------------------------------------------------------------
class _DuplicateKey(ValueError):
    pass


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json's object hook: a key given twice is refused, not silently the last one."""
    data: dict[str, object] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def _json_number(text: str) -> float:
    """Integers are read as floats: ``int()`` on a 5000-digit literal raises (Python's int-string limit), while
    ``float()`` turns it into inf, which the field checks then name."""
    return float(text)


def _shown(value: object) -> str:
    """A bad value as a message quotes it: short, ASCII-escaped, JSON's name for its kind when not a scalar."""
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return ascii(value if len(value) <= 40 else value[:40] + "...")
    return repr(value)


def _time(value: object, field: str, where: str, *, positive: bool) -> float:
    """A time in ms: a JSON number (not a bool, not a string), finite, within [MIN_TIME_MS or 0, MAX_TIME_MS]."""
    low = MIN_TIME_MS if positive else 0.0
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= MAX_TIME_MS):
        raise UserError(f"{where}: malformed cost profile: {field} is {_shown(value)}; every time must be a finite "
                        f"number of milliseconds in [{low:g}, {MAX_TIME_MS:g}]")
    return float(value)


def _text(value: object, field: str, where: str) -> str:
    """A string field: a JSON string of printable text (no control characters, no lone surrogates)."""
    limit = _TEXT_FIELDS[field]
    if not isinstance(value, str):
        raise UserError(f"{where}: malformed cost profile: {field} is {_shown(value)}; it must be a JSON string")
    if len(value) > limit:
        raise UserError(f"{where}: malformed cost profile: {field} is {len(value)} characters long (at most {limit})")
    bad = next((ch for ch in value if unicodedata.category(ch) in ("Cc", "Cs")), None)
    if bad is not None:
        raise UserError(f"{where}: malformed cost profile: {field} holds the character {ascii(bad)} "
                        "(control characters and lone surrogates are refused)")
    return value


def from_dict(data: object, where: str) -> CostProfile:
    """Validate a profile read from JSON; every problem is one UserError naming the file and the field.

    Every field CostProfile uses is checked for its JSON type, range and size before the dataclass is built, so
    nothing from the file reaches a price as a string, a bool, a NaN, an infinity or a key int() merely tolerates.
    """
    if not isinstance(data, dict):
        raise UserError(f"{where}: a cost profile is a JSON object (got {_shown(data)})")
    unknown = [key for key in data if key not in _FIELDS]
    if unknown:
        raise UserError(f"{where}: malformed cost profile: unknown field {_shown(unknown[0])} "
                        f"(known: {', '.join(_FIELDS)})")
    missing = [key for key in ("name", "verifier_ar_ms", "drafter_ms") if key not in data]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)}")
    text = {field: _text(data.get(field, ""), field, where) for field in _TEXT_FIELDS}
    if not text["name"].strip():
        raise UserError(f"{where}: malformed cost profile: name is empty")
    times = {field: _time(data.get(field, 0.0), field, where, positive=field in _POSITIVE_TIMES)
             for field in (*_POSITIVE_TIMES, *_NON_NEGATIVE_TIMES)}
    pricing = data.get("pricing", "measured")
    if pricing not in PRICING_MODES:  # a str compared with str only: a list or object is simply not in the tuple
        raise UserError(f"{where}: malformed cost profile: pricing is {_shown(pricing)}; it must be one of "
                        f"{', '.join(PRICING_MODES)}")
    raw_verify = data.get("verify_ms", {})
    if not isinstance(raw_verify, dict):
        raise UserError(f"{where}: malformed cost profile: verify_ms is {_shown(raw_verify)}; it must be a JSON "
                        'object of block size k -> ms, e.g. {"2": 14.5}')
    verify: dict[int, float] = {}
    for key, value in raw_verify.items():
        if not _BLOCK_KEY.fullmatch(key) or int(key) > MAX_BLOCK:
            raise UserError(f"{where}: malformed cost profile: verify_ms key {_shown(key)} is not a block size; "
                            f"keys are whole numbers k in 1..{MAX_BLOCK} (drafts + 1)")
        if int(key) in verify:  # "3" and "03" cannot both be there: the pattern has no leading zeros
            raise UserError(f"{where}: malformed cost profile: verify_ms[{json.dumps(key)}] is given twice")
        verify[int(key)] = _time(value, f"verify_ms[{json.dumps(key)}]", where, positive=True)
    if pricing == "measured" and not verify:
        raise UserError(f"{where}: malformed cost profile: measured pricing needs verify_ms (block size -> ms)")
    spread, stable = data.get("timing_spread"), data.get("timing_stable")
    if problem := _timing_problem(spread, stable):
        raise UserError(f"{where}: malformed cost profile: {problem}")
    try:
        return CostProfile(name=text["name"], hardware=text["hardware"], verifier=text["verifier"],
                           drafter=text["drafter"], verify_ms=verify, pricing=str(pricing), source=text["source"],
                           timing_spread=None if spread is None else float(spread), timing_stable=stable, **times)
    except UserError as exc:  # the dataclass's own checks, should one ever go further than the ones above
        raise UserError(f"{where}: malformed cost profile: {exc}") from None


def read_profile_file(path: Path) -> object:
    """The JSON value in ``path``, read defensively: a regular file (a FIFO or device is refused without
    blocking), at most MAX_PROFILE_BYTES, strict UTF-8 (a BOM allowed), no duplicate keys; NaN and Infinity
    literals, huge integers and too-deep nesting all end as one UserError naming the file."""
    try:
        raw = read_regular_bytes(path, MAX_PROFILE_BYTES, "cost profile")
    except FileTooBig as exc:
        raise UserError(f"{path}: {exc.size} bytes is too big for a cost profile (at most {MAX_PROFILE_BYTES} "
                        "bytes)") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not a valid JSON cost profile (not UTF-8: byte 0x{raw[exc.start]:02x} at offset "
                        f"{exc.start})") from None
    try:  # NaN/Infinity become floats here so that the field check names the field they are in
        return json.loads(text, object_pairs_hook=_object, parse_int=_json_number, parse_constant=float)
    except _DuplicateKey as exc:
        raise UserError(f"{path}: not a valid JSON cost profile (key {_shown(str(exc))} given twice)") from None
    except RecursionError:
        raise UserError(f"{path}: not a valid JSON cost profile (nested too deeply)") from None
    except ValueError as exc:  # json.JSONDecodeError, and anything else json's number parsing refuses
        raise UserError(f"{path}: not a valid JSON cost profile ({exc})") from None


def load_profile(spec: str) -> CostProfile:
    """A shipped name (``memory-bound:C`` sets its c_rel) or a JSON file (see ``read_profile_file`` and
    ``from_dict``: hostile files are one UserError, never another exception)."""
    name, _, parameter = spec.partition(":")
    if name == "memory-bound":
        if not parameter:
            return SHIPPED[name]
        try:
            c_rel = float(parameter)
        except ValueError:
            raise UserError(f"memory-bound:C takes a number for c_rel (got {_shown(parameter)})") from None
        return memory_bound(c_rel)
    if spec in SHIPPED:
        return SHIPPED[spec]
    if spec == THIS_MACHINE and not Path(spec).exists():
        raise UserError(f"{THIS_MACHINE} is the profile each eval run measures where its models run, saved in its "
                        "folder (`relaxtui profiles show results/TASK/measured-profile.json`) and read by that "
                        "folder's report (`relaxtui eval report DIR`); bench saves one of this machine as a file too")
    path = Path(spec)
    try:
        exists = path.exists()
    except OSError:  # e.g. a folder on the way that cannot be searched: reading it says why
        exists = True
    except ValueError:  # an embedded NUL
        exists = False
    if not exists:
        raise UserError(f"unknown cost profile {_shown(spec)}: not one of {', '.join(SHIPPED)} (or memory-bound:C), "
                        "nor a profile file")
    return from_dict(read_profile_file(path), str(path))
