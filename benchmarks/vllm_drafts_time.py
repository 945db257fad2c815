"""Does DAS's history drafting save generation time on the vLLM engine? (issue 42 item 2's timing; exploratory)

    bash scripts/extras/vllm-cpu.sh
    .venv-vllm/bin/python benchmarks/vllm_drafts_time.py [--seeds 0 1 2] [--steps 10] [--k 8]

Two training runs per seed on the testbed's shipped base (exported as GPT-2 for vLLM, `rollwise export`), both
`--engine vllm`, the same settings and seed: `plain` (planner uniform, no drafts) and `das` (planner das with
`engine_options.drafts={method: history, num_speculative_tokens: k}`: DAS's suffix-tree drafts from the run's
own earlier responses, verified inside vLLM; exact, tests/test_vllm_drafts.py). Each run is its own process
(vLLM's engine starts with it), arms in rotated order per seed, so the two share the machine's drift.

A small train pool (`--pool`, 2 x the prompts per step) brings each prompt back every other step: the
repetitive case DAS is for; the policy trains between visits, so the drafts meet the drift a real run has.
Step 1 is left out of every figure (vLLM's first step warms up, and DAS has no history to draft from).
Per run, over steps 2..S, from metrics.jsonl's cumulative counters:

    s/token   generation seconds (`gen_s`) / generated train tokens (`tokens_train`: every kind, drafted or
              decoded); the runs' lengths differ by sampling, so time per token is the figure compared
    step gen  generation seconds per step
    accept    DAS's kept / scored draft tokens

The ratio is plain's s/token over das's, per seed (> 1: drafts save time), with the median over seeds. The
wall clock of a shared CPU machine: run it on an otherwise idle one. The CPU build's figures say nothing of a
GPU's, where a decode pass is memory-bound and scoring k draft tokens costs little more than one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "src/rollwise/assets/bases/remainder"
DEFAULT_OUT = ROOT / "benchmarks/results/vllm_drafts_time"
ENGINE = ["engine_options.dtype=float32", "engine_options.llm_options.kv_cache_memory_bytes=268435456",
          "engine_options.llm_options.enforce_eager=true"]  # what the CPU build needs (docs/gpu.md)


def rollwise_cli() -> str:
    """The `rollwise` script of this interpreter's environment (the vLLM one)."""
    path = Path(sys.executable).parent / "rollwise"
    if not path.exists():
        raise SystemExit(f"vllm_drafts_time: no rollwise script beside {sys.executable}: run it with .venv-vllm's python")
    return str(path)


