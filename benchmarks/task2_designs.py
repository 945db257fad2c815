"""Scratchpad designs for embedded task 2, warm-started on the same budget: what does the base learn?
Results go to benchmarks/results/task2_designs/<design>.json.

    python benchmarks/task2_designs.py --design chain [--levels 5] [--group] [--steps 400] [--batch 32]
    python benchmarks/task2_designs.py --design chain --shipped --steps 1600 --save-every 200  # the shipped task

Designs (a running total over 2-24 one-digit +/- operations, unless said):
- chain (the shipped task, `rollwise.tasks.chain`): labelled operations, "7a+3b-5=" -> "a+3=10,b-5=5:5";
- unlabelled: "7+3-5=" -> "7+3=10,10-5=5:5" (each step repeats the running total);
- mod10: the labelled chain with totals modulo 10 (a one-digit state);
- reduce: each step folds the first operation and copies the rest of the expression;
- columns: long addition of two n-digit numbers, one step per column with its carry.

Same model (TinyGPT, 4 layers, width 128, block 320), same SFT recipe (`supervised_warm_start`), same
seeds. Reported: greedy held-out accuracy by level every `--eval-every` steps (10 prompts per level),
and at the end the greedy accuracy on 20 prompts per level plus lengths of T = 1 samples.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rollwise.core.types import Prompt, Request
from rollwise.generate.engine import run_sync
from rollwise.generate.torch_engine import TorchEngine
from rollwise.policy.warmstart import WarmStartConfig, deterministic, supervised_warm_start
from rollwise.run.evaluate import evaluate
from rollwise.tasks.chain import OPS, final_answer
from rollwise.tasks.reward import Scorer

HERE = Path(__file__).resolve().parent


REDUCE_OPS = (2, 3, 4, 5, 6, 8, 10, 12)


def sample_unlabelled(rng: np.random.Generator, ops: int) -> tuple[str, str, str]:
    """The chain without labels: "7+3-5=" -> "7+3=10,10-5=5:5" (each step repeats the running total)."""
    total = int(rng.integers(1, 10))
    prompt, steps = [str(total)], []
    for _ in range(ops):
        d = int(rng.integers(1, 10))
        op = "+" if rng.random() < 0.5 else "-"
        if (op == "-" and total - d < 0) or (op == "+" and total + d > 99):
            op = "+" if op == "-" else "-"
        new = total + d if op == "+" else total - d
        prompt.append(f"{op}{d}")
        steps.append(f"{total}{op}{d}={new}")
        total = new
    return "".join(prompt) + "=", ",".join(steps) + f":{total}", str(total)


def sample_reduce(rng: np.random.Generator, ops: int) -> tuple[str, str, str]:
    """The same chains, solved by rewriting: each step folds the first operation and copies the rest."""
    text, trace, ans = sample_unlabelled(rng, ops)
    terms = [m for m in __import__("re").findall(r"[+-]\d", text[1:-1])]
    totals = [int(step.split("=")[1]) for step in trace.split(":")[0].split(",")]
    states = [str(t) + "".join(terms[j + 1:]) for j, t in enumerate(totals)]
    return text, ",".join(states) + f":{ans}", ans


def sample_columns(rng: np.random.Generator, digits: int) -> tuple[str, str, str]:
    a = [int(rng.integers(0, 10)) for _ in range(digits)]
    b = [int(rng.integers(0, 10)) for _ in range(digits)]
    a[-1], b[-1] = int(rng.integers(1, 10)), int(rng.integers(1, 10))  # no leading zero (last reversed)
    carry, steps, out = 0, [], []
    for x, y in zip(a, b):
        s = x + y + carry
        steps.append(f"{x}+{y}+{carry}={s // 10}{s % 10}")
        out.append(str(s % 10))
        carry = s // 10
    if carry:
        out.append("1")
    ans = "".join(out)
    text = "".join(map(str, a)) + "+" + "".join(map(str, b)) + "="
    return text, ",".join(steps) + f":{ans}", ans


def sample_mod10(rng: np.random.Generator, ops: int) -> tuple[str, str, str]:
    """The labelled chain with a one-digit state: totals modulo 10 ("7a+3b-5=" -> "a+3=0,b-5=5:5")."""
    from rollwise.tasks.chain import LABELS

    total = int(rng.integers(0, 10))
    prompt, steps = [str(total)], []
    for label in LABELS[:ops]:
        d, op = int(rng.integers(1, 10)), "+" if rng.random() < 0.5 else "-"
        total = (total + d if op == "+" else total - d) % 10
        prompt.append(f"{label}{op}{d}")
        steps.append(f"{label}{op}{d}={total}")
    return "".join(prompt) + "=", ",".join(steps) + f":{total}", str(total)


def sample_labelled(rng, ops):
    from rollwise.tasks.chain import sample_chain

    return sample_chain(rng, ops)


# design -> (sampler, operations per level)
DESIGNS = {"chain": (sample_labelled, OPS), "unlabelled": (sample_unlabelled, OPS),
           "columns": (sample_columns, OPS), "reduce": (sample_reduce, REDUCE_OPS), "mod10": (sample_mod10, OPS)}


@dataclass
class DesignTask:
    """A design as a task the warm start takes: uniform levels (the first `levels` of them), the held-out
    set drawn first and avoided by the supervised examples, the final answer after the last ':'."""

    design: str = "chain"
    levels: int = len(OPS)
    sft_group_by_length: bool = False
    heldout_size: int = 400
    pool_size: int = 200
    max_new_tokens = 256
    _cache: dict = field(default_factory=dict, repr=False)

    def _draw(self, n, seed, exclude, unique=True):
        sampler, ops = DESIGNS[self.design]
        rng = np.random.default_rng(seed)
        out, seen = [], set(exclude)
        while len(out) < n:
            level = int(rng.integers(1, self.levels + 1))
            text, trace, ans = sampler(rng, ops[level - 1])
            if text not in seen:
                if unique:
                    seen.add(text)
                out.append((text, trace, ans, level))
        return out

    def heldout(self):
        if "h" not in self._cache:
            self._cache["h"] = [Prompt(i, t, a, lv) for i, (t, _, a, lv) in
                                enumerate(self._draw(self.heldout_size, 2, set()))]
        return self._cache["h"]

    def train_pool(self):
        ex = {p.text for p in self.heldout()}
        return [Prompt(i, t, a, lv) for i, (t, _, a, lv) in enumerate(self._draw(self.pool_size, 1, ex))]

    def sft_examples(self, n, seed):
        ex = {p.text for p in self.heldout()}
        return [(t, tr, lv) for t, tr, _, lv in self._draw(n, seed, ex, unique=False)]

    def verify(self, response, answer):
        return 1.0 if final_answer(response) == answer else 0.0


def per_level(prompts, k):
    """The first k held-out prompts of every level."""
    out, count = [], {}
    for p in prompts:
        if count.get(p.level, 0) < k:
            count[p.level] = count.get(p.level, 0) + 1
            out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--design", choices=list(DESIGNS), required=True)
    ap.add_argument("--levels", type=int, default=len(OPS), help="train and test on the first N levels only")
    ap.add_argument("--group", action="store_true", help="length-grouped supervised batches (as the shipped task)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--shipped", action="store_true",
                    help="--design chain only: the shipped ChainTask itself (its held-out set, length grouping), so "
                         "a checkpoint saved at step k (a multiple of 16) equals `rollwise warmstart --task chain "
                         "--set warmstart.steps=k` with the same lr and batch")
    ap.add_argument("--save-every", type=int, default=0, help="save the model every N steps (--save-dir)")
    ap.add_argument("--save-dir", default="/tmp/task2_designs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.shipped:
        from rollwise.tasks.chain import ChainTask

        task = ChainTask()
    else:
        task = DesignTask(args.design, args.levels, args.group)
    cfg = WarmStartConfig(steps=args.steps, batch_size=args.batch, lr=args.lr, n_layer=args.n_layer,
                          n_embd=args.n_embd, block_size=320)
    scorer = Scorer(task.verify)
    probe = per_level(task.heldout(), 10)
    curve = []
    t0 = time.time()

    def on_step(step, policy):
        if args.save_every and step % args.save_every == 0:
            policy.save(Path(args.save_dir) / f"step{step}")
        if step % args.eval_every == 0:
            r = evaluate(policy, probe, scorer, max_new_tokens=256)
            curve.append({"step": step, "s": round(time.time() - t0), **{k: round(v, 3) for k, v in r.items()}})
            print(json.dumps(curve[-1]), flush=True)

    with deterministic():
        policy = supervised_warm_start(task, cfg, on_step=on_step)
        sft_s = time.time() - t0
        final = evaluate(policy, per_level(task.heldout(), 20), scorer, max_new_tokens=256)
        sample_prompts = per_level(task.heldout(), 8)
        res = run_sync(TorchEngine(policy, seed=1, max_new_tokens=256), [Request(p, 4, id=i) for i, p in enumerate(sample_prompts)])
    rows = [(p.level, r.num_tokens, scorer.judge(r.text, p.answer).correct, r.finish_reason)
            for e, p in zip(res, sample_prompts) for r in e.group.rollouts]
    L = np.array([x[1] for x in rows])
    ok = np.array([x[2] for x in rows])
    samples = {"p50": float(np.percentile(L, 50)), "p90": float(np.percentile(L, 90)), "p99": float(np.percentile(L, 99)),
               "max": int(L.max()), "mean_correct": float(L[ok].mean()) if ok.any() else None,
               "mean_wrong": float(L[~ok].mean()) if (~ok).any() else None, "acc_t1": float(ok.mean()),
               "truncated": float(np.mean([x[3] == "length" for x in rows]))}
    doc = {"design": args.design, "command": "python benchmarks/task2_designs.py " + " ".join(argv or __import__("sys").argv[1:]),
           "warmstart": cfg.__dict__, "sft_seconds": round(sft_s), "curve": curve,
           "final_greedy": {k: round(v, 3) for k, v in final.items()}, "t1_samples": samples,
           "load_avg": list(__import__("os").getloadavg())}
    out = Path(args.out or HERE / "results" / "task2_designs" / f"{args.design}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
