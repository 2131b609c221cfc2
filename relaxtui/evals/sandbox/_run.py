"""One sandboxed run, supervised from outside: stdin fed, output drained under a cap, deadline and limits
enforced, every process of the run killed at the end. Also the one-time probe that picks the :class:`Plan`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from relaxtui.evals.sandbox import _procs
from relaxtui.evals.sandbox._plan import Plan, candidate_plans, missing_line_of, protections_of
from relaxtui.evals.sandbox._program import GUARD, NONCE_FILE, PROGRAM_PYTHON, environment, visible_paths

DEFAULT_TIMEOUT_S = 6.0
DEFAULT_MEMORY_MB = 1024
DEFAULT_MAX_PROCESSES = 64  # tasks at once, the program included (threads count on Linux)
MAX_OUTPUT_BYTES = 1 << 20  # kept per stream; the rest is read and counted, never stored
OUTPUT_KILL_BYTES = 32 << 20  # a program that writes more than this in all is killed ("output limit")
FILE_SIZE_BYTES = 16 << 20
OPEN_FILES = 256  # RLIMIT_NOFILE: descriptors at once, stdio included
TMPFS_SIZE, WORKDIR_SIZE = "32m", "64m"  # private /tmp and /dev/shm; the work dir
LAUNCHER_TASKS = 2  # the launcher and the namespace's init share the task budget (the launcher alone without one)
DRAIN_S = 1.0  # after the launcher is gone (and the run swept), how long output may still arrive
KILL_WAIT_S = 1.0  # after a kill, how long the launcher may take to die before we stop waiting
WATCHDOG_PERIOD_S = 0.1
POLL_S = 0.02  # exit polling where pidfds are missing
PROBE_TIMEOUT_S = 30.0
LAUNCHER = str(Path(__file__).with_name("_launcher.py"))

class SandboxError(RuntimeError):
    """The sandbox could not give a run the protections the probe found, so nothing was judged."""


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # negative: killed by that signal; None when we killed it
    stdout: str  # at most MAX_OUTPUT_BYTES of it
    stderr: str
    timed_out: bool
    killed_for: str | None = None  # "timeout", "output limit" or "process limit"
    stdout_bytes: int = 0  # all the program wrote, kept or not
    stderr_bytes: int = 0
    wall_s: float = 0.0
    leftover_processes: int = 0  # processes of the run still alive after cleanup: 0 unless something escaped
    run_id: str = ""  # every process of the run starts with RELAXTUI_SANDBOX_RUN=<run_id> in its environment
    # The program ran to its last line: no exception, no sys.exit or os._exit before it (in an atexit hook or a
    # thread too), as its guard told us with the run's nonce. A judge that appends tests to the program needs
    # this: ``ok`` only trusts the exit code, which ``os._exit(0)`` ahead of the tests sets to 0.
    finished: bool = False

    @property
    def ok(self) -> bool:
        """Exit code 0 and not killed: enough when the output is judged (stdin tests), not for appended tests."""
        return self.returncode == 0 and self.killed_for is None

    @property
    def truncated(self) -> bool:
        return max(self.stdout_bytes, self.stderr_bytes) > MAX_OUTPUT_BYTES


@dataclass
class _Capture:
    """The first ``keep`` bytes of a stream and the count of all of it."""

    keep: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class _Status:
    """What the launcher reported: steps set up, steps failed, an abort, the program's exit code."""

    ok: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    aborted: str | None = None
    exit_code: int | None = None
    pending: bytes = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            kind, _, rest = line.decode("utf-8", "replace").partition(" ")
            name, _, why = rest.partition(" ")
            if kind == "ok":
                self.ok.add(name)
            elif kind == "fail":
                self.failed[name] = why
            elif kind == "abort":
                self.aborted = rest
            elif kind == "exit":
                self.exit_code = int(rest)