def command(arm: str, model: Path, out: Path, seed: int, args) -> list[str]:
    sets = [f"batch_size={args.batch}", f"n={args.n}", "eval_every=0", f"checkpoint_every={args.steps + 1}",
            f"task_options.pool_size={args.pool}", *ENGINE]
    if arm == "das":
        # DAS drafts up to k_long (8) tokens a pass; the engine cuts every draft to k
        sets += ["engine_options.drafts.method=history", f"engine_options.drafts.num_speculative_tokens={args.k}"]
    cmd = [rollwise_cli(), "train", "--task", "remainder", "--engine", "vllm", "--model", str(model),
           "--planner", "uniform" if arm == "plain" else "das", "--steps", str(args.steps), "--seed", str(seed),
           "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def figures(rows: list[dict]) -> dict:
    """Steps 2..S of one run, from its cumulative counters."""
    by_step = {r["step"]: r for r in rows if r.get("step", 0) >= 1 and "gen_s" in r}
    first, last = by_step[1], by_step[max(by_step)]
    steps = max(by_step) - 1
    gen = last["gen_s"] - first["gen_s"]
    tokens = last["tokens_train"] - first["tokens_train"]
    kept, scored = last.get("das/kept", 0.0) - first.get("das/kept", 0.0), last.get("das/scored", 0.0) - first.get("das/scored", 0.0)
    return {"steps": steps, "gen_s": gen, "tokens": tokens, "s_per_token": gen / max(tokens, 1),
            "gen_s_per_step": gen / max(steps, 1), "wall_s_per_step": (last["wall_s"] - first["wall_s"]) / max(steps, 1),
            "accept": kept / scored if scored else None, "draft_tokens": kept, "scored": scored}


def run(arm: str, model: Path, work: Path, seed: int, args, log) -> dict:
    out = work / f"{arm}-seed{seed}"
    t0 = time.time()
    with open(work / f"{arm}-seed{seed}.log", "w") as f:
        rc = subprocess.run(command(arm, model, out, seed, args), stdout=f, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
    if rc != 0:
        raise SystemExit(f"vllm_drafts_time: {arm} seed {seed} exited {rc}; its log: {work / f'{arm}-seed{seed}.log'}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    fig = {"arm": arm, "seed": seed, "process_s": time.time() - t0, **figures(rows)}
    log(f"  {arm} seed {seed}: {fig['s_per_token'] * 1e3:.3f} ms/token, {fig['gen_s_per_step']:.2f} s gen/step"
        + (f", accept {fig['accept']:.2f}" if fig["accept"] is not None else ""))
    return fig


def summarize(runs: list[dict]) -> dict:
    seeds = sorted({r["seed"] for r in runs})
    get = {(r["arm"], r["seed"]): r for r in runs}
    ratios = [get["plain", s]["s_per_token"] / get["das", s]["s_per_token"] for s in seeds]
    step_ratios = [get["plain", s]["gen_s_per_step"] / get["das", s]["gen_s_per_step"] for s in seeds]
    return {"seeds": seeds, "s_per_token_ratio": ratios, "median_ratio": float(np.median(ratios)),
            "gen_step_ratio": step_ratios, "median_gen_step_ratio": float(np.median(step_ratios)),
            "accept": float(np.mean([get["das", s]["accept"] for s in seeds])),
            "draft_share": float(np.mean([get["das", s]["draft_tokens"] / max(get["das", s]["tokens"], 1) for s in seeds]))}


def markdown(doc: dict) -> str:
    a, s = doc["args"], doc["summary"]
    lines = ["# DAS's history drafts on the vLLM engine: generation time (exploratory)", "",
             f"`{doc['command']}`, {doc['when']}; load averages {doc['load_start']} at the start, {doc['load_end']} at "
             "the end. The testbed's shipped base exported as GPT-2; "
             f"{a['batch']} prompts x n {a['n']} per step, train pool {a['pool']}, {a['steps']} steps (step 1 left out), "
             f"k {a['k']}; arms alternate per seed in rotated order, each its own process.", "",
             "| seed | arm | ms / generated token | gen s / step | wall s / step | tokens | drafted share | accept |",
             "|---|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        accept = "-" if r["accept"] is None else f"{r['accept']:.2f}"
        lines.append(f"| {r['seed']} | {r['arm']} | {r['s_per_token'] * 1e3:.3f} | {r['gen_s_per_step']:.2f} | "
                     f"{r['wall_s_per_step']:.2f} | {r['tokens']:,} | "
                     f"{r['draft_tokens'] / max(r['tokens'], 1):.2f} | {accept} |")
    lines += ["", f"plain / das, generation seconds per generated token: per seed "
              f"{', '.join(f'{x:.2f}x' for x in s['s_per_token_ratio'])}, **median {s['median_ratio']:.2f}x** "
              f"(> 1: the drafts save time); per step {s['median_gen_step_ratio']:.2f}x. DAS kept {s['accept']:.2f} of "
              f"the draft tokens vLLM scored; {s['draft_share']:.2f} of its generated tokens came from drafts.", "",
              "Exploratory: a few seeds, vLLM's CPU build and the tiny testbed model, whose decode pass is bound by "
              "per-step overheads rather than memory traffic; a GPU's ratio is not read off this."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--pool", type=int, default=32)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="prefix of the .json and .md written")
    args = ap.parse_args(argv)
    if args.steps < 2:
        raise SystemExit("vllm_drafts_time: --steps must be at least 2 (step 1 is left out)")
    command_line = "python benchmarks/vllm_drafts_time.py " + " ".join(argv if argv is not None else sys.argv[1:])
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([rollwise_cli(), "export", "--model", str(BASE), "--out", str(work / "hf")], check=True,
                       stdout=subprocess.DEVNULL)
        for i, seed in enumerate(args.seeds):
            for arm in (["plain", "das"] if i % 2 == 0 else ["das", "plain"]):
                runs.append(run(arm, work / "hf", work, seed, args, print))
    doc = {"command": command_line.strip(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()], "args": vars(args) | {"out": str(args.out)},
           "runs": runs, "summary": summarize(runs)}
    Path(f"{args.out}.json").write_text(json.dumps(doc, indent=1) + "\n")
    Path(f"{args.out}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
