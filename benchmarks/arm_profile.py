"""Where each arm of a bench record spends its compute, recomputed from the raw runs (`metrics.jsonl`).

    python benchmarks/arm_profile.py bench3_explore27_remainder [bench3_confirm2_task1 ...] [--json]

Per arm, over its runs: the steps each run took inside the budget, compute units per step (the run's
final `compute` over its final `step`), the share of generated groups whose rewards were all equal
(`zero_var_frac_gen`, mean over every step of every run: the waste selection and filtering act on), and,
for arms with drafts (DAS), the share of trained tokens that came as accepted drafts and the acceptance
rate. The runs are read from the record's `runs.tar.xz` (or its unpacked `runs/`), nothing is written.
The plan report gives the accuracy figures; this gives the cost side behind them. Records from before
the compute budget (no `compute` in their rows) have nothing to show here.

The zero-variance share reads the groups a step generated last: for SPEED-RL these are its continuations,
one row each at n 4 and so equal by definition, and its share reads 1.0, which says nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

from archive import ARCHIVE, RESULTS, run_folders


def metrics_files(bench: Path) -> dict[str, bytes]:
    """{path inside the bench: bytes} of every run's metrics.jsonl, unpacked runs first, else the archive."""
    folders = run_folders(bench)
    if folders:
        return {p.relative_to(bench).as_posix(): p.read_bytes()
                for f in folders for p in sorted(f.rglob("metrics.jsonl"))}
    archive = bench / ARCHIVE
    if not archive.exists():
        raise SystemExit(f"arm_profile: {bench.name} has neither runs/ nor {ARCHIVE}")
    with tarfile.open(archive, "r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()
                if m.isfile() and m.name.endswith("metrics.jsonl")}


def arm_of(inner: str) -> str:
    """The arm a run belongs to: `arms/ARM/runs/...` in a plan record, else the planner folder of `runs/MIX/P/seedS`."""
    parts = inner.split("/")
    return parts[1] if parts[0] == "arms" else parts[-3]


def run_profile(data: bytes) -> dict | None:
    steps = [r for r in map(json.loads, data.decode().splitlines()) if "compute" in r and "step" in r]
    if not steps:
        return None
    last = steps[-1]
    drafted = last.get("tok/train/trained/draft", 0)
    decoded = last.get("tok/train/trained/decoded", 0)
    return {"steps": last["step"],
            "compute_per_step": last["compute"] / last["step"],
            "zero_var": statistics.fmean(r["zero_var_frac_gen"] for r in steps if "zero_var_frac_gen" in r),
            "draft_share": drafted / (drafted + decoded) if drafted else None,
            "accept_rate": last.get("das/accept_rate")}


def profile(bench: Path) -> dict[str, dict]:
    runs = defaultdict(list)
    for inner, data in metrics_files(bench).items():
        p = run_profile(data)
        if p is not None:
            runs[arm_of(inner)].append(p)
    out = {}
    for arm, ps in sorted(runs.items()):
        drafts = [p["draft_share"] for p in ps if p["draft_share"] is not None]
        accepts = [p["accept_rate"] for p in ps if p["accept_rate"] is not None]
        out[arm] = {"runs": len(ps),
                    "steps_min": min(p["steps"] for p in ps), "steps_max": max(p["steps"] for p in ps),
                    "compute_per_step": statistics.fmean(p["compute_per_step"] for p in ps),
                    "zero_var_frac_gen": statistics.fmean(p["zero_var"] for p in ps),
                    "draft_share": statistics.fmean(drafts) if drafts else None,
                    "accept_rate": (min(accepts), max(accepts)) if accepts else None}
    return out


def table(name: str, prof: dict[str, dict]) -> str:
    if not prof:
        return f"## {name}\n\nno run records compute units (a record from before the compute budget)"
    lines = [f"## {name}", "",
             "| arm | runs | steps in the budget | compute units per step | zero-variance share of generated groups "
             "| accepted drafts, share of trained tokens | draft acceptance |",
             "|---|---|---|---|---|---|---|"]
    for arm, p in prof.items():
        steps = f"{p['steps_min']}" if p["steps_min"] == p["steps_max"] else f"{p['steps_min']}–{p['steps_max']}"
        draft = "—" if p["draft_share"] is None else f"{p['draft_share']:.3f}"
        accept = "—" if p["accept_rate"] is None else f"{p['accept_rate'][0]:.3f}–{p['accept_rate'][1]:.3f}"
        lines.append(f"| {arm} | {p['runs']} | {steps} | {p['compute_per_step'] / 1000:.1f}k | "
                     f"{p['zero_var_frac_gen']:.3f} | {draft} | {accept} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("benches", nargs="+", help="record folders under benchmarks/results")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    args = ap.parse_args(argv)
    found = {}
    for name in args.benches:
        bench = RESULTS / name
        if not bench.is_dir():
            raise SystemExit(f"arm_profile: no record benchmarks/results/{name}")
        found[name] = profile(bench)
    print(json.dumps(found, indent=2) if args.json else "\n\n".join(table(n, p) for n, p in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
