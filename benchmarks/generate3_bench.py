"""The in-flight and speculative components (SPEC-RL, ARRoL, DUET's abort, TreePO) on the long-response task,
alone and composed with AR3PO, against GRPO on the Bench 2.0 protocol; then their own figures.

    python benchmarks/generate3_bench.py [--seeds 1] [--jobs 2] [--out DIR] [--budget N] [--eval-size N]

Two `rollwise bench --task chain` runs share the seeds, the base and the budget (the task's bench defaults:
400,000 tokens, pool 300, 200 held-out prompts evaluated every 40,000 tokens):
  * `main`: uniform (GRPO), ar3po, spec-rl, ar3po+spec-rl, arrol, ar3po+arrol, duet-abort, ar3po+duet-abort;
  * `treepo`: uniform and treepo with `--advantage treepo` (the tree estimator; on plain groups it is
    REINFORCE++-baseline, so that bench's own GRPO-shaped baseline uses it too), segments of 16 tokens.
Then every run's metrics.jsonl is read for what the bench report does not show: tokens by kind (decoded,
accepted from a draft, shared tree prefix) and fate (pruned), the draft tokens verified, the budget in
decode-equivalent tokens, SPEC-RL's acceptance rate, TreePO's segments per tree, ARRoL's pruned share and
its quality head's precision, DUET's stopped and pruned samples, and wall time. Writes
benchmarks/results/generate3_chain.{json,md}. With fewer than 5 seeds the bench gives no verdicts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rollwise.run.records import rows as metrics_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BENCHES = {
    "main": (["uniform", "ar3po", "spec-rl", "ar3po+spec-rl", "arrol", "ar3po+arrol", "duet-abort",
              "ar3po+duet-abort"], []),
    # segments of 16 tokens, at most 14 deep: the paper's 512 x 14 for 7k-token responses, scaled to the task's
    # max_new_tokens of 224 (its default of 4 tokens suits the 5-token arithmetic answers)
    "treepo": (["uniform", "treepo"], ["--set", "learner.advantage=treepo", "--set", "planner_options.treepo.segment_tokens=16",
                                       "--set", "planner_options.treepo.max_depth=14"]),
}


def run_dir(out: Path, bench: str, planner: str, seed: int) -> Path:
    return out / bench / "runs" / "default" / planner.replace("+", "_plus_") / f"seed{seed}"


def rows_of(path: Path) -> list[dict]:
    return metrics_rows(path)


def run_figures(rows: list[dict]) -> dict:
    """One run's generation figures from its metrics rows (ledger counts are cumulative; component
    metrics are per step)."""
    last = rows[-1]
    steps = [r for r in rows if r.get("step", 0) > 0 and "loss" in r]
    kinds = {"decoded": 0, "draft": 0, "shared": 0}
    fates: dict[str, int] = {}
    for k, v in last.items():
        if k.startswith("tok/") and k != "tok/verified":
            purpose, fate, kind = k.split("/")[1:]
            if purpose in ("eval", "oracle"):
                continue
            kinds[kind] = kinds.get(kind, 0) + v
            fates[fate] = fates.get(fate, 0) + v
    out = {"steps": len(steps), "budget_tokens": last["tokens"], "tokens_by_kind": kinds, "tokens_by_fate": fates,
           "verified": last.get("tok/verified", 0), "wall_s": last.get("wall_s"), "gen_s": last.get("gen_s")}

    def weighted(rate: str, weight: str):
        pairs = [(r[rate], r.get(weight, 1.0)) for r in steps if rate in r]
        total = sum(w for _, w in pairs)
        return sum(x * w for x, w in pairs) / total if total else None

    def summed(key: str):
        vals = [r[key] for r in steps if key in r]
        return sum(vals) if vals else None

    out["spec_accept_rate"] = weighted("spec/accept_rate", "spec/drafts")
    out["spec_whole_rate"] = weighted("spec/whole_rate", "spec/drafts")
    out["treepo_nodes_per_tree"] = weighted("treepo/nodes_per_tree", "treepo/trees")
    out["arrol_pruned_frac"] = (summed("arrol/pruned") or 0) / summed("arrol/rows") if summed("arrol/rows") else None
    out["arrol_precision"] = weighted("arrol/precision", "arrol/decided")
    out["arrol_auc"] = weighted("arrol/auc", "arrol/decided")
    out["duet_stopped"] = summed("duet/stopped")
    out["duet_pruned"] = summed("duet/pruned")
    return out


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


def markdown(rec: dict) -> str:
    lines = ["# The in-flight and speculative components on task 2 (`chain`)", "",
             f"Command: `{rec['command']}`", "",
             f"Protocol: Bench 2.0 on the long-response task from its shipped base: {rec['budget']:,} budget tokens "
             f"per run, {rec['seeds']} seed(s), pool {rec['pool_size']}, {rec['eval_size']} held-out prompts. The budget "
             "counts decoded tokens of every purpose but eval, plus every draft token the verification prefill read "
             f"weighted by draft_cost ({rec['draft_cost']}, the torch engine's measured prefill/decode ratio). "
             "The `treepo` bench uses the TreePO advantage for both its arms.", ""]
    if rec["seeds"] < 5:
        lines += [f"**{rec['seeds']} seed(s): no verdicts.** A difference in accuracy here is within one run's noise "
                  "(held-out standard error ≈ 0.025 at 200 prompts); the generation figures are what this measures.", ""]
    lines += ["| bench | planner | mean acc over budget | Δ vs its GRPO | acc at budget | tokens-to-target | "
              "steps | decoded | draft (accepted) | verified | shared | pruned | wall s / step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in rec["benches"]:
        for p, a in b["planners"].items():
            k = a["tokens_by_kind"]
            ratio = a.get("ratio")
            lines.append(f"| {b['name']} | {p} | {fmt(a['auc'])} | {fmt(a['auc_diff'], '+.3f')} | {fmt(a['final_acc'])} | "
                         f"{'not reached' if not ratio else format(ratio, '.2f')} | {a['steps']:.0f} | "
                         f"{k.get('decoded', 0):,.0f} | {k.get('draft', 0):,.0f} | {a['verified']:,.0f} | "
                         f"{k.get('shared', 0):,.0f} | {a['tokens_by_fate'].get('pruned', 0):,.0f} | "
                         f"{fmt(a['wall_per_step'], '.1f')} |")
    lines += ["", "Component figures (means over seeds; rates weighted by the step's drafts, trees or decisions):", "",
              "| bench | planner | SPEC-RL accept rate | drafts accepted whole | TreePO segments / tree | "
              "ARRoL pruned share | ARRoL head precision | ARRoL head AUC | DUET stopped | DUET pruned |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for b in rec["benches"]:
        for p, a in b["planners"].items():
            if p == "uniform" or (p == "ar3po" and b["name"] == "main"):
                continue
            lines.append(f"| {b['name']} | {p} | {fmt(a['spec_accept_rate'])} | {fmt(a['spec_whole_rate'])} | "
                         f"{fmt(a['treepo_nodes_per_tree'], '.2f')} | {fmt(a['arrol_pruned_frac'])} | "
                         f"{fmt(a['arrol_precision'])} | {fmt(a['arrol_auc'])} | {fmt(a['duet_stopped'], '.0f')} | "
                         f"{fmt(a['duet_pruned'], '.0f')} |")
    lines += ["", "Columns: tokens are per run (mean over seeds), every purpose but eval; *decoded* were sampled "
              "token by token, *draft (accepted)* were taken from an earlier rollout after verification, *verified* "
              "is every draft token the verification prefill read (accepted or not), *shared* is a tree segment "
              "decoded once and continued by several leaves, *pruned* is decoded then stopped (ARRoL, DUET). "
              "Wall time shared two cores with the other run of the bench and other jobs; compare it only loosely.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budget", type=int, help="tokens per run (default: the chain task's bench budget)")
    ap.add_argument("--eval-size", type=int, help="held-out prompts (default: the chain task's)")
    ap.add_argument("--out", default="bench-generate3", help="where the two benches' runs go")
    ap.add_argument("--record", default=str(RESULTS / "generate3_chain"), help="the .json/.md written")
    ap.add_argument("--report-only", action="store_true", help="tabulate finished runs only")
    args = ap.parse_args()
    out = Path(args.out)
    command = "python benchmarks/generate3_bench.py " + " ".join(sys.argv[1:])
    benches = []
    for name, (planners, extra) in BENCHES.items():
        cmd = ["rollwise", "bench", "--task", "chain", "--planners", ",".join(planners), "--seeds", str(args.seeds),
               "--jobs", str(args.jobs), "--out", str(out / name), *extra]
        cmd += ["--budget", str(args.budget)] if args.budget else []
        cmd += ["--eval-size", str(args.eval_size)] if args.eval_size else []
        if args.report_only:
            cmd.append("--report-only")
        print(" ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
        summary = json.loads((out / name / "summary.json").read_text())
        planners_out = {}
        for p, s in summary["mixes"]["default"]["planners"].items():
            per_seed = [run_figures(rows_of(run_dir(out, name, p, seed))) for seed in range(args.seeds)]
            agg = {"auc": s["auc"], "auc_diff": (s.get("auc_diff") or {}).get("diff"), "final_acc": s["final_acc"],
                   "ratio": s.get("ratio"), "per_seed": per_seed}
            for key in ("steps", "verified", "spec_accept_rate", "spec_whole_rate", "treepo_nodes_per_tree",
                        "arrol_pruned_frac", "arrol_precision", "arrol_auc", "duet_stopped", "duet_pruned"):
                agg[key] = mean([f[key] for f in per_seed])
            agg["tokens_by_kind"] = {k: mean([f["tokens_by_kind"].get(k, 0) for f in per_seed])
                                     for k in ("decoded", "draft", "shared")}
            agg["tokens_by_fate"] = {k: mean([f["tokens_by_fate"].get(k, 0) for f in per_seed])
                                     for k in sorted({k for f in per_seed for k in f["tokens_by_fate"]})}
            agg["wall_per_step"] = mean([f["wall_s"] / f["steps"] for f in per_seed if f["wall_s"] and f["steps"]])
            planners_out[p] = agg
        benches.append({"name": name, "command": " ".join(cmd), "planners": planners_out})
    rec = {"command": command, "budget": summary["budget_tokens"], "seeds": args.seeds,
           "pool_size": summary["pool_size"], "eval_size": summary["eval_size"],
           "draft_cost": spec_draft_cost(out), "benches": benches}
    Path(args.record).with_suffix(".json").write_text(json.dumps(rec, indent=2))
    Path(args.record).with_suffix(".md").write_text(markdown(rec))
    print(markdown(rec))
    return 0


def spec_draft_cost(out: Path) -> float:
    """The draft_cost the spec-rl runs used: their recorded option, else the measured default."""
    from rollwise.replay.spec_rl import MEASURED_DRAFT_COST

    cfg = json.loads((run_dir(out, "main", "spec-rl", 0) / "config.json").read_text())
    return cfg.get("planner_options", {}).get("draft_cost", MEASURED_DRAFT_COST)


if __name__ == "__main__":
    sys.exit(main())
