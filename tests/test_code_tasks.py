"""Code tasks: a response's code against the row's tests in the sandbox (tasks/code.py, tasks/sandbox.py).

Each hostile response must score 0 without harming the trainer, and the scorer must go on scoring."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollwise.core.types import Group, Prompt, Rollout
from rollwise.tasks.code import CodeTask, extract_code
from rollwise.tasks.reward import Scorer
from rollwise.tasks.sandbox import SandboxLimits, check_available, run_program

LIMITS = SandboxLimits(timeout_s=4, cpu_s=2)
try:
    check_available(LIMITS)
    NO_SANDBOX = None
except ValueError as e:  # not root, or no namespaces: the sandbox refuses, so there is nothing to test
    NO_SANDBOX = str(e)
pytestmark = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")

TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"
ROWS = [{"prompt": "Write add(a, b).", "tests": TESTS, "solution": "def add(a, b):\n    return a + b"},
        {"prompt": "Write sub(a, b).", "tests": ["assert sub(5, 3) == 2", "assert sub(0, 4) == -4"],
         "solution": "def sub(a, b):\n    return a - b"}]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def task(tmp_path):
    return CodeTask(write(tmp_path / "t.jsonl", ROWS), write(tmp_path / "h.jsonl", ROWS[:1]), timeout_s=4, cpu_s=2)


def rollout(text):
    return Rollout(0, [1], [2], [0.0], text, "eos", 0, "train")


def test_extract_code_takes_the_last_fenced_block():
    assert extract_code("x = 1") == "x = 1"
    assert extract_code("Here:\n```python\ndef f(): pass\n```\nand\n```\ny = 2\n```") == "y = 2\n"
    assert extract_code("```py\nz = 3\n```") == "z = 3\n"


def test_rows_and_tests_columns(tmp_path, task):
    # the held-out row is also a train row, so it leaves the RL pool (file tasks never train on held-out prompts)
    assert [p.answer for p in task.train_pool()] == ["assert sub(5, 3) == 2\nassert sub(0, 4) == -4"]
    assert [p.answer for p in task.heldout()] == [TESTS]
    assert not task.answers_are_responses
    renamed = [{"q": r["prompt"], "checks": r["tests"]} for r in ROWS]
    t2 = CodeTask(write(tmp_path / "r.jsonl", renamed), write(tmp_path / "rh.jsonl", renamed[:1]),
                  prompt_field="q", tests_column="checks")
    assert t2.heldout()[0].answer == TESTS


@pytest.mark.parametrize("row, msg", [
    ({"prompt": "p"}, r"bad.jsonl: row 2: missing field 'tests'"),
    ({"prompt": "p", "tests": None}, r"bad.jsonl: row 2: missing field 'tests'"),
    ({"prompt": "p", "tests": ""}, r"bad.jsonl: row 2: field 'tests' is empty"),
    ({"prompt": "p", "tests": []}, r"bad.jsonl: row 2: field 'tests' is empty"),
    ({"prompt": "p", "tests": ["assert 1", 3]}, r"bad.jsonl: row 2: field 'tests' must be a string or a list"),
])
def test_a_row_without_tests_is_one_error_naming_the_row(tmp_path, row, msg):
    bad = write(tmp_path / "bad.jsonl", [ROWS[0], row])
    with pytest.raises(ValueError, match=msg) as e:
        CodeTask(bad, bad)
    assert "\n" not in str(e.value)


def test_answer_field_is_refused_in_favour_of_tests_column(tmp_path):
    f = write(tmp_path / "t.jsonl", ROWS)
    with pytest.raises(ValueError, match="tests_column"):
        CodeTask(f, f, answer_field="solution")


def test_correct_and_incorrect_solutions(task):
    assert task.verify("def add(a, b):\n    return a + b", TESTS) == 1.0
    assert task.verify("```python\ndef add(a, b):\n    return a + b\n```", TESTS) == 1.0
    assert task.verify("def add(a, b):\n    return a - b", TESTS) == 0.0
    assert task.last_outcome.status == "failed" and "AssertionError" in task.last_outcome.detail
    assert task.verify("def add(a, b) return", TESTS) == 0.0  # not Python


def test_hostile_responses_score_zero_and_scoring_goes_on(task, tmp_path, monkeypatch):
    """Loop, fork bomb, write outside its directory, read the trainer's secrets, open a socket: each
    scores 0 with a reason, nothing escapes, and the next correct response still scores 1."""
    monkeypatch.setenv("ROLLWISE_TEST_SECRET", "s3cret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    outside = Path("/tmp") / f"rollwise-escape-{os.getpid()}"
    good = "def add(a, b):\n    return a + b\n"
    hostile = {
        "loop": good + "while True:\n    pass\n",
        "sleep": good + "import time\ntime.sleep(60)\n",
        "fork bomb": good + "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "write outside": good + f"open({str(outside)!r}, 'w').write('x')\n",
        "write home": good + "open('/root/rollwise-escape', 'w').write('x')\n",
        "secret": good + "import os\nassert os.environ['ROLLWISE_TEST_SECRET'] == 's3cret'\n",
        "parent's environ": good + "import os\nassert any('s3cret' in open(f'/proc/{p}/environ').read() "
                                   "for p in os.listdir('/proc') if p.isdigit())\n",
        "socket": good + f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
        "memory": good + "x = bytearray(4 << 30)\n",
        "exit 0 early": good + "import os\nos._exit(0)\n",  # skips the tests with status 0
        "sys.exit(0)": good + "import sys\nsys.exit(0)\n",
    }
    # another process of the sandbox user on the machine (a service, another test): not the sandbox's
    bystander = subprocess.Popen(["sleep", "120"], user=LIMITS.user, start_new_session=True)
    launched = _record_sandbox_sessions(monkeypatch)
    scorer = Scorer(task.verify)
    g = Group(Prompt(0, "Write add(a, b).", TESTS), [rollout(t) for t in [good, *hostile.values(), good]])
    t0 = time.monotonic()
    scorer.score([g])
    rewards = dict(zip(["good", *hostile, "good again"], [r.reward for r in g.rollouts]))
    assert time.monotonic() - t0 < 60
    assert rewards == {"good": 1.0, "good again": 1.0, **{k: 0.0 for k in hostile}}
    assert scorer.errors == 0  # a hostile response is a wrong answer, not a reward failure
    assert not outside.exists() and not Path("/root/rollwise-escape").exists()
    server.settimeout(0.2)
    with pytest.raises(socket.timeout):
        server.accept()  # nothing reached the trainer's socket
    server.close()
    # nothing the sandbox started outlives its programs (the fork bomb's children included); other
    # processes of the sandbox user on this machine are not the test's business
    assert len(launched) == len(g.rollouts)
    try:
        assert _processes_of_sessions(launched) == []
        assert _processes_of_sessions([bystander.pid])  # the check sees a live session's processes
    finally:
        bystander.kill()
        bystander.wait()


def _record_sandbox_sessions(monkeypatch) -> list[int]:
    """The pids of the sandbox launchers started from now on: each starts a new session (and its programs,
    in their own PID namespace, stay in it), so a process in one of these sessions is the sandbox's."""
    from rollwise.tasks import sandbox

    launched: list[int] = []
    real = subprocess.Popen

    class Recording(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if kw.get("start_new_session"):
                launched.append(self.pid)

    monkeypatch.setattr(sandbox.subprocess, "Popen", Recording)
    return launched


def _processes_of_sessions(sessions: list[int]) -> list[str]:
    """Live processes whose session or process group is one of `sessions`, or whose parent chain reaches
    one (read from /proc/PID/stat: pid (comm) state ppid pgrp session ...)."""
    stats = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":  # a zombie is dead already, waiting for its parent to read its status
                stats[int(d.name)] = (int(fields[1]), int(fields[2]), int(fields[3]), stat)
    ours = set(sessions)

    def descends(pid: int) -> bool:
        seen = set()
        while pid in stats and pid not in seen:
            seen.add(pid)
            ppid, pgrp, sid, _ = stats[pid]
            if pid in ours or pgrp in ours or sid in ours:
                return True
            pid = ppid
        return False

    return [stats[p][3] for p in stats if descends(p)]


def test_sandbox_outcomes_name_why():
    assert run_program("import os\nassert os.getuid() != 0 and os.getgroups() == []\n", LIMITS).passed
    assert run_program("import os\nassert os.environ.get('HOME') is None\n", LIMITS).passed
    assert run_program("open('mine.txt', 'w').write('ok')\nassert open('mine.txt').read() == 'ok'\n", LIMITS).passed
    assert run_program("while True: pass\n", LIMITS).status in ("timeout", "killed")
    out = run_program("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n", LIMITS)
    assert out.status == "failed" and "unreachable" in out.detail
    out = run_program("open('/tmp/x', 'w')\n", LIMITS)
    assert out.status == "failed" and "Read-only file system" in out.detail
    out = run_program("import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
                      "assert len([p for p in os.listdir('/proc') if p.isdigit()]) <= 2\n", LIMITS)
    assert out.passed  # its own /proc: it sees itself (PID 1), not the trainer


def test_an_unknown_sandbox_user_is_one_error(tmp_path):
    f = write(tmp_path / "t.jsonl", ROWS)
    with pytest.raises(ValueError, match=r"no user 'no-such-user-x'"):
        CodeTask(f, f, sandbox_user="no-such-user-x")


def test_train_on_the_example_code_task(tmp_path, cache_dir):
    """docs/tasks.md's command on examples/code (the tiny model warm-started on the solutions column,
    smaller here): the run finishes, every rollout was scored by the sandbox without a reward error."""
    root = Path(__file__).parents[1]
    out = tmp_path / "run"
    sets = {"task_options.train_path": root / "examples/code/train.jsonl",
            "task_options.heldout_path": root / "examples/code/heldout.jsonl",
            "task_options.sft_response_field": "solution", "max_new_tokens": 40,
            "warmstart.steps": 20, "warmstart.n_layer": 1, "warmstart.n_embd": 32, "warmstart.n_head": 2,
            "steps": 2, "batch_size": 2, "n": 2, "eval_every": 2}
    cmd = [sys.executable, "-m", "rollwise.cli", "train", "--task", "code", "--out", str(out)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward_mean" in r] == [1, 2]
    assert all(r["reward_errors"] == 0 for r in rows if "reward_errors" in r)
    assert any("eval_acc" in r for r in rows)
