"""A deployment written as a YAML file: a cluster profile, one step's shape, and the published figures to hold
the step-time model against (issue 41 item 4; WAVE4: the model is callable on any deployment so written).

    profile: h100x16-llama8b-v1        # a shipped name or a YAML path (relative to this file)
    overrides: {gpus: 16, gen_gpus: 4} # profile values this deployment sets (its GPU count and split)
    prompts: 64                        # prompts (groups) per step
    n: 16                              # rows per prompt
    prompt_len: 256
    lengths: {mean: 2000, sigma: 0.8, max: 8192}   # lognormal response lengths, a long-tail shape [INF]
    drafts: {accepted_per_step: 1.47, k: 3}        # speculative decoding, for the arms that say "+drafts"
    modes: [sync, one-step-off, async, tail]
    logprob_passes: {async: 0}         # per mode, when not 1: old-policy log-prob passes the trainer runs
    keep_fraction: 0.75                # tail: the share of launched groups the step trains on
    seed: 0
    assumed: [n, lengths.mean]         # inputs no source gives: the validation table shows them at x0.5 and x2
    published:                         # a list of figures (or one line of text, printed as is)
      - figure: "one-step-off over sync, time per step"
        quantity: speedup              # speedup (step s), rollout_speedup (generation s) or step_s
        arm: one-step-off              # a mode, "+drafts" for the deployment's drafts
        baseline: sync
        value: [1.23, 1.40]            # a number, [low, high], or {at_least: x}
        source: "the publication, table or figure"
        read: "where it was read, or 'not confirmed: ...'"
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from ..core import yamlsafe
from .profile import ClusterProfile, load_profile
from .steptime import MODES, Round, StepTime, StepWork, step_time

FIELDS = {"profile", "overrides", "prompts", "n", "prompt_len", "lengths", "drafts", "modes", "keep_fraction",
          "seed", "published", "assumed", "logprob_passes"}
# the deployment inputs an `assumed` list may name (each varied at x0.5 and x2 by the validation table)
INPUTS = ("prompts", "n", "prompt_len", "lengths.mean", "lengths.sigma", "lengths.max", "drafts.accepted_per_step",
          "drafts.k", "keep_fraction")
QUANTITIES = ("speedup", "rollout_speedup", "step_s")
FIGURE_FIELDS = {"figure", "quantity", "arm", "baseline", "value", "source", "read"}


@dataclass
class Figure:
    """One published figure: `quantity` of `arm` (over `baseline` for the ratios), as a range lo..hi (hi None:
    at least lo)."""
    figure: str
    quantity: str
    arm: str
    baseline: str | None
    lo: float
    hi: float | None
    source: str
    read: str

    def value_text(self) -> str:
        unit = " s" if self.quantity == "step_s" else "×"
        if self.hi is None:
            return f"> {self.lo:g}{unit}"
        return f"{self.lo:g}{unit}" if self.lo == self.hi else f"{self.lo:g}–{self.hi:g}{unit}"

    def error(self, predicted: float) -> float:
        """The prediction's relative error against the published range: 0 inside it, else from its nearest end."""
        if predicted < self.lo:
            return predicted / self.lo - 1
        if self.hi is not None and predicted > self.hi:
            return predicted / self.hi - 1
        return 0.0


