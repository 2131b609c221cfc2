"""Running untrusted generated code (docs/architecture.md#running-generated-code): each program in its own sandbox,
judged by its output.

What is contained, where Linux allows it without root (probed once per process; :func:`protections` says what
is active, :func:`missing_protections_line` what is not):

- **Filesystem**: user + mount namespaces and a new root (pivot_root) holding only /usr, /bin, /lib*, an
  allow-list of /etc files (ld.so.cache, passwd, localtime, …), the interpreter's own prefixes (bound back even
  where they live under a home, e.g. /root/.pyenv/versions/X, whose other entries stay hidden), /dev/null-like
  nodes and a fresh /proc, read-only (run by root, the program is uid 0 without capabilities, still the owner of
  /proc/sys/kernel/core_pattern and the rest): no home, /root, /home, project tree, /work, /var, /run, /sys or
  the rest of /etc. Every mount read-only; a fresh size-capped tmpfs as the program's work dir (at the path of a
  host temp dir that only stages the source), as /tmp and as /dev/shm. Nothing it writes survives the run or
  reaches the host.
- **Environment**: fixed (PATH, HOME and TMPDIR = its work dir, LANG/LC_ALL, the run's marker); none of the
  caller's variables (HF_TOKEN, AWS_*, API keys) reach the launcher or the program, with or without namespaces.
- **Processes**: a PID namespace whose init is ours; when the program's main process exits, init exits and
  the kernel kills every descendant, ``setsid`` and double forks included. The program runs in its own session
  with no capabilities and ``no_new_privs``, and may make no user namespace (``max_user_namespaces`` is 0 in
  ours): in one it would hold every capability again, mount cgroupfs and lift its own pids.max. A fresh /proc
  shows it only its own processes. An IPC namespace takes every SysV segment, queue and semaphore it made
  with it when the run ends.
- **Process count**: a per-run pids cgroup where writable (the host runs us as root, for whom RLIMIT_NPROC
  never binds), else RLIMIT_NPROC inside the user namespace when our uid is not root (counted per namespace),
  else a watchdog that kills the run when it has too many processes. Running as another uid instead was
  rejected: the interpreter may live where only our uid can read it (e.g. pyenv under a 0700 /root).
- **Network**: an empty network namespace, and inside the interpreter a guard that refuses inet sockets.
- **Resources**: RLIMIT_AS / CPU / FSIZE / CORE / NOFILE; at most 1 MiB kept per output stream (the rest is read,
  counted and dropped, so a flood never blocks the program nor fills our memory); a program that writes more
  than 32 MiB is killed.
- **Verdict**: ``RunResult.ok`` is exit code 0, which the program chooses (``os._exit(0)`` before appended
  tests); ``RunResult.finished`` is ours: the guard writes the run's nonce, which is in no file, variable or
  argv the program can read, on a pipe only after main.py ran to its last line.
- **Time**: a wall-clock deadline enforced from outside whatever the program does with its pipes: we never
  wait for pipe EOF past the deadline, and after the launcher exits we read for at most one more second.

Fallback without namespaces: the launcher's session is killed, then every process in the run's pids cgroup,
carrying the run's marker environment variable (``RELAXTUI_SANDBOX_RUN``) or holding the run's pipes is
SIGKILLed until none is left (only a descendant that leaves the cgroup-less run, scrubs its environment and
drops its stdio escapes, and it cannot delay the run); writes outside the work dir are then *not* prevented,
and the caller's files (home, project) stay readable: ``protections()`` then says ``hidden_user_files: False``.

This is not a security boundary against a determined attacker beyond what the kernel's namespaces give: it
stops generated code from damaging the machine, the results or the run by accident or by naive malice.
"""

from relaxtui.evals.sandbox._plan import Plan
from relaxtui.evals.sandbox._run import (
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    MAX_OUTPUT_BYTES,
    RunResult,
    SandboxError,
    current_plan,
    missing_protections_line,
    protections,
    run_python,
)

__all__ = ["DEFAULT_MAX_PROCESSES", "DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT_S", "MAX_OUTPUT_BYTES", "Plan",
           "RunResult", "SandboxError", "current_plan", "missing_protections_line", "protections", "run_python"]
