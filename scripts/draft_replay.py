"""Replay light drafters over the verifier's own greedy outputs: priced speed-up of every draft cut, in seconds.

At greedy a round keeps exactly the drafted tokens that match what the verifier alone writes, so the verifier's
greedy output of each task row is all a replay needs: each round asks the real drafter (relaxtui's factory) for a
proposal after the text so far, cuts it (priced drafting's ``KeepOdds``, or not at all), keeps its prefix that
matches the output and emits one more token, and pays v(k + 1) verifier steps. The result is the speed-up the
priced column of an eval would show, for a cut policy, a prior or a price curve, without decoding anything again.
docs/method.md#priced-drafts quotes it.

Usage, from the project root after set-up:
    .venv/bin/python scripts/draft_replay.py [--prices 1,1.65,2.06,...] [--kinds ngram-cache suffix] [--n 8]
The greedy outputs are made once with the embedded verifier (a few minutes) and kept in
``$RELAXTUI_CACHE/draft_replay_outputs.json``; ``--prices`` defaults to this machine's measured verify prices.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from relaxtui.decoding import draft_cut
from relaxtui.decoding.config import GenerationConfig
from relaxtui.decoding.drafters import DrafterOptions, Openers, make_drafter
from relaxtui.decoding.drafting import DraftRequest
from relaxtui.decoding.events import Finished
from relaxtui.decoding.loop import generate
from relaxtui.decoding.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("edit_code", "open_ended")
GREEDY = SamplingParams(0.0, 0, 1.0)


class Vocab:
    n_vocab = 151_936  # the embedded pair's; the drafters that run no model read nothing else of the verifier


def outputs(path: Path) -> dict[str, list[dict]]:
    """Each task row's prompt tokens and the verifier's greedy output (made once, then read back)."""
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    from relaxtui.engine.llama import LlamaModel
    from relaxtui.evals.taskfiles.taskfile import load_task
    from relaxtui.session import chat_template, conversation_tokens

    model = LlamaModel(ROOT / "ggml_models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", n_ctx=4096)
    template, made = chat_template(model), {}
    for name in TASKS:
        task = load_task(ROOT / f"evals/examples/{name}.toml")
        rows = []
        for sample in task.load():
            prompt = conversation_tokens(model, template, sample.messages)
            config = GenerationConfig(draft_max=0, max_tokens=task.max_tokens, sampling=GREEDY)
            done = next(e for e in generate(model, prompt, config) if isinstance(e, Finished))
            rows.append({"id": sample.id, "prompt": prompt, "output": list(done.token_ids)})
        made[name] = rows
    path.write_text(json.dumps(made), encoding="utf-8")
    return made


class Emitted(NamedTuple):
    """A token the replayed round emitted, as a drafter reads it."""

    token_id: int


def replay(rows: list[dict], kind: str, n_max: int, prices: list[float], *, cut: bool) -> float:
    """Priced speed-up of ``kind`` over ``rows``: output tokens over the verifier steps its rounds cost."""
    tokens = steps = 0.0
    for row in rows:
        drafter = make_drafter(DrafterOptions(kind=kind), Vocab(), Openers(model=None))
        context, out, at, odds = list(row["prompt"]), row["output"], 0, draft_cut.KeepOdds()
        drafter.begin(0, context)
        while at < len(out):
            n = min(n_max, len(out) - at - 1)
            request = DraftRequest(0, context, n, GREEDY, np.random.default_rng(0))
            proposal = drafter.draft([request])[0].tokens if n > 0 else []
            k = odds.cut(len(proposal), prices) if cut else len(proposal)
            kept = next((i for i in range(k) if proposal[i] != out[at + i]), k)
            emitted = out[at:at + kept + 1]
            if cut:
                odds.observe(proposal, emitted)
            drafter.accept(0, kept, [Emitted(token) for token in emitted])
            context.extend(emitted)
            at += len(emitted)
            tokens += len(emitted)
            steps += prices[k] if k < len(prices) else prices[-1]
    return tokens / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prices", help="v(1..K) in verifier steps, comma-separated (default: measured here)")
    parser.add_argument("--kinds", nargs="+", default=["ngram-cache", "suffix"])
    parser.add_argument("--n", type=int, default=8, help="the longest draft (default 8)")
    parser.add_argument("--prior", default=f"{draft_cut.PRIOR_KEPT:g},{draft_cut.PRIOR_SEEN:g}",
                        help="the keep odds' prior as KEPT,SEEN pseudo-counts per bucket (default: the loop's, "
                             f"{draft_cut.PRIOR_KEPT:g},{draft_cut.PRIOR_SEEN:g}: Beta(2, 1); 1,2 is Beta(1, 1))")
    args = parser.parse_args()
    kept, seen = (float(x) for x in args.prior.split(","))
    draft_cut.PRIOR_KEPT, draft_cut.PRIOR_SEEN = kept, seen  # read by every KeepOdds() made after this
    cache = Path(os.environ.get("RELAXTUI_CACHE") or Path.home() / ".cache" / "relaxtui")
    cache.mkdir(parents=True, exist_ok=True)
    data = outputs(cache / "draft_replay_outputs.json")
    if args.prices:
        prices = [float(p) for p in args.prices.split(",")]
    else:
        from relaxtui.costmodel.verify_prices import VerifyPrices, extend
        from relaxtui.session import ModelOptions, load_pair

        pair = load_pair(ModelOptions(drafter=None))
        assert pair.verifier_path is not None
        held = VerifyPrices(pair.verifier, pair.verifier_path, threads=None, gpu_layers=0)
        prices = list(extend(held.wait(log=print), args.n + 1))
        pair.close()
    prices = prices[:args.n + 1]
    print("prices", " ".join(f"{p:.2f}" for p in prices))
    for name, rows in data.items():
        for kind in args.kinds:
            whole = replay(rows, kind, args.n, prices, cut=False)
            cut = replay(rows, kind, args.n, prices, cut=True)
            print(f"{name:<11} {kind:<13} every draft whole {whole:.3f}x   priced cut {cut:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
