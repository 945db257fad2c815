"""A confirmatory plan reads a test split no earlier record read, or says why (issue 47, item 3)."""
import shutil
from pathlib import Path

import pytest

from rollwise.bench import plan as planmod
from rollwise.bench.data_reuse import earlier_reads, refuse_reused_test_split

ROOT = Path(__file__).parents[1]
CONFIRMED = ROOT / "benchmarks/plans/remainder_confirm_1.yaml"  # data seed 0, test split, recorded


def records(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    (results / "earlier").mkdir(parents=True)
    shutil.copy(CONFIRMED, results / "earlier" / "plan.yaml")
    return results


def plan_text(**change) -> str:
    text = CONFIRMED.read_text()
    for old, new in change.items():
        text = text.replace(old, new)
    return text


def test_a_confirmatory_plan_on_a_read_test_split_is_refused_in_one_line(tmp_path):
    results = records(tmp_path)
    plan = planmod.parse_plan(plan_text(), "p.yaml")
    assert earlier_reads(plan, tmp_path / "p.yaml", results / "new") == ["earlier"]
    with pytest.raises(planmod.PlanError, match=r"data_seed 0 test split was already read by earlier") as e:
        refuse_reused_test_split(plan, tmp_path / "p.yaml", results / "new")
    assert "\n" not in str(e.value)


def test_a_fresh_data_seed_or_a_stated_replication_is_allowed(tmp_path):
    results = records(tmp_path)
    text = plan_text()
    assert "data_seed: 0" in text
    fresh = planmod.parse_plan(text.replace("data_seed: 0", "data_seed: 7"), "p.yaml")
    refuse_reused_test_split(fresh, tmp_path / "p.yaml", results / "new")
    again = planmod.parse_plan(text + '\nreplication: "a replication of remainder_confirm_1 on new seeds"\n', "p.yaml")
    refuse_reused_test_split(again, tmp_path / "p.yaml", results / "new")
    # resuming the record itself is not a second read
    refuse_reused_test_split(planmod.parse_plan(text, "p.yaml"), tmp_path / "p.yaml", results / "earlier")


def test_the_committed_records_show_the_reuse_the_audit_found():
    plan = planmod.parse_plan((ROOT / "benchmarks/plans/task1_confirm_3.yaml").read_text(), "task1_confirm_3.yaml")
    reads = earlier_reads(plan, ROOT / "benchmarks/plans/task1_confirm_3.yaml")
    assert {"bench3_confirm_task1", "bench3_confirm2_task1", "bench3_confirm3_task1"} <= set(reads)
