"""The sandbox's child side: enter namespaces, lay out the filesystem, set limits, drop privileges, exec.

Started as ``python -I -S _launcher.py CONFIG_JSON`` in its own session, with stdin/stdout/stderr already the
run's pipes and ``config["status_fd"]`` a pipe back to the parent. It imports nothing outside the standard
library (``-S``: no site-packages) and reports every protection it set up as ``ok NAME`` or ``fail NAME WHY``
on the status pipe; a step named in ``config["require"]`` that fails aborts the run instead (``abort NAME``),
so a program never runs with less protection than the probe promised. The program inherits one more pipe,
the verdict pipe (its number the guard's last argument), and nothing else. Process tree:

    launcher (our session; joins the pids cgroup; unshares user+mount+PID+net+IPC namespaces; no user
      │       namespace may be made below them)
      └─ init (PID 1 of the new PID namespace: mounts, reaps, reports the exit status; when it exits the
         │     kernel kills everything left in the namespace)
         └─ program (new session, rlimits, no capabilities, no_new_privs; execs the interpreter)

Without a PID namespace the launcher forks the program directly and the parent hunts descendants itself.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = {"user_ns": CLONE_NEWUSER, "mount_ns": CLONE_NEWNS, "pid_ns": CLONE_NEWPID, "net_ns": CLONE_NEWNET,
                   "ipc_ns": CLONE_NEWIPC}

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOSYMFOLLOW, MS_NOATIME, MS_NODIRATIME = 32, 256, 1024, 2048
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 4096, 8192, 16384, 1 << 18, 1 << 21, 1 << 24
MNT_DETACH = 2
# Per-mount options a remount inside a user namespace must repeat (the kernel locks them).
KEPT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "nosymfollow": MS_NOSYMFOLLOW}

# pivot_root(2) has no libc wrapper: its syscall number per machine.
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203,
              "ppc64": 203, "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218}

PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


class StepFailed(Exception):
    """A protection could not be set up; the message says why."""


class Status:
    """Line protocol back to the parent: ``ok NAME``, ``fail NAME WHY``, ``abort NAME WHY``, ``exit RC``."""

    def __init__(self, fd: int, require: set[str]) -> None:
        self.fd, self.require = fd, require

    def send(self, line: str) -> None:
        os.write(self.fd, (line.replace("\n", " ") + "\n").encode())

    def step(self, name: str, action, *args) -> bool:
        """Run one protection step; report it; abort the run if it was required and failed."""
        try:
            action(*args)
        except Exception as error:  # any failure (no prctl off Linux, odd /proc) means the step is missing
            if name in self.require:
                self.send(f"abort {name} {error}")
                os._exit(125)
            self.send(f"fail {name} {error}")
            return False
        self.send(f"ok {name}")
        return True


def check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(libc.mount(encoded(source), encoded(target), encoded(fstype), ctypes.c_ulong(flags), encoded(data)),
          f"mount {target}")


def prctl(option: int, arg: int = 0, arg3: int = 0) -> int:
    return libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0))


# ---- namespaces -------------------------------------------------------------------------------------------

def enter_namespaces(names: list[str]) -> None:
    """One unshare(2) for all requested namespaces; a user namespace maps only our own uid/gid to root."""
    flags = 0
    for name in names:
        flags |= NAMESPACE_FLAGS[name]
    if not flags:
        return
    uid, gid = os.geteuid(), os.getegid()
    check(libc.unshare(flags), "unshare")
    if flags & CLONE_NEWUSER:
        for path, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{path}", "w") as handle:
                handle.write(text)


def forbid_user_namespaces() -> None:
    """No user namespace below ours. In one the program would hold every capability again: enough to mount
    cgroupfs and raise its own pids.max (or, run by root, the caller's memory limit). The limit belongs to our
    namespace, and only CAP_SYS_RESOURCE in it, which the program never holds, can raise it."""
    with open("/proc/sys/user/max_user_namespaces", "w") as handle:
        handle.write("0")


def join_cgroup(path: str) -> None:
    """Move the launcher, hence every descendant, into the run's pids cgroup (it caps and lists them)."""
    with open(os.path.join(path, "cgroup.procs"), "w") as handle:
        handle.write(str(os.getpid()))


# ---- filesystem -------------------------------------------------------------------------------------------

def current_mounts() -> list[tuple[str, int]]:
    """(mount point, options to keep) for every mount visible now, the topmost one per mount point."""
    mounts: dict[str, int] = {}
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), fields[4])  # \040
            options = fields[5].split(",")
            kept = 0
            for option in options:
                kept |= KEPT_OPTIONS.get(option, 0)
            if not kept & (MS_NOATIME | MS_RELATIME):
                kept |= MS_STRICTATIME
            mounts.pop(point, None)
            mounts[point] = kept
    return list(mounts.items())


