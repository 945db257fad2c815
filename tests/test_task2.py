"""Embedded task 2 (`chain`): the task, its defaults, the overlong penalty, truncation metrics, the
bench and the simulator profile. Everything small: a few seconds each."""
import re

import numpy as np
import pytest
import torch

from rollwise.core import registry
from rollwise.core.types import Group, Prompt, Rollout
from rollwise.policy.warmstart import WarmStartConfig, group_by_length
from rollwise.run.config import Config, load_config
from rollwise.tasks.chain import OPS, ChainTask, final_answer, sample_chain
from rollwise.tasks.reward import Scorer
from rollwise.tasks.shaping import OverlongPenalty, ShapedScorer, build_shaping

SMALL_WS = {"steps": 3, "batch_size": 4, "n_layer": 1, "n_embd": 32, "n_head": 2}


def check_trace(prompt: str, trace: str, answer: str) -> None:
    """Recompute every step of a scratchpad from the prompt ("7a+3b-5=" -> "a+3=10,b-5=5:5")."""
    total = int(prompt[0])
    operations = re.findall(r"([a-x])([+-])(\d)", prompt[1:-1])
    assert "".join(lab for lab, _, _ in operations) == "abcdefghijklmnopqrstuvwx"[:len(operations)]
    steps = trace.split(":")[0].split(",")
    assert len(steps) == len(operations) and prompt == str(total) + "".join(map("".join, operations)) + "="
    for (label, op, d), step in zip(operations, steps):
        total = total + int(d) if op == "+" else total - int(d)
        assert step == f"{label}{op}{d}={total}" and 0 <= total <= 99
    assert trace.endswith(f":{total}") and answer == str(total)


def test_chain_is_deterministic_disjoint_and_its_traces_are_right():
    t1, t2 = ChainTask(pool_size=300, heldout_size=80, seed=3), ChainTask(pool_size=300, heldout_size=80, seed=3)
    assert [p.text for p in t1.train_pool()] == [p.text for p in t2.train_pool()]
    assert {p.text for p in t1.train_pool()}.isdisjoint({p.text for p in t1.heldout()})
    assert [p.text for p in ChainTask(pool_size=300, heldout_size=80, seed=4).train_pool()] != \
        [p.text for p in t1.train_pool()]
    held = {p.text for p in t1.heldout()}
    for text, trace, level in t1.sft_examples(200, seed=5):
        assert text not in held and text.count("+") + text.count("-") == OPS[level - 1]
        assert len(text) == 3 * OPS[level - 1] + 2
        prompt_answer = trace.rsplit(":", 1)[1]
        check_trace(text, trace, prompt_answer)
    # longer chains, longer traces: the length grows with the level
    lengths = {lv: np.mean([len(tr) for _, tr, l in t1.sft_examples(400, 6) if l == lv]) for lv in (1, 4, 8)}
    assert lengths[1] < 20 < lengths[4] < 60 < 140 < lengths[8] < 180


class ScriptedRng:
    """Stands in for numpy's Generator: integers() and random() return the scripted values in order."""

    def __init__(self, ints, uniforms):
        self.ints, self.uniforms = list(ints), list(uniforms)

    def integers(self, low, high):
        return self.ints.pop(0)

    def random(self):
        return self.uniforms.pop(0)


def test_sample_chain_by_hand():
    # start 5; -9 would go below 0, so it is flipped to +9 (14); +8 -> 22; -2 -> 20
    rng = ScriptedRng([5, 9, 8, 2], [0.9, 0.1, 0.9])  # random() < 0.5 means "+"
    assert sample_chain(rng, 3) == ("5a+9b+8c-2=", "a+9=14,b+8=22,c-2=20:20", "20")
    # 9 then ten times +9 reaches 99; the next +7 would pass 99, so it is flipped to -7 (92)
    rng = ScriptedRng([9] + [9] * 10 + [7], [0.1] * 11)
    text, trace, ans = sample_chain(rng, 11)
    assert text == "9" + "".join(f"{c}+9" for c in "abcdefghij") + "k-7="
    assert trace.endswith("i+9=90,j+9=99,k-7=92:92") and ans == "92"


