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
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


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
