"""The process that runs a user reward function for `rollwise.tasks.reward.RewardWorker`.

It is started as a script (`python _reward_worker.py`) and imports nothing of rollwise, so it starts in
tens of milliseconds and whatever the user's function does (exit, crash, hang, spin, allocate) happens
here, never in the trainer. Protocol, one JSON object per line:

    parent -> worker  {"spec": "module:function", "path": [...], "memory_mb": 4096}   once
    worker -> parent  {"ready": true, "weights": {...} | null, "range": [low, high] | null}  or  {"error": "..."}
    parent -> worker  {"items": [[response, answer], ...]}                            per call
    worker -> parent  {"value": 1.0} | {"parts": {"name": 1.0}} | {"error": "..."}    one line per item

Results stream back one line per item, so a call that times out keeps the items scored before it.
"""
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Mapping


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


def main() -> None:
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
    send({"ready": True, "weights": weights, "range": declared_range})
    for line in proto_in:
        request = json.loads(line)
        for response, answer in request["items"]:
            try:
                out = _value(fn(response, answer))
            except BaseException as e:  # noqa: BLE001 - sys.exit, MemoryError, ... score 0; the worker lives
                out = {"error": f"{type(e).__name__}: {e}"[:500]}
            send(out)


if __name__ == "__main__":
    main()
