"""No process of a run survives it, whatever the reward does (issue 45, item 2): a reward that forked left 48
children of the reward worker alive (ppid 1) after the run exited 0. The worker's guard leads a process
group holding everything the reward starts; the trainer kills the group, and the guard does when the
trainer is gone (SIGKILL included)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollwise.tasks.reward import Scorer

from conftest import SMALL

TESTS = os.path.dirname(__file__)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="counts processes in /proc (Linux)")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for a reaper that is not this test's is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def group_members(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getpgid(int(name)) == pgid and alive(int(name)):
                    out.append(int(name))
            except OSError:
                pass
    return out


def recorded(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def wait_gone(pids, pgids, seconds: float) -> tuple[list[int], list[int]]:
    deadline = time.time() + seconds
    while True:
        left = [p for p in pids if alive(p)]
        members = [m for g in pgids for m in group_members(g)]
        if not left and not members or time.time() > deadline:
            return left, members
        time.sleep(0.1)


def train_args(out: Path, steps: int) -> list[str]:
    args = [sys.executable, "-m", "rollwise.cli", "train", "--out", str(out), "--steps", str(steps),
            "--reward", "adversarial_rewards:forks"]
    for k, v in {**SMALL, "eval_every": 0, "batch_size": 2, "n": 2, "checkpoint_every": 1000}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args


def env_for(pids_file: Path, cache_dir) -> dict:
    return {**os.environ, "ROLLWISE_CACHE": str(cache_dir), "FORK_PIDS_FILE": str(pids_file), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}


def test_a_reward_that_forks_leaves_nothing_after_the_run_exits(tmp_path, cache_dir):
    pids_file = tmp_path / "pids"
    with open(tmp_path / "log", "w+") as log:  # not a pipe: a survivor holding it would delay the run's return
        res = subprocess.run(train_args(tmp_path / "run", 2), env=env_for(pids_file, cache_dir), stdout=log,
                             stderr=log, timeout=300)
    assert res.returncode == 0, (tmp_path / "log").read_text()[-2000:]
    pids = recorded(pids_file)
    assert len(pids) >= 4  # two children per call, at least one call per step
    left, _ = wait_gone(pids, set(), 2.0)
    assert left == [], f"children of the reward still alive after the run: {left}"


def test_a_reward_that_forks_leaves_nothing_after_the_trainer_is_sigkilled(tmp_path, cache_dir):
    pids_file = tmp_path / "pids"
    proc = subprocess.Popen(train_args(tmp_path / "run", 10_000), env=env_for(pids_file, cache_dir),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while len(recorded(pids_file)) < 4 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        pids = recorded(pids_file)
        assert len(pids) >= 4, "the reward never ran"
        pgids = {os.getpgid(p) for p in pids if alive(p)}
        assert pgids and os.getpgid(proc.pid) not in pgids  # the worker's own group, not the trainer's
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left, members = wait_gone(recorded(pids_file), pgids, 5.0)
    assert left == [] and members == [], f"alive after the trainer's SIGKILL: {left}, group members {members}"


def test_closing_a_scorer_kills_the_whole_group(tmp_path, monkeypatch):
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("FORK_PIDS_FILE", str(pids_file))
    s = Scorer("adversarial_rewards:forks", trusted=False, timeout_s=10)
    try:
        assert [x.reward for x in s.judge_many([("1", "1"), ("2", "3")])] == [1.0, 0.0]
        pids = recorded(pids_file)
        group = os.getpgid(pids[0])
        assert len(pids) == 4 and group == s.worker.proc.pid  # the worker's guard leads the group
    finally:
        s.close()
    left, members = wait_gone(pids, {group}, 2.0)
    assert left == [] and members == []


# ---- a reward writing junk to the descriptors it inherited (issue 45, item 7) -------------------------------

def test_junk_on_the_protocols_descriptor_fails_that_call_names_the_reward_and_the_worker_goes_on(capfd):
    s = Scorer("adversarial_rewards:junk_fds", trusted=False, timeout_s=10)
    try:
        first = s.worker.proc.pid
        scores = s.judge_many([("junk", "x"), ("1", "1")])
        assert [x.reward for x in scores] == [0.0, 0.0] and s.errors == 2
        assert "\n" not in s.last_error and "reward 'adversarial_rewards:junk_fds': the reward worker (pid" in \
            s.last_error and "is not its protocol" in s.last_error and "worker was replaced" in s.last_error
        assert [x.reward for x in s.judge_many([("1", "1"), ("2", "3")])] == [1.0, 0.0]  # a fresh worker
        assert s.worker.proc.pid != first and s.worker.replaced == 1
    finally:
        s.close()


def test_junk_written_when_the_reward_module_is_imported_is_one_line_before_training():
    with pytest.raises(ValueError, match=r"^reward 'junk_on_import:fn': the reward worker \(pid \d+, "
                                         r"_reward_worker.py\) sent b'\\x80\\xff junk', which is not its protocol"):
        Scorer("junk_on_import:fn", trusted=False, timeout_s=10)


def test_a_run_whose_reward_always_writes_junk_goes_on(tmp_path, small_policy):
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    logs = []
    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "r"), "steps": 1, "eval_every": 0,
                             "reward": "adversarial_rewards:junk_always"})
    rows = Trainer(cfg, log=logs.append).run()
    assert rows[-1]["reward_errors"] == rows[-1]["rollouts"] > 0
    assert any("adversarial_rewards:junk_always': the reward worker" in m for m in logs), logs
