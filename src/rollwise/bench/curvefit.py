"""Sigmoid fits of held-out accuracy against compute, per arm of a plan (ScaleRL, arXiv 2510.13786).

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

R0 is the accuracy at compute 0 (the arm's mean step-0 evaluation: every arm starts from the base
checkpoint), A the asymptote (the ceiling, bounded to [R0, 1]), C_mid the compute at which half the gain
A - R0 is reached and B the efficiency exponent (how steep the rise). Compute-to-target reads one point of
the curves; the fit separates a method that reaches the same ceiling sooner (same A, smaller C_mid) from
one that reaches a different ceiling (A differs).

The fit is bounded least squares over every seed's evaluations pooled (numpy only: scipy is not a core
dependency). For each (C_mid, B) the best A is linear and closed-form, so a grid over log C_mid x log B
finds a global start, and a projected Levenberg-Marquardt step polishes (A, log C_mid, log B). Every fit is
a row of a batch, so the bootstrap (seeds resampled with replacement, every resample refitted) is one
vectorised call: a resample is the same pooled points with each seed's points weighted by how often it
was drawn. A fit that cannot be made (too few evaluations, a curve that never rises above R0, no
convergence) is a stated failure, never a traceback.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import stats

B_BOUNDS = (0.1, 10.0)  # the exponent: flatter than 0.1 or steeper than 10 is not a curve 6 evaluations tell
C_MID_SPAN = 10.0  # C_mid within [smallest evaluated compute / 10, largest x 10]: past that A is a guess
GRID = (40, 24)  # log C_mid x log B points of the starting grid (Levenberg-Marquardt polishes from there)
MIN_EVALS_PER_RUN = 3  # past compute 0: with fewer, seeds' slightly different computes fake a shape
MAX_ITER = 2000  # a flat curve's fit crawls along its valley: 1000 were needed on recorded runs
FAILED_RESAMPLES = 0.025  # more failed resamples than this and an interval is not defined (its tails would be)
# "same ceiling": the interval of ΔA inside ±0.01, the margin WAVE4 sets for "nearly lossless" accuracy
SAME_CEILING_MARGIN = 0.01
FORM = "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)"


@dataclass(frozen=True)
class Points:
    """One run's evaluations: compute (ascending, the first at 0) and accuracy."""
    c: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class Fit:
    """A fitted curve, or `failed` saying why there is none (then the numbers are nan)."""
    A: float
    B: float
    C_mid: float
    R0: float
    rmse: float
    failed: str = ""


def sigmoid(c, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """The curve at compute c; R0 at c = 0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        return R0 + (A - R0) / (1.0 + np.exp(B * (np.log(C_mid) - np.log(c))))


def _shape(u, v, lc):
    """1 / (1 + (C_mid / C)^B) with u = log C_mid, v = log B, lc = log C (broadcast); the exponent clipped so
    that exp never overflows (at +-50 the shape is 0 or 1 to double precision anyway)."""
    return 1.0 / (1.0 + np.exp(np.clip(np.exp(v) * (u - lc), -50, 50)))


def _pool(runs: list[Points]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every run's points end to end, and each point's run index."""
    c = np.concatenate([r.c for r in runs]).astype(float)
    y = np.concatenate([r.y for r in runs]).astype(float)
    owner = np.concatenate([np.full(len(r.c), i) for i, r in enumerate(runs)])
    return c, y, owner


def _check(c: np.ndarray, y: np.ndarray) -> str:
    """Why these points cannot be fitted ("" if they can)."""
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(y))):
        return "fit failed: a non-finite compute or accuracy"
    if np.any(c < 0):
        return "fit failed: a negative compute"
    if not np.any(c == 0):
        return "fit failed: no evaluation at compute 0 to fix R0"
    if len(np.unique(c[c > 0])) < 3:
        return "fit failed: fewer than 3 evaluations past compute 0 for 3 parameters"
    return ""


