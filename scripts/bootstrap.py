#!/usr/bin/env python3
"""Idempotent set-up for relaxtui: virtualenv, a safe llama-cpp-python build, the package, the models.

Runs with the system Python (stdlib only) because it is what creates the environment.

Why the wheel cache: llama-cpp-python ships only an sdist, so pip compiles llama.cpp (~5 min on 2 cores),
and pip's own cache ignores CMAKE_ARGS. We build the wheel once per set of build flags and keep it under
``$RELAXTUI_CACHE/wheels/<key>/``. Why the flags: the stock native build segfaults in ``llama_decode`` on
VMs that advertise AMX (docs/architecture.md#llamacpp-pitfalls), so we never build with ``GGML_NATIVE=ON``; we name the
CPU features this machine has and turn AMX off. ``RELAXTUI_BACKEND=cpu|cuda|metal`` picks the accelerator (default:
metal on Apple silicon, cuda when ``nvcc`` is on PATH and ``nvidia-smi`` sees a GPU, else cpu).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("RELAXTUI_VENV", ROOT / ".venv"))
CACHE = Path(os.environ.get("RELAXTUI_CACHE", Path.home() / ".cache" / "relaxtui"))


def log(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def gpu_present() -> bool:
    """A CUDA toolkit without a GPU (common on CI images) must not pick the CUDA build."""
    if not shutil.which("nvidia-smi"):
        return False
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return result.returncode == 0 and "GPU" in result.stdout


def choose_backend() -> str:
    backend = os.environ.get("RELAXTUI_BACKEND", "auto").lower()
    if backend not in {"auto", "cpu", "cuda", "metal"}:
        sys.exit(f"RELAXTUI_BACKEND must be one of auto, cpu, cuda, metal (got {backend!r})")
    if backend != "auto":
        return backend
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return "metal"
    if shutil.which("nvcc") and gpu_present():
        return "cuda"
    return "cpu"


def cmake_args(backend: str) -> list[str]:
    """Build flags that never produce the AMX segfault: no native build, explicit features, AMX off."""
    args = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    flags = cpu_flags()
    if platform.machine() in {"x86_64", "AMD64"}:
        wanted = {
            "GGML_AVX": "avx",
            "GGML_AVX2": "avx2",
            "GGML_FMA": "fma",
            "GGML_F16C": "f16c",
            "GGML_BMI2": "bmi2",
            "GGML_AVX512": "avx512f",
            "GGML_AVX512_VBMI": "avx512vbmi",
            "GGML_AVX512_VNNI": "avx512_vnni",
        }
        for option, flag in wanted.items():
            args.append(f"-D{option}={'ON' if flag in flags else 'OFF'}")
    if backend == "cuda":
        args.append("-DGGML_CUDA=ON")
    elif backend == "metal":
        args.append("-DGGML_METAL=ON")
    elif platform.system() == "Darwin":
        args.append("-DGGML_METAL=OFF")
    extra = os.environ.get("RELAXTUI_CMAKE_ARGS", "").split()
    return args + extra


def run(cmd: list[str], **kwargs) -> None:
    subprocess.run(cmd, check=True, **kwargs)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv() -> None:
    if not venv_python().exists():
        log(f"creating virtualenv {VENV}")
        run([sys.executable, "-m", "venv", str(VENV)])
        pip_quietly(["install", "-q", "--upgrade", "pip"])


def installed_version(package: str) -> str | None:
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    result = subprocess.run([str(venv_python()), "-c", probe], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def ensure_llama_cpp() -> None:
    backend = choose_backend()
    args = cmake_args(backend)
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    key_source = "\n".join([LLAMA_CPP_PYTHON, platform.machine(), python_version, *args])
    key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
    wheel_dir = CACHE / "wheels" / key
    stamp = VENV / f".llama-build-{key}"
    if stamp.exists() and installed_version("llama_cpp_python"):
        return
    wheels = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))
    if not wheels:
        log(f"building {LLAMA_CPP_PYTHON} for {backend} (once, ~5 min on 2 cores): {' '.join(args)}")
        env = dict(os.environ, CMAKE_ARGS=" ".join(args), FORCE_CMAKE="1")
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        with tempfile.TemporaryDirectory() as tmp:
            run(
                [str(venv_python()), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", tmp,
                 LLAMA_CPP_PYTHON],
                env=env,
            )
            wheel_dir.mkdir(parents=True, exist_ok=True)
            for built in Path(tmp).glob("*.whl"):
                shutil.move(str(built), wheel_dir / built.name)
            (wheel_dir / "BUILD_FLAGS.txt").write_text(key_source + "\n")
        wheels = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))
    log(f"installing cached wheel {wheels[-1].name} ({key})")
    pip_quietly(["install", "-q", "--force-reinstall", "--no-deps", str(wheels[-1])])
    # llama-cpp-python's own runtime dependencies (the wheel was installed without them).
    pip_quietly(["install", "-q", "numpy", "typing-extensions", "diskcache", "jinja2"])
    for old in VENV.glob(".llama-build-*"):
        old.unlink()
    stamp.touch()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def installed_extras(pyproject: bytes, requested: str) -> set[str] | None:
    """The extras the editable install has for this pyproject.toml (None: not installed for it). The stamp
    ``.relaxtui-<digest of pyproject.toml>`` lists them, so `scripts/dev demo` (no extras) after `scripts/dev
    test` (test,cluster) finds everything there instead of reinstalling; an older stamp named by the digest of
    pyproject.toml and one extras string (empty, read as no extras) counts for that string."""
    stamp = VENV / f".relaxtui-{_digest(pyproject)}"
    if stamp.exists():
        return {name for name in stamp.read_text().split(",") if name}
    if (VENV / f".relaxtui-{_digest(pyproject + requested.encode())}").exists():
        return {name for name in requested.split(",") if name}
    return None


def pip_quietly(args: list[str]) -> None:
    """pip, its output shown only when it fails: setuptools prints deprecation boxes on every editable build."""
    result = subprocess.run([str(venv_python()), "-m", "pip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        sys.exit(f"[setup] pip {' '.join(args)} failed (exit {result.returncode})")


def ensure_package(extras: str) -> None:
    """Install relaxtui editable with ``extras`` unless this pyproject.toml is installed with them already (the
    cached path: no pip at all)."""
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    wanted = {name.strip() for name in extras.split(",") if name.strip()}
    have = installed_extras(pyproject, extras)
    if have is not None and wanted <= have:
        stamp = VENV / f".relaxtui-{_digest(pyproject)}"
        if not stamp.exists():  # an older stamp: write the current one, nothing to install
            stamp.write_text(",".join(sorted(have)))
        return
    # what an earlier pyproject.toml was installed with stays: one reinstall serves demo and test alike
    earlier = {name for old in VENV.glob(".relaxtui-*") for name in old.read_text().split(",") if name}
    wanted |= (have or set()) | earlier
    names = ",".join(sorted(wanted))
    log(f"installing relaxtui[{names}] (editable; about a minute into a new virtualenv)")
    pip_quietly(["install", "-q", "-e", f"{ROOT}[{names}]" if names else str(ROOT)])
    for old in VENV.glob(".relaxtui-*"):
        old.unlink()
    (VENV / f".relaxtui-{_digest(pyproject)}").write_text(names)


def main() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - runs under whatever python3 the user has
        sys.exit(f"relaxtui needs Python >= 3.10 (this is {sys.version.split()[0]}); set PYTHON=python3.11")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="", help="package extras to install, e.g. 'test'")
    parser.add_argument("--models", default="default", help="model set for `relaxtui models install-default`")
    parser.add_argument("--llama-only", action="store_true", help="only build/install llama-cpp-python")
    opts = parser.parse_args()
    ensure_venv()
    ensure_llama_cpp()
    if opts.llama_only:
        return
    ensure_package(opts.extras)
    # the draft chain (relaxtui/engine/draft_chain.c): a model drafter's draft in one call; optional, says why not
    run([str(venv_python()), "-m", "relaxtui.engine.native"])
    if opts.models != "none":
        run([str(VENV / "bin" / "relaxtui"), "models", "install-default", "--set", opts.models])


if __name__ == "__main__":
    main()
