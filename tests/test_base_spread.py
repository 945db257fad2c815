"""benchmarks/base_spread.py: a base's warm-start spread, collected from base directories and tabulated
with its mean and s.d. against hand-computed figures; bad input is a one-line error; no record is
overwritten."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def spread():
    spec = importlib.util.spec_from_file_location("rw_base_spread", ROOT / "benchmarks" / "base_spread.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _base(folder: Path, seed: int, acc: float, wrong: float, right: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "build.json").write_text(json.dumps(
        {"fingerprint": f"fp{seed}", "seconds": 100.0 + seed, "command": f"rollwise warmstart seed={seed}",
         "warmstart": {"seed": seed, "steps": 10}}))
    (folder / "report.json").write_text(json.dumps(
        {"config": {"seed": seed}, "eval_acc": acc, "eval_se": 0.03, "eval_acc_L1": 1.0, "pool_all_wrong": wrong,
         "pool_all_correct": right, "pool_mixed": 1 - wrong - right, "not_kept": 7}))
    return folder


def test_collect_and_table_against_hand_computed_figures(spread, tmp_path, capsys):
    a = _base(tmp_path / "a", 0, 0.60, 0.30, 0.10)
    b = _base(tmp_path / "b", 1, 0.70, 0.20, 0.05)
    out = tmp_path / "spread.json"
    spread.main(["collect", str(out), f"seed 0={a}", f"seed 1={b}"])
    record = json.loads(out.read_text())
    assert list(record) == ["seed 0", "seed 1"]
    assert record["seed 1"]["fingerprint"] == "fp1" and record["seed 1"]["warmstart"]["seed"] == 1
    assert record["seed 0"]["eval_acc_L1"] == 1.0 and "not_kept" not in record["seed 0"]
    text = spread.table(record)
    assert "| seed 0 | 0.600 | 0.300 / 0.600 / 0.100 | 100 |" in text
    # mean 0.65, s.d. (ddof 1) of {0.6, 0.7} = 0.0707; zero-variance shares 0.40 and 0.25
    assert "mean 0.650, s.d. 0.071" in text and "25.0%-40.0%" in text
    spread.main(["table", str(out)])
    assert capsys.readouterr().out.strip().endswith("(2 seeds)")


def test_bad_input_is_a_one_line_error_and_nothing_is_overwritten(spread, tmp_path):
    a = _base(tmp_path / "a", 0, 0.6, 0.3, 0.1)
    out = tmp_path / "spread.json"
    out.write_text("keep me")
    with pytest.raises(SystemExit, match="exists"):
        spread.main(["collect", str(out), f"s={a}"])
    assert out.read_text() == "keep me"
    with pytest.raises(SystemExit, match="is not LABEL=BASE_DIR"):
        spread.main(["collect", str(tmp_path / "n.json"), str(a)])
    with pytest.raises(SystemExit, match="report.json is missing|build.json is missing"):
        spread.main(["collect", str(tmp_path / "n.json"), f"s={tmp_path}"])
    with pytest.raises(SystemExit, match="given twice"):
        spread.main(["collect", str(tmp_path / "n.json"), f"s={a}", f"s={a}"])
    assert not (tmp_path / "n.json").exists()


def test_the_recorded_testbed_spread_tabulates(spread):
    record = json.loads((ROOT / "benchmarks/results/testbed_search/base_spread.json").read_text())
    assert "| seed 2 | 0.665 |" in spread.table(record)
