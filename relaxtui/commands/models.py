"""`relaxtui models install-default|list|quantize`."""

from __future__ import annotations

import argparse

from relaxtui.models.store import install, list_models, model_set


def run(args: argparse.Namespace) -> int:
    if args.models_command == "install-default":
        for report in install(model_set(args.set), progress=lambda line: print(f"  {line}", flush=True)):
            print(f"{report.action:>9}  {report.path}")
        return 0
    if args.models_command == "quantize":
        from relaxtui.models.quantize import quantize

        target = quantize(args.source, args.target, args.type, threads=args.threads)
        print(f"wrote {target} ({target.stat().st_size / 2**20:.0f} MiB, {args.type.upper()})")
        return 0
    infos = list_models()
    if not infos:
        print("no GGUF files in ggml_models/; run `relaxtui models install-default`")
        return 0
    print(f"{'file':44} {'size':>9} {'arch':10} {'vocab':>7} {'quant':7}")
    for info in infos:
        vocab = str(info.vocab_size) if info.vocab_size is not None else "?"
        print(f"{info.path.name:44} {info.size / 2**20:7.0f} M {info.architecture:10} {vocab:>7} {info.quantisation:7}")
    return 0
