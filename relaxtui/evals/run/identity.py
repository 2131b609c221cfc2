"""A run's identity: every setting that shapes its outputs or speed, and the model files by content.

Why one object: the manifest, the config ids and the refusal to resume another run must agree. Built here
once from the plan and the model options, a new plan field is recorded, hashed and compared by construction.
Models are named *and* fingerprinted (size plus a digest of the header and of sampled tensor bytes), so a
different file under the same name is refused instead of resuming and mixing its results with the old ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaxtui.decoding.drafters import drafter_kind
from relaxtui.errors import UserError
from relaxtui.session import drafter_options

if TYPE_CHECKING:
    from relaxtui.evals.run.plan import EvalPlan
    from relaxtui.evals.run.results import GridPoint
    from relaxtui.evals.tasks.base import Task
    from relaxtui.session import ModelOptions

MODELS = "models"  # manifest key: model file name -> content fingerprint (compared, never hashed into config ids)
ENVIRONMENT = "environment"  # manifest key: facts about the machine (recorded, never compared)


@dataclass(frozen=True)
class RunIdentity:
    """``settings`` go into every config id and must match on resume; ``models`` must match for every file
    both runs know (a driver that never sees a file, as on Ray, records what it has)."""

    settings: Mapping[str, Any]
    models: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, task: Task, options: ModelOptions, plan: EvalPlan, *, thinking: str | None, data: Path | None,
           models: Mapping[str, str] | None = None) -> RunIdentity:
        model_drafter = options.drafter_file  # a model file (a drafter LM, an MTP-only GGUF), else the kind
        kind = drafter_kind(options.draft_kind)
        drafting = drafter_options(options)
        own = {name: getattr(drafting, name) for name in kind.reads if name not in ("ngram_min", "ngram_max")}
        params = plan.sampling
        # K sequences share every batch, so tokens/s is another regime: part of the identity (named only when
        # K > 1, so one-at-a-time folders from before keep resuming)
        batched = {"parallel": options.parallel} if options.parallel > 1 else {}
        # priced drafting (docs/method.md#priced-drafts) verifies other drafts: named only where the pair's drafter is
        # cut by price (its traits will say so: DrafterTraits.cut), so folders of model drafters from before keep
        # resuming (prices are this machine's, as its timings are)
        cut = {"draft_cut": "priced"} if kind.cuts(options.draft_cut) else {}
        # relaxation scoped to thinking (docs/method.md#relaxation-scoped-to-thinking) judges other rounds strictly:
        # named only where it is not "all", so folders from before keep resuming
        scoped = {"relax_scope": plan.relax_scope} if plan.relax_scope != "all" else {}
        settings = {
            **batched, **cut, **scoped, "task": task.name, "task_version": task.version,
            "verifier": Path(options.verifier).name,
            "drafter": Path(model_drafter).name if model_drafter else options.draft_kind,
            "draft_kind": options.draft_kind,
            # the n-gram sizes where the kind is built from them (its traits say so: prompt lookup)
            "ngram": [options.ngram_min, options.ngram_max] if {"ngram_min", "ngram_max"} <= set(kind.reads) else None,
            # every other setting the kind is built from (llama.cpp's n-gram kinds, suffix): named only for them
            **({"drafter_settings": own} if own else {}),
            "draft_min": plan.draft_min, "draft_p_min": options.draft_p_min, "draft_adapt": plan.adaptive,
            "bonus": plan.bonus, "temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
            "max_tokens": plan.max_tokens, "thinking": thinking, "system": None, "ctx_size": options.ctx_size,
            "threads": options.threads, "gpu_layers": options.gpu_layers, "data": str(data) if data else None,
        }
        return cls(settings, dict(models or {}))

    def config_id(self, point: GridPoint) -> str:
        payload = json.dumps({"run": dict(self.settings), "point": asdict(point)}, sort_keys=True)
        return hashlib.sha1(payload.encode()).hexdigest()[:12]

    def manifest(self, environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
        content: dict[str, Any] = {**self.settings, MODELS: dict(self.models)}
        if environment is not None:
            content[ENVIRONMENT] = dict(environment)
        return content

    def resumed_from(self, manifest: Mapping[str, Any], where: Path) -> RunIdentity:
        """This identity, checked against a folder's manifest: the settings must be equal and every model both
        know must be the same file. Returns the identity to record (with the folder's fingerprints of models
        this machine does not have). A manifest from before fingerprints is taken as it is."""
        existing = {k: v for k, v in manifest.items() if k not in (MODELS, ENVIRONMENT)}
        if existing != dict(self.settings):
            diff = sorted(k for k in set(existing) | set(self.settings) if existing.get(k) != self.settings.get(k))
            shown = ", ".join(f"{k} (was {existing.get(k)!r}, now {self.settings.get(k)!r})" for k in diff)
            raise UserError(f"{where} holds results of another run (differs in {shown}); "
                            "use another --out or the same settings")
        recorded = manifest.get(MODELS) or {}
        if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
            raise UserError(f"{where / 'manifest.json'}: field {MODELS!r} must map file names to fingerprints")
        for name, fingerprint in self.models.items():
            if name in recorded and not same_file(recorded[name], fingerprint):
                raise UserError(f"{where} was run with another file named {name} (fingerprint {recorded[name]}, "
                                f"this one {fingerprint}): its results are not this model's; use another --out")
        return RunIdentity(self.settings, {**recorded, **self.models})


def same_file(recorded: str, current: str) -> bool:
    """Whether a recorded fingerprint names the current file. A fingerprint is "SIZE:SAMPLED sha256:FULL"; a
    folder from before the full hash recorded "SIZE:SAMPLED" alone, and is held to what it recorded."""
    return recorded == current or (" " not in recorded and recorded == current.split(" ", 1)[0])


def full_fingerprint(path: Path) -> str:
    """The header-and-samples fingerprint and the whole file's sha256 (remembered per file version)."""
    from relaxtui.engine.gguf import model_fingerprint
    from relaxtui.evals.run.contenthash import content_sha256

    return f"{model_fingerprint(path)} sha256:{content_sha256(path)}"


def fingerprints(paths: Mapping[str, Path | None], *,
                 fingerprint: Callable[[Path], str] | None = None) -> dict[str, str]:
    """File name -> content fingerprint for the models that exist on this machine (others are skipped)."""
    fingerprint = fingerprint or full_fingerprint
    return {Path(name).name: fingerprint(path) for name, path in paths.items() if path is not None}


def model_paths(options: ModelOptions, *, pull: bool = True) -> dict[str, Path | None]:
    """The model files of this run as this machine has them (name -> path), for their fingerprints.
    ``pull=False`` (a Ray driver, which needs no model): what is not here is left out, never fetched."""
    from relaxtui.models.store import resolve_model

    names = [options.verifier] + ([options.drafter_file] if options.drafter_file else [])
    paths: dict[str, Path | None] = {}
    for name in names:
        if pull:
            paths[name] = resolve_model(name)
            continue
        try:
            paths[name] = None if str(name).startswith("hf:") else resolve_model(name)
        except UserError:
            paths[name] = None
    return paths


def run_environment(task: Task) -> dict[str, object] | None:
    """Facts recorded with a run but not part of its identity: which sandbox protections were active."""
    from relaxtui.evals.tasks.code import CodeTask

    if not isinstance(task, CodeTask) and not getattr(task, "runs_code", False):  # a task file's `code` kind too
        return None
    from relaxtui.evals import sandbox

    return {"sandbox": sandbox.protections(), "sandbox_missing": sandbox.missing_protections_line()}
