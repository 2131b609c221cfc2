"""The draft chain in C (``draft_chain.c``): built once per source into the virtualenv, loaded by ctypes.

Why: a CPU-run drafter's weights stream through every cache at each decode, so each Python step between two draft
decodes runs on cold caches: about 0.15 ms a step against 0.01 ms for the bare decode call. The chain decodes a
draft's every step and picks its tokens in one foreign call, as llama.cpp's own drafting loop runs in C++; the Python
step stays the reference it is tested against, and the path wherever the chain is not built or does not apply.

    python -m relaxtui.engine.native      builds it (scripts/bootstrap.py runs this), says where, or why not

Built with the C compiler that built llama-cpp-python (``cc``, or ``$CC``) and ``-O2 -ffp-contract=off`` (no fused
multiply-adds: the float64 steps round as Python's do); named by the source and the flags, not the compiler. No
llama.cpp header or link: the functions it calls come as pointers. ``RELAXTUI_NATIVE=0`` turns it off (the Python
step everywhere: for a side-by-side timing).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from relaxtui import envvars

SOURCE = Path(__file__).with_name("draft_chain.c")
FLAGS = ("-O2", "-ffp-contract=off", "-fPIC", "-shared", "-std=c11")
MAX_CANDIDATES = 256  # the most candidates a row may hand the chain (its fixed buffers)


def _compiler() -> str:
    return os.environ.get("CC") or "cc"


def library_path(source: bytes | None = None) -> Path:
    """Where this source, built with these flags, lives: under the running virtualenv (its own build, beside the
    llama-cpp-python it calls into)."""
    data = SOURCE.read_bytes() if source is None else source
    key = hashlib.sha256(data + " ".join(FLAGS).encode()).hexdigest()[:16]  # (not the compiler: any C compiler's
    # build of this source keeps the C ABI, so a $CC that differs from set-up's still finds it)
    return Path(sys.prefix) / "lib" / "relaxtui" / f"draft_chain-{key}.so"


def build() -> Path:
    """Compile the chain where ``library_path`` says (idempotent; older builds removed). Raises OSError or
    CalledProcessError when the compiler is missing or fails."""
    target = library_path()
    if target.is_file():
        return target
    compiler = shutil.which(_compiler())
    if compiler is None:
        raise OSError(f"no C compiler ({_compiler()}) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run([compiler, *FLAGS, "-o", str(built), str(SOURCE), "-lm"], check=True, capture_output=True,
                       text=True)
        os.replace(built, target)  # (atomic: a process loading it never sees half a file)
    for old in target.parent.glob("draft_chain-*.so"):
        if old != target:
            old.unlink(missing_ok=True)
    return target


@cache
def library() -> ctypes.CDLL | None:
    """The built chain, typed; None where it is not built (or ``RELAXTUI_NATIVE=0``): the Python step then."""
    if not envvars.flag("RELAXTUI_NATIVE", True):
        return None
    path = library_path()
    if not path.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:  # (a virtualenv copied to another machine: the Python step, as without a build)
        return None
    i32, f64, ptr = ctypes.c_int32, ctypes.c_double, ctypes.c_void_p
    lib.relaxtui_batch_size.argtypes, lib.relaxtui_batch_size.restype = [], i32
    lib.relaxtui_kept_pick.argtypes = [ptr, ptr, i32, f64, i32, f64, f64, ptr, ptr, ptr]
    lib.relaxtui_kept_pick.restype = i32
    lib.relaxtui_draft_chain.argtypes = [ptr, i32, i32, i32, i32, i32, f64, i32, f64]
    lib.relaxtui_draft_chain.restype = i32
    return lib


def main() -> None:
    try:
        print(f"relaxtui: draft chain built: {build()}")
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        print(f"relaxtui: draft chain not built (the Python draft step runs instead): {detail.strip()}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