class _Supervisor:
    """Drives one launched run to its end; never waits on the program's pipes past the deadline."""

    def __init__(self, process: subprocess.Popen[bytes], status_fd: int, stdin: bytes, *, token: str,
                 plan: Plan, cgroup: _procs.PidsCgroup | None, timeout_s: float, max_tasks: int) -> None:
        self.process, self.token, self.plan, self.cgroup = process, token, plan, cgroup
        self.timeout_s, self.max_tasks = timeout_s, max_tasks
        self.status, self.status_fd = _Status(), status_fd
        self.stdin, self.stdin_sent = stdin, 0
        self.stdin_fd: int | None = process.stdin.fileno() if process.stdin else None
        self.killed_for: str | None = None
        self.killed_at: float | None = None
        self.exited_at: float | None = None
        self.leftovers = 0
        self.selector = selectors.DefaultSelector()
        assert process.stdin and process.stdout and process.stderr
        self.captures = {process.stdout.fileno(): _Capture(MAX_OUTPUT_BYTES),
                         process.stderr.fileno(): _Capture(MAX_OUTPUT_BYTES)}
        self.program_ends = {os.fstat(process.stdin.fileno()).st_ino: os.O_RDONLY,
                             os.fstat(process.stdout.fileno()).st_ino: os.O_WRONLY,
                             os.fstat(process.stderr.fileno()).st_ino: os.O_WRONLY}
        for fd in (*self.captures, status_fd):
            self.selector.register(fd, selectors.EVENT_READ)
        if stdin and self.stdin_fd is not None:
            os.set_blocking(self.stdin_fd, False)
            self.selector.register(self.stdin_fd, selectors.EVENT_WRITE)
        else:
            self._close_stdin()
        self.pidfd = self._open_pidfd()

    # ---- the loop ----

    def run(self) -> None:
        started = time.monotonic()
        deadline, next_watch = started + self.timeout_s, started + WATCHDOG_PERIOD_S
        while True:
            now = time.monotonic()
            if self.exited_at is None and self._launcher_exited():
                self.exited_at = now
                self.sweep()  # with a PID namespace already empty; without, this ends what the program left
            if self.exited_at is not None:
                if not self._readers() or now >= self.exited_at + DRAIN_S:
                    break
            elif self.killed_at is not None:
                if now >= self.killed_at + KILL_WAIT_S:
                    break  # the launcher will not die (uninterruptible): stop waiting for it
            elif now >= deadline:
                self.kill("timeout")
            elif self.plan.nproc_mode == "watchdog" and now >= next_watch:
                next_watch = now + WATCHDOG_PERIOD_S
                if len(_procs.marked_pids(self.token)) > self.max_tasks:
                    self.kill("process limit")
            self._pump(self._wait_s(time.monotonic(), deadline, next_watch))
        self.leftovers = self.sweep()
        self._close()

    def _wait_s(self, now: float, deadline: float, next_watch: float) -> float:
        if self.exited_at is not None:
            limit = self.exited_at + DRAIN_S
        elif self.killed_at is not None:
            limit = self.killed_at + KILL_WAIT_S
        else:
            limit = deadline
            if self.plan.nproc_mode == "watchdog":
                limit = min(limit, next_watch)
        wait = limit - now
        if self.exited_at is None and self.pidfd is None:
            wait = min(wait, POLL_S)
        return max(0.0, wait)

    def _pump(self, wait_s: float) -> None:
        for key, _ in self.selector.select(wait_s):
            if key.fd == self.pidfd:
                self.selector.unregister(key.fd)  # stays readable once the launcher exited
            elif key.fd == self.stdin_fd:
                self._feed_stdin()
            else:
                self._read(key.fd)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self.selector.unregister(fd)
            if fd == self.status_fd:
                os.close(fd)
            return
        if fd == self.status_fd:
            self.status.feed(chunk)
            return
        self.captures[fd].feed(chunk)
        if self.killed_for is None and sum(capture.total for capture in self.captures.values()) > OUTPUT_KILL_BYTES:
            self.kill("output limit")

    def _feed_stdin(self) -> None:
        assert self.stdin_fd is not None
        try:
            self.stdin_sent += os.write(self.stdin_fd, self.stdin[self.stdin_sent:self.stdin_sent + (1 << 16)])
        except BlockingIOError:
            return
        except OSError:  # the program closed its stdin: the rest is not wanted
            self.stdin_sent = len(self.stdin)
        if self.stdin_sent >= len(self.stdin):
            self.selector.unregister(self.stdin_fd)
            self._close_stdin()

    def _readers(self) -> bool:
        return any(fd in self.captures or fd == self.status_fd for fd in self.selector.get_map())

    # ---- the launcher and its processes ----

    def _open_pidfd(self) -> int | None:
        try:
            pidfd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):
            return None
        self.selector.register(pidfd, selectors.EVENT_READ)
        return pidfd

    def _launcher_exited(self) -> bool:
        """Exited, but not reaped: until we reap it, its pid and process group id cannot be reused."""
        if self.process.returncode is not None or not hasattr(os, "waitid"):  # no waitid: reap (not Linux)
            return self.process.poll() is not None
        try:
            return os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def kill(self, reason: str) -> None:
        """Kill the whole run once, for ``reason``; what it already wrote is kept."""
        if self.killed_for is None:
            self.killed_for, self.killed_at = reason, time.monotonic()
            self.sweep()

    def sweep(self) -> int:
        """SIGKILL every process of the run we can find; how many are still alive after a short patience."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # launcher and namespace init (the program setsid'd)
        left = self.cgroup.kill_all() if self.cgroup else 0
        return max(left, _procs.kill_until_gone(self._stragglers))

    def _stragglers(self) -> list[int]:
        """Processes of the run by marker; without a PID namespace also whoever holds the run's pipes."""
        found = set(_procs.marked_pids(self.token))
        if "pid_ns" not in self.plan.steps:
            found.update(_procs.pipe_holders(self.program_ends))
        return sorted(found)

    def _close_stdin(self) -> None:
        self.stdin_fd = None
        if self.process.stdin:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def _close(self) -> None:
        for fd in list(self.selector.get_map()):
            self.selector.unregister(fd)
            if fd == self.status_fd:
                os.close(fd)
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        assert self.process.stdout and self.process.stderr
        self.process.stdout.close()
        self.process.stderr.close()
        self._close_stdin()
        if self._launcher_exited():
            self.process.wait()

    def result(self, started: float, told_nonce: bool) -> RunResult:
        stdout, stderr = self.captures.values()
        returncode = self.status.exit_code if self.status.exit_code is not None else self.process.returncode
        returncode = None if self.killed_for else returncode
        return RunResult(returncode, stdout.text(), stderr.text(), self.killed_for == "timeout", self.killed_for,
                         stdout.total, stderr.total, time.monotonic() - started, self.leftovers, self.token,
                         finished=told_nonce and returncode == 0)