def fit_weighted(c, y, weights) -> list[Fit]:
    """One fit per row of `weights` (K x points: how much each pooled point counts; a bootstrap resample's
    row is how often each point's seed was drawn). Points at compute 0 only fix R0 (their weighted mean)."""
    c, y = np.asarray(c, dtype=float), np.asarray(y, dtype=float)
    W = np.atleast_2d(np.asarray(weights, dtype=float))
    why = _check(c, y)
    if why:
        return [Fit(*[float("nan")] * 5, failed=why)] * len(W)
    zero = c == 0
    w0 = W[:, zero].sum(1)
    r0 = np.where(w0 > 0, (W[:, zero] * y[zero]).sum(1) / np.where(w0 > 0, w0, 1), np.nan)
    cp, yp, Wp = c[~zero], y[~zero], W[:, ~zero]
    lc = np.log(cp)
    u_lo, u_hi = lc.min() - np.log(C_MID_SPAN), lc.max() + np.log(C_MID_SPAN)
    v_lo, v_hi = np.log(B_BOUNDS[0]), np.log(B_BOUNDS[1])
    g_hi = 1.0 - r0  # A <= 1

    # the grid: for fixed (u, v) the gain g = A - R0 minimising the weighted squared error is
    # sum w s (y - R0) / sum w s^2, clipped to [0, 1 - R0]
    gu, gv = np.meshgrid(np.linspace(u_lo, u_hi, GRID[0]), np.linspace(v_lo, v_hi, GRID[1]), indexing="ij")
    gu, gv = gu.ravel(), gv.ravel()
    S = _shape(gu[:, None], gv[:, None], lc)  # G x P
    start = np.empty((len(W), 3))
    for k0 in range(0, len(W), 256):  # in chunks: G x chunk matrices stay small
        w = Wp[k0:k0 + 256].T  # P x k
        r = r0[k0:k0 + 256]
        sw, sy = S @ w, S @ (w * yp[:, None])
        num = sy - r[None, :] * sw
        den = (S * S) @ w
        g = np.clip(num / np.where(den > 0, den, 1), 0, g_hi[k0:k0 + 256][None, :])
        sse = g * g * den - 2 * g * num  # + sum w (y - R0)^2, the same for every grid point
        best = np.argmin(sse, axis=0)
        start[k0:k0 + 256] = np.column_stack([g[best, np.arange(len(best))], gu[best], gv[best]])

    theta, converged = _polish(start, lc, yp, Wp, r0, (u_lo, u_hi), (v_lo, v_hi), g_hi)
    g, u, v = theta.T
    resid = yp[None, :] - r0[:, None] - g[:, None] * _shape(u[:, None], v[:, None], lc)
    wsum = Wp.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rmse = np.sqrt((Wp * resid**2).sum(1) / wsum)
    nan = [float("nan")] * 5
    out = []
    for k in range(len(W)):
        if not np.isfinite(r0[k]) or wsum[k] == 0:
            out.append(Fit(*nan, failed="fit failed: no evaluations drawn"))
        elif g[k] <= 1e-9:
            out.append(Fit(*nan, failed="fit failed: the curve does not rise above R0 (C_mid, B undefined)"))
        elif not converged[k]:
            out.append(Fit(*nan, failed=f"fit failed: no convergence in {MAX_ITER} iterations"))
        else:
            out.append(Fit(A=float(r0[k] + g[k]), B=float(np.exp(v[k])), C_mid=float(np.exp(u[k])), R0=float(r0[k]),
                           rmse=float(rmse[k])))
    return out


def _polish(theta, lc, y, W, r0, ub, vb, g_hi):
    """Projected Levenberg-Marquardt on (g, u = log C_mid, v = log B), every fit of the batch at once (each
    iteration on the fits not yet done): a step is kept where it lowers that fit's weighted squared error,
    and its damping shrinks; elsewhere the damping grows. A fit has converged when a kept step lowers its
    error by under 1e-12 relatively, or no step can (damping past 1e10: a minimum, possibly on a bound)."""
    theta = theta.copy()
    K = len(theta)
    lo = np.column_stack([np.zeros(K), np.full(K, ub[0]), np.full(K, vb[0])])
    hi = np.column_stack([g_hi, np.full(K, ub[1]), np.full(K, vb[1])])

    def resid_jac(th, k):
        g, u, v = th[:, :1], th[:, 1:2], th[:, 2:3]
        B = np.exp(v)
        s = _shape(u, v, lc)
        r = y[None, :] - r0[k, None] - g * s
        ds = -s * (1 - s)  # d s / d z, z = B (u - log c)
        J = np.stack([s, g * ds * B, g * ds * B * (u - lc[None, :])], axis=2)  # d model / d theta: k x P x 3
        return r, J, (W[k] * r * r).sum(1)

    lam = np.full(K, 1e-3)
    done = np.zeros(K, dtype=bool)
    err = resid_jac(theta, np.arange(K))[2]
    eye = np.eye(3)[None]
    for _ in range(MAX_ITER):
        k = np.flatnonzero(~done)
        if not len(k):
            break
        th, lk, lok, hik = theta[k], lam[k], lo[k], hi[k]
        r, J, _ = resid_jac(th, k)
        JW = J * W[k][:, :, None]
        H = np.einsum("kpi,kpj->kij", JW, J)
        grad = np.einsum("kpi,kp->ki", JW, r)
        Hd = H + lk[:, None, None] * (eye * np.diagonal(H, axis1=1, axis2=2)[:, :, None] + 1e-12 * eye)
        step = np.linalg.solve(Hd, grad[:, :, None])[:, :, 0]
        # a parameter on its bound that the step pushes outward is held there and the others solved for
        # without it (clipping the full step instead crawls along the bound for thousands of iterations)
        held = ((th <= lok) & (step < 0)) | ((th >= hik) & (step > 0))
        if held.any():
            free = (~held).astype(float)
            Hd = Hd * free[:, :, None] * free[:, None, :] + eye * held[:, :, None]
            step = np.linalg.solve(Hd, (grad * free)[:, :, None])[:, :, 0]
        trial = np.clip(th + step, lok, hik)
        err_t = resid_jac(trial, k)[2]
        better = err_t < err[k]
        small = better & (err[k] - err_t <= 1e-12 * np.maximum(err[k], 1e-300))
        theta[k[better]] = trial[better]
        err[k[better]] = err_t[better]
        lam[k] = np.where(better, lk / 3, lk * 3)
        done[k] = small | (lam[k] > 1e10) | (err[k] <= 1e-30)
    return theta, done


