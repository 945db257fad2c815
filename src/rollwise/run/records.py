"""The one reader of a run's record, `metrics.jsonl`: every tool that reads rows (the trainer on resume,
the bench and its report, the simulator's calibration, the benchmark scripts) reads them here, so a
cut or damaged line is treated the same way everywhere."""
from __future__ import annotations

import json
from pathlib import Path

METRICS = "metrics.jsonl"


def metrics_path(where: str | Path) -> Path:
    """A run directory or the file itself -> the metrics file."""
    p = Path(where)
    return p / METRICS if p.is_dir() or p.suffix != ".jsonl" else p


def read_rows(where: str | Path, *, live: bool = False) -> tuple[list[dict], int | None]:
    """(rows, the number of a last line cut short or None). A missing file has no rows. The last line
    without a newline after it that is not JSON is a write cut short (a killed run, or with `live` one
    being written): it is left out and its number returned. Any other line that is not a JSON object is
    an error naming the file and line: the file is a run's record and is never silently reinterpreted."""
    path = metrics_path(where)
    if not path.exists():
        return [], None
    lines = path.read_text().split("\n")
    rows, cut = [], None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):  # no newline after it: a write cut short
                cut = i
                continue
            if live:
                continue
            raise ValueError(f"{path}: line {i} is not JSON; fix or remove it") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {i} is not a JSON object")
        rows.append(row)
    return rows, cut


def rows(where: str | Path) -> list[dict]:
    """The complete rows of a finished or running run (a last line cut short is left out)."""
    return read_rows(where)[0]
