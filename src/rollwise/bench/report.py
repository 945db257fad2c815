"""Bench analysis: tokens to reach a target held-out accuracy, as a ratio against GRPO (`uniform`) with
a bootstrap confidence interval over seeds; final accuracy at equal budget; tokens per useful group;
wall time; zero-variance fraction; mean |advantage|; rollouts by purpose. Writes summary.json,
report.md, report.html and PNG plots.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .runner import BenchConfig, run_dir

BASELINE = "uniform"


def load_run(d: Path) -> list[dict]:
    f = d / "metrics.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.exists() else []


def tokens_to_target(rows: list[dict], target: float) -> float:
    """Generated tokens at the first evaluation whose held-out accuracy reaches the target (inf if never)."""
    for r in rows:
        if "eval_acc" in r and r["step"] > 0 and r["eval_acc"] >= target:
            return float(r["tokens"])
    return float("inf")


def run_figures(rows: list[dict], target: float) -> dict:
    steps = [r for r in rows if r["step"] > 0]
    evals = [r for r in rows if "eval_acc" in r]
    last = steps[-1] if steps else {}
    useful = sum(r.get("batch_groups", 0) * (1 - r.get("zero_var_frac", 0)) for r in steps)
    return {
        "tokens_to_target": tokens_to_target(rows, target),
        "final_acc": evals[-1]["eval_acc"] if evals else float("nan"),
        "base_acc": evals[0]["eval_acc"] if evals else float("nan"),
        "tokens": last.get("tokens", 0),
        "wall_s": last.get("wall_s", float("nan")),
        "steps": last.get("step", 0),
        "tokens_per_useful_group": last.get("tokens", 0) / useful if useful else float("inf"),
        "zero_var_frac_gen": float(np.mean([r.get("zero_var_frac_gen", 0) for r in steps])) if steps else float("nan"),
        "zero_var_frac_batch": float(np.mean([r.get("zero_var_frac", 0) for r in steps])) if steps else float("nan"),
        "mean_abs_adv": float(np.mean([r.get("mean_abs_adv", 0) for r in steps])) if steps else float("nan"),
        "tokens_by_purpose": {k[7:]: v for k, v in last.items() if k.startswith("tokens_") and k != "tokens_"},
    }


def median(x) -> float:
    """Lower median: with an even number of seeds it is the lower middle run, never the mean of a
    finite and an infinite (unreached) run. The target is GRPO's median final accuracy, so at least
    half of GRPO's runs reach it and GRPO's own median stays finite."""
    return float(np.quantile(np.asarray(x, dtype=float), 0.5, method="lower"))


def median_ratio(base, other) -> float:
    """Ratio of median tokens-to-target (baseline / planner): > 1 means the planner needs fewer tokens.
    0 when the planner's median run never reaches the target, inf when GRPO's does not."""
    mb, mo = median(base), median(other)
    if np.isinf(mo):
        return 0.0
    return float(mb / mo) if np.isfinite(mb) and mo > 0 else float("inf")


def bootstrap_ratio(base: np.ndarray, other: np.ndarray, rng: np.random.Generator, B: int = 2000):
    """median_ratio with a 95% bootstrap interval: seeds are resampled independently for both;
    unreached runs count as infinite tokens."""
    point = median_ratio(base, other)
    samples = [median_ratio(rng.choice(base, len(base)), rng.choice(other, len(other))) for _ in range(B)]
    # no interpolation: samples may be inf (GRPO's resampled median unreached), and inf - inf is nan
    lo, hi = np.percentile(samples, 2.5, method="lower"), np.percentile(samples, 97.5, method="higher")
    return point, float(lo), float(hi)


def summarize(cfg: BenchConfig, target: float | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out: dict = {"budget_tokens": cfg.budget_tokens, "seeds": cfg.seeds, "pool_size": cfg.pool_size,
                 "eval_size": cfg.eval_size, "engine": cfg.engine, "mixes": {}}
    for mix in cfg.mixes:
        runs = {p: [load_run(run_dir(cfg, mix, p, s)) for s in range(cfg.seeds)] for p in cfg.planners}
        if BASELINE not in runs:
            raise ValueError(f"the bench needs the {BASELINE!r} planner (GRPO) as its baseline")
        base_final = [run_figures(r, 1.0)["final_acc"] for r in runs[BASELINE] if r]
        tgt = target if target is not None else median(base_final)
        mix_out = {"target_acc": tgt, "planners": {}}
        base_ttt = np.array([run_figures(r, tgt)["tokens_to_target"] for r in runs[BASELINE] if r])
        for p, rs in runs.items():
            figs = [run_figures(r, tgt) for r in rs if r]
            if not figs:
                continue
            ttt = np.array([f["tokens_to_target"] for f in figs])
            ratio, lo, hi = bootstrap_ratio(base_ttt, ttt, rng)
            base_wall = np.median([run_figures(r, tgt)["wall_s"] for r in runs[BASELINE] if r])
            mix_out["planners"][p] = {
                "ratio": ratio, "ci_low": lo, "ci_high": hi,
                "tokens_to_target": median(ttt),
                "reached": int(np.isfinite(ttt).sum()), "runs": len(figs),
                "final_acc": float(np.mean([f["final_acc"] for f in figs])),
                "final_acc_sd": float(np.std([f["final_acc"] for f in figs])),
                "base_acc": float(np.mean([f["base_acc"] for f in figs])),
                "tokens_per_useful_group": float(np.median([f["tokens_per_useful_group"] for f in figs])),
                "wall_s": float(np.median([f["wall_s"] for f in figs])),
                "wall_ratio": float(base_wall / np.median([f["wall_s"] for f in figs])),
                "zero_var_frac_gen": float(np.mean([f["zero_var_frac_gen"] for f in figs])),
                "zero_var_frac_batch": float(np.mean([f["zero_var_frac_batch"] for f in figs])),
                "mean_abs_adv": float(np.mean([f["mean_abs_adv"] for f in figs])),
                "tokens_by_purpose": {k: float(np.mean([f["tokens_by_purpose"].get(k, 0) for f in figs]))
                                      for k in figs[0]["tokens_by_purpose"]},
            }
        out["mixes"][mix] = mix_out
    return out


def _fmt_ratio(d: dict) -> str:
    if d["ratio"] == 0:
        return "not reached"
    return f"{d['ratio']:.2f} [{d['ci_low']:.2f}, {d['ci_high']:.2f}]"


def markdown_table(summary: dict, mix: str) -> str:
    m = summary["mixes"][mix]
    lines = [f"Target held-out accuracy {m['target_acc']:.3f} (GRPO's median final accuracy at the budget). "
             f"Ratio = GRPO's median tokens-to-target / the planner's (> 1 saves tokens), 95% bootstrap CI over "
             f"{summary['seeds']} seeds.", "",
             "| planner | tokens-to-target ratio [95% CI] | reached | final acc | tokens / useful group | "
             "zero-var frac (gen) | mean \\|A\\| | wall ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for p, d in sorted(m["planners"].items(), key=lambda kv: -kv[1]["ratio"]):
        lines.append(f"| {p} | {_fmt_ratio(d)} | {d['reached']}/{d['runs']} | {d['final_acc']:.3f} ± {d['final_acc_sd']:.3f} "
                     f"| {d['tokens_per_useful_group']:.0f} | {d['zero_var_frac_gen']:.2f} | {d['mean_abs_adv']:.3f} "
                     f"| {d['wall_ratio']:.2f} |")
    return "\n".join(lines)


def purpose_table(summary: dict, mix: str) -> str:
    """Generated tokens by purpose, mean per run: where each planner's budget went (oracle: off-budget)."""
    m = summary["mixes"][mix]["planners"]
    purposes = [k for k in ("train", "pilot", "discarded", "profile", "oracle")
                if any(d["tokens_by_purpose"].get(k, 0) for d in m.values())]
    lines = ["Generated tokens by purpose (mean per run; `oracle` is off-budget, eval excluded):", "",
             "| planner | " + " | ".join(purposes) + " |", "|---" * (len(purposes) + 1) + "|"]
    for p, d in sorted(m.items(), key=lambda kv: -kv[1]["ratio"]):
        lines.append(f"| {p} | " + " | ".join(f"{d['tokens_by_purpose'].get(k, 0):,.0f}" for k in purposes) + " |")
    return "\n".join(lines)


