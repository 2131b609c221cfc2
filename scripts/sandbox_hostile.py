#!/usr/bin/env python3
"""Run every hostile program against the code sandbox; print one line per case.

    .venv/bin/python scripts/sandbox_hostile.py [--plan full|no-namespaces|no-namespaces-no-cgroup]

A case is contained when the call returned within its timeout + 2 s, no process of it is left (found by a
marker in the command line or the run's marker environment variable), nothing it wrote is visible outside
its work dir, and its own check holds (output capped, spawning capped, network refused, the caller's home,
project and secret environment variables out of sight, ...). With a forced fallback plan the write case really
writes outside and the home case sees the planted file; the files are counted and removed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from relaxtui.evals import sandbox
from relaxtui.evals.sandbox import _procs, _run

REPOSITORY = Path(__file__).resolve().parents[1]
SLACK_S = 2.0
SECRET = f"relaxtui-hostile-secret-{uuid.uuid4().hex}"  # set in this process's environment as tokens are
SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY")


@dataclass(frozen=True)
class Case:
    name: str
    code: str  # formatted with marker=..., targets=..., port=..., home=..., repository=..., secret=...
    timeout_s: float
    check: Callable[[sandbox.RunResult], bool]
    max_processes: int = sandbox.DEFAULT_MAX_PROCESSES
    plant: bool = False  # put "<marker>-planted" (content SECRET) into the caller's home for the run


def outside_paths(marker: str) -> list[Path]:
    return [Path(tempfile.gettempdir(), marker), Path("/var/tmp", marker), Path("/dev/shm", marker),
            Path.home() / marker, REPOSITORY / marker, Path("/etc", marker)]


GRANDCHILD = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        env = {{}} if {scrub} else dict(os.environ)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}], env)
    os._exit(0)
os.wait()
print("main done", flush=True)
"""

CASES = [
    Case("write-outside-workdir", """
import json, os
paths = json.loads({targets!r}) + [os.path.join(os.path.dirname(os.getcwd()), {marker!r})]
for path in paths:
    try:
        open(path, "w").write("escaped")
    except OSError:
        pass
open("inside.txt", "w").write("fine")
print(open("inside.txt").read())
""", 10, lambda result: result.ok and result.stdout == "fine\n"),
    Case("setsid-grandchild-holds-stdout", GRANDCHILD.replace("{scrub}", "False"), 5,
         lambda result: result.ok and result.stdout == "main done\n"),
    Case("daemon-with-scrubbed-env", GRANDCHILD.replace("{scrub}", "True"), 5,
         lambda result: result.ok and result.stdout == "main done\n"),
    Case("stdout-flood", "import sys\nwhile True:\n    sys.stdout.write('z' * 65536)", 10,
         lambda result: len(result.stdout) <= sandbox.MAX_OUTPUT_BYTES and not result.ok),
    Case("spawn-300-sleeps", """
import shutil, subprocess
started = []
for _ in range(300):
    try:
        started.append(subprocess.Popen([{marker!r}, "30"], executable=shutil.which("sleep")))
    except OSError:
        break
print(len(started))
""", 10, lambda result: result.killed_for == "process limit" or (result.ok and int(result.stdout) < 300),
         max_processes=32),
    Case("network-connect", """
import socket
s = socket.socket()
s.settimeout(2)
s.connect(("127.0.0.1", {port}))
print("connected")
""", 5, lambda result: not result.ok and "connected" not in result.stdout),
    Case("closes-stdout-keeps-running", "import os, time\nos.close(1)\nos.close(2)\nwhile True:\n    time.sleep(0.1)",
         3, lambda result: result.timed_out),
    Case("ignores-sigterm", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass", 3,
         lambda result: result.timed_out),
    Case("infinite-loop-with-child", "import subprocess, sys\n"
         "subprocess.Popen([sys.executable, '-c', 'while True: pass', {marker!r}])\nwhile True:\n    pass", 3,
         lambda result: result.timed_out),
    Case("memory-bomb", "blocks = []\nwhile True:\n    blocks.append(bytearray(50_000_000))", 10,
         lambda result: "MemoryError" in result.stderr and not result.ok),
    Case("lists-and-reads-callers-home", """
import os
home, planted = {home!r}, {marker!r} + "-planted"
seen = []
for folder in (home, os.path.dirname(home), {repository!r}):
    try:
        seen += os.listdir(folder)
    except OSError:
        pass
for path in (os.path.join(home, planted), os.path.join({repository!r}, "pyproject.toml"), "/etc/shadow"):
    try:
        seen.append(open(path).read())
    except OSError:
        pass
leaked = [item for item in seen if planted in item or {secret!r} in item or item == "pyproject.toml"
          or "[project]" in item or item.startswith("root:")]
print("hidden" if not leaked else "visible " + repr(leaked)[:200])
""", 5, lambda result: result.ok and result.stdout == "hidden\n", plant=True),
    Case("reads-callers-secret-env", """
import os
found = [name for name, value in os.environ.items() if {secret!r} in value]
if {secret!r}.encode() in open("/proc/self/environ", "rb").read():
    found.append("/proc/self/environ")
print("clean" if not found else "leaked " + repr(found))
""", 5, lambda result: result.ok and result.stdout == "clean\n"),
    Case("opens-files-until-refused", """
import errno, os
handles = []
try:
    while True:
        handles.append(open(os.devnull))
except OSError as error:
    print(errno.errorcode[error.errno], len(handles) < 4096)
""", 5, lambda result: result.ok and result.stdout == "EMFILE True\n"),
    Case("reads-etc-passwd (allowed)", "print('root:' in open('/etc/passwd').read())", 5,
         lambda result: result.ok and result.stdout == "True\n"),
]


