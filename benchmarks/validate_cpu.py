"""The step-time model against this machine's measured steps (issue 41 item 5: "with the CPU profile, the model
predicts the measured wall seconds per step on this machine"): every trained step of the lossless plans' runs,
predicted from its own recorded work (systems/scale.py's StepWork at factor 1: no scaling) under the CPU
profile that benchmarks/cpu_profile.py measured, beside the wall seconds the run measured for that step.

    python benchmarks/validate_cpu.py [--profile cpu-2core-testbed-v1] [RECORD ...]

The deployment per run is what the run used: a synchronous run (tail batching's too) is one torch thread on
one core (`gpus: 1`); one-step-off and async runs (`workers: 0`) generate on one core while the learner trains
on the other (`gpus: 2, gen_gpus: 1`). Nothing is fitted: the profile's values come from micro-benchmarks.
Per arm: the median over its runs of the median over steps of predicted / measured, and the same for the
per-step speed against the plan's synchronous baseline. WAVE4: a prediction outside the goal (+-15%) is
reported, not tuned away.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from rollwise.systems.profile import load_profile
from rollwise.systems.scale import has_lengths, mode_of, step_works
from rollwise.systems.steptime import step_time

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ("lossless_explore_1", "lossless_explore_3", "lossless_confirm_1", "lossless_explore_2")


def runs_of(record: str) -> dict[str, list[Path]]:
    """{arm: its runs' directories}, the record's archive unpacked first where needed."""
    base = ROOT / "benchmarks/results" / record / "arms"
    if not any(base.glob("*/runs/**/metrics.jsonl")):
        subprocess.run([sys.executable, str(ROOT / "benchmarks/archive.py"), "unpack", record], check=True,
                       capture_output=True)
    return {arm.name: sorted(p.parent for p in arm.glob("runs/**/metrics.jsonl")) for arm in sorted(base.iterdir())}


def predicted_and_measured(run: Path, profile, part: str = "step") -> tuple[np.ndarray, np.ndarray, str]:
    """Per trained step of the run: the model's seconds and the measured ones, for the whole step (`wall_s`) or
    its generation (`part="generation"`: `gen_s`), and the run's mode."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    config = json.loads((run / "config.json").read_text())
    mode = mode_of(config)
    if not has_lengths(rows):
        return np.array([]), np.array([]), mode
    deploy = replace(profile, gpus=1, gen_gpus=1) if mode == "sync" else profile
    works = step_works(rows, 1.0)
    key = "wall_s" if part == "step" else "gen_s"
    measured, before = [], 0.0  # cumulative seconds: a step's own is the difference
    for r in rows:
        if r.get("step", 0) > 0:
            measured.append(r[key] - before)
        before = r.get(key, before)
    times = [step_time(deploy, w, mode) for w in works]
    pred = np.array([t.step_s if part == "step" else t.generation_s for t in times])
    return pred, np.asarray(measured, float), mode


def table(records, profile) -> list[str]:
    lines = ["| record | arm | mode | runs | measured s/step | predicted s/step | predicted / measured | "
             "speed vs sync: measured | predicted | generation: predicted / measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        per_arm = {}
        for arm, runs in runs_of(record).items():
            got = [predicted_and_measured(r, profile) for r in runs]
            gen = [predicted_and_measured(r, profile, "generation") for r in runs]
            gen = [np.median(p[m > 0] / m[m > 0]) for p, m, _ in gen if (m > 0).any()]
            got = [(p, m, mode) for p, m, mode in got if len(p)]
            if got:
                per_arm[arm] = (np.median([np.median(m) for _, m, _ in got]), np.median([np.median(p) for p, _, _ in got]),
                                np.median([np.median(p / m) for p, m, _ in got]), got[0][2], len(got), np.median(gen))
        base = next((a for a, v in per_arm.items() if v[3] == "sync"), None)
        for arm, (m, p, ratio, mode, k, gen) in per_arm.items():
            speed = ("—", "—") if base is None or arm == base else \
                (f"{per_arm[base][0] / m:.2f}×", f"{per_arm[base][1] / p:.2f}×")
            lines.append(f"| {record} | {arm} | {mode} | {k} | {m:.2f} | {p:.2f} | {ratio:.2f}× | {speed[0]} | {speed[1]} "
                         f"| {gen:.2f}× |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", default=list(RECORDS))
    ap.add_argument("--profile", default="cpu-2core-testbed-v1")
    args = ap.parse_args(argv)
    print("\n".join(table(args.records, load_profile(args.profile))))


if __name__ == "__main__":
    main()
