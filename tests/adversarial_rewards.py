"""Reward functions that misbehave, for the reward-worker tests (`--reward adversarial_rewards:NAME`).
They run in the reward worker process, so they are named by module path, never passed as objects."""
import os
import sys
import time


def flaky(resp, ans):
    if resp == "boom":
        raise RuntimeError("bad reward")
    if resp == "hang":
        time.sleep(60)
    return 1.0 if resp == ans else 0.0


def parts(resp, ans):
    if resp == "boom":
        raise RuntimeError("bad reward")
    if resp == "hang":
        time.sleep(60)
    if resp == "odd":
        return {"correct": 1.0}  # a missing component
    if resp == "flat":
        return 1.0  # a float after components
    return {"correct": float(resp == ans), "short": float(len(resp) <= 2)}


def exits(resp, ans):
    if resp == "exit":
        sys.exit(3)
    if resp == "_exit":
        os._exit(4)
    return 1.0


def spins(resp, ans):
    while resp == "spin":
        pass
    return 1.0


def hogs_memory(resp, ans):
    if resp == "hog":
        return float(len(bytearray(16 << 30)))  # 16 GB, far past the worker's limit
    return 1.0


def not_finite(resp, ans):
    return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}.get(resp, 1.0)


def prints(resp, ans):
    print("a reward that prints")  # must not corrupt the worker's protocol
    os.write(1, b"raw bytes on fd 1\n")
    return 1.0


def always_fails(resp, ans):
    raise ZeroDivisionError("division by zero")


def hangs_always(resp, ans):
    time.sleep(60)
    return 1.0


def exit_always(resp, ans):
    os._exit(1)


def nan_reward(resp, ans):
    return float("nan")


def huge(resp, ans):
    return 1e30  # "correct" by magnitude alone, were rewards unbounded


def signed(resp, ans):
    return -1.0 if resp == "bad" else 1.0


signed.reward_range = (-1.0, 1.0)  # a declared range widens the default (0, 1)


def forks(resp, ans):
    """Starts two children that sleep 60 s (one a plain fork, one a subprocess) and records their pids in
    $FORK_PIDS_FILE, then scores; issue 45 found 48 such children alive after the run."""
    import subprocess

    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    child = subprocess.Popen(["sleep", "60"])
    with open(os.environ["FORK_PIDS_FILE"], "a") as f:
        f.write(f"{pid}\n{child.pid}\n")
    return 1.0 if resp == ans else 0.0


def junk_fds(resp, ans):
    """Writes bytes that are not UTF-8 to every descriptor it may have inherited (the protocol's too), as
    issue 45's probe did; it scores normally otherwise."""
    if resp == "junk":
        for fd in range(0, 32):
            try:
                os.write(fd, b"\x80\xff junk")
            except OSError:
                pass
    return 1.0 if resp == ans else 0.0


def junk_at_import_fds():
    for fd in range(0, 32):
        try:
            os.write(fd, b"\x80\xff junk\n")
        except OSError:
            pass


def junk_always(resp, ans):
    return junk_fds("junk", ans)