def leftovers(marker: str, run_id: str, grace_s: float = 3.0) -> list[int]:
    """Processes of the case still alive, after a grace period for ones already dying."""
    entry = _procs.marker_entry(run_id)
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
                environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in cmdline or entry in environ:
                found.append(int(name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def listening_socket() -> tuple[socket.socket, list[object]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass
    threading.Thread(target=accept, daemon=True).start()
    return server, accepted


def run_case(case: Case) -> str:
    marker = f"relaxtui-hostile-{uuid.uuid4().hex}"
    targets = outside_paths(marker)
    planted = Path.home() / f"{marker}-planted"
    server, accepted = listening_socket()
    code = case.code.format(marker=marker, port=server.getsockname()[1], home=str(Path.home()),
                            repository=str(REPOSITORY), secret=SECRET,
                            targets=json.dumps([str(path) for path in targets]))
    try:
        if case.plant:
            planted.write_text(SECRET)
        result = sandbox.run_python(code, timeout_s=case.timeout_s, max_processes=case.max_processes)
    finally:
        server.close()
        planted.unlink(missing_ok=True)
    left = leftovers(marker, result.run_id)
    _procs.kill_pids(left)
    written = [path for path in [*targets, Path(tempfile.gettempdir()).parent / marker] if path.exists()]
    for path in written:
        path.unlink()
    contained = (result.wall_s < case.timeout_s + SLACK_S and not left and not written and not accepted
                 and case.check(result))
    how = result.killed_for or f"exit {result.returncode}"
    return (f"{case.name:<32} contained={'yes' if contained else 'NO ':<3}  wall {result.wall_s:5.2f} s / timeout "
            f"{case.timeout_s:4.1f} s  leftover processes {len(left)}  files written outside {len(written)}  "
            f"({how}; stdout {result.stdout_bytes} B, kept {len(result.stdout.encode())} B)")


def force_plan(kind: str) -> None:
    plan = _run.current_plan()
    if kind != "full":
        plan = plan.without_namespaces()
    if kind == "no-namespaces-no-cgroup":
        plan = dataclasses.replace(plan.without_cgroup(), nproc_rlimit=False)
    _run.current_plan = lambda: plan  # run_python looks it up at call time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=["full", "no-namespaces", "no-namespaces-no-cgroup"], default="full")
    args = parser.parse_args()
    force_plan(args.plan)
    os.environ.update(dict.fromkeys(SECRET_VARIABLES, SECRET))  # as a caller with tokens set would have
    active = sandbox.protections()
    print(f"plan: {args.plan}; active: {', '.join(name for name, on in active.items() if on)}")
    print(f"missing: {sandbox.missing_protections_line() or 'nothing'}")
    for case in CASES:
        print(run_case(case), flush=True)


if __name__ == "__main__":
    main()
