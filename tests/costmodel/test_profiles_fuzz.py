"""Cost profile files are outside input (issue 17): whatever bytes `--profile FILE` names, `load_profile` either
returns a profile every price of which is finite, or raises one UserError naming the file — never another
exception, never a NaN or an infinity reaching a speed-up.

Property-based: random bytes, random JSON, mutations of a valid saved profile, and hand-written hostile files.
Example counts are fixed and nothing depends on the machine's speed (``deadline=None``); the example database
is off, so the tests write nothing into the repository.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from relaxtui.costmodel.pricing import Rounds, break_even, priced_speedup
from relaxtui.costmodel.profiles import (
    MAX_BLOCK,
    MAX_PROFILE_BYTES,
    MAX_TIME_MS,
    MIN_TIME_MS,
    SHIPPED,
    CostProfile,
    from_dict,
    load_profile,
)
from relaxtui.errors import UserError


def fuzz(examples: int) -> settings:
    """Fixed example counts, no deadline (a busy 2-core machine must not fail them), no example database."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


VALID = CostProfile("fuzz", "a test machine", "big.gguf", "small.gguf", verifier_ar_ms=10.0, drafter_ms=2.0,
                    verify_ms={1: 10.0, 2: 14.0, 4: 20.0}, source="relaxtui calibration", draft_round_ms=0.5,
                    resync_ms=1.0, emit_ms=0.1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


def load_bytes(folder: Path, data: bytes) -> CostProfile | None:
    """Write ``data`` as a profile file and load it: the profile, or None after a UserError naming the file."""
    path = folder / "profile.json"
    path.write_bytes(data)
    try:
        profile = load_profile(str(path))
    except UserError as exc:
        message = str(exc)
        assert str(path) in message, message
        assert "\n" not in message, message
        assert len(message) < 600, message  # a hostile value is quoted short, not echoed whole
        note("refused: " + message.removeprefix(str(path) + ": ").split(" (")[0].split(";")[0][:60])
        return None
    note("accepted")
    check_prices(profile)
    return profile


def note(what: str) -> None:
    """Count what the examples did (``--hypothesis-show-statistics``); nothing outside a hypothesis test."""
    if currently_in_test_context():
        event(what)


def check_prices(profile: CostProfile) -> None:
    """Every number an accepted profile yields is finite: times, c_rel, round costs, break-even, speed-ups."""
    times = [profile.verifier_ar_ms, profile.drafter_ms, profile.draft_round_ms, profile.resync_ms, profile.emit_ms,
             *profile.verify_ms.values()]
    assert all(math.isfinite(t) and 0 <= t <= MAX_TIME_MS for t in times)
    assert profile.verifier_ar_ms >= MIN_TIME_MS and math.isfinite(profile.c_rel)
    assert all(isinstance(k, int) and 1 <= k <= MAX_BLOCK for k in profile.verify_ms)
    top = max(profile.verify_ms, default=1) if profile.pricing == "measured" else 8
    for drafts in range(0, min(top, 64)):
        cost = profile.round_cost_ms(drafts)
        assert math.isfinite(cost) and cost > 0
        assert math.isfinite(break_even(profile, drafts).steps)
        assert math.isfinite(priced_speedup(profile, Rounds.of([drafts] * 100, 1000, extra_draft_steps=3,
                                                               full_rounds=2, end_tokens=1)))
    assert load_profile_text(profile.to_json()) == profile  # what it saves, it reads back


def load_profile_text(text: str) -> CostProfile:
    return from_dict(json.loads(text), "round trip")


# -- random input ---------------------------------------------------------------------------------------------------
@fuzz(300)
@given(data=st.binary(max_size=512))
def test_random_bytes_are_a_user_error_or_a_profile(folder, data):
    load_bytes(folder, data)


scalars = (st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
           | st.integers(min_value=-(10**30), max_value=10**30) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=20)


@fuzz(500)
@given(value=json_values)
def test_random_json_is_a_user_error_or_a_profile(folder, value):
    load_bytes(folder, json.dumps(value).encode())


FIELDS = ("name", "hardware", "verifier", "drafter", "verifier_ar_ms", "drafter_ms", "verify_ms", "pricing", "source",
          "draft_round_ms", "resync_ms", "emit_ms")
block_keys = st.sampled_from(["1", "2", "3", "4", "8", "17", "4096", "4097", "0", "-1", "03", " 3", "3_0", "1e1",
                              "\u0663", "", "x"])
profile_like = st.fixed_dictionaries({}, optional={
    **{key: json_values for key in FIELDS},
    "verify_ms": st.dictionaries(block_keys, scalars, max_size=5) | json_values,
    "pricing": st.sampled_from(["measured", "optimistic", "Measured", "", "cheap"]) | json_values,
})


@fuzz(500)
@given(value=profile_like)
def test_random_objects_with_profile_fields_are_a_user_error_or_a_profile(folder, value):
    load_bytes(folder, json.dumps(value).encode())


# -- mutations of a valid saved profile --------------------------------------------------------------------------------
HOSTILE_LITERALS = [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-400", "-0.0", "0", "-1", "1e308", "1e10", "5e-324",
    "1" + "0" * 5000,  # past Python's int-string limit: int() raises ValueError
    "-" + "9" * 400,  # a float() overflow to -inf
    "true", "false", "null", '"12.5"', '"x"', '"\\udcff"', '"a\\u0000b"', "[]", "{}", "[12.5]", '{"2": 14}',
    "[" * 3000 + "]" * 3000,  # deep enough for json's recursion limit
    '"' + "x" * 5000 + '"',
]
BENIGN_LITERALS = ["3", "0.25", "1e-6", "999999999.9", "12", '"paper"', '"optimistic"', '"measured"', '"\u00e9\u00a0x"',
                   r'"\ud83d\ude00"', '{"2": 14.5, "8": 40}', '{"1": 10}', "{}", '""']


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid saved profile with fields dropped, added, retyped or their numbers replaced by hostile literals."""
    data: dict[str, object] = json.loads(VALID.to_json())
    raw: dict[str, str] = {}
    for key in draw(st.lists(st.sampled_from(list(data)), unique=True, max_size=3)):
        del data[key]
    for key in draw(st.lists(st.sampled_from(list(FIELDS)), unique=True, max_size=3)):
        marker = f"@raw{len(raw)}@"
        raw[marker] = draw(st.sampled_from(HOSTILE_LITERALS) | st.sampled_from(BENIGN_LITERALS))
        data[key] = marker
    if isinstance(data.get("verify_ms"), dict):
        verify: dict[str, object] = data["verify_ms"]  # type: ignore[assignment]
        for key in draw(st.lists(st.sampled_from(["1", "2", "4", "3", "0", "9999", "02"]), unique=True, max_size=2)):
            marker = f"@raw{len(raw)}@"
            raw[marker] = draw(st.sampled_from(HOSTILE_LITERALS) | st.sampled_from(BENIGN_LITERALS))
            verify[key] = marker
    if draw(st.integers(0, 3)) == 0:
        data[draw(st.sampled_from(["extra", "verify", "Name", ""]))] = 1
    text = json.dumps(data, indent=draw(st.sampled_from([None, 2])))
    for marker, literal in raw.items():
        text = text.replace(json.dumps(marker), literal)
    return text


@fuzz(1000)
@given(text=mutated())
def test_mutated_profiles_are_a_user_error_or_a_profile(folder, text):
    load_bytes(folder, text.encode())


finite_ms = st.floats(min_value=MIN_TIME_MS, max_value=MAX_TIME_MS, allow_nan=False, allow_infinity=False)
free_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=30)


@st.composite
def valid_profiles(draw: st.DrawFn) -> CostProfile:
    pricing = draw(st.sampled_from(["measured", "optimistic"]))
    verify = draw(st.dictionaries(st.integers(1, MAX_BLOCK), finite_ms, min_size=1 if pricing == "measured" else 0,
                                  max_size=6))
    extra = st.just(0.0) | finite_ms
    return CostProfile(draw(free_text.filter(str.strip)), draw(free_text), draw(free_text), draw(free_text),
                       verifier_ar_ms=draw(finite_ms), drafter_ms=draw(st.just(0.0) | finite_ms), verify_ms=verify,
                       pricing=pricing, source=draw(free_text), draft_round_ms=draw(extra), resync_ms=draw(extra),
                       emit_ms=draw(extra))


@fuzz(300)
@given(profile=valid_profiles())
def test_valid_profiles_still_load_identically(folder, profile):
    assert load_bytes(folder, profile.to_json().encode()) == profile


def test_the_reference_profile_and_the_shipped_ones_load_identically(folder):
    assert load_bytes(folder, VALID.to_json().encode()) == VALID
    assert load_bytes(folder, b"\xef\xbb\xbf" + VALID.to_json().encode()) == VALID  # a UTF-8 BOM is fine
    for profile in SHIPPED.values():
        assert load_bytes(folder, profile.to_json().encode()) == profile


@fuzz(200)
@given(spec=st.text(max_size=30))
def test_any_profile_name_is_a_user_error_or_a_profile(spec):
    try:
        load_profile(spec)
    except UserError as exc:
        assert "\n" not in str(exc)


@fuzz(200)
@given(parameter=st.text(max_size=12) | st.floats().map(repr))
def test_memory_bound_parameter_is_a_user_error_or_a_finite_profile(parameter):
    try:
        profile = load_profile(f"memory-bound:{parameter}")
    except UserError:
        return
    check_prices(profile)


# -- hand-written hostile files ----------------------------------------------------------------------------------------
def valid_with(**changes: str) -> bytes:
    """The reference profile's JSON with some values replaced by raw JSON text."""
    data: dict[str, object] = json.loads(VALID.to_json())
    data.update({key: f"@{key}@" for key in changes})
    text = json.dumps(data)
    for key, literal in changes.items():
        text = text.replace(f'"@{key}@"', literal)
    return text.encode()


@pytest.mark.parametrize("data,message", [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"a":' * 100_000, "nested too deeply"),
    (valid_with(verify_ms="[" * 100_000 + "]" * 100_000), "nested too deeply"),
    (valid_with(verifier_ar_ms="1" + "0" * 100_000), "verifier_ar_ms is inf"),
    (valid_with(drafter_ms="1e999"), "drafter_ms is inf"),
    (valid_with(emit_ms="NaN"), "emit_ms is nan"),
    (valid_with(resync_ms="-Infinity"), "resync_ms is -inf"),
    (valid_with(verify_ms='{"3": "x"}'), "verify_ms[\"3\"] is 'x'; every time must be a finite number of milliseconds"),
    (valid_with(verify_ms='{"3": 0}'), 'verify_ms["3"] is 0.0'),
    (valid_with(verify_ms='{"3": true}'), 'verify_ms["3"] is true'),
    (valid_with(verify_ms='{"3": 1, "3": 2}'), "given twice"),
    (valid_with(verify_ms='{"99999999999999999999": 1}'), "is not a block size"),
    (valid_with(verify_ms='[[2, 14]]'), "verify_ms is a JSON array"),
    (valid_with(verifier_ar_ms='"12.5"'), "verifier_ar_ms is '12.5'"),
    (valid_with(verifier_ar_ms="-3"), "verifier_ar_ms is -3.0"),
    (valid_with(verifier_ar_ms="5e-324"), "verifier_ar_ms is 5e-324"),
    (valid_with(name="12"), "name is 12.0; it must be a JSON string"),
    (valid_with(name='"\\udcff"'), "lone surrogates are refused"),
    (valid_with(name='"a\\nb"'), "control characters"),
    (valid_with(pricing='"cheap"'), "pricing is 'cheap'"),
    (valid_with(pricing="[]"), "pricing is a JSON array"),
    (valid_with(surprise="1"), "unknown field 'surprise'"),
    (b'{"name": "x", "drafter_ms": 1}', "missing verifier_ar_ms"),
    (b"[1, 2]", "a cost profile is a JSON object (got a JSON array)"),
    (b'{"name": "x", "verifier_ar_ms": 1, "drafter_ms": 1}', "measured pricing needs verify_ms"),
    (b"\xff\xfe{}", "not UTF-8: byte 0xff at offset 0"),
    (b'{"name": "\xc3(x"}', "not UTF-8"),
    (b"", "not a valid JSON cost profile"),
])
def test_hostile_profile_files_are_one_line_naming_the_field(tmp_path, data, message):
    path = tmp_path / "prof.json"
    path.write_bytes(data)
    with pytest.raises(UserError) as caught:
        load_profile(str(path))
    assert message in str(caught.value) and str(path) in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_of_many_megabytes_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: 64 MiB of nothing, never read
        handle.truncate(64 * MAX_PROFILE_BYTES)
    with pytest.raises(UserError, match="too big for a cost profile"):
        load_profile(str(path))
    path.write_bytes(b" " * MAX_PROFILE_BYTES + VALID.to_json().encode())  # just past the bound, but valid JSON
    with pytest.raises(UserError, match="too big for a cost profile"):
        load_profile(str(path))


def test_a_folder_a_fifo_and_an_unreadable_file_are_refused_without_blocking(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="not a regular file"):
        load_profile(str(tmp_path))
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # nobody writes to it: a plain open() would block forever
    with pytest.raises(UserError, match="not a regular file"):
        load_profile(str(fifo))
    locked = tmp_path / "locked.json"
    locked.write_text(VALID.to_json())
    locked.chmod(0)
    if os.access(locked, os.R_OK):  # root reads a mode-000 file: refuse the open itself, as it would be refused
        real_open = os.open

        def refused(path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            if Path(path) == locked:
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", refused)
    with pytest.raises(UserError, match="cost profile .* cannot be read .Permission denied"):
        load_profile(str(locked))
    monkeypatch.undo()
    locked.chmod(stat.S_IRUSR | stat.S_IWUSR)
