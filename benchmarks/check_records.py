"""Rerun recorded runs for their first steps and compare them with the record: does a change move results?

    python benchmarks/check_records.py [--steps 3] [--only NAME,NAME] [--out report.md]

WAVE3's rule for refactors: discrete fields and evaluations equal exactly; the loss, entropy and gradient
norm within 1e-6 relative (they move with the CPU's kernel path). Each recorded run below is rerun from
its own config.json for `--steps` steps (one torch thread, as the benches run), and its first rows are
compared with the record's. Fields the record does not have (added since) are listed, never compared.
Exit status 1 when any run moved beyond the tolerance, so a refactor can be checked at every commit.

Known, deliberate differences are applied as overrides with the reason (`OVERRIDES`), never silently.
The recorded runs live in their bench's archive (benchmarks/archive.py); a record not unpacked yet is
unpacked where it was recorded before it is rerun.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rollwise.run.records import TIMING as RUN_TIMING, rows as metrics_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import ensure_unpacked  # noqa: E402  (benchmarks/archive.py)

ROOT = Path(__file__).resolve().parent.parent
R = ROOT / "benchmarks" / "results"

# name -> recorded run directory (the list: bench2 GRPO and AR3PO, a task-2 ARRoL+DUET run, TreePO,
# SPEC-RL, a synchronous APRIL run and an async run)
RECORDS = {
    "bench2-grpo": R / "bench2/runs/default/uniform/seed0",
    "bench2-ar3po": R / "bench2/runs/default/ar3po/seed0",
    "chain-arrol+duet-abort": R / "generate3_confirm/arrol_plus_duet-abort/runs/default/arrol_plus_duet-abort/seed0",
    "chain-treepo": R / "generate3_chain/treepo/runs/default/treepo/seed0",
    "chain-spec-rl": R / "generate3_chain/main/runs/default/spec-rl/seed0",
    "chain-april-sync": R / "async_chain5/april/runs/default/uniform_plus_april/seed0",
    "arith-async-S1": R / "async_arithmetic/runs/async_S1_seed0",
}

# Overrides that make today's code run a record as it was recorded, each with why.
OVERRIDES = {
    # Recorded configs carry `max_staleness: 1`, which the synchronous loop ignored when they were made.
    # Since 0.4 a value the user sets bounds synchronous partial rows too; null is "not set".
    "chain-april-sync": ["max_staleness=null"],
    # The TreePO record was made before the torch engine's prefix KV store (whose float noise moves
    # loss/entropy/grad norm by <= 0.04%): rerun it as recorded.
    "chain-treepo": ["engine_options.prefix_kv_rows=0"],
}

NOISY = {"loss", "entropy", "grad_norm"}  # within RTOL (kernel path), everything else exact
TIMING = set(RUN_TIMING)
RTOL = 1e-6


def rows(path: Path) -> list[dict]:
    return metrics_rows(path)


def close(key: str, a, b, rtol: float = RTOL) -> bool:
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        if key in NOISY or key.startswith("loss") or key.endswith("entropy"):
            return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-12)
    return False


def compare_rows(rec: list[dict], new: list[dict], steps: int) -> tuple[list[str], set[str]]:
    """-> (differences, fields only the rerun writes)."""
    diffs, added = [], set()
    if len(new) < min(steps, len(rec)):
        diffs.append(f"rerun wrote {len(new)} rows, the record has {len(rec)} (expected {steps})")
    for a, b in zip(rec[:steps], new[:steps]):
        added |= set(b) - set(a)
        for k in sorted(set(a) & set(b) - TIMING):
            if not close(k, a[k], b[k]):
                diffs.append(f"step {a.get('step')} {k}: {a[k]!r} -> {b[k]!r}")
        missing = set(a) - set(b) - TIMING
        if missing:
            diffs.append(f"step {a.get('step')}: fields gone: {', '.join(sorted(missing))}")
    return diffs, added


def rerun(name: str, rec: Path, steps: int, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rollwise.cli", "train", "--config", str(rec / "config.json"), "--out", str(out),
           "--steps", str(steps)]
    for o in OVERRIDES.get(name, []):
        cmd += ["--set", o]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated names of RECORDS (default: all)")
    ap.add_argument("--out", help="write the table as markdown here too")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(RECORDS)
    unknown = [n for n in names if n not in RECORDS]
    if unknown:
        print(f"check_records: unknown record {unknown[0]!r}; known: {', '.join(RECORDS)}", file=sys.stderr)
        return 2
    lines = [f"Rerun for {args.steps} steps, compared with the record (discrete exact; loss, entropy, grad norm "
             f"within {RTOL:g} relative).", "", "| record | result | first difference |", "|---|---|---|"]
    bad, added = 0, set()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rec = ensure_unpacked(RECORDS[name])
            out = Path(tmp) / name
            p = rerun(name, rec, args.steps, out)
            if p.returncode != 0:
                bad += 1
                lines.append(f"| {name} | FAILED | {(p.stderr.strip().splitlines() or ['?'])[-1][:200]} |")
            else:
                diffs, more = compare_rows(rows(rec / "metrics.jsonl"), rows(out / "metrics.jsonl"), args.steps)
                added |= more
                bad += bool(diffs)
                lines.append(f"| {name} | {'MOVED' if diffs else 'EQUAL'} | {(diffs[0] if diffs else '-')[:200]} |")
            print(lines[-1], flush=True)
    lines.append(f"\nFields only the rerun writes (not compared): {', '.join(sorted(added)) or 'none'}.")
    text = "\n".join(lines)
    print(lines[-1])
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
