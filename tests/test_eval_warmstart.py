import json
import subprocess
import sys
from math import comb

import pytest

from rollwise.policy.warmstart import WarmStartConfig, base_checkpoint
from rollwise.run.evaluate import evaluate, pass_at_k
from rollwise.tasks.reward import Scorer


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(8, 0, 4) == 0.0 and pass_at_k(8, 8, 4) == 1.0 and pass_at_k(8, 5, 4) == 1.0  # n - c < k
    assert pass_at_k(8, 2, 1) == pytest.approx(2 / 8)
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - comb(6, 4) / comb(8, 4))  # 1 - 15/70
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_sampled_accuracy_and_pass_at_k_aggregate_per_prompt(small_policy):
    """A reward that accepts any response to 3 of 10 prompts: every sample of those is correct, so the
    sampled accuracy is 0.3, pass@2 is 0.3, and the standard error is the s.d. of [1,1,1,0,...] / sqrt(10)."""
    _, policy, task = small_policy
    prompts = task.heldout()[:10]
    lucky = {p.answer for p in prompts[:3]}
    scorer = Scorer(lambda response, answer: 1.0 if answer in lucky else 0.0)
    if len(lucky) < 3 or any(p.answer in lucky for p in prompts[3:]):
        pytest.skip("the held-out answers repeat")
    out = evaluate(policy, prompts, scorer, None, max_new_tokens=4, k=2, n_samples=4)
    assert out["eval_sampled_acc@4"] == pytest.approx(0.3) and out["eval_pass@2"] == pytest.approx(0.3)
    assert out["eval_sampled_se@4"] == pytest.approx((10 * 0.3 * 0.7 / 9) ** 0.5 / 10 ** 0.5)
    only = evaluate(policy, prompts, scorer, None, max_new_tokens=4, n_samples=3)  # sampled accuracy alone
    assert only["eval_sampled_acc@3"] == pytest.approx(0.3) and not any(k.startswith("eval_pass@") for k in only)


def test_sampled_evaluation_is_deterministic_under_its_seed(small_policy):
    _, policy, task = small_policy

    def sampled(seed):
        seen = []
        scorer = Scorer(lambda response, answer: (seen.append(response), task.verify(response, answer))[1])
        out = evaluate(policy, task.heldout()[:12], scorer, None, max_new_tokens=8, n_samples=4, seed=seed)
        return out["eval_sampled_acc@4"], seen

    acc, responses = sampled(7)
    assert sampled(7) == (acc, responses) and len(responses) == 12 + 48
    assert sampled(8)[1] != responses  # the seed draws the samples


def test_base_checkpoint_is_cached_and_reports_levels(small_policy, cache_dir):
    path, policy, task = small_policy
    report = json.loads((path / "report.json").read_text())
    assert {f"eval_acc_L{k}" for k in range(1, 7)} <= set(report)
    assert abs(report["pool_all_correct"] + report["pool_all_wrong"] + report["pool_mixed"] - 1) < 1e-9
    mtime = (path / "model.safetensors").stat().st_mtime
    logs = []
    again = base_checkpoint(task, WarmStartConfig(steps=20), cache_dir, log=logs.append)
    assert again == path and logs == [] and (path / "model.safetensors").stat().st_mtime == mtime


def test_evaluate_counts_eval_tokens_and_pass_at_k(small_policy):
    from rollwise.core.ledger import Ledger

    _, policy, task = small_policy
    ledger = Ledger()
    out = evaluate(policy, task.heldout()[:10], Scorer(task.verify), ledger, max_new_tokens=8, k=2, n_samples=4)
    assert 0.0 <= out["eval_pass@2"] <= 1.0 and out["eval_se"] >= 0.0
    assert ledger.count_rollouts("eval", "scored") == 10 + 40 and ledger.budget_tokens() == 0
    same = evaluate(policy, task.heldout()[:10], Scorer(task.verify), None, max_new_tokens=8, k=2, n_samples=4)
    assert same["eval_pass@2"] == out["eval_pass@2"]  # evaluation is a pure function of the weights


def test_cli_eval_on_a_checkpoint(small_policy, cache_dir):
    path, _, _ = small_policy
    res = subprocess.run([sys.executable, "-m", "rollwise.cli", "eval", "--model", str(path), "--size", "5"],
                         capture_output=True, text=True, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["prompts"] == 5 and 0.0 <= out["eval_acc"] <= 1.0


def test_warm_start_is_deterministic_whatever_the_thread_count(tmp_path):
    """A base rebuilt with another caller thread count has the same weights (the build runs with one
    thread and deterministic algorithms); the full rebuild of the shipped base is benchmarks/rebuild_base.py."""
    import torch
    from safetensors.torch import load_file

    from rollwise.policy.warmstart import WarmStartConfig, build_base
    from rollwise.tasks.arithmetic import ArithmeticTask

    task, cfg = ArithmeticTask(pool_size=50, heldout_size=20), WarmStartConfig(steps=12)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        build_base(task, cfg, tmp_path / "a", log=lambda m: None)
        torch.set_num_threads(1)
        build_base(task, cfg, tmp_path / "b", log=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.get_num_threads() == threads  # the caller's setting is restored


def test_the_default_run_starts_from_the_shipped_base():
    from rollwise.policy.warmstart import SHIPPED, WarmStartConfig, base_checkpoint
    from rollwise.tasks.arithmetic import ArithmeticTask

    path = base_checkpoint(ArithmeticTask(pool_size=300, level_weights=(4, 4, 2, 1, 0.5, 0.5)), WarmStartConfig(),
                           log=lambda m: pytest.fail(f"rebuilt the shipped base: {m}"))
    assert path == SHIPPED / "arithmetic" and (path / "model.safetensors").exists()
    report = json.loads((path / "report.json").read_text())
    assert 0.2 < report["eval_acc"] < 0.7 and report["pool_mixed"] > 0.3  # a spread of pass rates


def test_cli_warmstart_refuses_to_overwrite(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    res = subprocess.run([sys.executable, "-m", "rollwise.cli", "warmstart", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "not empty" in res.stderr and (tmp_path / "x" / "keep.txt").read_text() == "mine"


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_cli_eval_takes_a_run_directory(tmp_path, small_policy, cache_dir):
    """`rollwise eval --model RUN_DIR` (what `export` accepts) evaluates the run's latest model, instead of
    failing on the run's config.json as if it were a tokenizer's directory."""
    import os

    from conftest import SMALL

    run = tmp_path / "run"
    env = {**os.environ, "ROLLWISE_CACHE": str(cache_dir)}
    args = [sys.executable, "-m", "rollwise.cli", "train", "--steps", "1", "--out", str(run)]
    for k, v in {**SMALL, "eval_every": 0}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    subprocess.run(args, capture_output=True, text=True, check=True, env=env)
    res = subprocess.run([sys.executable, "-m", "rollwise.cli", "eval", "--model", str(run), "--size", "5"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["prompts"] == 5 and 0.0 <= out["eval_acc"] <= 1.0
