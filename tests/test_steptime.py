"""The step-time model against hand-computed step times (a toy profile with round numbers), and one-line
errors for bad profiles and deployment files."""
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from rollwise.systems.profile import ClusterProfile, load_profile, profile_from_mapping
from rollwise.systems.steptime import Round, StepWork, step_time

# N = 1 parameter, 2 FLOP/s at MFU 1: a decode iteration with b rows computes for 2*1*b/2 = b seconds;
# 10 bytes of weights at 1 byte/s: it reads for 10 s (+1 s per context token when kv = 1).
TOY = ClusterProfile(name="toy", gpus=1, gen_gpus=1, tp=1, peak_flops=2.0, mem_bw=1.0, params=1.0,
                     weight_bytes=10.0, kv_bytes_per_token=0.0, mfu_decode=1.0, mfu_prefill=1.0,
                     mfu_train=1.0, iter_overhead_s=0.0, concurrency=64, weight_sync_s=1.0, gen_len_mean=2)


def work(lengths, prompts=None, groups=None, trained=4.0, **kw):
    L = np.asarray(lengths)
    P = np.zeros(len(L)) if prompts is None else np.asarray(prompts)
    return StepWork([Round(L, P, None if groups is None else np.asarray(groups), **kw)], trained)


def test_sync_step_is_generation_then_training_then_sync():
    # rows of 3 and 1 tokens: 3 iterations, each memory-bound at 10 s -> 30; training (6 + 2) * 1 * 4 / 2 = 16
    t = step_time(TOY, work([3, 1]))
    assert (t.generation_s, t.training_s, t.sync_s, t.step_s) == (30.0, 16.0, 1.0, 47.0)


def test_the_long_tail_pays_a_full_iteration_per_token():
    # one row of 10 alone costs the same 10 s per token as 20 rows together would
    assert step_time(TOY, work([10])).generation_s == 100.0
    assert step_time(TOY, work([1] * 20)).generation_s == 20.0  # compute-bound: b = 20 > 10


def test_kv_cache_reads_grow_with_context():
    p = replace(TOY, kv_bytes_per_token=1.0)
    # no prompt: iteration 0 reads 10 + 0 (10 s), iteration 1 the two tokens decoded so far (12 s)
    assert step_time(p, work([2, 2], prompts=[0, 0])).generation_s == 22.0
    # prompts 5 and 5: iteration 0 holds 10 context tokens (20 s), iteration 1 holds 12 (22 s)
    assert step_time(replace(p, mfu_prefill=1e9), work([2, 2], prompts=[5, 5])).generation_s == pytest.approx(42.0)


def test_a_concurrency_limit_queues_rows():
    assert step_time(replace(TOY, concurrency=1), work([2, 3])).generation_s == 50.0


def test_prefill_is_compute_bound_and_shared_within_a_group():
    # 2 * N * 4 / 2 = 4 s per prompt prefilled; one decode iteration of 10 s
    assert step_time(TOY, work([1], prompts=[4])).generation_s == 14.0
    assert step_time(TOY, work([1, 1], prompts=[4, 4], groups=[0, 0])).generation_s == 14.0
    assert step_time(TOY, work([1, 1], prompts=[4, 4], groups=[0, 0], shared_prefill=False)).generation_s == 18.0


def test_accepted_drafts_save_iterations():
    # 4 tokens at 1 accepted per verification: 2 iterations of 10 s
    assert step_time(TOY, work([4], accepted_per_step=1.0, draft_k=1)).generation_s == 20.0


def test_one_step_off_overlaps_generation_and_training():
    p = replace(TOY, gpus=2, gen_gpus=1)
    t = step_time(p, work([3, 1]), "one-step-off")  # generation 30 on 1 GPU, training 16 on the other
    assert (t.step_s, t.idle_s) == (31.0, 14.0)
    assert step_time(p, work([3, 1]), "sync").step_s == 3 * 10 + 8 + 1  # both GPUs train: 16 / 2


def test_async_keeps_slots_full():
    # 4 tokens over 2 rows at full occupancy: 2 iterations of 10 s; max(20, 16) + 1
    assert step_time(replace(TOY, gpus=2, gen_gpus=1), work([3, 1]), "async").step_s == 21.0


def test_tail_batching_stops_the_short_round_at_the_kept_groups():
    w = work([1, 1, 4, 4], groups=[0, 0, 1, 1])
    w.keep_groups = 1
    t = step_time(TOY, w, "tail")
    # short round: 1 iteration (10 s); the 6 remaining tokens on 2 rows: 3 iterations at b = 2 (30 s)
    assert (t.detail["short_round_s"], t.detail["long_round_s"], t.generation_s) == (10.0, 30.0, 40.0)


def test_bad_modes_and_splits_are_one_line():
    with pytest.raises(ValueError, match="unknown deployment mode"):
        step_time(TOY, work([1]), "fast")
    with pytest.raises(ValueError, match="gen_gpus < gpus"):
        step_time(TOY, work([1]), "one-step-off")


def test_the_shipped_profile_loads_with_its_sources_and_assumptions():
    p = load_profile("h100x16-llama8b-v1")
    assert (p.gpus, p.kv_bytes_per_token, p.peak_flops) == (16, 131072, 9.89e14)
    assert "iter_overhead_s" in p.assumptions and "peak_flops" not in p.assumptions


@pytest.mark.parametrize("values, msg", [
    ({"gpus": {"value": float("nan")}}, "values.gpus.value must be a finite number"),
    ({"nope": 1}, "unknown key 'nope'"),
    ({"mfu_train": 1.5}, r"mfu_train must be a fraction of peak, in \(0, 1\]"),
    ({"gen_gpus": 32}, "exceeds gpus"),
])
def test_a_bad_profile_is_one_line(values, msg):
    doc = {"name": "x", "values": {f: 1 for f in ClusterProfile.__dataclass_fields__ if f not in ("name", "assumptions")}}
    with pytest.raises(ValueError, match=msg):
        profile_from_mapping({**doc, "values": {**doc["values"], **values}}, "x.yaml")
    del doc["values"]["tp"]
    with pytest.raises(ValueError, match="missing field 'tp'"):
        profile_from_mapping(doc, "x.yaml")


def test_predict_runs_on_a_deployment_file_and_refuses_a_bad_one(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "rollwise.cli", "systems", "predict",
                         "benchmarks/systems/nemo_rl_v04_llama8b.yaml"], capture_output=True, text=True)
    assert ok.returncode == 0 and "one-step-off" in ok.stdout, ok.stderr
    bad = tmp_path / "d.yaml"
    bad.write_text("profile: h100x16-llama8b-v1\nprompts: .nan\nn: 4\nprompt_len: 8\n")
    r = subprocess.run([sys.executable, "-m", "rollwise.cli", "systems", "predict", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "prompts must be" in r.stderr and len(r.stderr.strip().splitlines()) == 1
