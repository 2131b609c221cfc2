"""Finding and killing a run's processes from outside the sandbox.

Trackers that do not depend on the process tree, which a program can leave with ``setsid`` and a double
fork: a per-run environment variable that every descendant inherits unless it scrubs its environment, the
run's own pipes, which a descendant holds unless it closes or redirects its stdio (both ``/proc`` scans), and,
where this system lets us create one, a per-run pids cgroup, which no descendant can leave without write
access to cgroupfs (read-only inside the mount namespace) and which also caps how many tasks the run may have.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MARKER_VAR = "RELAXTUI_SANDBOX_RUN"
KILL_PATIENCE_S = 1.0  # how long a sweep keeps re-killing before it reports what is left


def marker_entry(token: str) -> bytes:
    return f"{MARKER_VAR}={token}".encode()


def marked_pids(token: str) -> list[int]:
    """Live processes whose initial environment carries this run's marker (zombies have none)."""
    entry, found, me = marker_entry(token), [], os.getpid()
    for name in _proc_pids():
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if name != me and entry in environ.split(b"\0"):
            found.append(name)
    return found


def pipe_holders(ends: dict[int, int]) -> list[int]:
    """Live processes holding the program's end of a run's pipe (``ends``: pipe inode -> O_RDONLY/O_WRONLY).

    A descendant that scrubbed its environment but kept the program's stdout is still found, and it is the
    one that would delay EOF. The access mode tells the program's end from ours, which a fork of this
    process (another thread starting a subprocess) holds for an instant."""
    links = {f"pipe:[{inode}]": mode for inode, mode in ends.items()}
    found, me = [], os.getpid()
    for pid in _proc_pids():
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        if any(_holds(pid, fd, links) for fd in fds):
            found.append(pid)
    return found


def _holds(pid: int, fd: str, links: dict[str, int]) -> bool:
    try:
        mode = links.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
        if mode is None:
            return False
        flags = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split("flags:", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return int(flags, 8) & os.O_ACCMODE == mode


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc (not Linux): nothing to scan
        return []


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_until_gone(find: Callable[[], list[int]], patience_s: float = KILL_PATIENCE_S) -> int:
    """SIGKILL whatever ``find()`` lists until it lists nothing (new forks included); how many are left."""
    deadline = time.monotonic() + patience_s
    while True:
        pids = find()
        if not pids or time.monotonic() >= deadline:
            return len(pids)
        kill_pids(pids)
        time.sleep(0.005)


# ---- pids cgroup ------------------------------------------------------------------------------------------

def find_pids_cgroup_base() -> Path | None:
    """A cgroup directory under which we may create children that get their own ``pids.max``, or None."""
    for base in _candidate_bases():
        probe = base / f"relaxtui-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            (probe / "pids.max").write_text("8")
            return base
        except OSError:
            continue
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
    return None


def _candidate_bases() -> list[Path]:
    """Our own cgroup in the v1 pids hierarchy, and in the v2 one if it hands the pids controller down."""
    try:
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    mounts = [_parse_cgroup_mount(line) for line in mountinfo]
    bases = []
    for membership in memberships:
        _, controllers, path = membership.split(":", 2)
        for fstype, root, point, options in filter(None, mounts):
            v1 = fstype == "cgroup" and "pids" in controllers.split(",") and "pids" in options
            v2 = fstype == "cgroup2" and controllers == ""
            if (v1 or v2) and (path + "/").startswith(root.rstrip("/") + "/"):
                base = Path(point, path[len(root.rstrip("/")):].lstrip("/"))
                if v1 or "pids" in _read(base / "cgroup.subtree_control").split():
                    bases.append(base)
    return bases


def _parse_cgroup_mount(line: str) -> tuple[str, str, str, list[str]] | None:
    fields = line.split()
    if "-" not in fields:
        return None
    dash = fields.index("-")
    fstype = fields[dash + 1]
    if fstype not in ("cgroup", "cgroup2"):
        return None
    return fstype, fields[3], fields[4], fields[dash + 3].split(",")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass(frozen=True)
class PidsCgroup:
    """One run's cgroup: caps the number of tasks, lists them all, and is removed after the run."""

    path: Path

    @classmethod
    def create(cls, base: Path, token: str, max_tasks: int) -> PidsCgroup:
        path = base / f"relaxtui-sandbox-{token}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(max_tasks))
        except OSError:
            path.rmdir()
            raise
        return cls(path)

    def pids(self) -> list[int]:
        return [int(line) for line in _read(self.path / "cgroup.procs").split()]

    def events(self) -> int:
        """How many forks ``pids.max`` refused so far."""
        for line in _read(self.path / "pids.events").splitlines():
            name, _, value = line.partition(" ")
            if name == "max":
                return int(value)
        return 0

    def kill_all(self) -> int:
        """Kill every task in the cgroup (atomically with cgroup.kill where the kernel has it)."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        return kill_until_gone(self.pids)

    def remove(self) -> None:
        deadline = time.monotonic() + KILL_PATIENCE_S
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # still busy: an empty directory left behind, harmless
                self.kill_all()
                time.sleep(0.01)