@dataclass
class Deployment:
    path: str
    profile: ClusterProfile
    modes: list[str]
    work: StepWork                      # the step without drafts
    drafts: tuple[float, int] | None    # (accepted per verification step, drafts proposed per step)
    published: list[Figure] | str | None = None
    inputs: dict = field(default_factory=dict)   # INPUTS -> value
    assumed: tuple = ()                          # the inputs no source gives
    logprob_passes: dict = field(default_factory=dict)  # mode -> the trainer's log-prob passes, where not 1

    def varied(self, name: str, factor: float) -> "Deployment":
        """The same deployment with one input x factor (a whole-number input rounded, at least 1)."""
        v = self.inputs[name] * factor
        if name in ("prompts", "n", "prompt_len", "lengths.max", "drafts.k"):
            v = max(1, int(round(v)))
        if name == "keep_fraction":
            v = min(v, 1.0)
        inputs = {**self.inputs, name: v}
        work, drafts = _build(inputs, self.drafts is not None)
        return replace(self, work=work, drafts=drafts, inputs=inputs)

    def work_for(self, arm: str) -> StepWork:
        work = replace(self.work, logprob_passes=self.logprob_passes.get(arm.removesuffix("+drafts"), 1))
        if not arm.endswith("+drafts"):
            return work
        a, k = self.drafts
        return replace(work, rounds=[replace(r, accepted_per_step=a, draft_k=k) for r in work.rounds])

    def predict(self, arm: str, profile: ClusterProfile | None = None) -> StepTime:
        return step_time(profile or self.profile, self.work_for(arm), arm.removesuffix("+drafts"))

    def predicted(self, fig: Figure, profile: ClusterProfile | None = None) -> float:
        t = self.predict(fig.arm, profile)
        if fig.quantity == "step_s":
            return t.step_s
        b = self.predict(fig.baseline, profile)
        return b.step_s / t.step_s if fig.quantity == "speedup" else b.generation_s / t.generation_s


def _positive(path, doc, key, default=None, whole=True):
    v = doc.get(key, default)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    if not ok or (whole and v != int(v)):
        raise ValueError(f"{path}: {key} must be a {'whole ' if whole else ''}number > 0, got {v!r}")
    return int(v) if whole else float(v)


def _mapping(path, doc, key) -> dict:
    v = doc.get(key) or {}
    if not isinstance(v, dict):
        raise ValueError(f"{path}: {key} must be a mapping, got {v!r}")
    return v


def _arm(path, where, arm, drafts) -> str:
    if not isinstance(arm, str) or arm.removesuffix("+drafts") not in MODES:
        raise ValueError(f"{path}: {where} must be a mode ({', '.join(MODES)}), '+drafts' for drafts; got {arm!r}")
    if arm.endswith("+drafts") and drafts is None:
        raise ValueError(f"{path}: {where} {arm!r} needs the deployment's drafts (accepted_per_step, k)")
    return arm


def _figure(path, i, doc, drafts) -> Figure:
    where = f"published[{i}]"
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: {where} must be a mapping ({', '.join(sorted(FIGURE_FIELDS))})")
    unknown = sorted(set(doc) - FIGURE_FIELDS)
    if unknown:
        raise ValueError(f"{path}: {where} has an unknown field {unknown[0]!r} (known: {', '.join(sorted(FIGURE_FIELDS))})")
    for k in ("figure", "source", "read"):
        if not isinstance(doc.get(k), str) or not doc[k].strip():
            raise ValueError(f"{path}: {where}.{k} must be text")
    q = doc.get("quantity")
    if q not in QUANTITIES:
        raise ValueError(f"{path}: {where}.quantity must be one of {', '.join(QUANTITIES)}, got {q!r}")
    arm = _arm(path, f"{where}.arm", doc.get("arm"), drafts)
    base = None if q == "step_s" else _arm(path, f"{where}.baseline", doc.get("baseline"), drafts)
    v = doc.get("value")
    if isinstance(v, dict) and set(v) == {"at_least"}:
        lo, hi = _positive(path, v, "at_least", whole=False), None
    elif isinstance(v, list) and len(v) == 2:
        lo, hi = (_positive(path, {"value": x}, "value", whole=False) for x in v)
        if hi < lo:
            raise ValueError(f"{path}: {where}.value [low, high] has high < low")
    else:
        lo = hi = _positive(path, {"value": v}, "value", whole=False)
    return Figure(doc["figure"], q, arm, base, lo, hi, doc["source"], doc["read"])


def _profile(path, doc) -> ClusterProfile:
    if not isinstance(doc.get("profile"), str):
        raise ValueError(f"{path}: profile must name a cluster profile (a shipped name or a YAML path)")
    prof = doc["profile"]
    if prof.endswith(".yaml"):
        prof = str(Path(path).parent / prof)
    profile = load_profile(prof)
    over = _mapping(path, doc, "overrides")
    known = {f.name for f in fields(ClusterProfile)} - {"name", "assumptions"}
    for k, v in over.items():
        if k not in known:
            raise ValueError(f"{path}: overrides: unknown profile field {k!r}")
        whole = isinstance(getattr(profile, k), int)
        over[k] = _positive(path, over, k, whole=whole)
    profile = replace(profile, **over)
    if profile.gen_gpus > profile.gpus or profile.tp > profile.gpus:
        raise ValueError(f"{path}: overrides leave gen_gpus {profile.gen_gpus} / tp {profile.tp} past gpus {profile.gpus}")
    return profile


