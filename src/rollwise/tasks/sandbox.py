"""Running untrusted Python (a model's code) in a sandbox: `run_program(source, limits) -> Outcome`.

Each program runs in a fresh process tree (`_sandbox_exec.py`, started as root) with:
- its own mount, network and PID namespaces: no network (a loopback interface that is down), every
  file system read-only except its own fresh directory, its own /proc, and all its processes killed by
  the kernel when it ends or runs out of time;
- an unprivileged user (`nobody` by default; root would ignore RLIMIT_NPROC) with no supplementary
  groups and no way to gain privileges (PR_SET_NO_NEW_PRIVS);
- limits: wall-clock time, CPU seconds, address space, processes of that user, file size, open files;
- an empty environment, stdin from /dev/null, Python in isolated mode (-I -S: no site, no user paths).
The threat model (what this isolates and what it does not) is docs/code_tasks.md.

It needs root (or CAP_SYS_ADMIN and CAP_SETUID) and Linux namespaces; `check_available` says in one
line what is missing. Where they cannot be had, rollwise refuses to run code rather than run it weaker.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

LAUNCHER = Path(__file__).with_name("_sandbox_exec.py")
SETUP_FAILED, TIMED_OUT = 125, 124  # the launcher's own exit codes
OUTPUT_TAIL = 400  # characters of the program's stderr kept in an Outcome


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0  # wall clock, Python's start included
    cpu_s: int = 5  # CPU seconds, per process
    memory_mb: int = 512  # address space, per process
    nproc: int = 32  # processes (and threads) of the sandbox user, system-wide
    file_mb: int = 16  # the largest file it may write (its stdout and stderr included)
    nofile: int = 64  # open file descriptors
    user: str = "nobody"  # the unprivileged user it runs as
    python: str = ""  # the interpreter it runs under; "": `default_python()`

    def rlimits(self) -> dict[str, int]:
        return {"RLIMIT_CPU": int(self.cpu_s), "RLIMIT_AS": int(self.memory_mb) << 20,
                "RLIMIT_NPROC": int(self.nproc), "RLIMIT_FSIZE": int(self.file_mb) << 20,
                "RLIMIT_NOFILE": int(self.nofile), "RLIMIT_CORE": 0}


@dataclass(frozen=True)
class Outcome:
    status: str  # "passed" (exit 0), "failed" (another exit), "timeout", "killed" (a signal), "setup"
    detail: str = ""  # the exit code or signal and the tail of its stderr
    stdout: str = ""  # the tail of its stdout

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _user(name: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"sandbox: no user {name!r} on this machine to run code as (set the sandbox user to an "
                         "unprivileged one, e.g. nobody)") from None
    if entry.pw_uid == 0:
        raise ValueError(f"sandbox: user {name!r} is root; the sandbox needs an unprivileged user")
    return entry.pw_uid, entry.pw_gid


def _reachable(path: str) -> bool:
    """Whether any user may execute `path`: o+x on it and on every directory above it."""
    p = Path(path)
    return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents])


def default_python() -> str:
    """An interpreter the sandbox user can run: this one (its real path) if every directory above it is
    open to others, else the system's python3. (A pyenv or conda interpreter under /root is not; the
    program needs only the standard library.)"""
    for candidate in (os.path.realpath(sys.executable), shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and os.path.exists(candidate) and _reachable(os.path.realpath(candidate)):
            return os.path.realpath(candidate)
    raise ValueError("sandbox: no Python interpreter the sandbox user can run (this one lies under a private "
                     "directory and there is no system python3); set the sandbox's python option")


def run_program(source: str, limits: SandboxLimits = SandboxLimits(), files: dict[str, str] | None = None) -> Outcome:
    """Run `source` as main.py (and `files`, name -> text, beside it) in the sandbox."""
    uid, gid = _user(limits.user)
    root = Path(tempfile.mkdtemp(prefix="rollwise-sandbox-"))
    try:
        os.chmod(root, 0o711)  # the sandbox user may pass through to work/, not list or read the rest
        work = root / "work"
        work.mkdir(mode=0o700)
        for name, text in {"main.py": source, **(files or {})}.items():
            (work / name).write_text(text, encoding="utf-8")
        for path in [work, *work.iterdir()]:
            os.chown(path, uid, gid)
        settings = {"dir": str(work), "uid": uid, "gid": gid, "limits": limits.rlimits(),
                    "python": limits.python or default_python(),
                    "argv": ["main.py"], "timeout_s": float(limits.timeout_s)}
        with open(root / "stdout", "wb") as out, open(root / "stderr", "w+b") as err:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(settings)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env={}, close_fds=True,
                                    start_new_session=True)
            try:
                # the launcher enforces timeout_s itself; this only guards against the launcher hanging
                code = proc.wait(timeout=limits.timeout_s + 60)
            except subprocess.TimeoutExpired:
                proc.kill()  # its program dies with it (PDEATHSIG)
                code = proc.wait()
            err.seek(0)
            tail = err.read()[-OUTPUT_TAIL:].decode("utf-8", "replace").strip()
        with open(root / "stdout", "rb") as out:
            out.seek(max(0, out.seek(0, os.SEEK_END) - OUTPUT_TAIL))
            stdout = out.read().decode("utf-8", "replace")
        return replace(_outcome(code, tail), stdout=stdout)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _outcome(code: int, tail: str) -> Outcome:
    if code == 0:
        return Outcome("passed")
    if code == TIMED_OUT:
        return Outcome("timeout", "ran out of time")
    if code == SETUP_FAILED and "sandbox: " in tail:
        return Outcome("setup", tail[tail.index("sandbox: "):].splitlines()[0])
    if code > 128:
        return Outcome("killed", f"killed by signal {code - 128}; {tail}")
    if code < 0:  # the launcher itself was killed
        return Outcome("killed", f"the launcher was killed by signal {-code}")
    return Outcome("failed", f"exit {code}; {tail}")


def unavailable(user: str = "nobody") -> str | None:
    """Why nothing can be sandboxed here, in one line (not Linux, not root, no such user), or None."""
    if not sys.platform.startswith("linux"):
        return f"sandbox: needs Linux namespaces; this is {sys.platform}"
    if os.geteuid() != 0:
        return ("sandbox: entering new namespaces and changing to an unprivileged user needs root "
                "(or CAP_SYS_ADMIN and CAP_SETUID)")
    try:
        _user(user)
    except ValueError as e:
        return str(e)
    return None


def check_available(limits: SandboxLimits = SandboxLimits()) -> None:
    """Raise a one-line ValueError if code cannot be sandboxed here (not Linux, not root, no namespaces,
    no such user): an empty program must run and pass."""
    why = unavailable(limits.user)
    if why:
        raise ValueError(why.replace("sandbox: ", "sandbox: code tasks: ", 1) + "; rollwise does not run code "
                         "without it")
    out = run_program("pass\n", limits)
    if not out.passed:
        raise ValueError(f"sandbox: cannot run a program here ({out.status}: {out.detail})")


def worker_settings(user: str = "nobody", tmp_mb: int = 16, nofile: int = 64) -> dict:
    """What a reward worker (`_reward_worker.py`) needs to enter the sandbox after importing its
    verifier: the user to drop to, its resource limits and the size of its private /tmp. No CPU limit
    (the worker lives for the run; each call has a wall-clock deadline) and no address-space limit here
    (the worker sets its own, `memory_mb`, before it imports anything); no new process or thread at all
    (RLIMIT_NPROC 0 for an unprivileged user), so a response cannot fork."""
    uid, gid = _user(user)
    return {"uid": uid, "gid": gid, "tmp_mb": int(tmp_mb),
            "limits": {"RLIMIT_NPROC": 0, "RLIMIT_FSIZE": int(tmp_mb) << 20, "RLIMIT_NOFILE": int(nofile),
                       "RLIMIT_CORE": 0}}
