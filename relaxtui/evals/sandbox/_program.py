"""What a sandboxed program is given: its interpreter, the only host paths it may see, and its environment.

Everything else is withheld on purpose: the caller's environment holds tokens (HF_TOKEN, AWS_*, API keys) and
its home and project tree hold more (~/.cache/huggingface, ~/.ssh, /etc/pip.conf, ...), any of which could end
up in a stored output. So the program's root is an allow-list — system directories, a few /etc files the
interpreter or the standard library reads, and the interpreter's own prefixes — and its environment is fixed.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import sysconfig

# The interpreter the program runs under, by its real path: a virtualenv's bin/python is a link that may live
# under /tmp (a clone in /tmp, CI), which the private /tmp hides, or in the project tree, which is hidden;
# programs need only the standard library, which lives under the base interpreter's prefix.
PROGRAM_PYTHON = os.path.realpath(sys.executable)

# Shared by every program on the system; no user data. Symlinks (/lib -> usr/lib) are recreated as links.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The /etc entries the dynamic loader, time zones, pwd/grp, mimetypes and platform read; not the rest of /etc,
# which holds secrets (shadow, ssh host keys, pip.conf/npmrc/gitconfig tokens).
ETC_PATHS = tuple(f"/etc/{name}" for name in (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group", "nsswitch.conf",
    "host.conf", "hosts", "protocols", "services", "mime.types", "os-release", "alternatives"))

# Run by the program's interpreter once: its prefixes and the shared libraries it and its common extension
# modules map, so that a Python whose libraries live outside /usr (conda, Nix, a custom build) still loads.
_PROBE = r'''
import json, sys
for name in ("ctypes", "decimal", "hashlib", "json", "sqlite3", "ssl", "zlib", "bz2", "lzma", "uuid"):
    try:
        __import__(name)
    except Exception:
        pass
maps = {line.split(None, 5)[5].strip() for line in open("/proc/self/maps") if len(line.split(None, 5)) == 6}
print(json.dumps({"prefixes": [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix],
                  "libraries": sorted(path for path in maps if path.startswith("/"))}))
'''


# The program's entry point: a socket guard for systems without a network namespace, then main.py as __main__,
# then the verdict: the run's nonce (from NONCE_FILE, removed before main.py starts) written on the verdict pipe
# (fd: the last argument) only when main.py ran to its end. An exit code is whatever the program chose
# (os._exit(0) before its tests); the nonce is in none of its files, its environment or any argv. Its limit: the
# program shares the guard's interpreter, so one that walks the call frames (sys._getframe) can find the nonce
# and forge the verdict; nothing inside one process can prevent that (the official HumanEval harness has the
# same limit). It stops every exit-code trick, which is what a wrong completion stumbles into.
NONCE_FILE = "_nonce"
GUARD = rf'''
import os, socket, sys, runpy
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
def _run(verdict_fd):
    with open({NONCE_FILE!r}, "rb") as handle:
        nonce = handle.read()
    os.unlink({NONCE_FILE!r})
    sys.argv = ["main.py"]
    runpy.run_path("main.py", run_name="__main__")
    os.write(verdict_fd, nonce)  # not reached after an exception, sys.exit or os._exit
_run(int(sys.argv[1]))
'''


def environment(workdir: str, marker: dict[str, str]) -> dict[str, str]:
    """The program's whole environment: fixed, none of the caller's variables (``marker`` is the run's own)."""
    return {"PATH": f"{os.path.dirname(PROGRAM_PYTHON)}:/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
            "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1", **marker}


@functools.cache
def visible_paths() -> tuple[str, ...]:
    """Host paths the program's root holds (read-only): the system directories, the /etc allow-list, and the
    interpreter's prefixes plus any directory outside them it loads a library from; nothing of a home or
    project tree the interpreter does not live in."""
    prefixes, libraries = [sys.base_prefix, sys.base_exec_prefix, os.path.dirname(PROGRAM_PYTHON)], []
    try:
        done = subprocess.run([PROGRAM_PYTHON, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, check=True)
        found = json.loads(done.stdout)
        prefixes += found["prefixes"]
        libraries = [os.path.dirname(path) for path in found["libraries"]]
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        pass  # the prefixes of this interpreter, which the program's is, still cover the standard library
    paths = [*SYSTEM_PATHS, *ETC_PATHS]
    covered = [os.path.realpath(path) for path in SYSTEM_PATHS if os.path.exists(path)]
    wanted = [part for path in [*prefixes, *libraries] if path for part in narrowed(os.path.realpath(path))]
    for path in wanted:
        if path != "/" and not any(_inside(path, root) for root in covered):
            paths.append(path)
            covered.append(path)
    return tuple(paths)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def narrowed(prefix: str, *, home: str | None = None, cwd: str | None = None) -> list[str]:
    """``prefix``, or, when it holds the caller's home or working folder (Python installed with
    ``--prefix=$HOME/.local`` or ``--prefix=$HOME``), only the interpreter's own folders inside it: binding the
    whole prefix would show the program every file of that home."""
    home = os.path.realpath(home if home is not None else os.path.expanduser("~"))
    cwd = os.path.realpath(cwd if cwd is not None else os.getcwd())
    if not (_inside(home, prefix) or _inside(cwd, prefix)):
        return [prefix]
    own = {os.path.realpath(path) for key, path in sysconfig.get_paths().items()
           if key in ("stdlib", "platstdlib", "purelib", "platlib")}
    own.add(os.path.dirname(os.path.realpath(PROGRAM_PYTHON)))
    return sorted(path for path in own if _inside(path, prefix) and not _inside(home, path)
                  and not _inside(cwd, path))
