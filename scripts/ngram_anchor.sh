#!/usr/bin/env bash
# llama.cpp's own n-gram speculation (llama-speculative-simple --spec-type ngram-*) side by side with relaxtui's
# same kind, on the edit workload (prompts whose answer repeats the input), greedy, the embedded verifier,
# interleaved: for each round and each prompt, both verifiers alone, then each kind and N on both sides.
# Prints per kind and N: tokens/s (decode only, prefill excluded, both sides), acceptance, and the ratio to that
# side's own verifier alone; then the best kind of each side. See docs/protocols.md, "Bench".
#
# Usage, from the project root after set-up and after ../shared/tools/llama-cpp-anchor 0 (the C++ build):
#   scripts/ngram_anchor.sh [ROUNDS] [N ...] [KIND ...]
#     ROUNDS  default 2; 0 only checks the binaries, the venv and the model, and lists both sides' kinds
#     N       draft lengths, default 8
#     KIND    relaxtui kinds (default: ngram-simple ngram-map ngram-map-k4v ngram-mod ngram-cache suffix), each run
#             against llama.cpp's same kind (ngram-map = llama.cpp's ngram-map-k; suffix and ngram are relaxtui
#             only); RT=CPP pairs any two ("ngram=ngram-cache"), RT=- runs relaxtui only
#   e.g. scripts/ngram_anchor.sh 3 4 8 16 ngram-simple ngram-mod suffix
# Environment: MAX_TOKENS (128), PROMPTS (3 rows, spread over the task file), ROWS (row ids instead: id,id,...),
#   THREADS (2), CTX (2048),
#   TASK (a task file; default evals/examples/edit_code.toml when it exists, else three prompts built in here),
#   KEY_N (the key n-gram of ngram-simple/map-k/map-k4v; default llama.cpp's 12), MOD_MATCH (ngram-mod's key,
#   default 24), MOD_MIN (ngram-mod's shortest draft, default min(48, N)), MIN_HITS (ngram-map-k4v, default 1),
#   RT_FLAGS (extra relaxtui generate flags, every kind run), OUT (a .jsonl file: one record per run),
#   REPLAY (a file OUT wrote: print its rounds and summary again, running nothing; give the same N and KINDs),
#   TIMEOUT (seconds per run, 1800), RELAXTUI_ANCHOR_CACHE (default ~/.cache/relaxtui-anchor).
# N on llama.cpp's side: -size-m N (simple, map-k, map-k4v), --spec-ngram-mod-n-max N; ngram-cache always drafts
# up to 8 (hard-coded there). --spec-draft-n-max does not bound these kinds in llama-speculative-simple.
# relaxtui gets --draft-max N, plus the same n-gram sizes where its generate has the flags for them.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${RELAXTUI_ANCHOR_CACHE:-$HOME/.cache/relaxtui-anchor}; BIN=$CACHE/build/bin
MODEL=${RELAXTUI_MODELS:-ggml_models}/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
[ -x .venv/bin/relaxtui ] && [ -x .venv/bin/python ] \
  || { echo "ngram_anchor: no .venv/bin/relaxtui: run the README set-up first (scripts/dev test)" >&2; exit 2; }
[ -x "$BIN/llama-speculative-simple" ] \
  || { echo "ngram_anchor: no $BIN/llama-speculative-simple: build it with ../shared/tools/llama-cpp-anchor 0" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "ngram_anchor: no verifier $MODEL: run .venv/bin/relaxtui models install-default" >&2; exit 2; }
exec .venv/bin/python - "$BIN" "$MODEL" "$@" <<'PY'
import json, math, os, re, shlex, subprocess, sys, time
from pathlib import Path

BIN, VERIFIER, ARGS = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
SPEC, RT = str(BIN / "llama-speculative-simple"), ".venv/bin/relaxtui"


def die(message):
    print(f"ngram_anchor: {message}", file=sys.stderr)
    sys.exit(2)


def env_int(name, default, low=1):
    raw = os.environ.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        die(f"{name} must be an integer (got {raw!r})")
    if value < low:
        die(f"{name} must be >= {low} (got {value})")
    return value


