"""What this system lets the sandbox do: the plan the probe settles on, and how to describe it."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
from dataclasses import dataclass

# Tried in order by the probe; the first that runs a program wins.
NAMESPACE_CHOICES: tuple[tuple[str, ...], ...] = (
    ("user_ns", "mount_ns", "pid_ns", "net_ns", "ipc_ns"),
    ("mount_ns", "pid_ns", "net_ns", "ipc_ns"),  # root where user namespaces are disabled
    ("user_ns", "net_ns", "ipc_ns"),
    ("net_ns", "ipc_ns"),
    (),
)

# Protections worth a word when missing, in the order the line lists them.
MISSING_TEXT = {
    "mount_ns_readonly_root": "no read-only filesystem (the program can write wherever its user can)",
    "hidden_user_files": "user files visible (no private root: home, project, /root readable)",
    "private_tmp": "no private /tmp",
    "pid_ns": "no PID namespace (descendants hunted by cgroup, marker and pipe scans only)",
    "private_proc": "other processes visible in /proc (a non-root caller's environment too)",
    "net_ns": "no network namespace (socket guard only)",
    "ipc_ns": "no IPC namespace (SysV shared memory and queues outlive the run)",
    "user_ns": "no user namespace",
    "no_nested_userns": "the program may make user namespaces (and mount cgroupfs in them to lift its limits)",
    "no_capabilities": "capabilities not dropped",
    "nproc_limit": "no hard process-count limit (watchdog only)",
    "resource_limits": "no memory/CPU/file-size/open-file limits",
}


@dataclass(frozen=True)
class Plan:
    """How every run is contained. ``steps`` are the launcher steps the probe saw succeed: each run requires
    them all, so a run never gets less than :func:`protections` reports."""

    namespaces: tuple[str, ...]
    cgroup_base: str | None = None
    nproc_rlimit: bool = False
    steps: frozenset[str] = frozenset()

    @property
    def nproc_mode(self) -> str:
        """``cgroup`` (pids.max), ``rlimit`` (RLIMIT_NPROC) or ``watchdog`` (count and kill)."""
        if self.cgroup_base:
            return "cgroup"
        return "rlimit" if self.nproc_rlimit else "watchdog"

    def without_namespaces(self) -> Plan:
        """The fallback when ``unshare`` is not allowed (tests force it)."""
        namespace_steps = {"namespaces", "mount_private", "hidden_user_files", "readonly_fs", "private_proc",
                           "private_tmp", "private_shm", "private_workdir", "no_nested_userns",
                           *NAMESPACE_CHOICES[0]}
        return dataclasses.replace(self, namespaces=(), nproc_rlimit=False, steps=self.steps - namespace_steps)

    def without_cgroup(self) -> Plan:
        return dataclasses.replace(self, cgroup_base=None, steps=self.steps - {"pids_cgroup"})


def candidate_plans(cgroup_base: str | None) -> list[Plan]:
    return [Plan(names, cgroup_base, nproc_rlimit_binds(names)) for names in NAMESPACE_CHOICES]


def nproc_rlimit_binds(namespaces: tuple[str, ...]) -> bool:
    """RLIMIT_NPROC caps just this run only inside its own user namespace (per-namespace counts, Linux ≥ 5.14)
    and never binds a process whose real uid is root on the host: there the cgroup or the watchdog does it."""
    match = re.match(r"(\d+)\.(\d+)", platform.release())
    recent = match is not None and (int(match.group(1)), int(match.group(2))) >= (5, 14)
    return "user_ns" in namespaces and os.geteuid() != 0 and recent


def protections_of(plan: Plan) -> dict[str, bool]:
    steps = plan.steps
    nproc_limit = "pids_cgroup" in steps or (plan.nproc_rlimit and "resource_limits" in steps)
    return {
        "user_ns": "user_ns" in steps,
        "mount_ns": "mount_ns" in steps,
        "mount_ns_readonly_root": "readonly_fs" in steps,
        "hidden_user_files": "hidden_user_files" in steps,
        "private_tmp": "private_tmp" in steps,
        "private_workdir": "private_workdir" in steps,
        "pid_ns": "pid_ns" in steps,
        "private_proc": "private_proc" in steps,
        "net_ns": "net_ns" in steps,
        "ipc_ns": "ipc_ns" in steps,
        "no_nested_userns": "no_nested_userns" in steps,
        "no_capabilities": "no_capabilities" in steps,
        "resource_limits": "resource_limits" in steps,
        "nofile_limit": "resource_limits" in steps,
        "nproc_limit": nproc_limit,
        "nproc_watchdog": not nproc_limit,
        "pids_cgroup": "pids_cgroup" in steps,
        "scrubbed_env": True,
        "socket_guard": True,
        "output_cap": True,
        "wall_clock_timeout": True,
    }


def missing_line_of(plan: Plan) -> str | None:
    active = protections_of(plan)
    missing = [text for name, text in MISSING_TEXT.items() if not active[name]]
    return "sandbox: " + "; ".join(missing) if missing else None
