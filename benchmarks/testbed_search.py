"""Bench 3.0's testbed search, step 1: a warm start of the testbed task with snapshots.

Saves the model every `--every` supervised steps into OUT/step_<k>/ and evaluates each snapshot on
the task's validation split (greedy accuracy, and the mean accuracy of `--samples` samples at
temperature 1 with pass@k), with the share of train-pool prompts whose 8 samples are all right, all
wrong or mixed. OUT/curve.json holds the rows; CPU seconds are process time (the machine is shared).

    python benchmarks/testbed_search.py --task remainder --steps 1500 --every 250 --out runs/testbed_ws
(`--arch llama`: the same for a Hugging Face Llama base, whose snapshots are HF checkpoints.)
Then RL from a snapshot: `rollwise train --model runs/testbed_ws/step_750 --task remainder ...`, and

    python benchmarks/testbed_search.py --summarize RUN_DIR [RUN_DIR ...] > runs.json
keeps each run's settings that were varied and its evaluation rows (the search's record).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch


def snapshot_stats(policy, task, samples: int, pool_n: int, seed: int = 1) -> dict:
    from rollwise.core.types import Request
    from rollwise.generate.engine import run_sync
    from rollwise.generate.torch_engine import TorchEngine

    held = task.heldout()
    new = task.max_new_tokens
    def groups(prompts, n, temperature=1.0):
        engine = TorchEngine(policy, seed=seed, max_new_tokens=new, temperature=temperature)
        return [e.group for e in run_sync(engine, [Request(p, n, id=i) for i, p in enumerate(prompts)])]

    def scores(gs):
        return np.array([[task.verify(r.text, g.prompt.answer) for r in g.rollouts] for g in gs])

    g = scores(groups(held, 1, temperature=0.0))[:, 0]
    sampled = groups(held, samples)
    s = scores(sampled)
    lens = np.array([r.num_tokens for grp in sampled for r in grp.rollouts])
    rate = scores(groups(task.train_pool()[:pool_n], 8)).mean(1)
    levels = np.array([p.level for p in held])
    return {"greedy": float(g.mean()), "sampled": float(s.mean()), f"pass@{samples}": float(s.max(1).mean()),
            "sampled_by_level": [round(float(s[levels == lv].mean()), 3) for lv in sorted(set(levels))],
            "len_p50": float(np.median(lens)), "len_p99": float(np.percentile(lens, 99)),
            "pool_all_right": float((rate == 1).mean()), "pool_all_wrong": float((rate == 0).mean()),
            "pool_mixed": float(((rate > 0) & (rate < 1)).mean())}


def summarize(dirs: list[str]) -> dict:
    """Each RL run's varied settings and its evaluation rows, from its config.json and metrics.jsonl."""
    out = {}
    for d in dirs:
        cfg = json.loads((Path(d) / "config.json").read_text())
        rows = [json.loads(line) for line in open(Path(d) / "metrics.jsonl")]
        keep = ("step", "tokens", "compute", "eval_acc", "eval_se", "eval_sampled_acc@2", "eval_pass@1", "eval_len_mean")
        out[Path(d).name] = {
            "model": Path(cfg["model"]).name if cfg.get("model") else None,
            "task_options": cfg["task_options"], "batch_size": cfg["batch_size"], "n": cfg["n"],
            "lr": cfg["learner"]["lr"],
            "evals": [{k: r[k] for k in keep if k in r} for r in rows if "eval_acc" in r],
            "zero_var_frac_first3": [r["zero_var_frac"] for r in rows[1:4] if "zero_var_frac" in r]}
    return out


def main() -> None:
    import sys

    if "--summarize" in sys.argv:
        print(json.dumps(summarize([a for a in sys.argv[1:] if a != "--summarize"]), indent=1))
        return
    from rollwise.core.registry import get
    from rollwise.policy.warmstart import WarmStartConfig, deterministic, supervised_warm_start
    import rollwise.tasks  # noqa: F401  (registers the tasks)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="remainder")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--pool", type=int, default=96)
    ap.add_argument("--arch", default="tiny", help="tiny or llama (warmstart.arch)")
    ap.add_argument("--n-layer", type=int, default=None, help="none: the arch's default (4 tiny, 6 llama)")
    ap.add_argument("--n-embd", type=int, default=None, help="none: the arch's default (128 tiny, 288 llama)")
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--task-options", default="{}", help="the task's options as JSON, e.g. '{\"sft_slip\": 0.03}'")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    task = get("task", a.task).obj(**json.loads(a.task_options))
    cfg = WarmStartConfig(steps=a.steps, batch_size=a.batch, lr=a.lr, seed=a.seed, arch=a.arch, n_layer=a.n_layer,
                          n_embd=a.n_embd, block_size=a.block)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    t0, eval_cpu = time.process_time(), [0.0]

    def on_step(step, policy):
        if step % a.every:
            return
        train_cpu = time.process_time() - t0 - eval_cpu[0]
        policy.save(out / f"step_{step}")
        t1 = time.process_time()
        row = {"step": step, "train_cpu_s": round(train_cpu, 1), **snapshot_stats(policy, task, a.samples, a.pool)}
        eval_cpu[0] += time.process_time() - t1
        row["eval_cpu_s"] = round(time.process_time() - t1, 1)
        rows.append(row)
        (out / "curve.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
        print(json.dumps(row), flush=True)

    with deterministic():
        supervised_warm_start(task, cfg, log=lambda m: print(m, flush=True), on_step=on_step)


if __name__ == "__main__":
    main()