MAX_TOKENS, PROMPTS, THREADS = env_int("MAX_TOKENS", 128, 2), env_int("PROMPTS", 3), env_int("THREADS", 2)
CTX, TIMEOUT, MIN_HITS = env_int("CTX", 2048, 256), env_int("TIMEOUT", 1800), env_int("MIN_HITS", 1)
KEY_N = env_int("KEY_N", 12) if os.environ.get("KEY_N") else None
MOD_MATCH = env_int("MOD_MATCH", 24) if os.environ.get("MOD_MATCH") else None
MOD_MIN = env_int("MOD_MIN", 48, 0) if os.environ.get("MOD_MIN") else None
RT_FLAGS = shlex.split(os.environ.get("RT_FLAGS", ""))

# relaxtui kind -> llama.cpp --spec-type (None: relaxtui only)
CPP_OF = {"ngram-simple": "ngram-simple", "ngram-map": "ngram-map-k", "ngram-map-k4v": "ngram-map-k4v",
          "ngram-mod": "ngram-mod", "ngram-cache": "ngram-cache", "suffix": None, "ngram": None}
RT_OF = {cpp: rt for rt, cpp in CPP_OF.items() if cpp}
DEFAULT_KINDS = ["ngram-simple", "ngram-map", "ngram-map-k4v", "ngram-mod", "ngram-cache", "suffix"]

if ARGS and not re.fullmatch(r"\d+", ARGS[0]):
    die(f"the first argument is ROUNDS, a whole number (got {ARGS[0]!r})")
ROUNDS = int(ARGS[0]) if ARGS else 2
NS = [int(a) for a in ARGS[1:] if re.fullmatch(r"\d+", a)] or [8]
if min(NS) < 1:
    die("each N must be >= 1")
KIND_ARGS = [a for a in ARGS[1:] if not re.fullmatch(r"\d+", a)] or DEFAULT_KINDS


def run(cmd):
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {TIMEOUT} s"
    return done.returncode, done.stdout, done.stderr


def words(text):
    return " ".join(text.split())


# what each side offers
rc, out, err = run([SPEC, "--help"])
found = re.search(r"--spec-type\s+\[?([\w,|-]+)", out + err)  # "none,draft-simple,..." (or [a|b|...])
CPP_KINDS = re.split(r"[,|]", found.group(1)) if found else []
if not CPP_KINDS:
    die(f"{SPEC} --help names no --spec-type list: is it llama.cpp's llama-speculative-simple? ({words(err)[-200:]})")
rc, out, err = run([RT, "generate", "--help"])
help_text = words(out)
found = re.search(r"drafter kind: (.*?) \(default", help_text)
RT_KINDS = [k.split()[0] for k in found.group(1).split(",") if k.strip()] if found else ["ngram"]
RT_HAS = set(re.findall(r"--[a-z][a-z0-9-]+", help_text))

KINDS = []  # (label, relaxtui kind or None, llama.cpp kind or None, note)
for arg in KIND_ARGS:
    if "=" in arg:
        rt, cpp = arg.split("=", 1)
        cpp = None if cpp in ("", "-") else cpp
    elif arg in CPP_OF:
        rt, cpp = arg, CPP_OF[arg]
    elif arg in RT_OF:
        rt, cpp = RT_OF[arg], arg
    elif arg in RT_KINDS:
        rt, cpp = arg, None
    else:
        die(f"unknown kind {arg!r}: relaxtui has {', '.join(RT_KINDS)}; llama.cpp has {', '.join(CPP_KINDS)}")
    if cpp and cpp not in CPP_KINDS:
        die(f"llama.cpp's llama-speculative-simple has no --spec-type {cpp} ({', '.join(CPP_KINDS)})")
    note, rt_kind = "", rt
    if rt not in RT_KINDS:
        rt_kind, note = ("ngram", f"relaxtui has no {rt} yet: its ngram stands in") if "ngram" in RT_KINDS else \
            (None, f"relaxtui has no {rt}")
    KINDS.append((rt, rt_kind, cpp, note))

