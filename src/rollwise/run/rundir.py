"""Which run directories rollwise started, so it never replaces rows it did not write.

A run writes `<out>/.rollwise-run` before its first step: `{"run_id": ..., "checkpointed": false}`, and sets
`checkpointed` at its first checkpoint. A directory that holds run files (metrics.jsonl, config.json, ...)
but no checkpoint.pt may start over only when that marker is there and says no checkpoint was ever saved: a
run killed before its first checkpoint. Anything else is refused:
- no marker: rollwise did not start a run there (a recorded bench run copied from elsewhere, another tool's
  files, a run of a rollwise older than the marker);
- a marker that says `checkpointed`: the run saved checkpoints and its checkpoint.pt is gone (an archived
  record keeps config.json and metrics.jsonl only); its rows are a record.

A config file's absolute `out` is not followed by `rollwise train` unless `--out` is given: a recorded
config.json carries the recording machine's path, and a rerun must not write there (`check_config_out`).
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

MARKER = ".rollwise-run"
RUN_FILES = ("metrics.jsonl", "config.json", "model", "checkpoint.pt")  # what a run writes (and may replace)


def read_marker(out: Path) -> dict | None:
    """The directory's marker, or None if it has none (or one that is not rollwise's)."""
    try:
        data = json.loads((Path(out) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("run_id"), str) else None


def _write(out: Path, data: dict) -> None:
    tmp = Path(out) / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, Path(out) / MARKER)


def start(out: Path) -> str:
    """Mark `out` as a run this rollwise started, before its first step; returns the run's id."""
    run_id = uuid.uuid4().hex
    _write(out, {"run_id": run_id, "checkpointed": False})
    return run_id


def mark_checkpointed(out: Path) -> None:
    """From the first checkpoint on, the run's rows are a record: losing checkpoint.pt never lets a new run
    replace them. (A resumed run of a rollwise older than the marker gets one here.)"""
    marker = read_marker(out)
    if marker is None or not marker.get("checkpointed"):
        _write(out, {"run_id": (marker or {}).get("run_id") or uuid.uuid4().hex, "checkpointed": True})


def check_may_start_over(out: Path, present: list[str], ckpt: str) -> None:
    """`out` holds the run files `present` and no checkpoint: refuse unless rollwise started a run there that
    stopped before its first checkpoint."""
    marker = read_marker(out)
    files = ", ".join(present)
    if marker is None:
        raise ValueError(f"--out {out}: holds {files} but no {ckpt} and no {MARKER} marker, so rollwise did not "
                         "start a run there (e.g. a recorded run); rollwise never replaces rows it did not write: "
                         "use a new or empty directory")
    if marker.get("checkpointed"):
        raise ValueError(f"--out {out}: the run there (id {marker['run_id']}) saved checkpoints but its {ckpt} is "
                         f"gone, so its {files} are a record; rollwise never replaces them: use a new or empty "
                         "directory")


def check_config_out(config_path, overrides: dict, out: str) -> None:
    """`rollwise train --config FILE` without `--out`: an absolute `out` in FILE is refused (a recorded
    config.json names the directory on the machine that recorded it); a relative one is used as written."""
    if config_path and "out" not in overrides and Path(out).is_absolute():
        raise ValueError(f"{config_path}: out is the absolute path {out} (a recorded run's config names the "
                         "machine it ran on); give --out DIR, or write out as a relative path")


def read_run_config(path: Path) -> dict | None:
    """config.json if it is a rollwise run's config (Config's fields only, the core ones present: a record
    of an older version lacks newer fields), else None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    from dataclasses import fields

    from .config import Config

    known = {f.name for f in fields(Config)}
    if not isinstance(data, dict) or not set(data) <= known or not {"out", "planner", "learner", "seed"} <= set(data):
        return None
    return data


class OutLock:
    """An exclusive `flock` on `<dir>/.lock`, held while a run (or a bench) uses the directory. The OS
    drops it when the process ends, however it ends, so a killed run never leaves a stale lock."""

    def __init__(self, directory: Path, what: str = "--out"):
        self.path, self.what, self.f = Path(directory) / ".lock", what, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # not Unix: no lock
            return self
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise ValueError(f"{self.what} {self.path.parent}: in use by another rollwise process (pid {holder}); "
                             "wait for it to finish or use another directory") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self.f = f
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            self.f.close()  # closing drops the lock
            self.f = None
