"""Loading gated or large benchmarks from the Hugging Face hub, or from a local file with the same columns.

The hub path is what users run: ``datasets.load_dataset`` for a data-file repo (GPQA), cached by ``datasets``
for offline reuse; for a repo driven by a loading script (LiveCodeBench), which ``datasets`` >= 4 no longer
runs, the files the script would read are fetched with ``huggingface_hub`` (cached in its hub cache, reused
offline) and parsed here. ``--data FILE`` (JSON lines, JSON or CSV with the hub's column names) is how tests
and air-gapped machines supply the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.tasks.base import Located, numbered, read_rows
from relaxtui.models.hub import hub_endpoint, hub_errors, unreachable
from relaxtui.models.hub import hub_token as hub_token
from relaxtui.models.hub_reach import offline_unless_reachable

OFFLINE_HINT = "{repo} is not in the local cache: pass --data FILE with the rows instead (see evals/DATA_CARD.md)"


def _livecodebench_releases() -> dict[str, tuple[str, ...]]:
    """LiveCodeBench's ``version_tag`` -> its files, as its ``code_generation_lite.py`` lists them:
    ``release_vN`` is cumulative (test.jsonl .. testN.jsonl), ``vN`` one release, ``vA_vB`` a range."""
    files = ["test.jsonl"] + [f"test{n}.jsonl" for n in range(2, 7)]
    releases = {f"release_v{n}": tuple(files[:n]) for n in range(1, 7)}
    releases["release_latest"] = tuple(files)
    releases.update({f"v{n}": (files[n - 1],) for n in range(1, 7)})
    releases.update({f"v{a}_v{b}": tuple(files[a - 1:b]) for a in range(1, 7) for b in range(a + 1, 7)})
    return releases


# Hub datasets driven by a loading script: the keyword that picks a configuration, and its data files.
SCRIPT_DATASETS: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "livecodebench/code_generation_lite": ("version_tag", _livecodebench_releases()),
}


def _script_dataset_files(repo: str, config: str | None, kwargs: dict[str, Any]) -> tuple[str, ...]:
    keyword, choices = SCRIPT_DATASETS[repo]
    tag = kwargs.pop(keyword, None) or config or next(iter(choices))
    if kwargs:
        raise UserError(f"{repo}: unsupported options {', '.join(sorted(kwargs))}")
    try:
        return choices[tag]
    except KeyError:
        raise UserError(f"{repo} has no {keyword} {tag!r}; known: {', '.join(choices)}") from None


def load_hub_rows(repo: str, *, config: str | None = None, split: str = "train", gated: bool = False,
                  how_to_get_access: str = "", revision: str | None = None, **kwargs: Any) -> list[Located]:
    """The rows of a hub dataset, each located (its cached file and line, or ``repo row N``) for error messages;
    they go through the same checks as a local ``--data`` file's rows."""
    token = hub_token()
    access = f"{repo} is gated on the Hugging Face hub and no token was found: {how_to_get_access}"
    if gated and not token:
        raise UserError(access)
    kwargs.pop("trust_remote_code", None)  # datasets >= 4 runs no loading scripts; see SCRIPT_DATASETS
    endpoint = hub_endpoint()
    guard = hub_errors(repo, token=token, repo_type="dataset", revision=revision,
                       offline_hint=OFFLINE_HINT.format(repo=repo), access_hint=access if how_to_get_access else "")
    if repo in SCRIPT_DATASETS:
        from huggingface_hub import hf_hub_download

        files = _script_dataset_files(repo, config, kwargs)
        with offline_unless_reachable(endpoint), guard:
            paths = [Path(hf_hub_download(repo, name, repo_type="dataset", revision=revision, token=token,
                                          endpoint=endpoint)) for name in files]
        return [row for path in paths for row in read_rows(path)]
    import datasets  # type: ignore[import-untyped]  # datasets ships no type information

    with offline_unless_reachable(endpoint) as offline:
        try:
            with guard:
                dataset = datasets.load_dataset(repo, config, split=split, token=token, revision=revision, **kwargs)
        except UserError as exc:
            if offline:
                raise UserError(unreachable(OFFLINE_HINT.format(repo=repo))) from None
            if gated and "gated" in str(exc) and how_to_get_access:
                raise UserError(f"no access to gated dataset {repo}: {how_to_get_access}") from None
            raise
        except Exception as exc:  # datasets raises many types; the message is what helps
            if offline:  # in offline mode, whatever it raises means "not cached"
                raise UserError(unreachable(OFFLINE_HINT.format(repo=repo))) from None
            text = str(exc)
            raise UserError(f"could not load {repo} from the hub: {text.splitlines()[0] if text else exc!r}") from None
    return numbered((dict(row) for row in dataset), repo)