# ---- running a program ------------------------------------------------------------------------------------

def execute(code: str, *, plan: Plan, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
            memory_mb: int = DEFAULT_MEMORY_MB, max_processes: int = DEFAULT_MAX_PROCESSES,
            ) -> tuple[RunResult, _Status]:
    """Run ``code`` under ``plan``; the result and what the launcher reported."""
    started, token, nonce = time.monotonic(), secrets.token_hex(8), secrets.token_hex(16).encode()
    max_tasks = max_processes + (LAUNCHER_TASKS if "pid_ns" in plan.namespaces else LAUNCHER_TASKS - 1)
    with tempfile.TemporaryDirectory(prefix="relaxtui-sandbox-", ignore_cleanup_errors=True) as workdir:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        Path(workdir, "_guard.py").write_text(GUARD, encoding="utf-8")
        Path(workdir, NONCE_FILE).write_bytes(nonce)  # the guard reads and removes it before main.py runs
        cgroup = _make_cgroup(plan, token, max_tasks)
        try:
            config = _config(plan, workdir, cgroup, timeout_s, memory_mb, max_tasks)
            process, status_fd, verdict_fd = _launch(config, workdir, token)
            try:
                supervisor = _Supervisor(process, status_fd, stdin.encode(), token=token, plan=plan,
                                         cgroup=cgroup, timeout_s=timeout_s, max_tasks=max_tasks)
                supervisor.run()
            finally:
                told = _read_verdict(verdict_fd)
        finally:
            if cgroup:
                cgroup.remove()
    if supervisor.status.aborted:
        raise SandboxError(f"sandbox set-up failed: {supervisor.status.aborted}")
    return supervisor.result(started, told_nonce=told == nonce), supervisor.status


