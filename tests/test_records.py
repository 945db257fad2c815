"""The one reader of metrics.jsonl (run/records.py): complete rows, a last line cut short, a damaged line."""
import pytest

from rollwise.run.records import read_rows, rows


def test_rows_a_cut_last_line_and_a_damaged_one(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "tok')  # a write cut short by a kill
    assert read_rows(tmp_path) == ([{"step": 1}, {"step": 2}], 3) and rows(f) == [{"step": 1}, {"step": 2}]
    f.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 is not JSON"):
        read_rows(f)
    assert read_rows(f, live=True)[0] == [{"step": 1}, {"step": 3}]  # a bench watching a running run
    f.write_text('[1, 2]\n')
    with pytest.raises(ValueError, match="line 1 is not a JSON object"):
        rows(f)
    assert read_rows(tmp_path / "missing") == ([], None)
