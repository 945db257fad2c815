"""End to end on the tiny model: a few steps of the real loop, and kill-and-resume equality."""
import json
import os
import subprocess
import sys

import pytest

from rollwise.run.config import load_config
from rollwise.run.loop import Trainer
from rollwise.run.records import TIMING

from conftest import SMALL, kill_and_resume

TIMING_KEYS = set(TIMING)


def small_cfg(out, **kw):
    return load_config(None, {**SMALL, "out": str(out), **kw})


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def read(path):
    return [json.loads(x) for x in open(path).read().splitlines()]


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_train_few_steps_end_to_end(tmp_path, small_policy):
    rows = Trainer(small_cfg(tmp_path / "run", steps=3)).run()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert "eval_acc" in rows[0] and "eval_acc" in rows[2] and "eval_acc" in rows[3]
    toks = [r["tokens"] for r in rows[1:]]
    assert toks == sorted(toks) and toks[0] > 0
    assert rows[3]["tokens"] == rows[3]["tokens_train"] + rows[3]["tokens_discarded"] + rows[3]["tokens_pilot"]
    assert rows[3]["tokens_eval"] > 0  # eval is counted, but apart from the budget
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()
    assert read(tmp_path / "run" / "metrics.jsonl") == rows


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_extend_run_continues_exactly(tmp_path, small_policy):
    full = Trainer(small_cfg(tmp_path / "full", steps=4)).run()
    Trainer(small_cfg(tmp_path / "part", steps=2)).run()
    resumed = Trainer(small_cfg(tmp_path / "part", steps=4)).run()  # same --out, more --steps
    assert strip(resumed) == strip(full)


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_kill_and_resume_is_bit_identical(tmp_path, small_policy, cache_dir):
    """SIGKILL a real `rollwise train` process after step 2, rerun the same command: the metrics equal an
    uninterrupted run's. Steps are slowed by a tiny sleep hook only to make the kill land mid-run."""
    args = [sys.executable, "-m", "rollwise.cli", "train", "--steps", "5", "--set", "eval_every=2"]
    for k, v in SMALL.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    env = {**os.environ, "ROLLWISE_CACHE": str(cache_dir)}
    subprocess.run(args + ["--out", str(tmp_path / "full")], env=env, check=True, capture_output=True)
    killed = tmp_path / "killed"
    done_before, res = kill_and_resume(args, killed, env, rows=3)
    if done_before < 6:  # the kill landed before the end (almost always)
        assert "resuming" in res.stdout
    assert strip(read(killed / "metrics.jsonl")) == strip(read(tmp_path / "full" / "metrics.jsonl"))


def test_budget_stops_the_run(tmp_path, small_policy):
    rows = Trainer(small_cfg(tmp_path / "b", steps=50, budget_tokens=300)).run()
    assert rows[-1]["tokens"] >= 300 and rows[-2]["tokens"] < 300 and "eval_acc" in rows[-1]


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'stepz'"):
        load_config(None, {"stepz": 3})
    with pytest.raises(ValueError, match="config: learner: unknown key 'lrr'"):
        load_config(None, {"learner.lrr": 3})
    f = tmp_path / "c.yaml"
    f.write_text("steps: 7\nlearner:\n  lr: 0.001\n")
    cfg = load_config(f, {"seed": 3})
    assert (cfg.steps, cfg.learner.lr, cfg.seed) == (7, 0.001, 3)


def test_cli_list_shows_every_kind():
    out = subprocess.run([sys.executable, "-m", "rollwise.cli", "list"], capture_output=True, text=True, check=True).stdout
    for needle in ("planner", "uniform", "dapo", "advantage", "grpo", "[CODE", "engine", "torch"):
        assert needle in out


def test_eval_every_tokens_evaluates_at_the_first_step_after_each_multiple(tmp_path, small_policy):
    rows = Trainer(small_cfg(tmp_path / "e", steps=12, eval_every=0, eval_every_tokens=150)).run()
    evaluated = [r["step"] for r in rows if "eval_acc" in r]
    toks = {r["step"]: r["tokens"] for r in rows}
    expected = [0] + [s for s in range(1, 13) if toks[s] // 150 > toks[s - 1] // 150 or s == 12]
    assert evaluated == expected and len(evaluated) > 3


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_recorded_config_reruns_the_run(tmp_path, small_policy, cache_dir):
    """`rollwise train --config <run>/config.json --out NEW` reproduces a run field for field."""
    Trainer(small_cfg(tmp_path / "a", steps=2, planner="dapo", seed=3)).run()
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["planner"] == "dapo" and saved["seed"] == 3 and saved["steps"] == 2
    res = subprocess.run([sys.executable, "-m", "rollwise.cli", "train", "--config", str(tmp_path / "a" / "config.json"),
                          "--out", str(tmp_path / "b")], env={**os.environ, "ROLLWISE_CACHE": str(cache_dir)},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert strip(read(tmp_path / "a" / "metrics.jsonl")) == strip(read(tmp_path / "b" / "metrics.jsonl"))


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_sampled_evaluation_leaves_training_unchanged(tmp_path, small_policy):
    """Sampled evaluation (eval_samples, pass@k) has its own engine and generator: turning it on changes
    the evaluation rows' fields and nothing the training wrote."""
    plain = strip(Trainer(small_cfg(tmp_path / "plain", steps=4, eval_every=1)).run())
    sampled = strip(Trainer(small_cfg(tmp_path / "sampled", steps=4, eval_every=1, eval_samples=3, eval_k=2)).run())
    assert all("eval_sampled_acc@3" in r and "eval_pass@2" in r for r in sampled)
    new = {"eval_sampled_acc@3", "eval_sampled_se@3", "eval_pass@2", "tokens_eval", "rollouts_eval",
           "tok/eval/scored/decoded"}  # the eval rows' own fields and the eval token counts (off budget)
    for a, b in zip(plain, sampled, strict=True):
        differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        assert differ <= new, sorted(differ - new)
