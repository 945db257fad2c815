"""Length profile of a task's responses, from a checkpoint's own samples (the task's base by default):
p50/p90/p99/max overall, by correctness and by level; how lengths correlate within a prompt; the spread
of per-prompt pass rates; and the simulator length shape fitted to them (sim/profiles.py).

    python benchmarks/task_profile.py --task chain [--model DIR] [--prompts 400] [--n 8] [--temperature 1]
                                      [--set key=value ...] [--out benchmarks/results/task_profile_chain]

Writes OUT.json and OUT.md. Nothing about lengths is planted by the task: its supervised traces have
one length per prompt, so whatever spread, tail or right/wrong gap appears here is the model's.

Definitions.
- Lengths are response tokens as the engine generated them, EOS included (what the ledger charges).
- Truncated: cut at max_new_tokens before EOS (finish reason "length").
- Wrong vs right, two ways: over all samples (mixes levels: harder levels are longer and more often
  wrong), and within prompt (only prompts with both right and wrong samples; the mean over those
  prompts of mean(wrong) / mean(right)), which compares like with like.
- Within-prompt correlation: the intraclass correlation of log length, ICC(1) = between-prompt variance
  / total, both raw and after removing each level's mean (so it is not just "same level, same length").
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def pct(x) -> dict:
    x = np.asarray(x, dtype=float)
    if not len(x):
        return {"count": 0}
    return {"count": int(len(x)), "mean": round(float(x.mean()), 1), "p50": float(np.percentile(x, 50)),
            "p90": float(np.percentile(x, 90)), "p99": float(np.percentile(x, 99)), "max": int(x.max())}


def icc(values: np.ndarray, groups: np.ndarray) -> float:
    """ICC(1) of values grouped by `groups` (one-way ANOVA estimator, equal group sizes)."""
    ids = np.unique(groups)
    k = len(values) / len(ids)
    means = np.array([values[groups == g].mean() for g in ids])
    msb = k * ((means - values.mean()) ** 2).sum() / (len(ids) - 1)
    msw = sum(((values[groups == g] - m) ** 2).sum() for g, m in zip(ids, means)) / (len(values) - len(ids))
    return float((msb - msw) / (msb + (k - 1) * msw))


def sim_shape(L, correct, prompt, pass_rate, max_len, prompt_lens, levels) -> dict:
    """The simulator's length parameters (sim/population.py) from the samples, by moments of log length:
    - len_sample_sd: within-prompt sd of log length among samples of the same correctness;
    - wrong_len: the within-prompt mean log-length gap, wrong minus right (prompts with both);
    - between-prompt sd S of the prompt's mean log length (wrong samples' gap removed), split into the
      part that follows difficulty (len_diff_slope = r * S, r = correlation with -logit of the prompt's
      smoothed pass rate) and the rest (len_prompt_sd); one call per prompt cannot separate a prompt's
      persistent length from its call's, so len_group_sd is left small (0.05);
    - median_len: the median correct length of a typical prompt (exp of the mean of mu).
    Cut samples are at max_len and bias the fit down a little; the simulator cuts at max_len too."""
    logL = np.log(np.maximum(L, 1))
    ids = np.unique(prompt)
    gaps, resid = [], []
    for g in ids:
        m = prompt == g
        c = correct[m]
        if c.any() and (~c).any():
            gaps.append(logL[m][~c].mean() - logL[m][c].mean())
    wrong_len = float(np.mean(gaps)) if gaps else 0.0
    adj = logL - wrong_len * (~correct)  # each sample's log length as if it were right
    mu = np.array([adj[prompt == g].mean() for g in ids])
    for g, m_ in zip(ids, mu):
        for c in (True, False):
            sel = (prompt == g) & (correct == c)
            if sel.sum() > 1:
                resid += list(adj[sel] - adj[sel].mean())
    sample_sd = float(np.sqrt(np.mean(np.square(resid)) * 1.0)) if resid else 0.0
    S = float(mu.std())
    pr = np.array([pass_rate[prompt == g][0] for g in ids])
    n = np.array([(prompt == g).sum() for g in ids])
    hard = -np.log((pr * n + 0.5) / (n - pr * n + 0.5))  # -logit of the smoothed pass rate
    r = float(np.corrcoef(mu, hard)[0, 1]) if hard.std() > 0 else 0.0
    r = max(r, 0.0)
    return {"median_len": round(float(np.exp(mu.mean())), 2), "len_prompt_sd": round(S * np.sqrt(1 - r * r), 3),
            "len_diff_slope": round(r * S, 3), "len_group_sd": 0.05, "len_sample_sd": round(sample_sd, 3),
            "wrong_len": round(wrong_len, 3), "max_len": int(max_len), "clusters": int(len(np.unique(levels))),
            "prompt_len_min": int(min(prompt_lens)), "prompt_len_max": int(max(prompt_lens))}


def difficulty_fit(pass_rate_per_prompt: np.ndarray, n: int, greedy_acc: float | None, clusters: int,
                   seed: int = 0) -> dict:
    """The simulator's difficulty parameters (diff_sd, skill0, cluster_sd, greedy_threshold) by a grid
    search that matches the histogram of per-prompt pass rates (n samples each, binomial noise included),
    then the greedy threshold that gives the measured greedy accuracy. A fit of the base only; the
    learning dynamics are not fitted (sim/profiles.py says which keep their defaults)."""
    rng = np.random.default_rng(seed)
    bins = np.linspace(0, 1, n + 2) - 0.5 / n
    want = np.histogram(pass_rate_per_prompt, bins)[0] / len(pass_rate_per_prompt)
    P = 4000
    z_d, z_c, cl = rng.standard_normal(P), rng.standard_normal(clusters), rng.integers(0, clusters, P)
    u = rng.random((P, n))
    best = None
    for diff_sd in np.arange(0.5, 4.01, 0.25):
        for skill0 in np.arange(-4.0, 4.01, 0.25):
            for cluster_sd in (0.0, 0.5, 1.0, 1.5, 2.0):
                p = 1 / (1 + np.exp(-(skill0 + cluster_sd * z_c[cl] - diff_sd * z_d)))
                rates = (u < p[:, None]).mean(1)
                err = float(np.abs(np.histogram(rates, bins)[0] / P - want).sum())
                if best is None or err < best[0]:
                    best = (err, diff_sd, skill0, cluster_sd, p)
    err, diff_sd, skill0, cluster_sd, p = best
    thr = float(np.quantile(p, 1 - greedy_acc)) if greedy_acc is not None else 0.5
    return {"diff_sd": float(diff_sd), "skill0": float(skill0), "cluster_sd": float(cluster_sd),
            "greedy_threshold": round(thr, 4), "fit_l1_error": round(err, 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="chain")
    ap.add_argument("--model", help="checkpoint directory (default: the task's base)")
    ap.add_argument("--prompts", type=int, default=0, help="held-out prompts (0 = all)")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, as in train")
    ap.add_argument("--out", help="output path without extension (default benchmarks/results/task_profile_TASK)")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    from rollwise.cli import _parse_value
    from rollwise.core import registry
    from rollwise.core.types import Request
    from rollwise.generate.engine import run_sync
    from rollwise.generate.torch_engine import TorchEngine
    from rollwise.policy.policy import Policy
    from rollwise.policy.warmstart import base_checkpoint
    from rollwise.run.config import load_config
    from rollwise.run.evaluate import evaluate
    from rollwise.tasks.reward import Scorer

    overrides = {"task": args.task, **{k: _parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}}
    cfg = load_config(None, overrides)
    task = registry.get("task", cfg.task).obj(**cfg.task_options)
    path = Path(args.model or cfg.model or base_checkpoint(task, cfg.warmstart))
    policy = Policy.load(path)
    policy.model.eval()
    prompts = task.heldout()[: args.prompts or None]
    scorer = Scorer(task.verify)
    t0 = time.perf_counter()
    greedy = evaluate(policy, prompts, scorer, max_new_tokens=cfg.max_new_tokens)
    engine = TorchEngine(policy, temperature=args.temperature, max_new_tokens=cfg.max_new_tokens, seed=args.seed)
    res = run_sync(engine, [Request(p, args.n, id=i) for i, p in enumerate(prompts)])
    gen_s = time.perf_counter() - t0
    L, ok, pid, lev, cut = [], [], [], [], []
    for e, p in zip(res, prompts):
        for r in e.group.rollouts:
            L.append(r.num_tokens)
            ok.append(scorer.judge(r.text, p.answer).correct)
            pid.append(p.id)
            lev.append(p.level)
            cut.append(r.finish_reason == "length")
    L, ok, pid, lev, cut = map(np.asarray, (L, ok, pid, lev, cut))
    rate_of = {g: ok[pid == g].mean() for g in np.unique(pid)}
    pass_rate = np.array([rate_of[g] for g in pid])
    rates = np.array(list(rate_of.values()))
    within = []
    for g in np.unique(pid):
        m = pid == g
        if ok[m].any() and (~ok[m]).any():
            within.append(L[m][~ok[m]].mean() / L[m][ok[m]].mean())
    logL = np.log(L)
    level_mean = {lv: logL[lev == lv].mean() for lv in np.unique(lev)}
    by_level = {}
    for lv in sorted(np.unique(lev).tolist()):
        m = lev == lv
        by_level[str(lv)] = {"acc_t1": round(float(ok[m].mean()), 3),
                             "acc_greedy": round(greedy.get(f"eval_acc_L{lv}", float("nan")), 3),
                             "truncated": round(float(cut[m].mean()), 3), **pct(L[m]),
                             "right": pct(L[m & ok]), "wrong": pct(L[m & ~ok])}
    prompt_lens = [len(policy.encode(p.text)) for p in prompts]
    shape = sim_shape(L, ok, pid, pass_rate, cfg.max_new_tokens, prompt_lens, lev)
    shape.update(difficulty_fit(rates, args.n, greedy["eval_acc"], shape["clusters"]))
    doc = {
        "task": args.task, "model": str(path), "prompts": len(prompts), "n": args.n,
        "temperature": args.temperature, "max_new_tokens": cfg.max_new_tokens,
        "command": "python benchmarks/task_profile.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now().isoformat(timespec="seconds"), "seconds": round(gen_s, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "greedy_acc": round(greedy["eval_acc"], 4), "acc_t1": round(float(ok.mean()), 4),
        "truncated": round(float(cut.mean()), 4),
        "all": pct(L), "right": pct(L[ok]), "wrong": pct(L[~ok]),
        "p99_over_p50": round(float(np.percentile(L, 99) / np.percentile(L, 50)), 2),
        "wrong_over_right_mean": round(float(L[~ok].mean() / L[ok].mean()), 3) if ok.any() and (~ok).any() else None,
        "wrong_over_right_within_prompt": {"prompts": len(within), "mean": round(float(np.mean(within)), 3) if within else None,
                                           "frac_prompts_wrong_longer": round(float(np.mean(np.array(within) > 1)), 3) if within else None},
        "icc_log_len": round(icc(logL, pid), 3),
        "icc_log_len_within_level": round(icc(logL - np.array([level_mean[v] for v in lev]), pid), 3),
        "pass_rates": {"all_correct": round(float((rates == 1).mean()), 3), "all_wrong": round(float((rates == 0).mean()), 3),
                       "mixed": round(float(((rates > 0) & (rates < 1)).mean()), 3)},
        "by_level": by_level, "sim_shape": shape,
    }
    out = Path(args.out or HERE / "results" / f"task_profile_{args.task}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def markdown(d: dict) -> str:
    def row(name, s, extra=""):
        if not s.get("count"):
            return f"| {name} | 0 | | | | | |{extra}"
        return f"| {name} | {s['count']} | {s['mean']} | {s['p50']:.0f} | {s['p90']:.0f} | {s['p99']:.0f} | {s['max']} |{extra}"

    w = d["wrong_over_right_within_prompt"]
    lines = [f"# Length profile: task `{d['task']}`", "",
             f"Command: `{d['command']}` ({d['date']}, {d['seconds']} s on a shared machine, load {d['load_avg']})  ",
             f"Model: `{d['model']}`; {d['prompts']} held-out prompts x {d['n']} samples at temperature "
             f"{d['temperature']}, max_new_tokens {d['max_new_tokens']}.", "",
             f"- Greedy accuracy {d['greedy_acc']:.3f}; sampled accuracy {d['acc_t1']:.3f}; truncated {d['truncated']:.3f}.",
             f"- p99 / p50 = {d['p99_over_p50']}.",
             f"- Wrong / right mean length: {d['wrong_over_right_mean']} over all samples; within prompt "
             f"{w['mean']} (mean over {w['prompts']} prompts with both; wrong longer in {w['frac_prompts_wrong_longer']} of them).",
             f"- Within-prompt correlation of log length (ICC): {d['icc_log_len']} raw, "
             f"{d['icc_log_len_within_level']} after removing level means.",
             f"- Per-prompt pass rates: all correct {d['pass_rates']['all_correct']}, all wrong "
             f"{d['pass_rates']['all_wrong']}, mixed {d['pass_rates']['mixed']}.", "",
             "| samples | count | mean | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|---:|",
             row("all", d["all"]), row("right", d["right"]), row("wrong", d["wrong"]), "",
             "| level | greedy acc | sampled acc | truncated | mean len | p50 | p90 | p99 | max | right mean | wrong mean |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lv, s in d["by_level"].items():
        lines.append(f"| {lv} | {s['acc_greedy']:.2f} | {s['acc_t1']:.2f} | {s['truncated']:.2f} | {s['mean']} | "
                     f"{s['p50']:.0f} | {s['p90']:.0f} | {s['p99']:.0f} | {s['max']} | {s['right'].get('mean', '—')} | "
                     f"{s['wrong'].get('mean', '—')} |")
    lines += ["", "Simulator shape fitted to these samples (sim/profiles.py): `" + json.dumps(d["sim_shape"]) + "`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
