"""Verify prices for priced drafting (relaxtui.costmodel.verify_prices): measured once, kept, read back, now or a slice
at a time in the background (a face's model used between slices keeps its cache); a run's identity names the cut."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from relaxtui.costmodel import verify_prices as vp
from relaxtui.costmodel.background import Background
from relaxtui.evals.run.identity import RunIdentity
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.taskfiles.taskfile import load_task
from relaxtui.session import ModelOptions
from tests.support.markov import cycle_table, fake


@dataclass
class Pair:  # what a session.Pair hands VerifyPrices: its verifier and its file; ``held``: this process's holders
    verifier: object
    verifier_path: Path
    held: dict = field(default_factory=dict)


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXTUI_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "verifier.gguf"
    model.write_bytes(b"GGUF")
    return Pair(fake(cycle_table()), model)


def verify_prices(pair, blocks, *, threads, gpu_layers, log=lambda line: None):
    """v(1..blocks) as a pair loaded with these settings holds them (kept by it: one per verifier and settings in a
    process; ``pair.held.clear()`` is a new process)."""
    key = (id(pair.verifier), threads, gpu_layers)
    held = pair.held.setdefault(key, vp.VerifyPrices(pair.verifier, pair.verifier_path, threads=threads,
                                                     gpu_layers=gpu_layers))
    return vp.extend(held.wait(log), blocks)


def test_extend_prices_past_the_measured_blocks_at_the_measured_average_per_token():
    assert vp.extend((1.0, 1.5, 2.0), 5) == pytest.approx((1.0, 1.5, 2.0, 2.5, 3.0))
    assert vp.extend((1.0, 1.9, 1.6), 4) == pytest.approx((1.0, 1.9, 1.6, 1.9))  # (1.6 - 1) / 2 a token
    assert vp.extend((1.0, 1.5, 2.0), 2) == (1.0, 1.5)


def test_prices_are_measured_once_kept_and_read_back(pair, monkeypatch):
    said = []
    measured = []
    real = vp.measure_prices

    def counting(verifier, blocks):
        measured.append(blocks)
        prices, _ = real(verifier, blocks)
        return prices, True

    monkeypatch.setattr(vp, "measure_prices", counting)
    first = verify_prices(pair, 5, threads=2, gpu_layers=0, log=said.append)
    blocks = vp.MEASURED_BLOCKS
    assert len(first) == 5 and first[0] == 1.0 and all(p > 0 for p in first) and measured == [blocks]
    assert len(said) == 1 and "verify costs" in said[0]
    assert verify_prices(pair, 4, threads=2, gpu_layers=0) == first[:4] and measured == [blocks]  # this process's
    whole = verify_prices(pair, 40, threads=2, gpu_layers=0)  # every N reads the one measurement, extended
    assert len(whole) == 40 and whole[:5] == first and measured == [blocks]
    pair.held.clear()  # a new process: read from the cache, not measured
    assert verify_prices(pair, 5, threads=2, gpu_layers=0, log=said.append) == first and measured == [blocks]
    assert len(said) == 1
    (stored,) = (pair.verifier_path.parent / "cache" / "profiles").glob("*.json")
    assert json.loads(stored.read_text())["prices"][:5] == list(first)
    pair.held.clear()
    verify_prices(pair, 5, threads=1, gpu_layers=0)
    assert measured == [blocks, blocks]  # another thread count: another key
    pair.held.clear()
    small = replace(pair, verifier=fake(cycle_table(), n_ctx=12))  # the same file in a context of 12 tokens
    assert len(verify_prices(small, 5, threads=2, gpu_layers=0)) == 5
    assert measured == [blocks, blocks, 10]  # a context of 12 fits blocks of 10 after 1 token: another key
    assert vp.measured_shape(small.verifier, blocks) == (10, 1)


def test_a_damaged_cache_is_measured_over_and_an_unstable_measurement_is_not_kept(pair, monkeypatch):
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: ((1.0, 1.4, 1.8), False))
    assert verify_prices(pair, 3, threads=None, gpu_layers=0) == (1.0, 1.4, 1.8)
    folder = pair.verifier_path.parent / "cache" / "profiles"
    assert not folder.exists() or not list(folder.glob("*.json"))  # unstable: used, not kept
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: ((1.0, 1.2, 1.3), True))
    pair.held.clear()
    verify_prices(pair, 3, threads=None, gpu_layers=0)
    (stored,) = folder.glob("*.json")
    stored.write_text('{"prices": [2.0, "x"]}')
    pair.held.clear()
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: ((1.0, 1.25, 1.5), True))
    assert verify_prices(pair, 3, threads=None, gpu_layers=0) == (1.0, 1.25, 1.5)


@pytest.mark.parametrize(("kind", "cut", "named"), [("suffix", "auto", True), ("ngram-simple", "priced", True),
                                                    ("suffix", "none", False), ("model", "auto", False),
                                                    ("model", "priced", True)])
def test_a_runs_identity_names_the_cut_only_where_it_cuts(kind, cut, named):
    task = load_task(Path("evals/examples/edit_code.toml"))
    options = ModelOptions(drafter="d.gguf" if kind == "model" else None, draft_kind=kind, draft_cut=cut)
    identity = RunIdentity.of(task, options, EvalPlan(), thinking=None, data=None)
    assert identity.settings.get("draft_cut") == ("priced" if named else None)


def test_a_small_context_measures_what_fits():
    small = fake(cycle_table(), n_ctx=16)
    prices, _ = vp.measure_prices(small, vp.MEASURED_BLOCKS)  # 14 blocks after one token: all that fits in 16
    assert len(prices) == 14 and prices[0] == 1.0


def test_in_the_background_the_prices_arrive_a_slice_at_a_time_and_a_face_between_slices_keeps_its_cache(pair):
    """A face that must answer at once queues the measurement; each step is one timed block (or the set-up), a face
    decoding between two steps says so, and the measurement sets its context up again after what the face holds:
    the face's cache keeps its own prefix, and the measurement ends with the sequence as the face left it."""
    background = Background()
    prices = vp.VerifyPrices(pair.verifier, pair.verifier_path, threads=None, gpu_layers=0)
    said, arrived = [], []
    assert prices.start(background, said.append, arrived.append) is False and prices.known() is None
    assert len(said) == 1 and "in the background" in said[0] and background.pending
    assert not pair.verifier.tokens_of(0)  # nothing ran yet: queued only
    steps = 0
    conversation = [3, 4, 5, 6]
    while background.step():
        steps += 1
        if steps == 5:  # a reply between two slices: the face's prefill keeps what it shares with its prompt
            held = list(pair.verifier.tokens_of(0))
            pair.verifier.clear(0)
            pair.verifier.decode(0, conversation)
            background.touched()
            assert held and held != conversation
    assert steps > vp.MEASURED_BLOCKS * 3 and prices.known() is not None and arrived == [prices.known()]
    assert list(pair.verifier.tokens_of(0)) == conversation  # rolled back to what the face held
    assert prices.start(background) is True and not background.pending  # known: nothing queued again