def _read_verdict(fd: int) -> bytes:
    """What the verdict pipe holds once the run is over (never waits): the nonce alone when main.py finished."""
    try:
        os.set_blocking(fd, False)
        return os.read(fd, 4096)
    except OSError:  # nothing written (BlockingIOError)
        return b""
    finally:
        os.close(fd)


def _make_cgroup(plan: Plan, token: str, max_tasks: int) -> _procs.PidsCgroup | None:
    if not plan.cgroup_base:
        return None
    try:
        return _procs.PidsCgroup.create(Path(plan.cgroup_base), token, max_tasks)
    except OSError as error:
        if "pids_cgroup" in plan.steps:
            raise SandboxError(f"cannot create the run's pids cgroup: {error}") from error
        return None


def _config(plan: Plan, workdir: str, cgroup: _procs.PidsCgroup | None, timeout_s: float, memory_mb: int,
            max_tasks: int) -> dict:
    memory = memory_mb * 1024 * 1024
    limits = {"RLIMIT_AS": memory, "RLIMIT_CPU": int(timeout_s) + 1, "RLIMIT_FSIZE": FILE_SIZE_BYTES,
              "RLIMIT_CORE": 0, "RLIMIT_NOFILE": OPEN_FILES}
    if plan.nproc_rlimit:
        limits["RLIMIT_NPROC"] = max_tasks
    return {"workdir": workdir, "argv": [PROGRAM_PYTHON, "-I", "_guard.py"], "namespaces": list(plan.namespaces),
            "require": sorted(plan.steps), "cgroup": str(cgroup.path) if cgroup else None, "limits": limits,
            "tmpfs_size": TMPFS_SIZE, "workdir_size": WORKDIR_SIZE, "visible": list(visible_paths())}


def _launch(config: dict, workdir: str, token: str) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start the launcher in a new session; the status pipe's write end goes only to it, the verdict pipe's on
    to the program's guard (its number the guard's argument). Returns the process and both read ends."""
    env = environment(workdir, {_procs.MARKER_VAR: token})  # the launcher's and the program's: no caller's
    status_read, status_write = os.pipe()
    verdict_read, verdict_write = os.pipe()
    config = {**config, "status_fd": status_write, "env": env, "argv": [*config["argv"], str(verdict_write)]}
    try:
        process = subprocess.Popen([sys.executable, "-I", "-S", LAUNCHER, json.dumps(config)], cwd=workdir,
                                   env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   pass_fds=(status_write, verdict_write), start_new_session=True)
    except BaseException:
        os.close(status_read)
        os.close(verdict_read)
        raise
    finally:
        os.close(status_write)
        os.close(verdict_write)
    return process, status_read, verdict_read


# ---- the plan -------------------------------------------------------------------------------------------

@functools.cache
def current_plan() -> Plan:
    """Probe once per process: the strongest containment under which a trivial program runs."""
    linux = sys.platform.startswith("linux")
    base = _procs.find_pids_cgroup_base() if linux else None
    for candidate in candidate_plans(str(base) if base else None):
        if candidate.namespaces and not linux:
            continue
        try:
            result, status = execute("pass", plan=candidate, timeout_s=PROBE_TIMEOUT_S)
        except (OSError, SandboxError):
            continue
        if result.ok:
            plan = dataclasses.replace(candidate, steps=frozenset(status.ok))
            return plan if "pids_cgroup" in plan.steps else plan.without_cgroup()
    return Plan(())


def protections() -> dict[str, bool]:
    """Which protections every run gets on this system (probed once): for the run manifest."""
    return protections_of(current_plan())


def missing_protections_line() -> str | None:
    """One line naming what this system does not allow, or None when every protection is active."""
    return missing_line_of(current_plan())


def run_python(code: str, *, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_mb: int = DEFAULT_MEMORY_MB, max_processes: int = DEFAULT_MAX_PROCESSES) -> RunResult:
    """Run ``code`` as a script in a fresh isolated interpreter, contained as :func:`protections` says."""
    return execute(code, plan=current_plan(), stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb,
                   max_processes=max_processes)[0]