def plots(cfg: BenchConfig, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for mix in cfg.mixes:
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
        for i, p in enumerate(cfg.planners):
            color = f"C{i % 10}"
            for s in range(cfg.seeds):
                rows = load_run(run_dir(cfg, mix, p, s))
                ev = [r for r in rows if "eval_acc" in r]
                st = [r for r in rows if r["step"] > 0]
                if not ev:
                    continue
                label = p if s == 0 else None
                axes[0].plot([r["tokens"] for r in ev], [r["eval_acc"] for r in ev], color=color, alpha=0.7, label=label)
                axes[1].plot([r.get("wall_s", 0) for r in ev], [r["eval_acc"] for r in ev], color=color, alpha=0.7, label=label)
                axes[2].plot([r["step"] for r in st], [r.get("zero_var_frac_gen", 0) for r in st], color=color, alpha=0.5, label=label)
        axes[0].set(xlabel="generated tokens (budget)", ylabel="held-out accuracy", title=f"accuracy vs tokens ({mix})")
        axes[1].set(xlabel="training wall time (s)", ylabel="held-out accuracy", title="accuracy vs wall time")
        axes[2].set(xlabel="step", ylabel="zero-variance fraction of generated groups", title="zero-variance fraction")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        name = f"plot_{mix}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def write_report(cfg: BenchConfig, command: str, target: float | None = None) -> dict:
    out = Path(cfg.out)
    summary = summarize(cfg, target)
    summary["command"] = command
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    pngs = plots(cfg, out)
    held_out = (f"held-out {cfg.eval_size} prompts (standard error of one accuracy ≈ "
                f"{0.5 / np.sqrt(cfg.eval_size):.3f} at most)" if cfg.engine == "torch" else
                f"engine: the population simulator, profile `{cfg.sim_profile}` (held-out accuracy computed from the "
                f"model, no sampling noise; no learner, so no mean |advantage|; wall time is simulated seconds)")
    md = [f"# rollwise bench\n", f"Command: `{command}`\n",
          f"Budget {cfg.budget_tokens} generated tokens per run (every purpose but eval/oracle), "
          f"{cfg.seeds} seeds, pool {cfg.pool_size} prompts revisited over epochs, {held_out}.\n"]
    skipped = sorted({p for m in cfg.mixes for p in cfg.planners for s in range(cfg.seeds)
                      if (run_dir(cfg, m, p, s) / "skipped.json").exists()})
    if skipped:
        md.append("Not run by this engine: " + "; ".join(
            json.loads((run_dir(cfg, cfg.mixes[0], p, 0) / "skipped.json").read_text())["reason"]
            if (run_dir(cfg, cfg.mixes[0], p, 0) / "skipped.json").exists() else p for p in skipped) + "\n")
    for mix in cfg.mixes:
        md += [f"## Mix `{mix}`\n", markdown_table(summary, mix), "", purpose_table(summary, mix), ""]
    md += [f"![{p}]({p})\n" for p in pngs]
    text = "\n".join(md)
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(_html(text))
    return summary


def _html(md: str) -> str:
    """A tiny markdown-to-HTML for the report (headings, tables, images, paragraphs)."""
    import html

    out, in_table = ["<html><head><meta charset='utf-8'><title>rollwise bench</title>"
                     "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;"
                     "padding:3px 8px}table{border-collapse:collapse}</style></head><body>"], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-"):
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
                out.append("<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cells) + "</tr>")
            else:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            lvl = len(line) - len(line.lstrip("#"))
            out.append(f"<h{lvl}>{html.escape(line.lstrip('#').strip())}</h{lvl}>")
        elif line.startswith("!["):
            src = line[line.index("(") + 1: line.index(")")]
            out.append(f"<img src='{html.escape(src)}' width='100%'>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out + ["</body></html>"])