def test_chain_verifier_reads_the_answer_after_the_last_colon():
    t = ChainTask(pool_size=10, heldout_size=10)
    assert t.verify("a+3=10,b-5=5:5", "5") == 1.0
    assert t.verify("a+3=10,b-5=4:5", "5") == 1.0  # the trace is free
    assert t.verify("a+3=10:9,b-5=4:4", "5") == 0.0 and t.verify("a+3=10,b-5=5", "5") == 0.0
    assert t.verify(": 5 ", "5") == 1.0 and final_answer("no mark") is None
    with pytest.raises(ValueError, match="level_weights"):
        ChainTask(level_weights=(1, 1))
    assert {p.level for p in ChainTask(pool_size=50, heldout_size=10, level_weights=(0,) * 7 + (1,)).train_pool()} == {8}


def test_task_defaults_apply_only_where_the_user_set_none():
    arith = load_config(None, {})
    assert arith.max_new_tokens == 10 and arith.warmstart == WarmStartConfig()  # the shipped base's settings
    chain = load_config(None, {"task": "chain"})
    assert chain.max_new_tokens == ChainTask.max_new_tokens == 224
    assert chain.warmstart == WarmStartConfig(**ChainTask.warmstart_defaults)
    mine = load_config(None, {"task": "chain", "max_new_tokens": 64, "warmstart.steps": 7})
    assert mine.max_new_tokens == 64 and mine.warmstart.steps == 7
    assert mine.warmstart.block_size == ChainTask.warmstart_defaults["block_size"]  # kept under the user's key
    assert load_config(None, {"task": "chain", "warmstart.block_size": 400}).warmstart.block_size == 400
    assert Config(task="chain").max_new_tokens == 224  # built directly, too
    again = load_config(None, Config(task="chain").to_dict())  # a recorded config reruns unchanged
    assert again.to_dict() == Config(task="chain").to_dict()


def test_chain_train_picks_the_shipped_base_without_a_warm_start(tmp_path):
    from rollwise.policy.warmstart import SHIPPED, base_checkpoint

    cfg = load_config(None, {"task": "chain"})
    logs = []
    path = base_checkpoint(ChainTask(), cfg.warmstart, cache_dir=tmp_path, log=logs.append)
    assert path == SHIPPED / "chain" and logs == [] and not any(tmp_path.iterdir())


# ---- the overlong penalty (DAPO) ----------------------------------------------------------------

def rollout(ntok: int, reward: float = 1.0) -> Rollout:
    return Rollout(0, [1], torch.zeros(ntok, dtype=torch.long), torch.zeros(ntok), "x", "eos", 0,
                   reward=reward, correct=reward >= 1)


def test_overlong_penalty_by_hand():
    # L_max 20, L_cache 5: no penalty up to 15 tokens, then -(L - 15) / 5, down to -1 at 20
    shape = OverlongPenalty(max_len=20, buffer_len=5)
    assert [shape(rollout(L)) for L in (1, 15, 16, 18, 20)] == [0.0, 0.0, -0.2, pytest.approx(-0.6), -1.0]
    assert shape(rollout(25)) == -1.0  # past L_max (a resumed partial): the paper's -1
    half = OverlongPenalty(max_len=20, buffer_len=5, penalty_factor=0.5)
    assert half(rollout(18)) == pytest.approx(-0.3) and half(rollout(30)) == -0.5
    # the run's max_new_tokens is L_max unless given; L_cache defaults to L_max // 5 (DAPO: 4096 of 20480)
    run = build_shaping("overlong", {}, max_len=256)
    assert (run.max_len, run.buffer_len) == (256, 51) and run(rollout(256 - 51)) == 0.0
    assert run(rollout(256)) == -1.0
    with pytest.raises(ValueError, match="buffer_len"):
        OverlongPenalty(max_len=10, buffer_len=11)
    assert registry.get("shaping", "overlong").obj is OverlongPenalty


