"""Hostile programs against the code sandbox: each test asserts containment, never how fast the machine is.

Survivors are found from outside by a marker in their command line or the run's marker environment variable,
with a grace period for processes that are already dying; time bounds are timeout + a generous margin.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from relaxtui.evals import sandbox
from relaxtui.evals.sandbox import _plan as sandbox_plan
from relaxtui.evals.sandbox import _procs as sandbox_procs
from relaxtui.evals.sandbox import _run as sandbox_run
from relaxtui.evals.sandbox import run_python

MARGIN_S = 10.0
REPOSITORY = Path(__file__).resolve().parents[2]


def new_marker() -> str:
    return f"relaxtui-hostile-{uuid.uuid4().hex}"


def survivors(*, cmdline: str | None = None, run_id: str | None = None, grace_s: float = 5.0) -> list[int]:
    """Live processes whose command line holds ``cmdline`` or whose environment holds the run's marker."""
    entry = sandbox_procs.marker_entry(run_id).decode() if run_id else None
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                command = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace")
                environ = Path(f"/proc/{name}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if (cmdline and cmdline in command) or (entry and entry in environ.split("\0")):
                found.append(int(name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def require(*names: str) -> None:
    active = sandbox.protections()
    missing = [name for name in names if not active[name]]
    if missing:
        pytest.skip(f"this system does not allow: {', '.join(missing)}")


@pytest.fixture
def plan_as(monkeypatch):
    """Force a weaker plan, as on a system without namespaces (and without a writable cgroup)."""
    def force(kind: str) -> None:
        plan = sandbox_run.current_plan()
        if kind in ("no-namespaces", "no-namespaces-no-cgroup"):
            plan = plan.without_namespaces()
        if kind in ("no-namespaces-no-cgroup", "namespaces-no-cgroup"):
            plan = plan.without_cgroup()
        elif kind == "watchdog":
            plan = dataclasses.replace(plan.without_cgroup(), nproc_rlimit=False)
        monkeypatch.setattr(sandbox_run, "current_plan", lambda: plan)
        return plan
    return force


# ---- filesystem -------------------------------------------------------------------------------------------

WRITER = """
import json, os
targets = json.loads({targets!r})
targets["workdir_parent"] = os.path.join(os.path.dirname(os.getcwd()), {name!r})
outcome = {{}}
for label, path in targets.items():
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        outcome[label] = "written"
    except OSError as error:
        outcome[label] = error.strerror
with open("inside.txt", "w") as handle:
    handle.write("fine")
outcome["inside"] = open("inside.txt").read()
outcome["passwd_readable"] = "root:" in open("/etc/passwd").read()
outcome["workdir_parent_path"] = targets["workdir_parent"]
print(json.dumps(outcome))
"""


def test_writes_outside_the_work_dir_fail_or_stay_private():
    require("mount_ns_readonly_root", "private_tmp")
    name = new_marker()
    targets = {"tmp": Path(tempfile.gettempdir(), name), "home": Path.home() / name, "repository": REPOSITORY / name,
               "etc": Path("/etc", name), "var_tmp": Path("/var/tmp", name), "dev_shm": Path("/dev/shm", name)}
    code = WRITER.format(targets=json.dumps({label: str(path) for label, path in targets.items()}), name=name)
    try:
        result = run_python(code, timeout_s=10)
        assert result.ok, result.stderr
        outcome = json.loads(result.stdout)
        targets["workdir_parent"] = Path(outcome["workdir_parent_path"])
        visible = [str(path) for path in targets.values() if path.exists()]
    finally:
        for path in targets.values():
            path.unlink(missing_ok=True)
    assert visible == []  # nothing the program wrote is visible on the host
    for label in ("home", "repository", "etc", "var_tmp"):
        assert outcome[label] != "written", label  # read-only: the write itself fails
    assert outcome["inside"] == "fine" and outcome["passwd_readable"] is True


# ---- what the program can see -----------------------------------------------------------------------------

SNOOPER = """
import json, os
home = {home!r}
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as error:
        return error.strerror
def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as error:
        return error.strerror
print(json.dumps({{"home": listing(home), "home_parent": listing(os.path.dirname(home)), "root": listing("/"),
                  "marker": read(os.path.join(home, {name!r})), "repository": listing({repository!r}),
                  "pyproject": read({pyproject!r}), "shadow": read("/etc/shadow")}}))
"""


def test_the_program_sees_no_home_project_or_user_files():
    require("hidden_user_files")
    name, secret = new_marker(), f"secret-{uuid.uuid4().hex}"
    home = Path.home()
    marker = home / name
    try:
        marker.write_text(secret)
    except OSError:
        pytest.skip(f"cannot write a marker into {home}")
    try:
        code = SNOOPER.format(home=str(home), name=name, repository=str(REPOSITORY),
                              pyproject=str(REPOSITORY / "pyproject.toml"))
        result = run_python(code, timeout_s=10)
    finally:
        marker.unlink(missing_ok=True)
    assert result.ok, result.stderr
    assert name not in result.stdout and secret not in result.stdout
    outcome = json.loads(result.stdout)
    assert isinstance(outcome["root"], list) and "proc" in outcome["root"]  # it did list /, just not the marker
    assert outcome["marker"] in ("No such file or directory", "Permission denied")
    assert not isinstance(outcome["repository"], list) or "pyproject.toml" not in outcome["repository"]
    assert "[project]" not in outcome["pyproject"] and "root:" not in outcome["shadow"]


SECRETS = {"HF_TOKEN": "secret-marker", "HUGGING_FACE_HUB_TOKEN": "secret-marker-hub",
           "AWS_SECRET_ACCESS_KEY": "secret-marker-aws", "OPENAI_API_KEY": "secret-marker-openai"}
ENVIRONMENT_PROBE = """
import json, os
print(json.dumps({"environ": dict(os.environ), "proc": open("/proc/self/environ", "rb").read().decode(),
                  "home": os.path.expanduser("~"), "cwd": os.getcwd()}))
"""


@pytest.mark.parametrize("kind", ["full", "no-namespaces"])
def test_the_callers_environment_never_reaches_the_program(kind, plan_as, monkeypatch):
    if kind != "full":
        plan_as(kind)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    result = run_python(ENVIRONMENT_PROBE, timeout_s=10)
    assert result.ok, result.stderr
    assert "secret-marker" not in result.stdout
    outcome = json.loads(result.stdout)
    assert set(outcome["environ"]) == {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED",
                                       "PYTHONDONTWRITEBYTECODE", sandbox_procs.MARKER_VAR}
    assert outcome["home"] == outcome["cwd"]  # HOME is its own work dir, with and without namespaces
    assert sandbox.protections()["scrubbed_env"]


def test_a_program_that_opens_files_in_a_loop_hits_the_descriptor_limit():
    require("nofile_limit")
    code = ("import os\nhandles = []\ntry:\n    while True:\n        handles.append(open(os.devnull))\n"
            "except OSError as error:\n    print(len(handles), error.errno)")
    result = run_python(code, timeout_s=10)
    assert result.ok, result.stderr
    opened, number = map(int, result.stdout.split())
    assert number == errno.EMFILE and 0 < opened < sandbox_run.OPEN_FILES


# ---- processes --------------------------------------------------------------------------------------------

GRANDCHILD = """
import os, sys
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: its own session, sleeping
        if not {keep_stdio}:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
        env = {{}} if {scrub_env} else dict(os.environ)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}], env)
    os._exit(0)
os.waitpid(child, 0)
print("main done", flush=True)
"""


@pytest.mark.parametrize(("kind", "scrub_env", "keep_stdio"), [
    ("namespaces-no-cgroup", True, True),  # found by nothing but the PID namespace
    ("no-namespaces", True, False),  # found by the cgroup only
    ("no-namespaces-no-cgroup", False, False),  # found by the marker only
    ("no-namespaces-no-cgroup", True, True),  # found by the pipe it holds only
], ids=["pid-namespace", "fallback-cgroup", "fallback-marker", "fallback-pipe-holder"])
def test_setsid_grandchild_neither_delays_the_run_nor_survives(kind, scrub_env, keep_stdio, plan_as):
    plan = plan_as(kind)
    if kind == "namespaces-no-cgroup":
        require("pid_ns")
    if kind == "no-namespaces" and plan.nproc_mode != "cgroup":
        pytest.skip("no writable pids cgroup on this system")
    marker = new_marker()
    timeout_s = 5.0
    started = time.monotonic()
    code = GRANDCHILD.format(marker=marker, scrub_env=scrub_env, keep_stdio=keep_stdio)
    result = run_python(code, timeout_s=timeout_s)
    elapsed = time.monotonic() - started
    try:
        assert elapsed < timeout_s + MARGIN_S
        assert result.ok and result.stdout == "main done\n", result.stderr
        assert survivors(cmdline=marker) == []
        assert result.leftover_processes == 0
    finally:
        sandbox_procs.kill_pids(survivors(cmdline=marker, grace_s=0))


SPAWNER = """
import shutil, subprocess, time
started, error = [], None
for _ in range({attempts}):
    try:
        started.append(subprocess.Popen([{marker!r}, "30"], executable=shutil.which("sleep")))
    except OSError as exc:
        error = type(exc).__name__
        break
print(len(started), error, flush=True)
time.sleep({linger})
"""


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces-if-available", "without-namespaces"])
def test_process_spawning_is_capped_by_the_process_limit(namespaces, monkeypatch):
    require("nproc_limit")
    if not namespaces:  # the launcher is the only extra task then: the cap must still hold exactly
        plan = sandbox_run.current_plan().without_namespaces()
        if plan.nproc_mode != "cgroup":
            pytest.skip("no pids cgroup here to cap processes without namespaces")
        monkeypatch.setattr(sandbox_run, "current_plan", lambda: plan)
    marker, limit = new_marker(), 16
    result = run_python(SPAWNER.format(attempts=300, marker=marker, linger=0), timeout_s=20, max_processes=limit)
    try:
        assert result.ok, result.stderr
        started, error = result.stdout.split()
        assert int(started) < limit and error == "BlockingIOError"  # fork refused: EAGAIN
        assert survivors(cmdline=marker) == []
    finally:
        sandbox_procs.kill_pids(survivors(cmdline=marker, grace_s=0))


def test_the_watchdog_kills_a_run_with_too_many_processes(plan_as):
    plan = plan_as("watchdog")
    assert plan.nproc_mode == "watchdog"
    marker = new_marker()
    result = run_python(SPAWNER.format(attempts=60, marker=marker, linger=60), timeout_s=20, max_processes=8)
    try:
        assert result.killed_for == "process limit" and not result.ok
        assert result.wall_s < 20 + MARGIN_S
        assert survivors(cmdline=marker) == []
    finally:
        sandbox_procs.kill_pids(survivors(cmdline=marker, grace_s=0))


@pytest.mark.parametrize("program", [
    "import os, time\nos.close(1)\nos.close(2)\nwhile True:\n    time.sleep(0.1)",
    "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "print('ready', flush=True)\nwhile True:\n    pass",
], ids=["closes-stdout-keeps-running", "ignores-sigterm"])
def test_a_program_that_never_ends_is_killed_at_the_timeout(program):
    timeout_s = 2.0
    result = run_python(program, timeout_s=timeout_s)
    assert result.timed_out and result.killed_for == "timeout" and result.returncode is None
    assert timeout_s <= result.wall_s < timeout_s + MARGIN_S
    assert result.leftover_processes == 0 and survivors(run_id=result.run_id) == []
    if "ready" in program:
        assert result.stdout == "ready\n"  # what it wrote before the kill is kept


def test_a_stdout_flood_is_capped_and_cut_short():
    timeout_s = 20.0
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('z' * 65536)", timeout_s=timeout_s)
    assert result.killed_for == "output limit" and not result.ok
    assert result.wall_s < timeout_s + MARGIN_S
    assert len(result.stdout) == sandbox.MAX_OUTPUT_BYTES < result.stdout_bytes
    assert survivors(run_id=result.run_id) == []


def test_the_program_sees_only_its_own_processes():
    require("private_proc")
    result = run_python("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert result.ok and max(json.loads(result.stdout)) < 10  # init, the program: not the host's pids


def test_the_program_has_no_capabilities():
    require("no_capabilities")
    code = ("fields = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
            "print(int(fields['CapEff'], 16), int(fields['CapPrm'], 16), int(fields['NoNewPrivs']))")
    result = run_python(code)
    assert result.ok and result.stdout.split() == ["0", "0", "1"]


# ---- the host's kernel ------------------------------------------------------------------------------------

KERNEL_WRITER = """
import json, os
outcome = {}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/panic",
             "/proc/sysrq-trigger", "/proc/irq/default_smp_affinity"):
    try:
        os.close(os.open(path, os.O_WRONLY))  # opened only: nothing is ever written
        outcome[path] = "writable"
    except OSError as error:
        outcome[path] = error.strerror
print(json.dumps(outcome))
"""


def test_the_program_cannot_write_kernel_settings():
    """Run by root, the program is uid 0 without capabilities: still the owner of every /proc/sys file, so a
    writable /proc would let it set core_pattern, a command the host kernel then runs as root."""
    require("private_proc")
    result = run_python(KERNEL_WRITER, timeout_s=10)
    assert result.ok, result.stderr
    assert "writable" not in json.loads(result.stdout).values(), result.stdout


NESTED_NAMESPACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000 | 0x02000000) == 0:  # user + mount + cgroup namespaces
    print("made")
else:
    print("refused", os.strerror(ctypes.get_errno()))
"""


def test_the_program_cannot_make_a_user_namespace_of_its_own():
    """In one it holds every capability again: enough to mount cgroupfs and raise its own pids.max, or lower
    the caller's memory limit (cgroup files its uid owns when the caller is root)."""
    require("user_ns", "no_nested_userns")
    result = run_python(NESTED_NAMESPACE, timeout_s=10)
    assert result.ok and result.stdout.startswith("refused"), result.stdout + result.stderr


SHARED_MEMORY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.shmget({key}, 1 << 20, 0o1600))  # IPC_CREAT | 0600: a segment lives until someone removes it
"""


def host_segments(key: int) -> list[int]:
    """Ids of the host's SysV shared memory segments with ``key``."""
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return [int(row.split()[1]) for row in rows if int(row.split()[0]) == key]


def test_shared_memory_does_not_outlive_the_run():
    """A segment left behind would hold host memory after the run, outside every limit of the program."""
    if not Path("/proc/sysvipc/shm").exists():
        pytest.skip("no SysV IPC here")
    require("ipc_ns")
    key = int.from_bytes(os.urandom(3), "big") + 1
    result = run_python(SHARED_MEMORY.format(key=key), timeout_s=10)
    left = host_segments(key)
    try:
        assert result.ok and int(result.stdout) >= 0, result.stderr
        assert left == []
    finally:
        for shmid in left:
            ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID


# ---- the verdict ------------------------------------------------------------------------------------------

FORGER = """
import os, sys
for name in ("_nonce", "_guard.py"):
    try:
        print(name, open(name).read()[:40])
    except OSError as error:
        print(name, error.strerror)
guess = os.environ["RELAXTUI_SANDBOX_RUN"].encode()  # the only run secret it can see
for fd in range(3, 256):
    for forged in (guess, b"finished", b"ok"):
        try:
            os.write(fd, forged)
        except OSError:
            pass
os._exit(0)
assert False, "the tests"
"""


@pytest.mark.parametrize("program", [
    "import os\nos._exit(0)\nassert False, 'the tests'",
    "import sys\nsys.exit(0)\nassert False, 'the tests'",
    "import atexit, os\natexit.register(os._exit, 0)\nassert False, 'the tests'",
    "import os, threading, time\nthreading.Thread(target=os._exit, args=(0,)).start()\nwhile True:\n"
    "    time.sleep(1)\nassert False, 'the tests'",
    FORGER,
], ids=["os-exit", "sys-exit", "atexit-os-exit", "thread-os-exit", "forges-the-verdict"])
def test_a_program_that_stops_before_its_tests_is_not_finished(program):
    """Exit code 0 is the program's own claim; ``finished`` is the sandbox's (a nonce the program never sees),
    and a judge that appends tests to the program needs it: else ``os._exit(0)`` first passes every test."""
    result = run_python(program, timeout_s=10)
    assert result.returncode == 0 and result.ok, result.stderr
    assert not result.finished


def test_a_program_that_runs_to_its_end_is_finished():
    result = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="2 3")
    assert result.ok and result.finished and result.stdout == "5\n"
    failed = run_python("assert 1 + 1 == 3")
    assert failed.returncode == 1 and not failed.ok and not failed.finished
    looping = run_python("while True:\n    pass", timeout_s=1)
    assert looping.timed_out and not looping.finished


# ---- degradation and reporting ----------------------------------------------------------------------------

def test_protections_are_reported_and_the_missing_line_matches_them():
    active = sandbox.protections()
    assert all(isinstance(value, bool) for value in active.values())
    for name in ("user_ns", "mount_ns_readonly_root", "hidden_user_files", "private_tmp", "pid_ns", "net_ns",
                 "ipc_ns", "no_nested_userns", "nproc_limit", "nofile_limit", "scrubbed_env", "socket_guard",
                 "output_cap"):
        assert name in active
    line = sandbox.missing_protections_line()
    assert (line is None) == all(active[name] for name in sandbox_plan.MISSING_TEXT)


def test_the_fallback_plan_says_what_it_lacks():
    weak = sandbox_run.current_plan().without_namespaces().without_cgroup()
    active = sandbox_plan.protections_of(weak)
    assert not active["pid_ns"] and not active["mount_ns_readonly_root"] and not active["nproc_limit"]
    assert not active["hidden_user_files"] and active["scrubbed_env"]
    line = sandbox_plan.missing_line_of(weak)
    assert line and "no PID namespace" in line and "read-only" in line and "watchdog" in line
    assert "user files visible" in line and "environment" in line


def test_the_probe_falls_back_when_namespaces_cannot_be_made(monkeypatch):
    refused = sandbox_plan.Plan(("no_such_namespace",))
    monkeypatch.setattr(sandbox_run, "candidate_plans", lambda base: [refused, sandbox_plan.Plan(())])
    plan = sandbox_run.current_plan.__wrapped__()
    assert plan.namespaces == () and "resource_limits" in plan.steps


def test_a_run_never_gets_less_than_the_probe_promised(monkeypatch):
    plan = dataclasses.replace(sandbox_run.current_plan(), cgroup_base="/nonexistent/cgroup",
                               steps=sandbox_run.current_plan().steps | {"pids_cgroup"})
    monkeypatch.setattr(sandbox_run, "current_plan", lambda: plan)
    with pytest.raises(sandbox.SandboxError, match="pids cgroup"):
        run_python("print('must not run')")


def test_the_launcher_aborts_when_a_required_step_fails(monkeypatch):
    require("private_workdir")
    monkeypatch.setattr(sandbox_run, "WORKDIR_SIZE", "not-a-size")  # the work dir's tmpfs mount now fails
    with pytest.raises(sandbox.SandboxError, match="private_workdir"):
        run_python("print('must not run')")


def test_a_python_installed_in_the_home_shows_only_its_own_folders():
    """Python built with --prefix=$HOME/.local (or $HOME): the prefix holds the home, so only the interpreter's
    library and binary folders inside it are bound, never the prefix itself."""
    import sysconfig

    from relaxtui.evals.sandbox._program import narrowed

    stdlib = sysconfig.get_paths()["stdlib"]
    prefix = os.path.dirname(os.path.dirname(stdlib))  # .../lib/pythonX.Y -> the prefix
    assert narrowed(prefix, home="/nonexistent-home", cwd="/nonexistent-cwd") == [prefix]
    inside = narrowed(prefix, home=prefix, cwd="/nonexistent-cwd")
    assert prefix not in inside and os.path.realpath(stdlib) in inside
    assert all(path.startswith(prefix + "/") for path in inside)