def fit(runs: list[Points]) -> Fit:
    """The curve through every run's evaluations, each point counted once."""
    fewest = min((int(np.sum(r.c > 0)) for r in runs), default=0)
    if fewest < MIN_EVALS_PER_RUN:
        y0 = [y for r in runs for y in r.y[r.c == 0]]
        return Fit(*[float("nan")] * 3, R0=float(np.mean(y0)) if y0 else float("nan"), rmse=float("nan"), failed=f"fit failed: a run has {fewest} evaluations past compute 0; "
                                                f"3 parameters need {MIN_EVALS_PER_RUN}")
    c, y, _ = _pool(runs)
    return fit_weighted(c, y, np.ones(len(c)))[0]


def _interval(values: np.ndarray, failed: int, n: int) -> dict:
    ok = values[np.isfinite(values)]
    if failed > FAILED_RESAMPLES * n or not len(ok):
        return {"lo": None, "hi": None, "failed": failed}
    lo, hi = stats.percentile_interval(ok)
    return {"lo": lo, "hi": hi, "failed": failed}


def bootstrap(runs: list[Points], draws: np.ndarray) -> list[Fit]:
    """The refit on each resample of the runs (draws: resamples x runs, indices drawn with replacement)."""
    c, y, owner = _pool(runs)
    counts = np.stack([np.bincount(d, minlength=len(runs)) for d in draws])  # resamples x runs
    return fit_weighted(c, y, counts[:, owner])


def _values(fits: list[Fit], key: str) -> np.ndarray:
    return np.array([getattr(f, key) for f in fits])


def arm_figures(runs: list[Points], rng: np.random.Generator, samples: int = stats.BOOTSTRAP_SAMPLES) -> dict:
    """An arm's fit over its runs, with 95% percentile intervals over resamples of its seeds."""
    point = fit(runs)
    out = {"seeds": len(runs), "R0": point.R0, "A": point.A, "B": point.B, "C_mid": point.C_mid,
           "rmse": point.rmse, "failed": point.failed}
    if point.failed:
        return out
    fits = bootstrap(runs, stats.resample_indices(len(runs), rng, samples))
    bad = sum(bool(f.failed) for f in fits)
    for key in ("A", "B", "C_mid"):
        out[f"{key}_ci"] = _interval(_values(fits, key), bad, samples)
    return out


def paired_figures(base: list[Points], arm: list[Points], rng: np.random.Generator,
                   samples: int = stats.BOOTSTRAP_SAMPLES) -> dict:
    """ΔA = A(arm) - A(baseline) and the midpoint ratio C_mid(baseline) / C_mid(arm) (> 1: the arm is
    half-way to its ceiling sooner), with intervals over paired resamples of seeds (base[i], arm[i] are
    seed i's runs: one draw refits both)."""
    fb, fa = fit(base), fit(arm)
    if fb.failed or fa.failed:
        return {"failed": fb.failed and f"baseline: {fb.failed}" or f"arm: {fa.failed}"}
    draws = stats.resample_indices(len(base), rng, samples)
    bb, ba = bootstrap(base, draws), bootstrap(arm, draws)
    bad = sum(bool(x.failed or z.failed) for x, z in zip(bb, ba))
    dA = _values(ba, "A") - _values(bb, "A")
    ratio = _values(bb, "C_mid") / _values(ba, "C_mid")
    return {"failed": "", "C_mid_paired": {"base": fb.C_mid, "arm": fa.C_mid},
            "dA": {"diff": fa.A - fb.A, **_interval(dA, bad, samples)},
            "C_mid_ratio": {"ratio": fb.C_mid / fa.C_mid, **_interval(ratio, bad, samples)}}


