"""Running untrusted generated code: a subprocess with time, memory and file-size limits, no network, its
own temporary directory, and its whole process group killed on timeout.

Network isolation has two layers: an empty network namespace (``unshare --net``) where the system allows
one, and inside the child a guard that makes every non-Unix socket refuse to connect. Neither is a security
boundary against a determined attacker; together they stop generated code from reaching the network by
accident, and the limits stop loops and memory bombs from taking the machine down.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 6.0
DEFAULT_MEMORY_MB = 1024
MAX_OUTPUT_BYTES = 1 << 20

GUARD = r'''
import socket, sys, runpy
_real_socket = socket.socket
class _NoNetworkSocket(_real_socket):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(101, "network is disabled in the relaxtui sandbox")
        return super().connect(address)
    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            return 101
        return super().connect_ex(address)
socket.socket = _NoNetworkSocket
def _refuse(*args, **kwargs):
    raise OSError(101, "network is disabled in the relaxtui sandbox")
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
sys.argv = ["main.py"]
runpy.run_path("main.py", run_name="__main__")
'''


@dataclass(frozen=True)
class RunResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@functools.cache
def _unshare_prefix() -> tuple[str, ...]:
    """``unshare`` arguments for an empty network namespace, if this system lets us make one."""
    unshare = shutil.which("unshare")
    if not unshare or not sys.platform.startswith("linux"):
        return ()
    for prefix in ((unshare, "--net"), (unshare, "--map-root-user", "--net")):
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


def _limits(timeout_s: float, memory_mb: int) -> None:  # runs in the child before exec
    import resource

    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_python(code: str, *, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_mb: int = DEFAULT_MEMORY_MB) -> RunResult:
    """Run ``code`` as a script in a fresh interpreter (isolated mode) inside its own temporary directory."""
    with tempfile.TemporaryDirectory(prefix="relaxtui-sandbox-") as workdir:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        Path(workdir, "_guard.py").write_text(GUARD, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "TMPDIR": workdir,
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        command = [*_unshare_prefix(), sys.executable, "-I", "_guard.py"]
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=functools.partial(_limits, timeout_s, memory_mb),
        )
        try:
            stdout, stderr = process.communicate(stdin.encode(), timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            timed_out = True
        finally:
            _kill_group(process)  # anything the program forked into its group goes too
        return RunResult(None if timed_out else process.returncode,
                         stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"),
                         stderr[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), timed_out)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