def test_shaped_scorer_moves_rewards_not_correctness():
    task = ChainTask(pool_size=10, heldout_size=10)
    scorer = ShapedScorer(Scorer(task.verify), OverlongPenalty(max_len=20, buffer_len=5))
    p = Prompt(0, "1+1=", "2", 1)
    right_long, right_short, wrong_long = rollout(18), rollout(10), rollout(20)
    right_long.text = right_short.text = "1+1=2:2"
    wrong_long.text = "1+1=3:3"
    g = Group(p, [right_long, right_short, wrong_long])
    scorer.score([g])
    assert [r.reward for r in g.rollouts] == [pytest.approx(0.4), 1.0, -1.0]
    assert [r.correct for r in g.rollouts] == [True, True, False]
    assert scorer.judge("1+1=2:2", "2").reward == 1.0  # evaluation judges the answer only
    scorer.errors = 3
    assert scorer.scorer.errors == 3


def test_shaping_options_are_checked_before_the_run():
    with pytest.raises(ValueError, match="unknown option 'buffer'.*buffer_len"):
        load_config(None, {"reward_shaping": "overlong", "reward_shaping_options": {"buffer": 4}})
    with pytest.raises(ValueError, match="no shaping named 'nope'"):
        load_config(None, {"reward_shaping": "nope"})
    with pytest.raises(ValueError, match="reward_shaping is not"):
        load_config(None, {"reward_shaping_options": {"buffer_len": 4}})


# ---- truncation and shaping in a real training step ------------------------------------------

def test_train_step_counts_truncation_and_applies_the_penalty(tmp_path, cache_dir):
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {
        "task": "chain", "task_options": {"pool_size": 8, "heldout_size": 8}, "warmstart": SMALL_WS,
        "out": str(tmp_path / "run"), "batch_size": 4, "n": 4, "max_new_tokens": 6, "steps": 1, "eval_size": 8,
        "reward_shaping": "overlong", "reward_shaping_options": {"buffer_len": 2}})
    trainer = Trainer(cfg, log=lambda m: None)  # warm-starts a 3-step base into the test cache
    row = trainer.train_step()
    rollouts = [r for g in trainer.driver._generated for r in g.rollouts]
    cut = [r.finish_reason == "length" for r in rollouts]
    assert row["truncated_frac"] == pytest.approx(np.mean(cut)) and any(cut)  # 6 tokens: no trace fits
    assert all(r.num_tokens == 6 for r, c in zip(rollouts, cut) if c)
    # L_max 6, L_cache 2: a cut rollout (6 tokens) gets -1 on top of its 0/1 reward
    pen = OverlongPenalty(max_len=6, buffer_len=2)
    for r in rollouts:
        assert r.reward == pytest.approx(float(r.correct) + pen(r))
    ev = trainer._evaluate()
    assert 0 < ev["eval_truncated_frac"] <= 1 and ev["eval_len_mean"] <= 6


# ---- the warm start's length grouping -----------------------------------------------------------

def test_group_by_length_keeps_the_examples_and_pads_less():
    ex = ChainTask(pool_size=10, heldout_size=10).sft_examples(32 * 16, seed=1)
    out = group_by_length(ex, 32, np.random.default_rng(0))
    assert sorted(out) == sorted(ex)
    padded = lambda xs: sum(32 * max(len(e[1]) for e in xs[i: i + 32]) for i in range(0, len(xs), 32))  # noqa: E731
    assert padded(out) < 0.7 * padded(ex)
    assert out == group_by_length(ex, 32, np.random.default_rng(0))  # deterministic by seed


# ---- bench and simulator ------------------------------------------------------------------------