def reading(paired: dict, budget: float, margin: float = SAME_CEILING_MARGIN) -> str:
    """What the fit says about the arm against the baseline, from the paired intervals, in this order:
    1. a fit or an interval that could not be made: "fit failed" (or "not defined");
    2. ΔA's interval above 0: "higher ceiling"; below 0: "lower ceiling";
    3. ΔA's interval inside ±margin: "same ceiling", then the pace from the midpoint ratio's interval
       (baseline's C_mid / arm's): above 1 "sooner", below 1 "later", else "pace not distinguished";
    4. otherwise (ΔA's interval spans 0 and reaches past the margin): "ceiling not resolved" — with
       ceilings that may differ, their midpoints are not compared;
    5. where either fitted midpoint lies past the budget, " (extrapolated)" is added to 2 and 3: the runs
       stopped before half that curve's gain, so its ceiling is the sigmoid's guess beyond the data."""
    if paired.get("failed"):
        return "fit failed"
    dA, cr = paired["dA"], paired["C_mid_ratio"]
    if dA["lo"] is None:
        return f"not defined ({dA['failed']} resamples failed)"
    tail = " (extrapolated)" if max(paired["C_mid_paired"].values()) > budget else ""
    if dA["lo"] > 0:
        return "higher ceiling" + tail
    if dA["hi"] < 0:
        return "lower ceiling" + tail
    if -margin <= dA["lo"] and dA["hi"] <= margin:
        if cr["lo"] is not None and cr["lo"] > 1:
            return "same ceiling, sooner" + tail
        if cr["hi"] is not None and cr["hi"] < 1:
            return "same ceiling, later" + tail
        return "same ceiling, pace not distinguished" + tail
    return "ceiling not resolved"


def run_points(rows: list[dict], budget: float) -> Points:
    """A run's evaluations on its compute axis (rows whose `tokens` is compute: stats.with_x) up to the first
    at or past the budget (where a bench run stops): every arm is fitted over the same window."""
    c, y = stats.eval_curve(rows)
    keep = c <= budget
    keep[np.argmax(~keep)] |= not keep.all()  # the first evaluation past the budget, if any
    return Points(c=c[keep], y=y[keep])


def plan_fits(arms: dict[str, list[Points | None]], baseline: str, budget: float,
              rngs: dict[str, np.random.Generator], samples: int = stats.BOOTSTRAP_SAMPLES) -> dict:
    """Every arm's fit (its finished seeds), and each other arm's ΔA and midpoint ratio against the baseline
    over the seeds both finished (arms[a][i] is plan seed i's run, None if unfinished), with its reading."""
    out = {"form": FORM, "margin": SAME_CEILING_MARGIN, "samples": samples, "budget": budget, "arms": {}}
    base = arms[baseline]
    for a, runs in arms.items():
        done = [r for r in runs if r is not None]
        if not done:
            continue
        d = arm_figures(done, rngs[a], samples)
        if a != baseline:
            paired = [i for i in range(len(runs)) if runs[i] is not None and base[i] is not None]
            p = (paired_figures([base[i] for i in paired], [runs[i] for i in paired], rngs[a], samples) if paired
                 else {"failed": "fit failed: no seed both finished"})
            own = d["failed"]
            d.update(p, seeds_paired=len(paired), reading=reading(p, budget))
            d["failed"] = own or p["failed"]
        out["arms"][a] = d
    return out


# ---------------------------------------------------------------------------------------------------
# The page


def _num(v, fmt: str) -> str:
    return "—" if v is None or not np.isfinite(v) else format(v, fmt)


def _ci(d: dict, key: str, fmt: str) -> str:
    ci = d.get(f"{key}_ci") if key in ("A", "B", "C_mid") else d.get(key)
    point = d.get(key) if key in ("A", "B", "C_mid") else (ci or {}).get("diff", (ci or {}).get("ratio"))
    if ci is None or ci.get("lo") is None:
        tail = f" [not defined: {ci['failed']} resamples failed]" if ci and ci.get("failed") else ""
        return _num(point, fmt) + tail
    return f"{format(point, fmt)} [{format(ci['lo'], fmt)}, {format(ci['hi'], fmt)}]"


