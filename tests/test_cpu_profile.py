"""The CPU profile (benchmarks/cpu_profile.py) and the model against this machine's measured steps
(benchmarks/validate_cpu.py): the profile file a measurement writes is a valid cluster profile with every
value sourced, the shipped one loads, and a run's measured step seconds are the differences of its
cumulative wall clock, beside the model's prediction for the deployment the run used."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from rollwise.systems.profile import load_profile, profile_from_mapping
from rollwise.systems.steptime import StepWork, Round, step_time

ROOT = Path(__file__).resolve().parents[1]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEASURED = {"params": 1000, "peak": 1e9, "bw": 1e10, "mfu_prefill": 0.5, "mfu_decode": 0.25,
            "iter_overhead_s": 1e-3, "mfu_train": 0.4, "weight_sync_s": 1e-4, "kv": 4096}


def test_a_measurement_writes_a_profile_with_every_value_sourced():
    doc = yaml.safe_load(script("cpu_profile").profile_yaml(MEASURED))
    p = profile_from_mapping(doc, "cpu.yaml")
    assert (p.gpus, p.gen_gpus, p.params, p.weight_bytes, p.peak_flops) == (2, 1, 1000, 4000, 1e9)
    assert all(v.get("source") for v in doc["values"].values())
    assert p.assumptions == ("gen_len_mean",)  # the one value no micro-benchmark gives


def test_the_shipped_cpu_profile_loads_and_prices_a_step_by_hand():
    p = load_profile("cpu-2core-testbed-v1")
    assert p.gpus == 2 and p.gen_gpus == 1 and p.params > 0
    # one row of 3 tokens after a 2-token prompt, nothing trained: prefill + 3 iterations at 1 row + sync
    work = StepWork([Round([3], [2.0])], trained_tokens=0.0, logprob_passes=0)
    t = step_time(p, work, "sync")
    prefill = 2 * p.params * 2 / (p.peak_flops * p.mfu_prefill)
    iters = sum(max((p.weight_bytes + c * p.kv_bytes_per_token) / p.mem_bw, 2 * p.params / (p.peak_flops * p.mfu_decode))
                + p.iter_overhead_s for c in (2, 3, 4))
    assert t.generation_s == pytest.approx(prefill + iters / 1)  # the slowest of 2 engines holds the one row
    assert t.step_s == pytest.approx(t.generation_s + p.weight_sync_s)


def test_a_runs_measured_steps_are_its_wall_clock_differences(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 0, "rollouts": 0, "prompt_tokens": 0, "learner_tokens": 0},
            {"step": 1, "rollouts": 4, "prompts": 2, "prompt_tokens": 8, "learner_tokens": 40, "wall_s": 2.0,
             "len_mean": 6.0, "len_p50": 6.0, "len_p90": 6.0, "len_max": 6.0},
            {"step": 2, "rollouts": 8, "prompts": 2, "prompt_tokens": 16, "learner_tokens": 80, "wall_s": 5.0,
             "len_mean": 6.0, "len_p50": 6.0, "len_p90": 6.0, "len_max": 6.0}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (run / "config.json").write_text(json.dumps({"mode": "one-step-off"}))
    pred, measured, mode = script("validate_cpu").predicted_and_measured(run, load_profile("cpu-2core-testbed-v1"))
    assert mode == "one-step-off" and measured.tolist() == [2.0, 3.0]
    assert len(pred) == 2 and pred[0] == pytest.approx(pred[1])  # the same work each step