# -- a kept file is read back only when it can be this machine's measurement (issue 47) ---------------------------
def kept_file(pair, monkeypatch, prices):
    """Measure ``prices`` once (kept in the cache) and return the file they were kept in."""
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: (prices[:blocks], True))
    verify_prices(pair, 3, threads=None, gpu_layers=0)
    pair.held.clear()  # a new process
    (stored,) = (pair.verifier_path.parent / "cache" / "profiles").glob("*.json")
    return stored


CPU = (1.0, 1.56, 1.90, 1.73, 2.22, 2.63, 3.02, 3.25, 3.48, 3.7, 3.9, 4.1, 4.4, 4.6, 4.9, 5.1, 5.3)  # method.md's


def edited(data, change):
    out = json.loads(json.dumps(data))
    if change == "huge":
        out["prices"] = [1.0] + [1e300] * (len(out["prices"]) - 1)
    elif change == "tiny":
        out["prices"] = [1.0] + [1e-300] * (len(out["prices"]) - 1)
    elif change == "first":
        out["prices"][0] = 5.0
    elif change == "past-k":
        out["prices"][1] = 9.0  # two tokens in one batch priced as nine single steps
    elif change == "short":
        out["prices"] = out["prices"][:2]
    elif change == "other-key":
        out["key"]["threads"] = 64  # a file measured for another setting, copied under this key's name
    elif change == "no-key":
        del out["key"]
    elif change == "bool":
        out["prices"][1] = True
    return out


@pytest.mark.parametrize("change", ["huge", "tiny", "first", "past-k", "short", "other-key", "no-key", "bool"])
def test_an_edited_price_file_is_measured_over_with_one_warning(pair, monkeypatch, change):
    """Prices of 1e300 stopped every draft and 1e-300 verified every draft, read back as written; a file that
    cannot be this machine's v(1..K) for this key is now measured over (and replaced), with one warning line."""
    stored = kept_file(pair, monkeypatch, CPU)
    stored.write_text(json.dumps(edited(json.loads(stored.read_text()), change)))
    again = tuple(1.0 + 0.25 * k for k in range(vp.MEASURED_BLOCKS))
    calls = []
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: calls.append(blocks) or (again, True))
    said = []
    assert verify_prices(pair, 3, threads=None, gpu_layers=0, log=said.append) == again[:3]
    assert calls == [vp.MEASURED_BLOCKS]
    warnings = [line for line in said if "verify costs" not in line]
    assert len(warnings) == 1 and str(stored) in warnings[0] and "measur" in warnings[0] and "\n" not in warnings[0]
    assert json.loads(stored.read_text())["prices"] == list(again)  # measured over


def test_a_real_measurement_is_read_back_though_not_monotone(pair, monkeypatch):
    """A CPU's v(k) is not monotone (llama.cpp's repacked Q4 weights make k = 4 cheaper than k = 3): kept as is."""
    kept_file(pair, monkeypatch, CPU)
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: pytest.fail("measured again"))
    said = []
    assert verify_prices(pair, 5, threads=None, gpu_layers=0, log=said.append) == CPU[:5] and said == []


def test_a_refused_file_that_cannot_be_replaced_is_removed(pair, monkeypatch):
    stored = kept_file(pair, monkeypatch, CPU)
    stored.write_text(json.dumps(edited(json.loads(stored.read_text()), "huge")))
    monkeypatch.setattr(vp, "measure_prices", lambda verifier, blocks: (CPU, False))  # unstable: not kept
    assert verify_prices(pair, 3, threads=None, gpu_layers=0) == CPU[:3]
    assert not stored.exists()