if ROUNDS == 0:
    print(f"llama.cpp binaries: {BIN}")
    print(f"llama.cpp --spec-type: {', '.join(CPP_KINDS)}")
    print(f"relaxtui --draft-kind: {', '.join(RT_KINDS)}")
    for rt, rt_kind, cpp, note in KINDS:
        print(f"  {rt:<14} relaxtui {rt_kind or '-':<14} llama.cpp {cpp or '-':<14} {note}")
    sys.exit(0)

# the edit workload
BUILT_IN = [
    ("rename_x", "Rename the variable `x` to `count` in this function. Return the whole function, in one ```python "
     "code block, with no explanation.", '''def summarize_scores(scores, threshold):
    """Summarise a list of scores, skipping missing ones."""
    x = 0
    total = 0.0
    best = None
    worst = None
    for score in scores:
        if score is None:
            continue
        total += score
        x += 1
        if best is None or score > best:
            best = score
        if worst is None or score < worst:
            worst = score
    if x == 0:
        return {"count": 0, "mean": None, "best": None, "worst": None, "passed": 0}
    passed = sum(1 for score in scores if score is not None and score >= threshold)
    mean = total / x
    return {"count": x, "mean": round(mean, 3), "best": best, "worst": worst,
            "passed": passed, "ratio": passed / x}'''),
    ("print_to_logger", "In this function, replace every `print(...)` call with `logger.info(...)` with the same "
     "arguments, and change nothing else. Return the whole function, in one ```python code block, with no "
     "explanation.", '''def sync_inventory(store, warehouse, dry_run=False):
    print("syncing inventory for", store.name)
    missing = []
    updated = 0
    for item in warehouse.items():
        local = store.find(item.sku)
        if local is None:
            print("missing item", item.sku)
            missing.append(item.sku)
            continue
        if local.quantity != item.quantity:
            print("quantity changed", item.sku, local.quantity, item.quantity)
            if not dry_run:
                local.quantity = item.quantity
                store.save(local)
            updated += 1
    if missing:
        print("items missing from the store:", len(missing))
    print("updated", updated, "items")
    if dry_run:
        print("dry run: nothing was saved")
    return updated, missing'''),
    ("fix_typo", "This function misspells `length` as `lenght` in several places. Fix every occurrence and change "
     "nothing else. Return the whole function, in one ```python code block, with no explanation.",
     '''def wrap_text(text, lenght=72, indent=""):
    """Wrap text into lines of at most lenght characters."""
    if lenght <= len(indent):
        raise ValueError("lenght must be longer than the indent")
    lines = []
    current = indent
    for word in text.split():
        if len(word) > lenght - len(indent):
            if current.strip():
                lines.append(current)
            lines.append(indent + word)
            current = indent
            continue
        if len(current) + len(word) + 1 > lenght:
            lines.append(current.rstrip())
            current = indent + word
        elif current.strip():
            current += " " + word
        else:
            current = indent + word
    if current.strip():
        lines.append(current.rstrip())
    return "\\n".join(lines)'''),
]