def remount_all_read_only(mounts: list[tuple[str, int]]) -> None:
    """Every mount read-only. One we cannot even reach (EACCES/ENOENT on the path) the program, with the same
    uid and no capabilities, cannot reach either."""
    failures = []
    for point, kept in mounts:
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.ENOENT):
                failures.append(f"{point} ({error.strerror})")
    if failures:
        raise StepFailed("still writable: " + ", ".join(failures))


def mount_tmpfs(target: str, size: str) -> None:
    if not os.path.isdir(target):
        raise StepFailed(f"{target} is not a directory")
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")


def private_workdir(workdir: str, files: dict[str, bytes], size: str) -> None:
    """A fresh size-capped tmpfs at the work dir's own path, holding only the program's files."""
    os.makedirs(workdir, exist_ok=True)  # absent when /tmp was just replaced
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0755")
    for name, data in files.items():
        with open(os.path.join(workdir, name), "wb") as handle:
            handle.write(data)


def mount_proc(target: str) -> None:
    """A fresh /proc, read-only: run by root, the program is uid 0 (without capabilities), still the owner of
    /proc/sys/kernel/core_pattern (a command the host kernel runs as root), drop_caches, /proc/irq, ..."""
    mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)


def add_path(root: str, path: str) -> None:
    """``path`` inside the new root as on the host: a link recreated, a directory or file bound (with its
    submounts), nothing when the host lacks it."""
    inside = root + path
    os.makedirs(os.path.dirname(inside), exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), inside)
    elif os.path.isdir(path):
        os.makedirs(inside, exist_ok=True)
        mount(path, inside, None, MS_BIND | MS_REC)
    elif os.path.exists(path):
        open(inside, "a").close()
        mount(path, inside, None, MS_BIND)


def build_root(root: str, visible: list[str], workdir: str) -> None:
    """A tmpfs at ``root`` (the staging dir, whose files we hold) holding only the ``visible`` host paths, a
    minimal /dev, a fresh /proc and mount points for /tmp and the work dir; every mount read-only; then it
    becomes "/" and the old root is detached, so no home, project tree or other user data can be reached."""
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    try:
        kept: list[str] = []
        # By its parent's real path: then no directory made inside the new root lies under a recreated link,
        # which could point into a bind of the host (still writable until the read-only pass).
        for path in sorted({os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
                            for path in visible}):
            if not any(path.startswith(parent + "/") for parent in kept):
                add_path(root, path)
                if os.path.isdir(path) and not os.path.islink(path):
                    kept.append(path)
        for name in ("null", "zero", "full", "random", "urandom"):
            add_path(root, f"/dev/{name}")
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            os.symlink(target, f"{root}/dev/{name}")
        for point in ("/proc", "/tmp", "/dev/shm", workdir):
            os.makedirs(root + point, exist_ok=True)
        remount_all_read_only([(point, kept_options) for point, kept_options in current_mounts()
                               if point == root or point.startswith(root + "/")])
        # Before the old root goes: the kernel lets a user namespace mount proc only while one is visible.
        mount_proc(root + "/proc")
        enter_root(root)
    except BaseException:
        libc.umount2(encoded(root), MNT_DETACH)  # the caller lays out the old root in place instead
        raise


