"""The reasoning-gym verifier's sandbox (tasks/_reward_worker.py with `sandbox`, rgym.py's verify_sandbox).

A response that reaches Python evaluation (sympy's parse_expr, or `evaluates` below, a verifier that
evals the response) must not reach the network, write outside the worker's private /tmp, read a file
only root can read or the trainer's environment, or start a process; it scores 0 and the next response
is scored as before. Sandboxed scores equal the in-process verifier's."""
import json
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

from rollwise.tasks.reward import RewardWorker
from rollwise.tasks.sandbox import unavailable, worker_settings

TESTS = str(Path(__file__).parent)


def _probe() -> str | None:
    """Why no sandboxed worker starts here (not root, no namespaces), or None."""
    if unavailable():
        return unavailable()
    try:
        RewardWorker("rewards_for_tests:evaluates", 5, 0, [TESTS], sandbox=worker_settings()).close()
    except ValueError as e:
        return str(e)
    return None


NO_SANDBOX = _probe()
pytestmark = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")


def worker(**kw) -> RewardWorker:
    return RewardWorker("rewards_for_tests:evaluates", kw.pop("timeout_s", 5), 1024, [TESTS],
                        sandbox=worker_settings(), **kw)


def score(w: RewardWorker, response: str):
    (ok, value), = w.call([(response, "")])
    return value if ok else None  # None: the function raised (a zero reward)


@pytest.fixture
def outside():
    """A directory outside /tmp that the sandbox user could write to (mode 777) if the file system were
    writable, holding a file only root can read."""
    d = Path(tempfile.mkdtemp(prefix="rollwise-sbx-", dir="/var/tmp"))
    d.chmod(0o777)
    (d / "secret").write_text("s3cret")
    (d / "secret").chmod(stat.S_IRUSR | stat.S_IWUSR)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def test_a_confined_worker_reaches_nothing_outside_and_goes_on(outside, monkeypatch):
    monkeypatch.setenv("ROLLWISE_TEST_SECRET", "hunter2")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    w = worker()
    pid = w.proc.pid
    assert score(w, "os.getuid()") == 65534.0 and score(w, "os.getgid()") == 65534.0  # nobody
    assert score(w, "float(len(os.getgroups()))") == 0.0
    assert score(w, f"socket.create_connection(('127.0.0.1', {port}), timeout=1) and 1") is None
    assert score(w, f"open('{outside}/written', 'w').write('x')") is None
    assert not (outside / "written").exists()
    assert score(w, f"len(open('{outside}/secret').read())") is None
    assert score(w, "float(os.environ.get('ROLLWISE_TEST_SECRET') is None)") == 1.0
    assert score(w, "float(b'hunter2' in open('/proc/self/environ', 'rb').read())") is None  # not even its own
    assert score(w, "os.fork()") is None  # RLIMIT_NPROC 0
    assert score(w, "sum(n.isdigit() for n in os.listdir('/proc'))") == 1.0  # it sees itself only
    # its own /tmp is writable, private, and gone with it
    name = f"rollwise-sbx-{os.getpid()}"
    assert score(w, f"open('/tmp/{name}', 'w').write('abc')") == 3.0
    assert score(w, f"len(open('/tmp/{name}').read())") == 3.0
    assert not Path(f"/tmp/{name}").exists()
    assert score(w, "1") == 1.0 and w.proc.pid == pid and w.replaced == 0  # the same worker goes on
    srv.settimeout(0.2)
    with pytest.raises(socket.timeout):
        srv.accept()  # nothing connected
    srv.close()
    w.close()


