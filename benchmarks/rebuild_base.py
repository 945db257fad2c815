"""Rebuild the shipped base checkpoint from scratch and compare it with the shipped weights, tensor by
tensor (the full check is a benchmark, not a test: it takes minutes).

    python benchmarks/rebuild_base.py [--task arithmetic] [--threads 2]   -> benchmarks/results/rebuild_base.json

The warm start runs with one torch thread and deterministic algorithms whatever the caller's thread
count (`--threads` sets the caller's, to show it does not matter), so on a machine of this kind (the
same CPU build of torch) the rebuild equals the shipped weights exactly.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from rollwise.core import registry
from rollwise.policy.warmstart import SHIPPED, WarmStartConfig, build_base

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="arithmetic")
    ap.add_argument("--threads", type=int, default=2, help="the caller's torch threads during the rebuild")
    ap.add_argument("--out", default=str(HERE / "results" / "rebuild_base.json"))
    args = ap.parse_args(argv)
    shipped = SHIPPED / args.task
    build = json.loads((shipped / "build.json").read_text())
    task = registry.get("task", args.task).obj()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        report = build_base(task, WarmStartConfig(**build["warmstart"]), Path(tmp) / "base", log=lambda m: None)
        new = load_file(str(Path(tmp) / "base" / "model.safetensors"))
    old = load_file(str(shipped / "model.safetensors"))
    diffs = {k: float((new[k] - old[k]).abs().max()) for k in old}
    result = {
        "task": args.task, "caller_threads": args.threads, "seconds": round(time.time() - t0, 1),
        "equal": set(new) == set(old) and all(torch.equal(new[k], old[k]) for k in old),
        "max_abs_diff": max(diffs.values()), "tensors": len(old),
        "eval_acc_rebuilt": report["eval_acc"],
        "eval_acc_shipped": json.loads((shipped / "report.json").read_text())["eval_acc"],
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "command": f"python benchmarks/rebuild_base.py --task {args.task} --threads {args.threads}",
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
