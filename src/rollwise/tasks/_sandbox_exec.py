"""The launcher of one sandboxed program (`sandbox.run_program` starts it as root; see docs/code_tasks.md).

Run as `python -I -S _sandbox_exec.py SETTINGS_JSON`. It imports nothing of rollwise. In order:
1. new mount, network and PID namespaces (unshare): the program sees only a loopback interface that is
   down, and its processes live in a PID namespace whose init is the program itself;
2. every mount made read-only in that mount namespace, then the program's own directory bound back
   read-write: /tmp, /dev/shm and the rest are not writable, whatever their permissions;
3. fork: the child (PID 1 of the new namespace) mounts its own /proc (it sees its own processes only),
   sets the resource limits, drops to the unprivileged user (groups, gid, uid), asks for SIGKILL when
   the launcher dies and for no new privileges, and executes Python on the program with an empty
   environment, in its directory;
4. the launcher waits (at most timeout_s of wall-clock time, then SIGKILL) and exits with the program's
   status: 128 + signal when a signal killed it, 124 when it ran out of time.
When the program's PID 1 exits or is killed, the kernel kills every process left in its namespace (a
fork bomb's included); when the launcher is killed (the parent's timeout), PDEATHSIG kills the program.

Exit code 125 with a line "sandbox: ..." on stderr: a setup step failed (the program never ran).

The reasoning-gym reward worker (`_reward_worker.py` with a sandbox) takes steps 1 and 3 from here
(`enter_namespaces`, `confine`) but does not execute anything: it has imported its verifier already.
"""
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SETUP_FAILED = 125
TIMED_OUT = 124

libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """A setup step failed; its message names the step and the system's reason."""


def fail(what: str) -> None:
    os.write(2, f"sandbox: {what}\n".encode())
    os._exit(SETUP_FAILED)


def call(rc: int, what: str) -> None:
    if rc != 0:
        raise SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(src, target, fstype, flags: int, what: str, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    call(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), what)


def mount_points() -> list[str]:
    """Every mount point of this mount namespace (/proc/self/mountinfo's 5th field, octal escapes undone)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    return sorted(set(points), key=len)


def enter_namespaces() -> None:
    """Steps 1-2 up to the writable directory: new mount, PID and network namespaces (the PID one holds
    the next child forked), every mount read-only in the new mount namespace. Raises SetupError."""
    call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    call(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare (needs root, or CAP_SYS_ADMIN)")
    mount(None, "/", None, MS_REC | MS_PRIVATE, "make / private")  # nothing below leaks to the host
    for point in mount_points():
        if point.startswith(("/proc/", "/sys/")) or point == "/proc":
            continue
        if libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None) != 0 and point == "/":
            raise SetupError(f"remount / read-only: {os.strerror(ctypes.get_errno())}")


def confine(limits: dict, uid: int, gid: int) -> None:
    """Step 3 in the forked child, up to the exec: its own /proc, the resource limits, the unprivileged
    user (groups, gid, uid: in that order, while it may still change them), death with its parent, no
    new privileges. Raises SetupError (or OSError)."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mount /proc")
    for name, value in limits.items():
        # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL a second later if it is caught
        resource.setrlimit(getattr(resource, name), (value, value + 1 if name == "RLIMIT_CPU" else value))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SetupError("still root after setuid")
    call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")  # setuid cleared it
    call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def main() -> None:
    s = json.loads(sys.argv[1])
    try:
        enter_namespaces()
        # the program's directory, writable again: a bind mount copies the read-only flag, so remount it
        mount(s["dir"], s["dir"], None, MS_BIND, "bind the program's directory")
        mount(None, s["dir"], None, MS_REMOUNT | MS_BIND, "make the program's directory writable")
    except SetupError as e:
        fail(str(e))
    pid = os.fork()
    if pid == 0:
        child(s)
    timed_out = []

    def timeout(*_):
        timed_out.append(True)
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, s["timeout_s"])
    # The namespace's init exits only after the kernel has killed and reaped every process left in it,
    # so once this returns nothing of the program runs any more.
    _, status = os.waitpid(pid, 0)
    if timed_out:
        os._exit(TIMED_OUT)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def child(s: dict) -> None:
    try:
        confine(s["limits"], s["uid"], s["gid"])
        os.chdir(s["dir"])
        os.execve(s["python"], [s["python"], "-I", "-S", "-B", *s["argv"]], {})
    except SetupError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
