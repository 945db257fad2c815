"""Code named by a data file (issue 45, item 1): a config's `reward: "shutil:rmtree"` deleted the folders
named like the model's answers and exited 0. Code a config or plan names must be the user's own
(core/trust.py); anything else needs --trust-code on the command line. docs/robustness.md has the rule."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollwise.core import trust
from rollwise.tasks.reward import Scorer

from conftest import SMALL

ANSWERS = ("1", "2", "3", "10", "12", "42")


def _train(cwd: Path, config: dict, *flags, env_extra=None) -> subprocess.CompletedProcess:
    (cwd / "c.yaml").write_text(json.dumps({**SMALL, "steps": 1, "eval_every": 0, "batch_size": 2, "n": 2,
                                            **config}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    env.pop("ROLLWISE_TRUST_CODE", None)
    return subprocess.run([sys.executable, "-m", "rollwise.cli", "train", "--config", "c.yaml", "--out", "run",
                           *flags], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_issue_probe_a_config_reward_of_shutil_rmtree_deletes_nothing(tmp_path, cache_dir):
    for a in ANSWERS:
        (tmp_path / a).mkdir()
    res = _train(tmp_path, {"reward": "shutil:rmtree"})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rollwise: error: reward 'shutil:rmtree': refused: 'shutil' is "
                                                   "the standard library"), res.stderr
    assert "--trust-code shutil" in lines[0]
    assert all((tmp_path / a).is_dir() for a in ANSWERS) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("source,why", [
    ("from shutil import rmtree\n", "it is defined in 'shutil'"),
    ("import os\nrmtree = os.remove\n", "it is defined in 'posix'"),
    ("import functools, shutil\nrmtree = functools.partial(shutil.rmtree)\n", "defined in 'functools'"),
])
def test_a_users_module_that_re_exports_a_stdlib_callable_is_refused(tmp_path, cache_dir, source, why):
    """The module is the user's, the callable is not: refused after the worker imports it, before any call."""
    (tmp_path / "mine.py").write_text(source)
    for a in ANSWERS:
        (tmp_path / a).mkdir()
    res = _train(tmp_path, {"reward": "mine:rmtree"})
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and why in res.stderr, res.stderr
    assert all((tmp_path / a).is_dir() for a in ANSWERS)


def test_trust_code_on_the_command_line_lets_an_installed_callable_run(tmp_path, cache_dir):
    """operator:eq scores a response 1 when it equals the answer: harmless, and from the standard library."""
    res = _train(tmp_path, {"reward": "operator:eq"})
    assert res.returncode == 2 and "'operator' is the standard library" in res.stderr
    res = _train(tmp_path, {"reward": "operator:eq"}, "--trust-code", "operator")
    assert res.returncode == 0, res.stderr
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["reward_errors"] == 0


def test_the_users_own_module_is_allowed_and_the_trust_env_is_the_flags(tmp_path, monkeypatch):
    (tmp_path / "myreward.py").write_text("def fn(r, a):\n    return float(r == a)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(trust.TRUST_ENV, raising=False)
    s = Scorer("myreward:fn", trusted=False, timeout_s=5)
    try:
        assert [x.reward for x in s.judge_many([("7", "7"), ("7", "8")])] == [1.0, 0.0]
    finally:
        s.close()
    with pytest.raises(ValueError, match=r"'json' is the standard library"):
        trust.check_code("reward", "json:loads")
    with pytest.raises(ValueError, match=r"'yaml' is an installed package \(.*site-packages"):
        trust.check_code("task", "yaml:load", allow_rollwise=True)
    with pytest.raises(ValueError, match=r"'rollwise.run.rundir' is rollwise itself"):
        trust.check_code("reward", "rollwise.run.rundir:start")
    trust.check_code("task", "rollwise.tasks.arithmetic:ArithmeticTask", allow_rollwise=True)  # a registry kind
    with pytest.raises(ValueError, match=r"no module 'zz_no_such'"):
        trust.check_code("reward", "zz_no_such:f")
    monkeypatch.setenv(trust.TRUST_ENV, "yaml, json")
    trust.check_code("reward", "json:loads")
    trust.check_code("reward", "yaml.constructor:x")  # a dotted module under a trusted package


def test_the_trust_flag_does_not_outlive_the_command(tmp_path, monkeypatch, capsys):
    from rollwise.cli import main

    monkeypatch.delenv(trust.TRUST_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    main(["list", "--trust-code", "shutil"])
    assert trust.TRUST_ENV not in os.environ