def _nobody_workers() -> list[int]:
    """Processes of the sandbox user running the reward worker."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            uid = int((d / "status").read_text().split("\nUid:")[1].split()[0])
            if uid == 65534 and b"_reward_worker.py" in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_a_worker_that_dies_or_hangs_is_replaced_and_leaves_nothing_behind():
    w = worker(timeout_s=1.0)
    first = w.proc.pid
    ok, why = w.call([("os._exit(3)", "")])[0]
    assert not ok and "exited" in why and w.replaced == 1
    assert score(w, "2 / 2") == 1.0 and w.proc.pid != first  # a fresh sandboxed worker
    assert score(w, "os.getuid()") == 65534.0
    ok, why = w.call([("sum(iter(int, 1))", "")])[0]  # spins for ever
    assert not ok and "timed out" in why and w.replaced == 2
    assert score(w, "1") == 1.0
    w.close()
    deadline = time.monotonic() + 5
    while _nobody_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _nobody_workers() == []  # PDEATHSIG took every confined child with its keeper


def test_a_verifier_that_scores_differently_once_confined_is_refused():
    """The warm-up items are scored before and after confinement: one that needs root's view (here: being
    root) differs, and the worker does not start."""
    with pytest.raises(ValueError, match=r"scores its warm-up items \[\{'value': 0.0\}\] inside the sandbox "
                                         r"but \[\{'value': 1.0\}\] outside") as e:
        worker(warm=[("float(os.getuid() == 0)", "")])
    assert "\n" not in str(e.value)
    assert score(worker(warm=[("1", "")]), "1") == 1.0


# ---- the reasoning-gym task ------------------------------------------------------------------------

rg = pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra is not installed")

from rollwise.tasks import _rg_reward  # noqa: E402
from rollwise.tasks.rgym import ReasoningGymTask  # noqa: E402

SMALL = dict(pool_size=5, validation_size=3, test_size=0, sft_size=5)


def ref(p) -> str:
    return str(json.loads(p.answer)["entry"]["answer"])


@pytest.mark.parametrize("dataset", ["gcd", "basic_arithmetic", "polynomial_multiplication"])
def test_sandboxed_scores_equal_the_in_process_verifier(dataset):
    task = ReasoningGymTask(dataset=dataset, **SMALL)  # verify_sandbox: auto
    p, q = task.heldout()[:2]
    responses = [ref(p), f" {ref(p)} ok", ref(q), "7", "", "(1 +", "x" * 300]
    got = [task.verify(r, p.answer) for r in responses]
    assert task._worker.sandbox is not None  # it ran confined
    assert got == [_rg_reward.score(r, p.answer) for r in responses]
    assert got[0] == 1.0 and got[3:] == [0.0] * 4  # the right answer, and nothing for a wrong one or garbage
    task.close()


def test_a_response_that_sympy_evaluates_reaches_nothing_and_scores_zero(outside):
    """polynomial_multiplication parses the response with sympy's parse_expr, which evaluates Python:
    each response below is the right polynomial only if its side effect succeeds. In the trainer's
    process each scores 1 (the control); in the sandbox each scores 0 and has no effect."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    task = ReasoningGymTask(dataset="polynomial_multiplication", **SMALL, verify_sandbox=True)
    p = task.heldout()[0]
    right = ref(p)
    hostile = [f"({right}) if open('{outside}/secret').read() == 's3cret' else 0",
               f"__import__('socket').create_connection(('127.0.0.1', '{port}')) and ({right})",
               f"open('{outside}/written', 'w').write('x') and ({right})"]
    assert [task.verify(r, p.answer) for r in hostile] == [0.0, 0.0, 0.0]
    assert not (outside / "written").exists()
    with pytest.raises(socket.timeout):
        srv.accept()
    assert task.verify(right, p.answer) == 1.0 and task._worker.replaced == 0  # the run goes on
    task.close()
    assert [_rg_reward.score(r, p.answer) for r in hostile] == [1.0, 1.0, 1.0]  # unconfined, they work
    assert (outside / "written").exists()
    srv.accept()[0].close()
    srv.close()


def test_verify_sandbox_options_and_the_fallback(monkeypatch, capsys):
    with pytest.raises(ValueError, match="verify_sandbox must be true, false or auto, got 'yes'"):
        ReasoningGymTask(dataset="gcd", **SMALL, verify_sandbox="yes")
    monkeypatch.setattr("rollwise.tasks.rgym.unavailable", lambda: "sandbox: needs root")
    with pytest.raises(ValueError, match=r"^task_options.verify_sandbox=true: sandbox: needs root \(set it to "
                                         r"auto or false"):
        ReasoningGymTask(dataset="gcd", **SMALL, verify_sandbox=True)
    task = ReasoningGymTask(dataset="gcd", **SMALL)  # auto: warns once, then runs unconfined
    p = task.heldout()[0]
    assert task.verify(ref(p), p.answer) == 1.0 and task.verify("0", p.answer) == 0.0
    assert task._worker.sandbox is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: reasoning-gym: the verifier runs without its sandbox (sandbox: needs root); "
                   "task_options.verify_sandbox=false silences this, true makes it an error"]
    task.close()
