"""Probe llama.cpp's experimental backend sampling through llama-cpp-python (issue 21's next step).

Loads a GGUF with a per-sequence sampler chain in the context (top-k, optionally temperature and top-p, or greedy),
decodes a prompt with its last ``--rows`` rows as outputs (a verify batch), and prints per row what llama.cpp hands
back — the sampled token, how many candidates/logits/probabilities — against a plain decode of the same batch, and
the time of repeated decodes with and without the chain. Facts it showed on llama-cpp-python 0.3.36 (CPU):
``n_outputs_max_per_seq`` defaults to 1, so a verify batch is refused ("backend sampling supports at most 1 outputs
per sequence") until it is raised; with a top-k chain ``llama_get_logits_ith`` returns the candidates' raw logits
(as many as candidates, in candidate order), not the whole row; a greedy chain still returns the whole row.

    .venv/bin/python scripts/probe_backend_sampling.py MODEL.gguf [--chain topk|topk-temp-topp|greedy] [--rows 4]

``--sequences`` checks relaxtui's own candidate sampler (``relaxtui.engine.candidates``) on a context of four
sequences instead: every pattern of 0..3 tokens per sequence, all rows asked for, the candidates' argmax against a
twin context's whole rows. On 0.3.36 a few patterns come back wrong (e.g. 2 tokens each for sequences 1 and 3:
sequence 3's first row holds another row's candidates), which is why ``LlamaModel.set_candidates`` keeps whole rows
on contexts of several sequences.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import llama_cpp as lib
import numpy as np


def chain(kind: str, top_k: int) -> ctypes.c_void_p:
    made = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    if kind == "greedy":
        lib.llama_sampler_chain_add(made, lib.llama_sampler_init_greedy())
    else:
        lib.llama_sampler_chain_add(made, lib.llama_sampler_init_top_k(top_k))
        if kind == "topk-temp-topp":
            lib.llama_sampler_chain_add(made, lib.llama_sampler_init_temp(0.6))
            lib.llama_sampler_chain_add(made, lib.llama_sampler_init_top_p(0.95, 1))
    return made


def context(model: int, sampler: ctypes.c_void_p | None, rows: int, threads: int) -> tuple[int, object]:
    params = lib.llama_context_default_params()
    params.n_ctx = params.n_batch = 512
    params.n_seq_max, params.n_threads, params.n_threads_batch = 1, threads, threads
    params.n_outputs_max_per_seq = rows  # the default (1) refuses a verify batch
    configs = (lib.llama_sampler_seq_config * 1)()
    if sampler is not None:
        configs[0].seq_id, configs[0].sampler = 0, ctypes.cast(sampler, ctypes.c_void_p)
        params.samplers = ctypes.cast(configs, ctypes.POINTER(lib.llama_sampler_seq_config))
        params.n_samplers = 1
    return lib.llama_init_from_model(model, params), configs  # configs: kept alive with the context


def decode(ctx: int, tokens: list[int], start: int, rows: int) -> float:
    batch = lib.llama_batch_init(len(tokens), 0, 1)
    batch.n_tokens = len(tokens)
    for j, token in enumerate(tokens):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = token, start + j, 1
        batch.seq_id[j][0] = 0
        batch.logits[j] = j >= len(tokens) - rows
    started = time.perf_counter()
    status = lib.llama_decode(ctx, batch)
    seconds = time.perf_counter() - started
    lib.llama_batch_free(batch)
    if status != 0:
        raise SystemExit(f"llama_decode returned {status}")
    return seconds


def sequences(path: str, threads: int) -> None:
    """Candidate rows on a context of four sequences against whole rows, for every small length pattern."""
    import itertools

    from relaxtui.engine.api import RowSpec, SeqDecode
    from relaxtui.engine.llama import LlamaModel

    def run(model: LlamaModel, lengths: tuple[int, ...]) -> list:
        for seq in range(4):
            model.clear(seq)
        prompts = [model.tokenize(t) for t in ("The cat sat on", "Once upon a time", "def f(x):", "Hello there")]
        model.decode_many([SeqDecode(seq, prompt, []) for seq, prompt in enumerate(prompts)])
        return model.decode_many([SeqDecode(seq, list(range(100, 100 + n)), range(n))
                                  for seq, n in enumerate(lengths) if n])

    with LlamaModel(path, n_ctx=128, n_seq=4, n_threads=threads) as whole, \
            LlamaModel(path, n_ctx=128, n_seq=4, n_threads=threads) as top:
        for seq in range(4):
            top._candidates.set(seq, RowSpec(1))  # past the gate in set_candidates, on purpose
        wrong = 0
        for lengths in itertools.product(range(4), repeat=4):
            if not any(lengths):
                continue
            pairs = zip(run(whole, lengths), run(top, lengths), strict=True)
            bad = [(item, row) for item, (rows, found) in enumerate(pairs)
                   for row, (logits, candidates) in enumerate(zip(rows, found, strict=True))
                   if int(np.argmax(logits)) != int(candidates.ids[0])]
            if bad:
                wrong += 1
                print(f"tokens per sequence {lengths}: wrong rows (item, row) {bad}")
        print(f"{wrong} of {4 ** 4 - 1} patterns hand some row of the wrong token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--sequences", action="store_true", help="relaxtui's sampler on four sequences")
    parser.add_argument("--chain", choices=["topk", "topk-temp-topp", "greedy"], default="topk")
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.sequences:
        sequences(args.model, args.threads)
        return
    lib.llama_backend_init()
    params = lib.llama_model_default_params()
    params.n_gpu_layers = 0
    model = lib.llama_model_load_from_file(args.model.encode(), params)
    vocab = lib.llama_model_get_vocab(model)
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    text = b"def fibonacci(n):\n    "
    buffer = (lib.llama_token * 64)()
    tokens = list(buffer[: lib.llama_tokenize(vocab, text, len(text), buffer, 64, True, True)])
    plain, _ = context(model, None, args.rows, args.threads)
    sampled, keep = context(model, chain(args.chain, args.top_k), args.rows, args.threads)
    for ctx in (plain, sampled):
        decode(ctx, tokens, 0, args.rows)
    first = len(tokens) - args.rows
    for i in range(first, len(tokens)):
        whole = np.ctypeslib.as_array(lib.llama_get_logits_ith(plain, i), shape=(n_vocab,))
        count = lib.llama_get_sampled_candidates_count_ith(sampled, i)
        ids = np.ctypeslib.as_array(lib.llama_get_sampled_candidates_ith(sampled, i), shape=(count,)) if count else []
        n_logits = lib.llama_get_sampled_logits_count_ith(sampled, i)
        logits = np.ctypeslib.as_array(lib.llama_get_sampled_logits_ith(sampled, i), shape=(n_logits,))
        top = set(np.argsort(-whole)[: args.top_k].tolist())
        line = (f"row {i}: sampled token {lib.llama_get_sampled_token_ith(sampled, i)}, candidates {count}, "
                f"logits {n_logits}, probs {lib.llama_get_sampled_probs_count_ith(sampled, i)}")
        if count:
            line += (f"; candidates = whole row's top-{args.top_k}: {set(np.asarray(ids).tolist()) == top}; "
                     f"max |logit - whole row's| {np.max(np.abs(logits[:count] - whole[np.asarray(ids)])):.2e}")
        print(line)
    times = {"plain": [], "sampled": []}
    for _ in range(args.repeats):
        for name, ctx in (("plain", plain), ("sampled", sampled)):
            lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), 0, first, -1)
            times[name].append(decode(ctx, tokens[first:], first, args.rows))
    print(", ".join(f"{name} {1e3 * min(values):.2f} ms" for name, values in times.items()),
          f"(best of {args.repeats} decodes of {args.rows} rows, interleaved)")
    del keep


if __name__ == "__main__":
    main()
