"""`rollwise systems predict DEPLOYMENT.yaml`: the step-time model on a deployment written as a file.

A deployment file names a cluster profile (shipped name or path), the step's shape and the modes:

    profile: h100x16-llama8b-v1
    prompts: 64             # prompts (groups) per step
    n: 16                   # rows per prompt
    prompt_len: 256
    lengths: {mean: 2000, sigma: 0.8, max: 8192}   # lognormal response lengths, a long-tail shape [INF]
    modes: [sync, one-step-off, async, tail]
    keep_fraction: 0.75     # tail: the share of launched groups the step trains on
    seed: 0
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core import yamlsafe
from .profile import load_profile
from .steptime import MODES, Round, StepWork, step_time

FIELDS = {"profile", "prompts", "n", "prompt_len", "lengths", "modes", "keep_fraction", "seed", "published"}


def _positive(path, doc, key, default=None, whole=True):
    v = doc.get(key, default)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    if not ok or (whole and v != int(v)):
        raise ValueError(f"{path}: {key} must be a {'whole ' if whole else ''}number > 0, got {v!r}")
    return int(v) if whole else float(v)


def load_deployment(path: Path):
    try:
        doc = yamlsafe.load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read ({e})") from None
    except yamlsafe.yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a deployment is a mapping ({', '.join(sorted(FIELDS))})")
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(sorted(FIELDS))})")
    if not isinstance(doc.get("profile"), str):
        raise ValueError(f"{path}: profile must name a cluster profile (a shipped name or a YAML path)")
    prof = doc["profile"]
    if prof.endswith(".yaml"):
        prof = str((Path(path).parent / prof))
    profile = load_profile(prof)
    G, n, P = (_positive(path, doc, k) for k in ("prompts", "n", "prompt_len"))
    if G * n > 10**7:
        raise ValueError(f"{path}: prompts x n = {G * n} rows is past the bound of 10^7")
    lengths = doc.get("lengths") or {}
    if not isinstance(lengths, dict):
        raise ValueError(f"{path}: lengths must be a mapping (mean, sigma, max)")
    mean = _positive(path, lengths, "mean", profile.gen_len_mean, whole=False)
    sigma = _positive(path, lengths, "sigma", 0.8, whole=False)
    cap = _positive(path, lengths, "max", 32768)
    modes = doc.get("modes", list(MODES))
    if not isinstance(modes, list) or any(m not in MODES for m in modes):
        raise ValueError(f"{path}: modes must be a list of {', '.join(MODES)}, got {modes!r}")
    keep = _positive(path, doc, "keep_fraction", 0.75, whole=False)
    if keep > 1:
        raise ValueError(f"{path}: keep_fraction is a share of the launched groups, at most 1")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{path}: seed must be a whole number >= 0")
    rng = np.random.default_rng(seed)
    # a lognormal with this mean: mu = log(mean) - sigma^2 / 2
    L = np.minimum(np.maximum(rng.lognormal(math.log(mean) - sigma ** 2 / 2, sigma, G * n).round(), 1), cap)
    rnd = Round(L.astype(np.int64), np.full(G * n, P), np.repeat(np.arange(G), n))
    trained = float(L.sum() + G * n * P)
    return profile, modes, StepWork([rnd], trained, keep_groups=max(1, int(G * keep))), doc.get("published")


def sensitivity_table(profile, modes, work) -> str:
    """Each assumed value at x0.5 and x2: every mode's step seconds and its speed-up over the first mode."""
    from dataclasses import replace
    lines = [f"sensitivity (x0.5 / x2 of each assumed value): {' | '.join(modes)} step s, speed-up vs {modes[0]}"]
    for name in profile.assumptions:
        for factor in (0.5, 2.0):
            v = getattr(profile, name) * factor
            if isinstance(getattr(profile, name), int):
                v = max(1, int(round(v)))
            p = replace(profile, **{name: v})
            if name in ("gen_gpus", "tp") and (p.gen_gpus >= p.gpus or p.tp > p.gpus):
                lines.append(f"  {name} x{factor:g}: not a valid split")
                continue
            steps = [step_time(p, work, m).step_s for m in modes]
            cells = " | ".join(f"{s:.1f} ({steps[0] / s:.2f}x)" for s in steps)
            lines.append(f"  {name} x{factor:g}: {cells}")
    return "\n".join(lines)


def cmd_predict(args) -> int:
    profile, modes, work, published = load_deployment(Path(args.deployment))
    print(f"profile {profile.name}: {profile.gpus} GPUs, {work.rounds[0].lengths.size} rows, "
          f"mean length {work.rounds[0].lengths.mean():.0f}")
    print(f"{'mode':<14}{'step s':>10}{'generation':>12}{'training':>10}{'sync':>7}{'idle':>8}")
    base = None
    for m in modes:
        t = step_time(profile, work, m)
        base = base or t.step_s
        print(f"{m:<14}{t.step_s:>10.1f}{t.generation_s:>12.1f}{t.training_s:>10.1f}{t.sync_s:>7.1f}"
              f"{t.idle_s:>8.1f}   {base / t.step_s:.2f}x vs {modes[0]}")
    if profile.assumptions:
        print(f"assumed (no source): {', '.join(profile.assumptions)}")
        if args.sensitivity:
            print(sensitivity_table(profile, modes, work))
    if published:
        print(f"published: {published}")
    return 0


def add_systems_parser(sub) -> None:
    ps = sub.add_parser("systems", help="the step-time model: seconds per step on a cluster profile")
    ss = ps.add_subparsers(dest="systems_cmd", required=True)
    pp = ss.add_parser("predict", help="predicted step time of each deployment mode for a deployment file")
    pp.add_argument("deployment", help="a deployment YAML file (profile, prompts, n, lengths, modes)")
    pp.add_argument("--sensitivity", action="store_true", help="also each assumed profile value at x0.5 and x2")
    pp.set_defaults(func=cmd_predict)
