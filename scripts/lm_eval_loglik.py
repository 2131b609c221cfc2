#!/usr/bin/env python3
"""lm-evaluation-harness's `local-completions` against `relaxtui serve`, per-choice log-likelihoods checked against
llama-cpp-python directly (loopback only, a bounded run).

What it does, end to end:

1. writes a local multiple-choice task (a YAML and a JSONL of 8 questions, 4 choices each) into --work;
2. starts `relaxtui serve -m MODEL --drafter none --port 0` (the verifier alone: scoring never drafts);
3. runs lm-eval (from its own virtualenv: --lm-eval, it is not a project dependency) with
   `--model local-completions`, `tokenizer_backend=remote` (the server's /tokenizer_info, /tokenize, /detokenize),
   `--log_samples`: every choice is one echo + logprobs + max_tokens 1 request, as lm-eval sends them;
4. recomputes each choice's log-likelihood with `llama_cpp.Llama(logits_all=True)` on the same model file, from the
   same tokens (lm-eval's own split of context and continuation, replayed with the same tokenizer), one whole-prompt
   batch per request, with flash attention on as the server has it (llama.cpp's default, "auto", turns it on;
   llama-cpp-python's `Llama` turns it off unless told);
5. prints lm-eval's accuracy, each choice's served and direct log-likelihood, max |Δ| (the noise between the
   server's chunked decode and a one-batch decode: llama.cpp's batch arithmetic), and how far the direct values
   move with flash attention off (a different attention kernel, not the server).

    python3 -m venv /tmp/lmeval-venv && /tmp/lmeval-venv/bin/pip install "lm-eval[api]==0.4.13"
    .venv/bin/python scripts/lm_eval_loglik.py --lm-eval /tmp/lmeval-venv/bin/lm_eval --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = "ggml_models/smollm2-135m-instruct-q4_1.gguf"
TASK = "relaxtui_mc"
LM_EVAL_TIMEOUT_S = 1800
QUESTIONS = [
    ("The capital of France is", ["Paris", "London", "Berlin", "Madrid"], 0),
    ("Water freezes at a temperature of", ["zero degrees Celsius", "fifty degrees Celsius",
                                           "ninety degrees Celsius", "two hundred degrees Celsius"], 0),
    ("The largest planet in the solar system is", ["Mercury", "Jupiter", "Mars", "Venus"], 1),
    ("Two plus two equals", ["three", "five", "four", "seven"], 2),
    ("The opposite of hot is", ["warm", "loud", "tall", "cold"], 3),
    ("A baby cat is called a", ["kitten", "puppy", "calf", "foal"], 0),
    ("The sun rises in the", ["west", "east", "north", "south"], 1),
    ("Bees make", ["milk", "silk", "honey", "wool"], 2),
]
# a long preamble (twice ~170 tokens), so that every prompt spans two of the server's scoring chunks (at most 256)
DESCRIPTION = ("Below are short statements about the world, each with its last word or words left out. Every "
               "statement is about common knowledge: geography, science, arithmetic, animals, nature and daily "
               "life. Read the statement, think about which completion makes it true, and complete it with the "
               "word or words that a well-informed reader would choose. There is exactly one correct completion "
               "for each statement; the others are plausible-sounding but wrong. The statements were written "
               "for a quiz that schoolchildren take at the end of the year, so none of them needs special "
               "training, a calculator or a book to look things up in: what a curious child has seen, heard or "
               "been taught is enough. Some completions are a single word, others a short phrase of two, three "
               "or four words; a phrase counts as correct only when all of its words are right. ") * 2
YAML = """task: {task}
description: "{description}"
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: choices
doc_to_target: answer
metric_list:
  - metric: acc
  - metric: acc_norm
"""


@dataclass(frozen=True)
class Scored:
    """One choice: lm-eval's request (context, continuation) and its log-likelihood as lm-eval parsed it."""

    doc: int
    context: str
    continuation: str
    served: float


@dataclass(frozen=True)
class Compared:
    scored: Scored
    direct: float
    tokens: int  # continuation tokens

    @property
    def delta(self) -> float:
        return self.scored.served - self.direct


def write_task(folder: Path) -> Path:
    """The task's data and YAML (an --include_path folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "mc.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n" for q, c, a in QUESTIONS))
    (folder / f"{TASK}.yaml").write_text(YAML.format(task=TASK, data=data, description=DESCRIPTION))
    return folder


@contextmanager
def server(model: str, threads: int, ctx: int) -> Iterator[str]:
    """`relaxtui serve` on a free loopback port; yields its base URL, stops it (SIGTERM) on the way out."""
    command = [sys.executable, "-m", "relaxtui.cli", "serve", "--port", "0", "-m", model, "--drafter", "none",
               "-c", str(ctx), "--threads", str(threads), "--temperature", "0"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("listening on "):
            raise SystemExit(f"relaxtui serve did not start: {line}{process.stderr.read() if process.stderr else ''}")
        yield line.split()[-1]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def run_lm_eval(lm_eval: str, url: str, model_name: str, tasks: Path, out: Path) -> tuple[dict, Path]:
    """lm-eval's run to its end; (its results JSON, its samples JSONL)."""
    args = ",".join([f"base_url={url}/v1/completions", f"model={model_name}", "tokenizer_backend=remote",
                     "num_concurrent=1", "max_retries=1", "tokenized_requests=True", "max_length=1024"])
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [lm_eval, "run", "--model", "local-completions", "--model_args", args, "--tasks", TASK,
               "--include_path", str(tasks), "--output_path", str(out), "--log_samples", "--batch_size", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=LM_EVAL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"lm-eval failed ({done.returncode}):\n{done.stderr[-4000:]}")
    results = sorted(out.rglob("results_*.json"))
    samples = sorted(out.rglob(f"samples_{TASK}_*.jsonl"))
    if not results or not samples:
        raise SystemExit(f"lm-eval wrote no results under {out}:\n{done.stderr[-2000:]}")
    return json.loads(results[-1].read_text()), samples[-1]


