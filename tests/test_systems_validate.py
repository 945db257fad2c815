"""Deployment files with published figures, and the validation table (issue 41 item 4): hand-computed
predictions on a toy profile with round numbers, a figure's error against its published range, the
sensitivity to assumed inputs, and one-line errors for bad files."""
import subprocess
import sys

import pytest

from rollwise.systems import validate
from rollwise.systems.deployment import Figure, load_deployment

# N = 1 parameter at 2 FLOP/s and MFU 1; 10 bytes of weights at 1 byte/s: a decode iteration reads for 10 s,
# prefill costs 2 * 1 * P / 2 = P seconds, training (6 + 2 per log-prob pass) * tokens / 2 seconds.
TOY = """name: toy
values:
  gpus: 1
  gen_gpus: 1
  tp: 1
  peak_flops: 2
  mem_bw: 1
  params: 1
  weight_bytes: 10
  kv_bytes_per_token: 0
  mfu_decode: 1
  mfu_prefill: 1
  mfu_train: 1
  iter_overhead_s: 0
  concurrency: 64
  weight_sync_s: 1
  gen_len_mean: 4
"""

# one row of 4 tokens (a lognormal of mean 4 with sigma ~ 0), a 1-token prompt
DEPLOY = """profile: toy.yaml
prompts: 1
n: 1
prompt_len: 1
lengths: {mean: 4, sigma: 1.0e-9, max: 100}
drafts: {accepted_per_step: 1, k: 1}
modes: [sync, sync+drafts]
assumed: [lengths.mean]
published:
  - {figure: sync step, quantity: step_s, arm: sync, value: 62, source: toy, read: by hand}
  - {figure: drafts over sync, quantity: speedup, arm: sync+drafts, baseline: sync, value: [1.0, 1.1], source: toy, read: by hand}
  - {figure: drafts rollout, quantity: rollout_speedup, arm: sync+drafts, baseline: sync, value: {at_least: 1.5}, source: toy, read: by hand}
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "toy.yaml").write_text(TOY)  # a profile: the folder's deployment files are the *.yaml with figures
    (tmp_path / "d.yaml").write_text(DEPLOY)
    return tmp_path


def test_a_figures_error_is_zero_inside_its_range_and_from_the_nearest_end_outside():
    f = Figure("x", "speedup", "async", "sync", 2.0, 3.0, "s", "r")
    assert (f.error(2.5), f.error(1.5), f.error(4.5)) == (0.0, -0.25, 0.5)
    at_least = Figure("x", "speedup", "async", "sync", 1.7, None, "s", "r")
    assert (at_least.error(3.0), at_least.error(0.85)) == (0.0, -0.5) and at_least.value_text() == "> 1.7×"


def test_predictions_on_a_deployment_file_by_hand(folder):
    dep = load_deployment(folder / "d.yaml")
    sync_step, drafts_over_sync, rollout = dep.published
    # sync: prefill 1 + 4 iterations x 10 s + training 8 x 5 tokens / 2 = 20 + sync 1 = 62
    assert dep.predicted(sync_step) == pytest.approx(62.0)
    # drafts, 1 accepted per verification: 2 iterations (20 s; compute 2 x 1 x 2 / 2 = 2 < 10): 1 + 20 + 20 + 1 = 42
    assert dep.predicted(drafts_over_sync) == pytest.approx(62 / 42)
    assert dep.predicted(rollout) == pytest.approx(41 / 21)
    # a mode the trainer runs without the old-policy pass: training 6 x 5 / 2 = 15
    dep.logprob_passes = {"sync": 0}
    assert dep.predicted(sync_step) == pytest.approx(57.0)


def test_the_validation_rows_and_the_sensitivity_to_an_assumed_input(folder):
    rs = validate.rows(folder)
    assert [r["within"] for r in rs] == [True, False, True]  # 62 / 42 = 1.48 is past 1.1 x 1.25
    assert rs[1]["error"] == pytest.approx((62 / 42) / 1.1 - 1)
    # lengths.mean x0.5 -> 2 tokens: 1 + 20 + 8 x 3 / 2 + 1 = 34; x2 -> 8 tokens: 1 + 80 + 36 + 1 = 118
    lo, hi, most = rs[0]["range"]
    assert (lo, hi, most) == (pytest.approx(34.0), pytest.approx(118.0), "lengths.mean x2")
    text = validate.markdown(rs)
    assert "| sync step | `d.yaml` | 62 s | 62.00 s | +0% | yes |" in text and "**no**" in text
    assert "2 of 3 figures within ±25%" in text


@pytest.mark.parametrize("edit, msg", [
    (("modes: [sync, sync+drafts]", "modes: [sync, fast]"), r"modes\[1\] must be a mode"),
    (("drafts: {accepted_per_step: 1, k: 1}\n", ""), "needs the deployment's drafts"),
    (("quantity: step_s", "quantity: joules"), r"published\[0\].quantity must be one of"),
    (("value: 62", "value: [3, 2]"), "high < low"),
    (("assumed: [lengths.mean]", "assumed: [mood]"), r"assumed\[0\] must be one of prompts, n, "),
    (("prompts: 1", "prompts: 1\noverrides: {gpuz: 2}"), "overrides: unknown key 'gpuz'"),
    (("prompts: 1", "prompts: 1\nlogprob_passes: {sync: -1}"), r"logprob_passes.sync must be >= 0, got -1"),
])
def test_a_bad_deployment_file_is_one_line(folder, edit, msg):
    (folder / "d.yaml").write_text(DEPLOY.replace(*edit))
    with pytest.raises(ValueError, match=msg) as e:
        load_deployment(folder / "d.yaml")
    assert str(e.value).startswith(str(folder / "d.yaml")) and "\n" not in str(e.value)


def test_the_shipped_validation_table_is_one_command():
    r = subprocess.run([sys.executable, "-m", "rollwise.cli", "systems", "validate", "benchmarks/systems",
                        "--no-sensitivity"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ") and "`" in ln]
    # every file's figures, each with its source and how it was read; misses are shown, not dropped
    assert len(rows) >= 12 and all("(" in ln for ln in rows) and "**no**" in r.stdout
    assert any("verl_fully_async_qwen7b.yaml" in ln for ln in rows) and any("tlt_qwen7b.yaml" in ln for ln in rows)


def test_docs_show_the_validation_tables_current_output():
    """docs/systems.md shows `rollwise systems validate benchmarks/systems` as it prints today: a changed
    profile, deployment or model must update the page (rerun the command and paste its output)."""
    from pathlib import Path
    table = validate.markdown(validate.rows("benchmarks/systems"))
    assert table in Path("docs/systems.md").read_text(encoding="utf-8")


def test_every_shipped_profile_loads_and_says_where_each_value_comes_from():
    from rollwise.core import yamlsafe
    from rollwise.systems.profile import SHIPPED, load_profile
    for path in sorted(SHIPPED.glob("*.yaml")):
        p = load_profile(path.stem)
        assert p.name == path.stem and 1 <= p.gen_gpus <= p.gpus
        values = yamlsafe.load(path.read_text(encoding="utf-8"))["values"]
        assert all(isinstance(v, dict) and v.get("source", "").strip() for v in values.values()), path.name
