"""benchmarks/arm_profile.py: each arm's steps, compute per step, zero-variance share and draft figures,
recomputed from the raw runs of a record, packed or not, against a hand-computed record."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def arm_profile(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports archive.py beside it
    spec = importlib.util.spec_from_file_location("rw_arm_profile", ROOT / "benchmarks" / "arm_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _record(bench: Path) -> Path:
    runs = bench / "arms"
    # grpo: two seeds; the eval-only row (no compute) is not a step
    _run(runs / "grpo" / "runs" / "default" / "uniform" / "seed0",
         [{"step": 1, "compute": 100.0, "zero_var_frac_gen": 0.5},
          {"step": 2, "compute": 200.0, "zero_var_frac_gen": 0.25},
          {"eval_acc": 0.5, "tokens": 30}])
    _run(runs / "grpo" / "runs" / "default" / "uniform" / "seed1",
         [{"step": 1, "compute": 90.0, "zero_var_frac_gen": 0.0},
          {"step": 2, "compute": 180.0, "zero_var_frac_gen": 0.0},
          {"step": 3, "compute": 300.0, "zero_var_frac_gen": 1.0}])
    _run(runs / "das" / "runs" / "default" / "das" / "seed0",
         [{"step": 1, "compute": 60.0, "zero_var_frac_gen": 0.5, "tok/train/trained/draft": 30,
           "tok/train/trained/decoded": 90, "das/accept_rate": 0.9}])
    return bench


def test_figures_match_a_hand_computed_record(arm_profile, tmp_path):
    prof = arm_profile.profile(_record(tmp_path / "b"))
    g, d = prof["grpo"], prof["das"]
    assert (g["runs"], g["steps_min"], g["steps_max"]) == (2, 2, 3)
    assert g["compute_per_step"] == pytest.approx((200 / 2 + 300 / 3) / 2)  # 100 per step in both runs
    assert g["zero_var_frac_gen"] == pytest.approx(((0.5 + 0.25) / 2 + (0 + 0 + 1) / 3) / 2)
    assert g["draft_share"] is None and g["accept_rate"] is None
    assert d["draft_share"] == pytest.approx(30 / 120) and d["accept_rate"] == (0.9, 0.9)
    table = arm_profile.table("b", prof)
    assert "| grpo | 2 | 2–3 | 0.1k |" in table and "| das | 1 | 1 | 0.1k | 0.500 | 0.250 | 0.900–0.900 |" in table


def test_a_packed_record_reads_as_the_unpacked_one(arm_profile, tmp_path, monkeypatch):
    import archive
    results = tmp_path / "benchmarks" / "results"
    monkeypatch.setattr(archive, "ROOT", tmp_path)
    monkeypatch.setattr(archive, "RESULTS", results)
    monkeypatch.setattr(archive, "IGNORE", results / ".gitignore")
    bench = _record(results / "rec")
    before = arm_profile.profile(bench)
    archive.pack(bench)
    assert not (bench / "arms" / "grpo" / "runs").exists()
    assert arm_profile.profile(bench) == before


def test_a_record_without_compute_or_runs_says_so(arm_profile, tmp_path, capsys):
    bench = tmp_path / "old"
    _run(bench / "runs" / "default" / "uniform" / "seed0", [{"step": 1, "tokens": 10}])
    assert arm_profile.profile(bench) == {}
    assert "before the compute budget" in arm_profile.table("old", {})
    with pytest.raises(SystemExit, match="neither runs/ nor runs.tar.xz"):
        arm_profile.profile(tmp_path / "empty")
