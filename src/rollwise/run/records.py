"""The one reader of a run's record, `metrics.jsonl`: every tool that reads rows (the trainer on resume,
the bench and its report, the simulator's calibration, the benchmark scripts) reads them here, so a
cut or damaged line is treated the same way everywhere."""
from __future__ import annotations

import json
import math
import os
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


def rows_upto(path: Path, upto: int) -> list[dict]:
    """The rows up to the checkpoint's step. A last line cut short by a kill is dropped only when it is a row
    after the checkpoint (the rows still reach the checkpoint's step: the resumed run writes it again);
    if it was the checkpoint's own row, dropping it would lose it, so it is an error naming the line, as
    is any other line that is not JSON (the file is the run's record: never silently rewritten)."""
    rows, cut = read_rows(path)
    rows = [r for r in rows if r.get("step", 0) <= upto]
    if cut is not None and upto and max((r.get("step", 0) for r in rows), default=0) < upto:
        raise ValueError(f"{path}: line {cut} is cut short and the rows stop before the checkpoint's step {upto}, "
                         "so it held a row the checkpoint covers; restore the file (or remove the line and accept "
                         "the gap) before resuming")
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    write_atomic(path, "".join(json.dumps(finite_row(r), allow_nan=False) + "\n" for r in rows))


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finite_row(row: dict) -> dict:
    """The row as strict JSON can hold it: a non-finite float (NaN, inf) becomes null and its key is listed
    in `nonfinite`, so the file parses everywhere and the loss of the value is visible."""
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return row
    return {**{k: None if k in bad else v for k, v in row.items()},
            "nonfinite": sorted(set(row.get("nonfinite") or []) | set(bad))}
