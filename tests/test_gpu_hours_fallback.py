"""GPU-hours for rows without a length shape (systems/scale.py `fill_lengths`) and the split of GPU-hours to
target into steps x GPU-seconds per step (bench/clock.py; issue 41 item 6). Hand-computed cases under a tiny
profile where a decode iteration costs 1 s and every other part of a step a round number of seconds."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rollwise.bench import clock
from rollwise.systems import scale
from rollwise.systems.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent

# 1 GPU; weights 1 byte at 1 B/s and no KV: a decode iteration reads 1 s (compute 2 * 1 * b / 8 = b / 4 s, below
# it up to 4 rows); prefill 2 * 1 * P / 8 = P / 4 s per group; training (6 + 2) * 1 * T / 8 = T s; sync 0.5 s.
TINY = {"name": "tiny-v1", "values": {
    "gpus": 1, "gen_gpus": 1, "tp": 1, "peak_flops": 8, "mem_bw": 1, "params": 1, "weight_bytes": 1,
    "kv_bytes_per_token": 0, "mfu_decode": 1, "mfu_prefill": 1, "mfu_train": 1, "iter_overhead_s": 0,
    "concurrency": 64, "weight_sync_s": 0.5, "gen_len_mean": 3}}


@pytest.fixture
def tiny(tmp_path):
    import yaml
    path = tmp_path / "tiny-v1.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return str(path)


def old_rows(step_tokens, accs, rows_per_step=4):
    """A run's rows as recorded before 2026-12-05: cumulative decoded tokens and rows, one group of 4 rows with
    a 4-token prompt per step, learner tokens 2 then 4; no length shape."""
    rows = [{"step": 0, "tokens": 0, "eval_acc": accs[0]}]
    tot = {"tokens": 0, "rollouts": 0, "prompt_tokens": 0, "learner_tokens": 0}
    for s, (t, acc, learn) in enumerate(zip(step_tokens, accs[1:], (2, 4)), 1):
        tot = {"tokens": tot["tokens"] + t, "rollouts": tot["rollouts"] + rows_per_step,
               "prompt_tokens": tot["prompt_tokens"] + 4, "learner_tokens": tot["learner_tokens"] + learn}
        rows.append({"step": s, "prompts": 1, "eval_acc": acc, **tot})
    return rows


def test_step_means_are_decoded_tokens_over_rows():
    rows = old_rows([12, 20], [0.2, 0.4, 0.7])
    assert scale.step_means(rows) == [None, 3.0, 5.0]
    assert scale.has_step_means(rows) and not scale.has_lengths(rows)
    assert scale.step_means(rows + [{"step": 3, "tokens": 32, "rollouts": 8}]) == [None, 3.0, 5.0, None]
    with pytest.raises(ValueError, match="step 1: no 'rollouts'"):
        scale.step_means([{"step": 1, "tokens": 3}])


def test_the_step_mean_fallback_puts_every_row_at_its_steps_mean_and_says_so():
    rows = scale.fill_lengths(old_rows([12, 20], [0.2, 0.4, 0.7]), "step mean")
    assert [r.get("len_source") for r in rows] == [None, "step mean", "step mean"]
    assert [(r["len_mean"], r["len_p50"], r["len_p90"], r["len_max"]) for r in rows[1:]] == [(3, 3, 3, 3), (5, 5, 5, 5)]
    works = scale.step_works(rows, factor=2.0)
    assert works[0].rounds[0].lengths.tolist() == [6] * 4 and works[1].rounds[0].lengths.tolist() == [10] * 4
    # a shape the rows carry is replaced (one rule for every run of a comparison); an unknown fallback is one line
    shaped = [{"step": 1, "tokens": 12, "rollouts": 3, "len_mean": 4.0, "len_p50": 3.0, "len_p90": 8.0, "len_max": 9}]
    assert scale.fill_lengths(shaped, "step mean")[0]["len_max"] == 4.0
    with pytest.raises(ValueError, match="unknown length fallback 'tail'"):
        scale.fill_lengths(old_rows([12, 20], [0.2, 0.4, 0.7]), "tail")


def test_the_lognormal_fallback_keeps_each_steps_mean_with_a_tail():
    rows = scale.fill_lengths(old_rows([12, 20], [0.2, 0.4, 0.7]), "step lognormal", sigma=0.8)
    L = scale.row_lengths(rows[2], 4)
    assert L.mean() == pytest.approx(5.0) and (np.diff(L) > 0).all()  # mid-rank quantiles, ascending
    # the lognormal's quantiles at ranks 1/8 and 7/8 stand in the ratio exp(0.8 * (z(7/8) - z(1/8)))
    from statistics import NormalDist
    assert L[-1] / L[0] == pytest.approx(np.exp(0.8 * 2 * NormalDist().inv_cdf(7 / 8)))
    assert rows[2]["len_max"] == pytest.approx(L.max()) and rows[2]["len_sigma"] == 0.8


def test_gpu_seconds_of_two_old_steps_by_hand(tiny):
    # step 1: 4 rows of 3 tokens: prefill 4 / 4 = 1 s, 3 decode iterations 3 s, training 2 s, sync 0.5 s = 6.5 s;
    # step 2: 4 rows of 5 tokens: 1 + 5 + 4 + 0.5 = 10.5 s (every length x factor 1: the profile's mean 3 / 3)
    rows = scale.fill_lengths(old_rows([12, 20], [0.2, 0.4, 0.7]), "step mean")
    assert scale.gpu_seconds(rows, load_profile(tiny), 1.0, "sync") == pytest.approx([0.0, 6.5, 17.0])


def test_the_split_multiplies_out_by_hand(tiny):
    """The baseline reaches the target (0.2 + 0.8 x (0.7 - 0.2) = 0.6) at step 1 + 2/3, at 6.5 + 2/3 x 10.5 =
    13.5 GPU-seconds: 8.1 s per step. The arm reaches it at step 1, its first step at mean length 1 costing
    1 + 1 + 2 + 0.5 = 4.5 s. Steps 5/3 x per step 8.1 / 4.5 = 1.8 -> GPU-hours 13.5 / 4.5 = 3."""
    base = [{"rows": old_rows([12, 20], [0.2, 0.4, 0.7]), "config": {}} for _ in range(2)]
    arm = [{"rows": old_rows([4, 20], [0.2, 0.6, 0.7]), "config": {}} for _ in range(2)]
    g = clock.modelled(base, arm, [r["rows"] for r in base], [r["rows"] for r in arm], np.random.default_rng(0),
                       profile_name=tiny)
    assert g["lengths"] == "step mean" and g["longtail"]["lengths"] == "step lognormal" and g["factor"] == 1.0
    sp = g["split"]
    assert sp["steps"]["ratio"] == pytest.approx(5 / 3)
    assert sp["per_step"]["ratio"] == pytest.approx(1.8)
    assert sp["per_step"]["base_s"] == pytest.approx(8.1) and sp["per_step"]["arm_s"] == pytest.approx(4.5)
    assert g["to_target"]["ratio"] == pytest.approx(3.0) == sp["hours"]["ratio"]
    assert sp["steps"]["ratio"] * sp["per_step"]["ratio"] == pytest.approx(g["to_target"]["ratio"])
    # the whole-run per-step ratio beside it: 17 / 2 against (4.5 + 10.5) / 2
    assert g["per_step"]["ratio"] == pytest.approx(8.5 / 7.5)
    text = "\n".join(clock.markdown_lines({"arm": {"gpu_hours": g}}))
    assert "| arm | 1.67× [1.67×, 1.67×] | 1.80× [1.80×, 1.80×] (8 s / 4 s) | 3.00× [3.00×, 3.00×] |" in text
    assert "step mean" in text and "misses the tail" in text and clock.VALIDATION in text


def test_the_split_pairs_every_resample_and_repeats_the_hours_figure():
    """Seeds that differ: the split's hours figure is variant 1's to_target draw for draw, and steps x per
    step = hours in every resample, so the intervals come from the same seeds on both axes."""
    rng = np.random.default_rng(5)

    def run(step_tokens, accs):
        return {"rows": old_rows(step_tokens, accs), "config": {}}
    base = [run([12 + k, 20 + 2 * k], [0.2, 0.3 + 0.05 * k, 0.7]) for k in range(4)]
    arm = [run([8 + k, 24 - k], [0.2, 0.45 + 0.03 * k, 0.72]) for k in range(4)]
    g = clock.modelled(base, arm, [r["rows"] for r in base], [r["rows"] for r in arm], rng)
    sp = g["split"]
    assert {k: sp["hours"][k] for k in ("ratio", "lo", "hi")} == {k: g["to_target"][k] for k in ("ratio", "lo", "hi")}
    assert sp["steps"]["ratio"] * sp["per_step"]["ratio"] == pytest.approx(sp["hours"]["ratio"])
    assert sp["per_step"]["lo"] <= sp["per_step"]["ratio"] <= sp["per_step"]["hi"]


def test_rows_with_a_shape_keep_the_full_shape_path():
    """A run whose rows carry a shape is read through it, not the fallback; only when one run lacks it do all
    fall back (one rule for every arm of a comparison)."""
    def run(m):
        rows = old_rows([4 * m, 4 * m], [0.2, 0.5, 0.7])
        for r in rows[1:]:
            r.update(len_mean=float(m), len_p50=m - 1.0, len_p90=m + 2.0, len_max=m + 6)
        return {"rows": rows, "config": {}}
    base, arm = [run(40)], [run(20)]
    g = clock.modelled(base, arm, [base[0]["rows"]], [arm[0]["rows"]], np.random.default_rng(0))
    assert g["lengths"] == "shape" and g["longtail"]["lengths"] == "baseline map"
    stripped = [{"rows": [{k: v for k, v in r.items() if not k.startswith("len_")} for r in arm[0]["rows"]],
                 "config": {}}]
    f = clock.modelled(base, stripped, [base[0]["rows"]], [stripped[0]["rows"]], np.random.default_rng(0))
    assert f["lengths"] == "step mean"
    # the full shape has a tail (max = mean + 6) the step mean misses: read the same way as the arm, the
    # baseline's steps are cheaper without it
    assert f["split"]["per_step"]["base_s"] < g["split"]["per_step"]["base_s"]


def test_the_records_script_recomputes_one_archived_record(tmp_path):
    out = tmp_path / "ghr"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_hours_records.py"), "--records", "bench3_confirm_llama",
                    "--out", str(out)], check=True, capture_output=True, text=True, cwd=ROOT)
    (rec,) = json.loads(out.with_suffix(".json").read_text())["records"]
    assert rec["record"] == "bench3_confirm_llama" and rec["lengths"] == ["step mean"]
    a = rec["arms"]["ar3po"]
    assert a["matches_record"] and a["lengths"] == "step mean"
    assert a["steps_to_target"]["ratio"] * a["per_step_to_target"]["ratio"] == pytest.approx(
        a["gpu_hours_to_target"]["ratio"])
    md = out.with_suffix(".md").read_text()
    assert "`bench3_confirm_llama` | ar3po |" in md and "no length shape in its rows" in md


def test_the_validation_line_says_what_docs_systems_says():
    """The line every GPU-hours table carries (clock.VALIDATION) is the count docs/systems.md's published
    table reports: a new validation row that changes the count must change both."""
    import re
    docs = (ROOT / "docs/systems.md").read_text()
    within, total = re.search(r"(\d+) of (\d+) figures within ±25%", docs).groups()
    assert f"{within} of {total} published figures within ±25%" in clock.VALIDATION


def test_the_both_units_table_leads_with_compute_units_and_gpu_hours(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "benchmarks/update_readme.py")
    update = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(update)
    g = {"ratio": 1.5, "lo": 1.1, "hi": 2.0, "defined": True}
    rec = {"record": "bench3_confirm3_task1", "task": "arithmetic", "lengths": ["step mean"], "arms": {
        "pods-ar3po": {"in_family": True, "verdict": "higher", "compute_to_target": {**g, "ratio": 1.67},
                       "gpu_hours_to_target": g, "steps_to_target": {**g, "ratio": 3.0},
                       "per_step_to_target": {"ratio": 0.5, "lo": 0.4, "hi": 0.6, "defined": True},
                       "lengths": "step mean"},
        "dapo": {"in_family": True, "verdict": "lower", "compute_to_target": {**g, "ratio": 0.0, "lo": 0.0},
                 "gpu_hours_to_target": {**g, "ratio": 0.0, "lo": 0.0}, "steps_to_target": {**g, "ratio": 0.0},
                 "per_step_to_target": {"ratio": float("nan"), "lo": float("nan"), "hi": float("nan"),
                                        "defined": False}, "lengths": "step mean"}}}
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"command": "python benchmarks/gpu_hours_records.py", "profile": "h100x16-llama8b-v1",
                                "validation": clock.VALIDATION, "records": [rec]}))
    text = update.units_table(path)
    header = next(line for line in text.splitlines() if line.startswith("| task"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[3:5] == ["compute-to-target, compute units (measured)", "GPU-hours to target (modelled)"]
    assert clock.VALIDATION in text and "misses the tail" in text
    assert ("| 1 (arithmetic), plan 3 | dapo | lower | not reached [not reached, 2.00×] | not reached [not reached, "
            "2.00×] | not reached | not defined | step mean |") in text
    assert "| pods-ar3po | higher | 1.67× [1.10×, 2.00×] | 1.50× [1.10×, 2.00×] | 3.00× | 0.50× | step mean |" in text
    # the compact form (the README's): the lower arm named below, the split in one column
    compact = update.units_table(path, compact=True)
    assert "| pods-ar3po | higher | 1.67× [1.10×, 2.00×] | 1.50× [1.10×, 2.00×] | 3.00× × 0.50× | step mean |" in compact
    assert "| dapo |" not in compact and "lower in the verdict (accuracy over the compute budget): " \
        "1 (arithmetic), plan 3: dapo." in compact
    assert "not computed yet" in update.units_table(tmp_path / "missing.json")
