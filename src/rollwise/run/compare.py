"""`rollwise compare RUN_A RUN_B [...]`: the held-out accuracy curves of runs side by side, their differences
from the first run, and each run's learning verdict; `--plot FILE` draws them (matplotlib).

The x axis is the step (default), generated tokens or compute units (`--x`): the later two are what a budget
counts, so planners that spend at different rates compare at equal cost. The first run's evaluation points
are the rows; another run's accuracy there is read off its own curve by linear interpolation between its
evaluations (blank outside the range it covers), so runs evaluated at different points still line up.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

AXES = ("step", "tokens", "compute")


@dataclass
class Curve:
    name: str
    x: np.ndarray  # the axis value of each evaluation
    acc: np.ndarray  # held-out accuracy there


def curve(rows: list[dict], axis: str, name: str) -> Curve:
    """A run's held-out accuracy by `axis` (step 0's evaluation is at 0 tokens and 0 compute)."""
    if axis not in AXES:
        raise ValueError(f"--x must be one of {', '.join(AXES)}, got {axis!r}")
    pts = []
    for r in rows:
        if not isinstance(r.get("eval_acc"), (int, float)):
            continue
        x = r.get(axis, 0 if r.get("step") == 0 else None)
        if x is None:
            raise ValueError(f"{name}: the evaluation at step {r.get('step')} has no {axis!r} field (a run "
                             f"recorded before it was written); compare by --x step")
        pts.append((float(x), float(r["eval_acc"])))
    if not pts:
        raise ValueError(f"{name}: no held-out evaluation in its metrics.jsonl (set eval_every)")
    x, acc = map(np.array, zip(*pts))
    return Curve(name, x, acc)


def at(c: Curve, x: np.ndarray) -> np.ndarray:
    """The curve's accuracy at `x`, interpolated between its evaluations; NaN outside them."""
    y = np.interp(x, c.x, c.acc)
    y[(x < c.x[0]) | (x > c.x[-1])] = np.nan
    return y


def table(curves: list[Curve], axis: str) -> str:
    """The curves at the first run's evaluation points, with each other run's difference from it."""
    base, others = curves[0], curves[1:]
    head = [axis, base.name] + [c.name for c in others] + [f"{c.name} - {base.name}" for c in others]
    cols = [at(c, base.x) for c in others]
    lines = []
    for i, x in enumerate(base.x):
        vals = [base.acc[i]] + [col[i] for col in cols]
        diffs = [col[i] - base.acc[i] for col in cols]
        lines.append([f"{x:,.0f}" if axis != "compute" else f"{x:.3g}"] + [_f(v) for v in vals]
                     + [_f(d, signed=True) for d in diffs])
    widths = [max(len(h), *(len(line[j]) for line in lines)) for j, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*line) for line in lines])


def _f(v: float, signed: bool = False) -> str:
    if not np.isfinite(v):
        return "-"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def names(dirs: list[str]) -> list[str]:
    """Each run's label: its directory's name, or its path where two names are the same."""
    short = [Path(d).name or str(d) for d in dirs]
    return short if len(set(short)) == len(short) else [str(d) for d in dirs]


def plot(curves: list[Curve], axis: str, path: str) -> None:
    """The curves (top) and their differences from the first run (bottom), one colour per run in both."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(7, 6), height_ratios=[2, 1])
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    base = curves[0]
    for i, c in enumerate(curves):
        top.plot(c.x, c.acc, marker="o", color=colours[i % len(colours)], label=c.name)
        if i:
            bottom.plot(base.x, at(c, base.x) - base.acc, marker="o", color=colours[i % len(colours)],
                        label=f"{c.name} - {base.name}")
    bottom.axhline(0.0, color="grey", linewidth=0.8)
    top.set_ylabel("held-out accuracy")
    bottom.set_ylabel(f"difference from {base.name}")
    bottom.set_xlabel(axis)
    top.legend()
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def compare(dirs: list[str], axis: str = "step", plot_path: str | None = None) -> str:
    """The text `rollwise compare` prints (and the plot, when asked for)."""
    from .records import metrics_path, rows
    from .verdict import run_verdict

    if len(dirs) < 2:
        raise ValueError("compare needs at least two run directories")
    labels = names(dirs)
    curves = []
    for d, label in zip(dirs, labels):
        if not metrics_path(d).exists():
            raise ValueError(f"{d}: no metrics.jsonl (not a run directory)")
        curves.append(curve(rows(d), axis, label))
    out = [table(curves, axis), ""]
    out += [f"{label}: {run_verdict(d).text()}" for d, label in zip(dirs, labels)]
    if plot_path:
        plot(curves, axis, plot_path)
        out.append(f"plot: {plot_path}")
    return "\n".join(out)


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="held-out accuracy curves of runs side by side, their differences from the "
                                       "first, each run's learning verdict (and a plot)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (the first is the one others are "
                                                           "compared with)")
    p.add_argument("--x", default="step", choices=AXES, help="the axis: step (default), generated tokens or "
                                                              "compute units")
    p.add_argument("--plot", metavar="FILE", help="also draw the curves and differences to FILE (png, pdf, svg)")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args) -> int:
    from .progress import console

    console().info(compare(args.runs, args.x, args.plot))
    return 0
