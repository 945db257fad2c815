"""The process that runs a user reward function for `rollwise.tasks.reward.RewardWorker`.

It is started as a script (`python _reward_worker.py`) and imports nothing of rollwise, so it starts in
tens of milliseconds and whatever the user's function does (exit, crash, hang, spin, allocate) happens
here, never in the trainer. Protocol, one JSON object per line:

    parent -> worker  {"spec": "module:function", "path": [...], "memory_mb": 4096}   once
    worker -> parent  {"ready": true, "weights": {...} | null, "range": [low, high] | null,
                       "module": the function's __module__}  or  {"error": "..."}
    parent -> worker  {"items": [[response, answer], ...]}                            per call
    worker -> parent  {"value": 1.0} | {"parts": {"name": 1.0}} | {"error": "..."}    one line per item

Results stream back one line per item, so a call that times out keeps the items scored before it.

With a sandbox (the init carries "sandbox": `sandbox.worker_settings()`, and "warm": [[response, answer],
...]), the worker imports the function and scores the warm-up items as the trainer's user, then enters the
sandbox (`_isolate`) and scores them again: "ready" means it is confined and scores them the same.
Nothing is executed after that: the verifier is in memory already. See docs/tasks.md for the threat model.
"""
import importlib
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping


def _guard() -> None:
    """Split into the guard (this process, the process-group leader: the trainer starts it in a new session)
    and the worker (the child, which returns from here). Whatever the reward starts stays in the group; the
    guard kills every other process of the group once the worker has exited or the trainer is gone (SIGKILL
    included: it polls its parent), then exits with the worker's status. The trainer kills the whole group
    itself when it replaces or closes the worker. The guard runs no user code, so it is never stuck in it."""
    trainer = os.getppid()
    pid = os.fork()
    if pid == 0:
        return
    null = os.open(os.devnull, os.O_RDWR)  # the protocol is the worker's alone: EOF reaches the trainer with it
    for fd in (0, 1):
        os.dup2(null, fd)
    status = None
    while status is None and os.getppid() == trainer:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        else:
            time.sleep(0.05)
    _kill_group_but_me()
    if status is None:
        os._exit(1)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _kill_group_but_me() -> None:
    """SIGKILL every process of this process group but this one, until none is left (a process forking
    meanwhile is found on the next pass). Without /proc (not Linux), the whole group, this one included."""
    import signal

    me, group = os.getpid(), os.getpgid(0)
    if not os.path.isdir("/proc"):
        os.killpg(group, signal.SIGKILL)
    for _ in range(100):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                if os.getpgid(int(name)) == group:
                    os.kill(int(name), signal.SIGKILL)
                    found = True
            except OSError:  # gone meanwhile
                pass
        if not found:
            return
        time.sleep(0.01)
        try:  # reap what was ours (the worker); the rest is reaped by its new parent
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def _die_with_parent() -> None:
    """Exit when the trainer dies, even if the reward function never returns: PR_SET_PDEATHSIG on
    Linux, and a watchdog thread everywhere (a Python busy loop still yields the GIL to it)."""
    parent = os.getppid()
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the watchdog alone
        pass
    if os.getppid() != parent:
        os._exit(1)

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _value(raw):
    """The reward as JSON: a float, or the components as floats. Anything else is the function's error."""
    if isinstance(raw, Mapping):
        return {"parts": {str(k): _number(v) for k, v in raw.items()}}
    return {"value": _number(raw)}


def _number(v) -> float:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__float__"):
        raise TypeError(f"returned {type(v).__name__} {v!r:.60}, expected a number or a mapping of numbers")
    return float(v)


