"""The step-time model against published figures (issue 41 item 4): one row per figure in the deployment
files of a folder (`rollwise systems validate benchmarks/systems`).

WAVE4's rules, kept here by construction: every deployment is a file anyone can read and change; a
prediction outside +-25% of the published range is reported as such, never tuned away; nothing in a profile
or deployment is fitted to a figure. Each row also shows how far the prediction moves when every assumed
value (the profile's `assumption: true` values and the deployment's `assumed` inputs) is taken at x0.5 and
x2, one at a time: the row's range, and which assumption moves it most.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..core import yamlsafe
from .deployment import Deployment, Figure, load_deployment

WITHIN = 0.25


def _profile_varied(dep: Deployment, name: str, factor: float):
    p = dep.profile
    v = getattr(p, name) * factor
    if isinstance(getattr(p, name), int):
        v = max(1, int(round(v)))
    q = replace(p, **{name: v})
    if name in ("gen_gpus", "tp") and (q.gen_gpus >= q.gpus or q.tp > q.gpus):
        return None  # not a valid split: left out of the range
    if name == "gpus" and q.gen_gpus >= q.gpus:
        return None
    return q


def sensitivity(dep: Deployment, fig: Figure) -> tuple[float, float, str]:
    """(lowest, highest prediction, the assumption that moves it most) over each assumed value at x0.5 and x2."""
    base = dep.predicted(fig)
    lo, hi, worst, most = base, base, "", 0.0
    trials = [(f"{n} (profile)", f, lambda n=n, f=f: dep.predicted(fig, _profile_varied(dep, n, f)))
              for n in dep.profile.assumptions for f in (0.5, 2.0)]
    trials += [(n, f, lambda n=n, f=f: dep.varied(n, f).predicted(fig)) for n in dep.assumed for f in (0.5, 2.0)]
    for name, f, run in trials:
        if name.endswith("(profile)") and _profile_varied(dep, name.split(" ")[0], f) is None:
            continue
        v = run()
        lo, hi = min(lo, v), max(hi, v)
        if abs(v / base - 1) > most:
            most, worst = abs(v / base - 1), f"{name} x{f:g}"
    return lo, hi, worst


def _is_profile(path: Path) -> bool:
    try:
        doc = yamlsafe.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yamlsafe.yaml.YAMLError):
        return False  # load_deployment says what is wrong with it
    return isinstance(doc, dict) and "values" in doc and "profile" not in doc


def rows(folder, with_sensitivity: bool = True) -> list[dict]:
    """Every published figure of every deployment file in `folder` (sorted by file name), with its prediction."""
    out = []
    for path in sorted(Path(folder).glob("*.yaml")):
        if _is_profile(path):
            continue  # a cluster profile kept beside the deployments that name it
        dep = load_deployment(path)
        if not isinstance(dep.published, list):
            continue
        for fig in dep.published:
            pred = float(dep.predicted(fig))
            err = float(fig.error(pred))
            row = {"file": path.name, "figure": fig, "predicted": pred, "error": err, "within": abs(err) <= WITHIN}
            if with_sensitivity:
                row["range"] = sensitivity(dep, fig)
            out.append(row)
    return out


def markdown(rs: list[dict]) -> str:
    unit = {"step_s": " s", "speedup": "×", "rollout_speedup": "×"}
    lines = ["| figure | deployment file | published | predicted | error | within ±25%? "
             "| predicted, each assumption x0.5 / x2 | source (how read) |", "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        f: Figure = r["figure"]
        u = unit[f.quantity]
        rng = f"{r['range'][0]:.2f}–{r['range'][1]:.2f}{u} (most: {r['range'][2] or 'none'})" if "range" in r else "—"
        lines.append(f"| {f.figure} | `{r['file']}` | {f.value_text()} | {r['predicted']:.2f}{u} | {r['error']:+.0%} | "
                     f"{'yes' if r['within'] else '**no**'} | {rng} | {f.source} ({f.read}) |")
    n_in = sum(r["within"] for r in rs)
    lines += ["", f"{n_in} of {len(rs)} figures within ±25% (the issue's goal: at least five)."]
    return "\n".join(lines)