def markdown_lines(fits: dict | None, baseline: str, budget: float) -> list[str]:
    """The report's table of fits (nothing where the summary has none)."""
    if not fits or not fits.get("arms"):
        return []
    lines = ["", f"Sigmoid fits of the primary metric against compute (ScaleRL, arXiv 2510.13786): "
             f"`{fits['form']}`, R0 the arm's mean step-0 accuracy, A in [R0, 1] the ceiling, C_mid the compute "
             f"to half the gain, B the steepness; least squares over every seed's evaluations up to the budget "
             f"(the first at or past it included), "
             f"95% intervals over {fits['samples']} resamples of seeds (each refitted; ΔA and the midpoint ratio "
             f"on paired seeds). Reading: ΔA's interval above / below 0 is a higher / lower ceiling; inside "
             f"±{fits['margin']:g} the same ceiling, then sooner / later where the midpoint ratio's interval is "
             f"above / below 1; otherwise the ceiling is not resolved. † marks a C_mid past the budget "
             f"({budget:,.0f}): the runs stopped before half that curve's gain, so its A is the sigmoid's "
             f"extrapolation, and a reading that rests on one says \"(extrapolated)\".", "",
             "| arm | seeds | R0 | A [95% CI] | C_mid [95% CI] | B [95% CI] | ΔA vs baseline [95% CI] "
             "| C_mid baseline / arm [95% CI] | reading |", "|---|---|---|---|---|---|---|---|---|"]
    for a, d in fits["arms"].items():
        if d["failed"] and not np.isfinite(d.get("A", float("nan"))):
            lines.append(f"| {a} | {d['seeds']} | {_num(d['R0'], '.3f')} | — | — | — | — | — "
                         f"| {d['failed']} |")
            continue
        past = " †" if d["C_mid"] > budget else ""
        if a == baseline:
            rest = "— | — | baseline"
        elif d.get("dA") is None:
            rest = f"— | — | {d['failed']}"
        else:
            rest = f"{_ci(d, 'dA', '+.3f')} | {_ci(d, 'C_mid_ratio', '.2f')} | {d['reading']}"
        lines.append(f"| {a} | {d['seeds']} | {d['R0']:.3f} | {_ci(d, 'A', '.3f')} | {_ci(d, 'C_mid', ',.0f')}{past} "
                     f"| {_ci(d, 'B', '.2f')} | {rest} |")
    if any(not d["failed"] or np.isfinite(d.get("A", float("nan"))) for d in fits["arms"].values()):
        lines += ["", "![sigmoid fits](plan_fits.png)"]
    return lines


def plot(summary: dict, path) -> bool:
    """Each arm's fitted curve over its mean evaluations (summary["curves"]), solid to the budget and dashed
    past it to 3x the budget, where a ceiling past the budget is the sigmoid's guess; False (nothing written)
    where no arm has a fit."""
    fits = (summary.get("curve_fits") or {}).get("arms", {})
    ok = {a: d for a, d in fits.items() if not d["failed"] or np.isfinite(d.get("A", float("nan")))}
    if not ok:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = summary.get("budget_gpu_seconds") or summary["budget_compute"]  # where the figures are read
    inside, past = np.linspace(0, budget, 100), np.linspace(budget, 3 * budget, 100)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for a, d in ok.items():
        base = a == summary["baseline"]
        params = (d["A"], d["B"], d["C_mid"], d["R0"])
        line, = ax.plot(inside, sigmoid(inside, *params), color="black" if base else None, lw=2.2 if base else 1.2,
                        label=f"{a}: A {d['A']:.3f}, C_mid {d['C_mid']:,.0f}, B {d['B']:.2f}")
        ax.plot(past, sigmoid(past, *params), color=line.get_color(), lw=line.get_linewidth(), ls="--")
        c = summary.get("curves", {}).get(a)
        if c:
            ax.plot(c["x"], c["mean"], "o", color=line.get_color(), ms=3, alpha=0.6)
    ax.axvline(budget, color="0.5", lw=0.8)
    from .plan_report import axis_label

    ax.set_xlabel(f"{axis_label(summary)}; budget at the grey line, dashed: extrapolated")
    ax.set_ylabel(f"{summary['metric']}")
    ax.set_title(f"{summary['plan']}: {FORM} per arm; dots: the mean over seeds", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True