def served_choices(samples: Path) -> list[Scored]:
    """Every (context, continuation) lm-eval asked about, with the log-likelihood it parsed from the server."""
    out = []
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        arguments = sample["arguments"]
        for i, resp in enumerate(sample["filtered_resps"]):
            args = arguments[f"gen_args_{i}"]
            value = resp[0] if isinstance(resp, list | tuple) else resp
            out.append(Scored(int(sample["doc_id"]), args["arg_0"], args["arg_1"], float(value)))
    return out


def encode_pair(tokenize: Callable[[str], list[int]], context: str,
                continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's own split (``_encode_pair``): trailing spaces move to the continuation, the whole is tokenized
    and the context's tokens cut off its front."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, head = tokenize(context + continuation), tokenize(context)
    return head, whole[len(head):]


def direct_logliks(model: str, choices: Sequence[Scored], threads: int, ctx: int, *,
                   flash_attn: bool = True) -> list[Compared]:
    """Each choice's log-likelihood by llama-cpp-python alone: the whole prompt in one batch, every row kept."""
    import llama_cpp

    llm = llama_cpp.Llama(str(ROOT / model), n_ctx=ctx, n_batch=ctx, n_threads=threads, logits_all=True,
                          flash_attn=flash_attn, verbose=False)

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode(), add_bos=False, special=True)

    out = []
    try:
        for choice in choices:
            head, tail = encode_pair(tokenize, choice.context, choice.continuation)
            tokens = head + tail
            llm.reset()
            llm.eval(tokens)
            rows = np.asarray(llm.scores[:len(tokens)], dtype=np.float64)
            rows -= rows.max(axis=1, keepdims=True)
            logp = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
            value = sum(logp[i - 1, tokens[i]] for i in range(len(head), len(tokens)))
            out.append(Compared(choice, float(value), len(tail)))
    finally:
        llm.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm-eval", default="/tmp/lmeval-venv/bin/lm_eval", help="lm-eval's command")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--work", type=Path, default=None, help="folder for the task and lm-eval's output")
    parser.add_argument("--json", type=Path, default=None, help="write the per-choice numbers here")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="relaxtui-lm-eval-"))
    tasks = write_task(work / "tasks")
    with server(args.model, args.threads, args.ctx) as url:
        results, samples = run_lm_eval(args.lm_eval, url, Path(args.model).name, tasks, work / "out")
    choices = served_choices(samples)
    compared = direct_logliks(args.model, choices, args.threads, args.ctx)
    kernel = direct_logliks(args.model, choices, args.threads, args.ctx, flash_attn=False)
    metrics = results["results"][TASK]
    print(f"lm-eval local-completions on {TASK} ({len(QUESTIONS)} questions, {len(compared)} choices): "
          + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, float)))
    print(f"{'doc':>3}  {'continuation':<28} {'tokens':>6} {'served':>10} {'direct':>10} {'delta':>10}")
    for c in compared:
        print(f"{c.scored.doc:>3}  {c.scored.continuation[:28]!r:<28} {c.tokens:>6} {c.scored.served:>10.4f} "
              f"{c.direct:>10.4f} {c.delta:>+10.2e}")
    deltas = np.abs([c.delta for c in compared])
    picks = sum(_pick(compared, doc, served=True) == _pick(compared, doc, served=False)
                for doc in {c.scored.doc for c in compared})
    print(f"max |delta| {deltas.max():.2e} nats, mean {deltas.mean():.2e}; same choice picked on {picks}/"
          f"{len(QUESTIONS)} questions; samples: {samples}")
    moved = np.abs([a.direct - b.direct for a, b in zip(compared, kernel, strict=True)])
    print(f"direct with flash attention off instead: moves by up to {moved.max():.2e} nats (mean {moved.mean():.2e})")
    if args.json is not None:
        args.json.write_text(json.dumps([{"doc": c.scored.doc, "continuation": c.scored.continuation,
                                          "served": c.scored.served, "direct": c.direct} for c in compared]))
    return 0


def _pick(compared: Sequence[Compared], doc: int, *, served: bool) -> str:
    rows = [c for c in compared if c.scored.doc == doc]
    return max(rows, key=lambda c: c.scored.served if served else c.direct).scored.continuation


if __name__ == "__main__":
    sys.exit(main())
