import os

import pytest

# Small everything: the suite must run in minutes on 2 cores.
SMALL = {
    "task_options": {"pool_size": 200, "heldout_size": 40},
    "warmstart": {"steps": 20},
    "batch_size": 8, "n": 4, "max_new_tokens": 8, "eval_every": 2, "checkpoint_every": 1,
}


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rollwise-cache")
    old = os.environ.get("ROLLWISE_CACHE")
    os.environ["ROLLWISE_CACHE"] = str(d)
    yield d
    if old is None:
        os.environ.pop("ROLLWISE_CACHE", None)
    else:
        os.environ["ROLLWISE_CACHE"] = old


@pytest.fixture(scope="session")
def small_policy(cache_dir):
    """A briefly warm-started tiny policy (shared, read-only: load a copy to train)."""
    from rollwise.policy.policy import Policy
    from rollwise.policy.warmstart import WarmStartConfig, base_checkpoint
    from rollwise.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(**SMALL["task_options"])
    path = base_checkpoint(task, WarmStartConfig(**SMALL["warmstart"]), cache_dir, log=lambda m: None)
    return path, Policy.load(path), task


def kill_and_resume(args, out, env, rows: int):
    """Start `args --out out` as a process, SIGKILL it once metrics.jsonl has `rows` lines (or it ended), then
    run the same command again: (rows written before the kill, the rerun's CompletedProcess)."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(args + ["--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        m = out / "metrics.jsonl"
        if m.exists() and sum(1 for _ in open(m)) >= rows:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    m = out / "metrics.jsonl"
    before = sum(1 for x in open(m) if x.strip()) if m.exists() else 0
    return before, subprocess.run(args + ["--out", str(out)], env=env, check=True, capture_output=True, text=True)
