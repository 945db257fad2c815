"""TreePO's generation on the torch engine with and without its prefix KV store: what sharing a node's KV
with its branches saves, on task 2 (`chain`) from the shipped base.

    OMP_NUM_THREADS=1 python benchmarks/treepo_kv.py [--prompts 32] [--n 8] [--repeats 3] [--seed 0]

One TreePO step's rollouts, as the bench runs it (segments of 16 tokens, at most 14 deep, `--n` leaves per
prompt), generated twice per repeat by two engines that differ only in `prefix_kv_rows`: 256 (the default:
a branch starts from its parent's kept KV and prefills one token) and 0 (every branch prefills prompt +
prefix again, the engine before the store). The two arms alternate, and which goes first alternates by
repeat: the machine is shared, so the figure is the ratio within a repeat, and its median over repeats.
Both arms draw from the same seed; their trees are the same up to float noise in the logits (the test
tests/test_prefix_kv.py checks equality under greedy decoding), so the decoded tokens are reported per arm.

Reported per arm: wall seconds, tokens decoded, prompt tokens prefilled (the engines' Finished counts), the
continuations served from kept KV; and a third arm, `independent`: the same prompts' n samples drawn
in one engine call, as GRPO generates them, for the wall time a tree step costs against it. Writes benchmarks/results/treepo_kv.{json,md}.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from rollwise.control.base import StepContext  # noqa: E402
from rollwise.control.treepo import TreePO  # noqa: E402
from rollwise.core import registry  # noqa: E402
from rollwise.core.types import Request, SamplingParams  # noqa: E402
from rollwise.generate.engine import number, run_sync  # noqa: E402
from rollwise.generate.torch_engine import TorchEngine  # noqa: E402
from rollwise.policy.policy import Policy  # noqa: E402
from rollwise.policy.warmstart import base_checkpoint  # noqa: E402
from rollwise.run.config import load_config  # noqa: E402

RESULTS = HERE / "results"


def one_step(policy, prompts, n: int, max_new: int, kv_rows: int, seed: int) -> dict:
    """Grow one tree per prompt, wave by wave, through a fresh engine; its figures."""
    engine = TorchEngine(policy, temperature=1.0, max_new_tokens=max_new, seed=seed, prefix_kv_rows=kv_rows)
    treepo = TreePO(segment_tokens=16, max_depth=14, seed=seed)
    ctx = StepContext(step=0, batch_size=len(prompts), n=n, pool=prompts, history=None, ledger=None,
                      rng=np.random.default_rng(seed))
    treepo.begin_step(ctx)
    hook = treepo.speculate([Request(p, n, sampling=SamplingParams(max_tokens=max_new)) for p in prompts], ctx)
    prefilled = decoded = waves = 0
    t0 = time.perf_counter()
    try:
        requests = next(hook)
        while True:
            number(requests)
            events = run_sync(engine, requests)
            waves += 1
            prefilled += sum(e.prompt_tokens for e in events)
            for e in events:
                for r in e.group.rollouts:  # a continuation's rollout holds its prefix: count its new tokens
                    decoded += r.meta.get("tokens_by_kind", {}).get("decoded", r.num_tokens)
            requests = hook.send([e.group for e in events])
    except StopIteration as stop:
        leaves = stop.value
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 3), "decoded": decoded, "prefilled": prefilled, "waves": waves,
            "leaves": sum(g.n for g in leaves), "kv_hits": engine.prefix_kv.hits,
            "kv_reused_tokens": engine.prefix_kv.reused_tokens,
            "leaf_tokens": sum(r.num_tokens for g in leaves for r in g.rollouts)}


def independent(policy, prompts, n: int, max_new: int, seed: int) -> dict:
    """The same prompts' n samples drawn independently in one engine call (GRPO's generation)."""
    engine = TorchEngine(policy, temperature=1.0, max_new_tokens=max_new, seed=seed)
    t0 = time.perf_counter()
    requests = [Request(p, n) for p in prompts]
    number(requests)
    events = run_sync(engine, requests)
    wall = time.perf_counter() - t0
    toks = sum(r.num_tokens for e in events for r in e.group.rollouts)
    return {"wall_s": round(wall, 3), "decoded": toks, "prefilled": sum(e.prompt_tokens for e in events), "waves": 1,
            "leaves": sum(e.group.n for e in events), "kv_hits": 0, "kv_reused_tokens": 0, "leaf_tokens": toks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (the bench's batch)")
    ap.add_argument("--n", type=int, default=8, help="leaves per prompt (the group size)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "treepo_kv"), help="output path without extension")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.n < 1 or args.repeats < 1:
        raise SystemExit("treepo_kv: --prompts, --n and --repeats must be >= 1")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cfg = load_config(None, {"task": "chain"})
    task = registry.get("task", cfg.task).obj(**cfg.task_options)
    path = Path(base_checkpoint(task, cfg.warmstart))
    policy = Policy.load(path)
    policy.model.eval()
    prompts = task.train_pool()[: args.prompts]
    arms = {"shared": 256, "re-prefill": 0}
    one_step(policy, prompts[:2], 2, cfg.max_new_tokens, 256, args.seed)  # warm-up, unrecorded
    runs = []
    for rep in range(args.repeats):
        order = list(arms) + ["independent"]
        order = order if rep % 2 == 0 else order[::-1]
        runs.append({arm: one_step(policy, prompts, args.n, cfg.max_new_tokens, arms[arm], args.seed + rep)
                     if arm in arms else independent(policy, prompts, args.n, cfg.max_new_tokens, args.seed + rep)
                     for arm in order})
        print(json.dumps(runs[-1]), flush=True)
    ratio = [r["re-prefill"]["wall_s"] / r["shared"]["wall_s"] for r in runs]
    vs_indep = [r["shared"]["wall_s"] / r["independent"]["wall_s"] for r in runs]
    vs_indep0 = [r["re-prefill"]["wall_s"] / r["independent"]["wall_s"] for r in runs]
    prefill_ratio = [r["re-prefill"]["prefilled"] / max(r["shared"]["prefilled"], 1) for r in runs]
    rec = {"command": "python benchmarks/treepo_kv.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "date": dt.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
           f"load {os.getloadavg()[0]:.1f} at the end", "torch": torch.__version__, "threads": torch.get_num_threads(),
           "checkpoint": str(path.name), "prompts": args.prompts, "n": args.n, "max_new_tokens": cfg.max_new_tokens,
           "runs": runs, "wall_ratio_median": round(statistics.median(ratio), 3), "wall_ratios": [round(x, 3) for x in ratio],
           "prefill_ratio_median": round(statistics.median(prefill_ratio), 2),
           "shared_vs_independent_median": round(statistics.median(vs_indep), 3),
           "reprefill_vs_independent_median": round(statistics.median(vs_indep0), 3)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=2) + "\n")
    lines = ["# TreePO on the torch engine: branches sharing their parent's KV, or re-prefilling it", "",
             f"Command: `{rec['command']}` ({rec['date']}, {rec['machine']}, torch {rec['torch']}, "
             f"{rec['threads']} thread(s)). One TreePO step on `chain` from the shipped base: {args.prompts} prompts x "
             f"{args.n} leaves, segments of 16 tokens, at most 14 deep.", "",
             "| repeat | arm | wall s | decoded | prefilled | continuations from kept KV | prefill tokens skipped | waves | leaves |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs):
        for arm in (*arms, "independent"):
            a = r[arm]
            lines.append(f"| {i} | {arm} | {a['wall_s']:.2f} | {a['decoded']} | {a['prefilled']} | {a['kv_hits']} | "
                         f"{a['kv_reused_tokens']} | {a['waves']} | {a['leaves']} |")
    lines += ["", f"Wall time, re-prefill / shared, per repeat: {', '.join(f'{x:.2f}' for x in ratio)} "
              f"(median **{rec['wall_ratio_median']:.2f}×**); prompt tokens prefilled, re-prefill / shared: median "
              f"{rec['prefill_ratio_median']:.1f}×. Against the same prompts' samples drawn independently "
              f"(`independent`, GRPO's generation, which decodes more tokens), a tree step takes "
              f"{rec['shared_vs_independent_median']:.2f}× the wall time with the store and "
              f"{rec['reprefill_vs_independent_median']:.2f}× without (medians).", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