def _isolate(box: dict, keep_fds: list[int]) -> None:
    """Enter the sandbox, in this order: new mount, PID and network namespaces with every mount read-only
    (`_sandbox_exec.enter_namespaces`); a private tmpfs on /tmp (`tmp_mb`), the only writable place, gone
    with the worker; fork, so that the child is PID 1 of the new PID namespace; in the child its own
    /proc, the resource limits, then groups, gid, uid (`_sandbox_exec.confine`). It returns in the child;
    this process stays outside as the child's keeper: it waits and exits with the child's status (the
    trainer kills the keeper, and PDEATHSIG the child, to replace the worker). Raises on a failed step."""
    import _sandbox_exec as sx  # beside this script

    sx.enter_namespaces()
    sx.mount("tmpfs", "/tmp", "tmpfs", sx.MS_NOSUID | sx.MS_NODEV, "mount a private /tmp",
             f"size={int(box['tmp_mb'])}m,mode=1777")
    with warnings.catch_warnings():  # Python 3.12 warns of fork with a thread alive: the watchdog holds no lock
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        for fd in keep_fds:  # the protocol is the child's alone: its end closes when the child ends
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    sx.confine(box["limits"], int(box["uid"]), int(box["gid"]))
    os.chdir("/tmp")
    devnull = os.open(os.devnull, os.O_WRONLY)  # nothing a response prints reaches the trainer's stderr
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _score(fn, response: str, answer: str) -> dict:
    try:
        return _value(fn(response, answer))
    except BaseException as e:  # noqa: BLE001 - sys.exit, MemoryError, ... score 0; the worker lives
        return {"error": f"{type(e).__name__}: {e}"[:500]}


def main() -> None:
    _guard()
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    # the user's prints (and anything writing to fd 1) go to stderr, never into the protocol
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdout = sys.stderr
    _die_with_parent()

    def send(obj) -> None:
        proto_out.write(json.dumps(obj) + "\n")

    init = json.loads(proto_in.readline())
    if init.get("sandbox"):
        import _sandbox_exec  # noqa: F401 - from beside this script, before the trainer's path comes first
    sys.path[:0] = [p for p in init["path"] if p not in sys.path]
    if init.get("memory_mb"):
        try:
            import resource

            limit = int(init["memory_mb"]) << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):  # not supported here (e.g. not Unix): no limit
            pass
    spec = init["spec"]
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr, None)
    except BaseException as e:  # noqa: BLE001 - the import is user code too
        send({"error": f"cannot import module {module!r} ({type(e).__name__}: {e})"})
        return
    if not callable(fn):
        send({"error": f"{attr!r} is not a callable in module {module!r}"})
        return
    weights = None
    for owner in (fn, getattr(fn, "__self__", None)):
        w = getattr(owner, "reward_weights", None)
        if w:
            try:
                weights = {str(k): float(v) for k, v in dict(w).items()}
            except Exception as e:  # noqa: BLE001
                send({"error": f"reward_weights of {spec!r} are not numbers ({e})"})
                return
            break
    declared_range = None  # (low, high): the trainer checks every value against it
    for owner in (fn, getattr(fn, "__self__", None)):
        r = getattr(owner, "reward_range", None)
        if r is not None:
            try:
                declared_range = [float(x) for x in r]
            except Exception as e:  # noqa: BLE001
                send({"error": f"reward_range of {spec!r} is not two numbers ({e})"})
                return
            break
    if init.get("sandbox"):
        warm = [(r, a) for r, a in init.get("warm", [])]
        before = [_score(fn, r, a) for r, a in warm]  # imports what the verifier imports lazily, while it can
        try:
            _isolate(init["sandbox"], [proto_in.fileno(), proto_out.fileno()])
        except Exception as e:  # noqa: BLE001 - SetupError or OSError: one line to the trainer
            send({"error": f"sandbox: {e}"})
            return
        after = [_score(fn, r, a) for r, a in warm]
        if after != before:
            send({"error": f"sandbox: the verifier scores its warm-up items {after} inside the sandbox but "
                           f"{before} outside (it may need a file the sandbox user cannot read)"[:500]})
            return
    defined_in = getattr(fn, "__module__", None)  # the trainer checks it is the user's own code (core/trust.py)
    send({"ready": True, "weights": weights, "range": declared_range,
          "module": defined_in if isinstance(defined_in, str) else None})
    for line in proto_in:
        request = json.loads(line)
        for response, answer in request["items"]:
            send(_score(fn, response, answer))


if __name__ == "__main__":
    main()