def load_deployment(path) -> Deployment:
    """A deployment file (module docstring): one line naming the file and field on any error."""
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
    profile = _profile(path, doc)
    G, n, P = (_positive(path, doc, k) for k in ("prompts", "n", "prompt_len"))
    if G * n > 10**7:
        raise ValueError(f"{path}: prompts x n = {G * n} rows is past the bound of 10^7")
    lengths = _mapping(path, doc, "lengths")
    mean = _positive(path, lengths, "mean", profile.gen_len_mean, whole=False)
    sigma = _positive(path, lengths, "sigma", 0.8, whole=False)
    cap = _positive(path, lengths, "max", 32768)
    d = _mapping(path, doc, "drafts")
    drafts = (_positive(path, d, "accepted_per_step", whole=False), _positive(path, d, "k")) if d else None
    modes = doc.get("modes", list(MODES))
    if not isinstance(modes, list) or not modes:
        raise ValueError(f"{path}: modes must be a list of {', '.join(MODES)} ('+drafts' for drafts), got {modes!r}")
    modes = [_arm(path, "modes", m, drafts) for m in modes]
    keep = _positive(path, doc, "keep_fraction", 0.75, whole=False)
    if keep > 1:
        raise ValueError(f"{path}: keep_fraction is a share of the launched groups, at most 1")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{path}: seed must be a whole number >= 0")
    lp = _mapping(path, doc, "logprob_passes")
    for m, v in lp.items():
        if m not in MODES or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{path}: logprob_passes maps a mode ({', '.join(MODES)}) to a whole number >= 0, "
                             f"got {m!r}: {v!r}")
    pub = doc.get("published")
    if isinstance(pub, list):
        pub = [_figure(path, i, f, drafts) for i, f in enumerate(pub)]
    elif pub is not None and not isinstance(pub, str):
        raise ValueError(f"{path}: published must be a list of figures or one line of text")
    assumed = doc.get("assumed", [])
    if not isinstance(assumed, list) or any(a not in INPUTS for a in assumed):
        raise ValueError(f"{path}: assumed must list deployment inputs ({', '.join(INPUTS)}), got {assumed!r}")
    if drafts is None and any(a.startswith("drafts.") for a in assumed):
        raise ValueError(f"{path}: assumed names drafts, but the deployment has none")
    inputs = {"prompts": G, "n": n, "prompt_len": P, "lengths.mean": mean, "lengths.sigma": sigma,
              "lengths.max": cap, "keep_fraction": keep, "seed": seed}
    if drafts:
        inputs.update({"drafts.accepted_per_step": drafts[0], "drafts.k": drafts[1]})
    work, drafts = _build(inputs, drafts is not None)
    return Deployment(str(path), profile, modes, work, drafts, pub, inputs, tuple(assumed), lp)


def _build(inputs: dict, has_drafts: bool) -> tuple[StepWork, tuple[float, int] | None]:
    """One step's work from the deployment's inputs: lognormal lengths of the given mean (mu = log(mean) -
    sigma^2 / 2), capped, drawn with the file's seed; the learner trains on every prompt and response token."""
    G, n, P = inputs["prompts"], inputs["n"], inputs["prompt_len"]
    mean, sigma = inputs["lengths.mean"], inputs["lengths.sigma"]
    rng = np.random.default_rng(inputs["seed"])
    L = np.minimum(np.maximum(rng.lognormal(math.log(mean) - sigma ** 2 / 2, sigma, G * n).round(), 1),
                   inputs["lengths.max"])
    rnd = Round(L.astype(np.int64), np.full(G * n, P), np.repeat(np.arange(G), n))
    work = StepWork([rnd], float(L.sum() + G * n * P), keep_groups=max(1, int(G * inputs["keep_fraction"])))
    drafts = (inputs["drafts.accepted_per_step"], int(inputs["drafts.k"])) if has_drafts else None
    return work, drafts