def enter_root(root: str) -> None:
    """Make ``root`` "/" and detach the old one; where pivot_root is refused (an initramfs root), move the
    mount over "/" and chroot (the program holds no capability to leave it)."""
    os.chdir(root)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is not None and libc.syscall(number, b".", b".") == 0:
        check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    else:
        mount(root, "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def set_up_filesystem(config: dict, status: Status, new_proc: bool) -> None:
    """Nothing we do propagates out; a root holding only what the interpreter needs, everything read-only
    except a private /tmp, /dev/shm and work dir. Without a new /proc (no PID namespace) or where the new
    root fails, the host's root stays, read-only, and only writes are contained."""
    workdir = config["workdir"]
    files = {}
    for name in os.listdir(workdir):
        with open(os.path.join(workdir, name), "rb") as handle:
            files[name] = handle.read()
    if not status.step("mount_private", mount, None, "/", None, MS_REC | MS_PRIVATE):
        return  # without private propagation any further mount could leak to the host
    if new_proc and status.step("hidden_user_files", build_root, workdir, config["visible"], workdir):
        status.send("ok readonly_fs")
        status.send("ok private_proc")
    else:
        status.step("readonly_fs", remount_all_read_only, current_mounts())
        if new_proc:
            status.step("private_proc", mount_proc, "/proc")
    status.step("private_tmp", mount_tmpfs, "/tmp", config["tmpfs_size"])
    if os.path.isdir("/dev/shm"):
        status.step("private_shm", mount_tmpfs, "/dev/shm", config["tmpfs_size"])
    status.step("private_workdir", private_workdir, workdir, files, config["workdir_size"])


# ---- the program ------------------------------------------------------------------------------------------

def set_limits(limits: dict) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> None:
    """No capabilities now or after exec, and no way to regain any (no_new_privs ignores setuid/file caps)."""
    check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    for cap in range(64):
        if prctl(PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() != errno.EINVAL:  # past the last one
            if os.geteuid() == 0 or ctypes.get_errno() != errno.EPERM:  # unprivileged: nothing to drop
                check(-1, f"drop capability {cap}")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    check(libc.capset(ctypes.byref(CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), (CapData * 2)()), "capset")
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":\t", 1) for line in handle if ":\t" in line)
    if int(fields["CapEff"], 16) or int(fields["CapPrm"], 16) or int(fields.get("NoNewPrivs", "1")) != 1:
        raise StepFailed("capabilities still held")


def exec_program(config: dict, status: Status) -> None:
    """In the forked program process: own session, limits, no privileges, then the interpreter."""
    try:
        os.setsid()  # it can no longer signal the launcher's process group
        for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        status.step("resource_limits", set_limits, config["limits"])
        status.step("no_capabilities", drop_privileges)
        os.chdir(config["workdir"])
        os.execve(config["argv"][0], config["argv"], config["env"])  # the fixed environment, no caller's
    except BaseException as error:  # the only way out of here is _exit
        status.send(f"abort exec {error!r}")
    os._exit(127)


def wait_for(child: int) -> int:
    """Reap every child (we may be PID 1) until ``child`` ends; its exit code, negative for a signal."""
    while True:
        pid, wait_status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(wait_status)


def run_program(config: dict, status: Status) -> int:
    pid = os.fork()
    if pid == 0:
        exec_program(config, status)
    status.send(f"program {pid}")
    return wait_for(pid)


def init_process(config: dict, status: Status) -> None:
    """PID 1 of the new namespace. Its exit makes the kernel kill every process left in the namespace."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the program may signal us; only SIGKILL from outside counts
    if "mount_ns" in config["namespaces"]:
        set_up_filesystem(config, status, new_proc=True)
    status.send(f"exit {run_program(config, status)}")
    os._exit(0)


def main() -> None:
    config = json.loads(sys.argv[1])
    status = Status(config["status_fd"], set(config["require"]))
    os.set_inheritable(status.fd, False)  # forks keep it; the exec'd program does not
    if config["cgroup"]:
        status.step("pids_cgroup", join_cgroup, config["cgroup"])
    for name in config["namespaces"]:
        if name not in NAMESPACE_FLAGS:
            raise SystemExit(f"unknown namespace {name}")
    if not status.step("namespaces", enter_namespaces, config["namespaces"]):
        os._exit(125)  # the probe asked for these; the caller tries fewer
    for name in config["namespaces"]:
        status.send(f"ok {name}")
    if "user_ns" in config["namespaces"]:
        status.step("no_nested_userns", forbid_user_namespaces)
    if "pid_ns" in config["namespaces"]:
        init = os.fork()
        if init == 0:
            init_process(config, status)
        status.send(f"init {init}")
        os._exit(0 if wait_for(init) == 0 else 1)
    if "mount_ns" in config["namespaces"]:
        set_up_filesystem(config, status, new_proc=False)
    status.send(f"exit {run_program(config, status)}")
    os._exit(0)


if __name__ == "__main__":
    main()