def task_prompts(path):
    import tomllib
    task = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    data = Path(path).parent / task["data"]["path"]
    template, system = task["prompt"]["template"], task["prompt"].get("system")
    id_field = task["data"].get("id", "id")
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    if os.environ.get("ROWS"):
        wanted = os.environ["ROWS"].split(",")
        picked = [row for name in wanted for row in rows if str(row.get(id_field)) == name]
        if len(picked) != len(wanted):
            lacking = sorted(set(wanted) - {str(row.get(id_field)) for row in rows})
            raise ValueError(f"ROWS names ids the file lacks: {lacking}")
    else:  # PROMPTS rows spread over the file (its code, JSON and YAML parts alike)
        picked = [rows[i * len(rows) // min(PROMPTS, len(rows))] for i in range(min(PROMPTS, len(rows)))]
    return [(str(row.get(id_field)), template.format_map(row), system) for row in picked]


TASK = os.environ.get("TASK")
source = "built in"
if TASK:
    if not Path(TASK).is_file():
        die(f"TASK={TASK} is not a file")
    try:
        PROMPT_LIST = task_prompts(TASK)
    except Exception as exc:  # noqa: BLE001 - one line for any malformed task file
        die(f"cannot render prompts from TASK={TASK}: {type(exc).__name__}: {exc}")
    source = TASK
else:
    PROMPT_LIST = None
    for candidate in ("evals/examples/edit_code.toml", "relaxtui/evals/examples/edit_code.toml"):
        if Path(candidate).is_file():
            try:
                PROMPT_LIST, source = task_prompts(candidate), candidate
            except Exception as exc:  # noqa: BLE001
                if os.environ.get("ROWS"):
                    die(f"cannot render prompts from {candidate}: {exc}")
                print(f"ngram_anchor: {candidate} did not render ({type(exc).__name__}: {exc}); using the built-in "
                      "prompts", file=sys.stderr)
            break
    if PROMPT_LIST is None:
        PROMPT_LIST = [(name, f"{ask}\n\n```python\n{code}\n```", None) for name, ask, code in BUILT_IN][:PROMPTS]
if not PROMPT_LIST:
    die(f"no prompts in {source}")

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def chat(user, system):  # the anchor's CP: Qwen2.5's chat template, its default system message
    return (f"<|im_start|>system\n{system or QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def cpp_kind_flags(cpp, n):
    if cpp in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        flags = [f"--spec-ngram-{cpp[6:]}-size-m", str(n)]
        if KEY_N is not None:
            flags += [f"--spec-ngram-{cpp[6:]}-size-n", str(KEY_N)]
        if cpp == "ngram-map-k4v":
            flags += ["--spec-ngram-map-k4v-min-hits", str(MIN_HITS)]
        return flags
    if cpp == "ngram-mod":
        n_min = min(48 if MOD_MIN is None else MOD_MIN, n)  # llama.cpp's 48, never above n_max
        flags = ["--spec-ngram-mod-n-max", str(n), "--spec-ngram-mod-n-min", str(n_min)]
        return flags + (["--spec-ngram-mod-n-match", str(MOD_MATCH)] if MOD_MATCH is not None else [])
    return []  # ngram-cache: n_draft = 8 in common/speculative.cpp, no flag


def rt_kind_flags(rt_kind, cpp, n):
    """The same n-gram sizes as llama.cpp's side, where relaxtui's generate has a flag for them."""
    flags = ["--draft-kind", rt_kind, "--draft-max", str(n)]
    want = []
    if cpp in ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"):
        want.append(("--ngram-size-m", n))
        key = MOD_MATCH if cpp == "ngram-mod" else KEY_N
        if key is not None:
            want.append(("--ngram-size-n", key))
    if cpp == "ngram-mod":
        want.append(("--ngram-mod-n-min", min(48 if MOD_MIN is None else MOD_MIN, n)))
    if cpp == "ngram-map-k4v" and MIN_HITS != 1:
        want.append(("--ngram-min-hits", MIN_HITS))
    for flag, value in want:
        if flag in RT_HAS:
            flags += [flag, str(value)]
    return flags


# llama.cpp's verifier alone, through the same binary, prompt and timer: an ngram-simple that can never draft
# (it copies at most m = 1 token and only when at least n = 1024 are there to copy)
CPP_AR = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024", "--spec-ngram-simple-size-m", "1"]


def run_cpp(prompt, system, extra):
    cmd = [SPEC, "-m", VERIFIER, "-p", chat(prompt, system), "-n", str(MAX_TOKENS - 1), "-t", str(THREADS),
           "-tb", str(THREADS), "--temp", "0", "--top-k", "1", "-c", str(CTX), "--seed", "1"] + extra
    rc, out, err = run(cmd)
    log = out + err
    dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    if rc != 0 or not dec:
        last = [line for line in err.splitlines() if line.strip()][-1:] or [f"exit {rc}"]
        return {"ok": False, "error": words(last[0])[:200]}

    def number(pattern):
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    # llama-speculative-simple counts the end-of-generation token it stops at (n_predict += ids.size() before its
    # is_eog check); relaxtui does not emit it. Both decoded it, so count the same text on both sides: a run that
    # stopped before its budget (-n MAX_TOKENS - 1 stops past MAX_TOKENS - 1) ended on that token. (Not caught: a
    # round that accepted drafts past that token counts them too, and a run whose last round both reached the budget
    # and ended on it; both need a draft past the end of the text, which the edit prompts' runs have not shown.)
    tokens = int(dec.group(1))
    tokens -= 1 if tokens < MAX_TOKENS else 0
    return {"ok": True, "tokens": tokens, "seconds": float(dec.group(2)),
            "drafted": number(r"n_drafted\s*=\s*(\d+)"), "accepted": number(r"n_accept\s*=\s*(\d+)"),
            "prompt_tokens": number(r"encoded\s+(\d+) tokens"), "text": out.rstrip()}


def run_rt(prompt, system, extra):
    cmd = [RT, "generate", prompt, "--verifier", VERIFIER, "--temperature", "0", "--threads", str(THREADS),
           "--seed", "1", "--max-tokens", str(MAX_TOKENS), "--ctx-size", str(CTX), "--json"]
    cmd += (["--system", system] if system else []) + extra
    rc, out, err = run(cmd)
    finished = None
    for line in out.splitlines():
        if line.startswith("{") and '"finished"' in line:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("type") == "finished":
                finished = event
    if rc != 0 or finished is None:
        last = [line for line in err.splitlines() if line.strip()][-1:] or [f"exit {rc}"]
        return {"ok": False, "error": words(last[0])[:200]}
    m = finished["metrics"]
    return {"ok": True, "tokens": m["output_tokens"], "seconds": m["decode_s"], "drafted": m.get("drafted", 0),
            "accepted": m.get("accepted", 0), "prompt_tokens": m.get("prompt_tokens", 0),
            "mean_len": m.get("mean_accepted_length"), "host_ms": m.get("host_ms_per_round"),
            "text": finished.get("text", "")}


# the grid, in the order each round runs it
CONFIGS = [("llama.cpp", "verifier alone", None), ("relaxtui", "verifier alone", None)]
for n in NS:
    for rt, rt_kind, cpp, note in KINDS:
        if cpp:
            CONFIGS.append(("llama.cpp", rt, n))
        if rt_kind:
            CONFIGS.append(("relaxtui", rt, n))
KIND = {rt: (rt_kind, cpp, note) for rt, rt_kind, cpp, note in KINDS}


def command_extra(side, label, n):
    if label == "verifier alone":
        return CPP_AR if side == "llama.cpp" else ["--no-spec"]
    rt_kind, cpp, _ = KIND[label]
    return ["--spec-type", cpp] + cpp_kind_flags(cpp, n) if side == "llama.cpp" else \
        rt_kind_flags(rt_kind, cpp, n) + RT_FLAGS


print(f"ngram anchor: {Path(VERIFIER).name}, greedy, {len(PROMPT_LIST)} edit prompts ({source}), "
      f"{MAX_TOKENS} tokens, {THREADS} threads, ctx {CTX}, rounds {ROUNDS}, N {' '.join(map(str, NS))}")
print("tok/s: decode only (prefill excluded), both sides; ×AR: over the same side's verifier alone")
for rt, rt_kind, cpp, note in KINDS:
    n = NS[0]
    cpp_part = f"llama.cpp --spec-type {cpp} {' '.join(cpp_kind_flags(cpp, n))}".rstrip() if cpp else "llama.cpp -"
    rt_part = f"relaxtui {' '.join(rt_kind_flags(rt_kind, cpp, n))}" if rt_kind else "relaxtui -"
    print(f"  {rt:<14} {cpp_part:<62} | {rt_part}" + (f"  ({note})" if note else ""))
    if cpp == "ngram-simple" and min(NS) < (KEY_N or 12):
        print(f"  {'':<14} note: llama.cpp's ngram-simple drafts nothing when size-m (N) < size-n ({KEY_N or 12})")
    if cpp == "ngram-cache" and any(n != 8 for n in NS):
        print(f"  {'':<14} note: llama.cpp's ngram-cache drafts up to 8 whatever N (hard-coded)")
print(flush=True)

records = []
REPLAY = os.environ.get("REPLAY")  # a file OUT wrote: print its rounds and summary again, running nothing
if REPLAY:
    try:
        records = [json.loads(line) for line in Path(REPLAY).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        die(f"REPLAY={REPLAY}: {exc}")
    ROUNDS = max((x["round"] for x in records), default=0)
    PROMPT_LIST = [(name, None, None) for name in dict.fromkeys(x["prompt"] for x in records)]
out_file = open(os.environ["OUT"], "a", encoding="utf-8") if os.environ.get("OUT") and not REPLAY else None
ar_text = {}  # (side, prompt) -> the verifier alone's text in round 1


def pool(rows):
    rows = [r for r in rows if r["ok"]]
    tokens, seconds = sum(r["tokens"] for r in rows), sum(r["seconds"] for r in rows)
    drafted, accepted = sum(r["drafted"] for r in rows), sum(r["accepted"] for r in rows)
    return (tokens / seconds if seconds > 0 else None), (accepted / drafted if drafted else None), len(rows)


def speed(rec):
    return rec["tokens"] / rec["seconds"] if rec["ok"] and rec["seconds"] > 0 else None


def paired(num, den):
    """The geometric mean, over the (round, prompt) pairs where both ran, of num's tok/s over den's: each pair ran
    back to back on one prompt, so a machine whose speed drifts between prompts or rounds cancels out."""
    reference = {(x["round"], x["prompt"]): speed(x) for x in den}
    logs = []
    for x in num:
        here, there = speed(x), reference.get((x["round"], x["prompt"]))
        if here and there:
            logs.append(math.log(here / there))
    return math.exp(sum(logs) / len(logs)) if logs else None


def fmt(value, spec, width):
    return f"{value:{width}{spec}}" if value is not None else f"{'n/a':>{width}}"


for r in range(1, ROUNDS + 1):
    for p, (name, prompt, system) in enumerate([] if REPLAY else PROMPT_LIST, 1):
        for side, label, n in CONFIGS:
            started = time.monotonic()
            extra = command_extra(side, label, n)
            rec = (run_cpp if side == "llama.cpp" else run_rt)(prompt, system, extra)
            rec.update(round=r, prompt=name, side=side, kind=label, n=n, wall_s=round(time.monotonic() - started, 1))
            if rec["ok"]:
                key = (side, name)
                if label == "verifier alone":
                    ar_text.setdefault(key, rec["text"])
                ref = ar_text.get(key)  # llama.cpp's last draft may overrun the budget: compare the common length
                rec["same_text"] = ref is not None and (ref.startswith(rec["text"]) or rec["text"].startswith(ref))
            what = f"{label}" + (f" N={n}" if n else "")
            if rec["ok"]:
                acc = rec["accepted"] / rec["drafted"] if rec["drafted"] else None
                print(f"  [r{r} {name}] {side:<9} {what:<22} {rec['tokens'] / rec['seconds']:7.2f} tok/s  acceptance "
                      f"{fmt(acc, '.3f', 5)}  ({rec['wall_s']:.0f} s)" + ("" if rec["same_text"] else "  text≠AR"),
                      file=sys.stderr, flush=True)
            else:
                print(f"  [r{r} {name}] {side:<9} {what:<22} FAILED: {rec['error']}", file=sys.stderr, flush=True)
            records.append(rec)
            if out_file:
                out_file.write(json.dumps({k: v for k, v in rec.items() if k != "text"}) + "\n")
                out_file.flush()
        pt = {side: next((x["prompt_tokens"] for x in records if x["round"] == r and x["prompt"] == name
                          and x["side"] == side and x["ok"]), None) for side in ("llama.cpp", "relaxtui")}
        if r == 1 and None not in pt.values() and pt["llama.cpp"] != pt["relaxtui"]:
            print(f"  warning: prompt {name}: llama.cpp encodes {pt['llama.cpp']} tokens, relaxtui {pt['relaxtui']}: "
                  "the chat templates differ", flush=True)
    print(f"round {r}")
    for side, label, n in CONFIGS:
        rows = [x for x in records if x["round"] == r and x["side"] == side and x["kind"] == label and x["n"] == n]
        tps, acc, ok = pool(rows)
        ratio = paired(rows, [x for x in records
                              if x["round"] == r and x["side"] == side and x["kind"] == "verifier alone"])
        what = label + (f" N={n}" if n else "")
        print(f"  {side:<9} {what:<22} {fmt(tps, '.2f', 7)} tok/s  acceptance {fmt(acc, '.3f', 5)}  "
              f"{fmt(ratio, '.2f', 5)}x" + ("" if ok == len(rows) else f"  ({len(rows) - ok} failed)"), flush=True)

print(f"\nsummary over {ROUNDS} round(s) x {len(PROMPT_LIST)} prompt(s): tok/s and acceptance pooled; ×AR = tok/s over "
      "the same side's verifier alone and rt/cpp = relaxtui's tok/s over llama.cpp's (same kind and N), each the "
      "geometric mean over the runs' (round, prompt) pairs")
print(f"  {'kind':<16}{'N':>3} | {'llama.cpp tok/s':>15} {'accept':>7} {'×AR':>6} | {'relaxtui tok/s':>14} "
      f"{'accept':>7} {'×AR':>6} {'mean len':>8} | {'rt/cpp':>6}  text≠AR")
alone = {side: [x for x in records if x["side"] == side and x["kind"] == "verifier alone"]
         for side in ("llama.cpp", "relaxtui")}
best = {}
rows_out = [("verifier alone", None)] + [(rt, n) for n in NS for rt, _, _, _ in KINDS]
for label, n in rows_out:
    cells, rows_of, differs = [], {}, 0
    for side in ("llama.cpp", "relaxtui"):
        rows = [x for x in records if x["side"] == side and x["kind"] == label and x["n"] == n]
        tps, acc, ok = pool(rows)
        differs += sum(1 for x in rows if x["ok"] and not x["same_text"])
        ratio = paired(rows, alone[side])
        rows_of[side] = rows
        if n and ratio is not None and (side not in best or ratio > best[side][0]):
            best[side] = (ratio, label, n, tps, rows)
        cell = f"{fmt(tps, '.2f', 15 if side == 'llama.cpp' else 14)} {fmt(acc, '.3f', 7)} {fmt(ratio, '.2f', 6)}"
        if side == "relaxtui":
            lens = [x["mean_len"] for x in rows if x["ok"] and x.get("mean_len") is not None]
            cell += f" {fmt(sum(lens) / len(lens) if lens and n else None, '.2f', 8)}"
        cells.append(cell if rows or label == "verifier alone" else
                     f"{'-':>15} {'-':>7} {'-':>6}" + (" " * 9 if side == "relaxtui" else ""))
    rt_cpp = paired(rows_of["relaxtui"], rows_of["llama.cpp"])
    print(f"  {label:<16}{n or '-':>3} | {cells[0]} | {cells[1]} | {fmt(rt_cpp, '.2f', 6)}  {differs or ''}")
for side in ("llama.cpp", "relaxtui"):
    if side in best:
        ratio, label, n, tps, _ = best[side]
        print(f"best {side:<9}: {label} N={n}  {tps:.2f} tok/s  {ratio:.2f}x its verifier alone")
if "llama.cpp" in best and "relaxtui" in best:
    over = paired(best["relaxtui"][4], best["llama.cpp"][4])
    print(f"relaxtui's best over llama.cpp's best, tok/s: {fmt(over, '.2f', 0)}x "
          "(issue 33 target: >= 1.0, and relaxtui's best >= 1.5x its verifier alone)")
failed = [x for x in records if not x["ok"]]
if failed:
    print(f"{len(failed)} run(s) failed, e.g. {failed[0]['side']} {failed[0]['kind']}: {failed[0]['error']}")
    sys.exit(1)
PY