def test_bench_settings_by_task(tmp_path):
    from rollwise.bench.runner import BenchConfig, run_settings, task_mixes

    arith = run_settings(BenchConfig(out=str(tmp_path)), "hard", "uniform", 0)
    assert "task" not in arith  # unchanged for the arithmetic task: earlier bench runs are reused
    assert arith["task_options"] == {"pool_size": 300, "level_weights": [0.25, 0.25, 0.5, 1, 2, 3]}
    cfg = BenchConfig(out=str(tmp_path), task="chain")
    s = run_settings(cfg, "default", "uniform", 0)
    assert s["task"] == "chain" and s["task_options"]["level_weights"] == list(task_mixes("chain")["default"])
    run = load_config(None, s)  # the run it starts resolves the task's defaults
    assert run.max_new_tokens == 224 and run.warmstart.block_size == 320
    with pytest.raises(ValueError, match="no mix 'medium'"):
        run_settings(cfg, "medium", "uniform", 0)
    file_cfg = BenchConfig(out=str(tmp_path), task="file")
    assert run_settings(file_cfg, "default", "uniform", 0)["task_options"] == {}  # its pool is its file


def test_bench_builds_the_base_of_its_task(tmp_path, monkeypatch):
    from rollwise.bench import runner
    from rollwise.policy import warmstart

    seen = []
    monkeypatch.setattr(warmstart, "base_checkpoint", lambda task, ws, log=print: seen.append((task, ws)))
    runner._ensure_base(runner.BenchConfig(out=str(tmp_path), task="chain", pool_size=50,
                                           extra={"warmstart.steps": 9}), log=lambda m: None)
    (task, ws), = seen
    assert isinstance(task, ChainTask) and task.pool_size == 50
    assert ws == WarmStartConfig(**{**ChainTask.warmstart_defaults, "steps": 9})


def test_sim_profile_chain_has_the_long_tail():
    from rollwise.sim.population import Population
    from rollwise.sim.profiles import profile_configs

    pop_cfg, _, _ = profile_configs("chain")
    assert pop_cfg.max_len == 224
    pop = Population(2000, pop_cfg, seed=0)
    L = np.exp(pop.log_len)
    assert 20 < np.median(L) < 150 and np.percentile(L, 99) > 2.5 * np.median(L)


def test_sim_cli_takes_a_profile_by_name():
    import argparse

    from rollwise.sim.cli import add_sim_parser, build_config
    from rollwise.sim.runner import SimConfig

    parser = argparse.ArgumentParser()
    add_sim_parser(parser.add_subparsers(dest="cmd"))
    cfg = build_config(parser.parse_args(["sim", "--profile", "chain", "--set", "population.max_len=100"]))
    assert cfg.population.median_len == pytest.approx(51.71) and cfg.population.max_len == 100 and cfg.greedy_eval
    plain = build_config(parser.parse_args(["sim"]))
    assert plain.population == SimConfig().population and not plain.greedy_eval  # the default is unchanged
    with pytest.raises(ValueError, match="unknown sim profile 'nope'"):
        build_config(parser.parse_args(["sim", "--profile", "nope"]))


def test_task_profile_statistics_by_hand():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "task_profile.py"
    spec = importlib.util.spec_from_file_location("task_profile", path)
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    s = tp.pct([10, 20, 30, 40])
    assert (s["count"], s["mean"], s["p50"], s["max"]) == (4, 25.0, 25.0, 40) and tp.pct([]) == {"count": 0}
    groups = np.array([0, 0, 1, 1, 2, 2])
    assert tp.icc(np.array([1.0, 1.0, 5.0, 5.0, 9.0, 9.0]), groups) == pytest.approx(1.0)  # all spread between
    # between-group variance zero: the estimator goes negative (no within-prompt correlation)
    assert tp.icc(np.array([1.0, 3.0, 1.0, 3.0, 1.0, 3.0]), groups) < 0
