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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from ..core import schema, yamlsafe
from ..core.schema import SEED, Float, Int, Rule, at_least, checked, finite, one_of
from .profile import ClusterProfile, load_profile
from .steptime import MODES, Round, StepTime, StepWork, step_time

# the deployment inputs an `assumed` list may name (each varied at x0.5 and x2 by the validation table)
INPUTS = ("prompts", "n", "prompt_len", "lengths.mean", "lengths.sigma", "lengths.max", "drafts.accepted_per_step",
          "drafts.k", "keep_fraction")
QUANTITIES = ("speedup", "rollout_speedup", "step_s")


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


# ---- the file's shape, checked by core/schema.py like every config ------------------------------------

POSITIVE = Annotated[Float, finite(0, strict=True)]
ARM = Rule(lambda v: v.removesuffix("+drafts") in MODES, f"a mode ({', '.join(MODES)}), '+drafts' for drafts")
TEXT = Rule(lambda v: bool(v.strip()), "text")


@checked
@dataclass
class LengthsFile:
    mean: POSITIVE | None = None  # None: the cluster profile's gen_len_mean
    sigma: POSITIVE = 0.8
    max: Annotated[Int, at_least(1)] = 32768


@checked
@dataclass
class DraftsFile:
    accepted_per_step: POSITIVE
    k: Annotated[Int, at_least(1)]


@checked
@dataclass
class AtLeast:
    at_least: POSITIVE


@checked
@dataclass
class FigureFile:
    figure: Annotated[str, TEXT]
    quantity: Annotated[str, one_of(*QUANTITIES)]
    arm: Annotated[str, ARM]
    value: POSITIVE | tuple[POSITIVE, POSITIVE] | AtLeast  # a number, [low, high], or {at_least: x}
    source: Annotated[str, TEXT]
    read: Annotated[str, TEXT]
    baseline: Annotated[str, ARM] | None = None  # the ratios' denominator (not for step_s)


@checked
@dataclass
class DeploymentFile:
    profile: str
    prompts: Annotated[Int, at_least(1)]
    n: Annotated[Int, at_least(1)]
    prompt_len: Annotated[Int, at_least(1)]
    overrides: dict[str, Any] = field(default_factory=dict)  # checked as ClusterProfile values
    lengths: LengthsFile = field(default_factory=LengthsFile)
    drafts: DraftsFile | None = None
    modes: Annotated[list[Annotated[str, ARM]], Rule(bool, "a non-empty list of modes")] = field(
        default_factory=lambda: list(MODES))
    keep_fraction: Annotated[Float, Rule(lambda v: 0 < v <= 1, "a share of the launched groups, in (0, 1]")] = 0.75
    seed: Annotated[Int, SEED] = 0
    logprob_passes: dict[Annotated[str, one_of(*MODES)], Annotated[Int, at_least(0)]] = field(default_factory=dict)
    published: list[FigureFile] | str | None = None
    assumed: list[Annotated[str, one_of(*INPUTS)]] = field(default_factory=list)


def _figure(path, i, f: FigureFile, drafts) -> Figure:
    where = f"{path}: published[{i}]"
    for name in ("arm", "baseline"):
        if str(getattr(f, name)).endswith("+drafts") and drafts is None:
            raise ValueError(f"{where}.{name} {getattr(f, name)!r} needs the deployment's drafts (accepted_per_step, k)")
    if f.quantity != "step_s" and f.baseline is None:
        raise ValueError(f"{where}: a {f.quantity} needs a baseline (a mode)")
    if isinstance(f.value, AtLeast):
        lo, hi = f.value.at_least, None
    elif isinstance(f.value, tuple):
        lo, hi = f.value
        if hi < lo:
            raise ValueError(f"{where}.value [low, high] has high < low")
    else:
        lo = hi = f.value
    return Figure(f.figure, f.quantity, f.arm, None if f.quantity == "step_s" else f.baseline, lo, hi, f.source,
                  f.read)


def _profile(path, d: DeploymentFile) -> ClusterProfile:
    prof = d.profile
    if prof.endswith(".yaml"):
        prof = str(Path(path).parent / prof)
    profile = load_profile(prof)
    if not d.overrides:
        return profile
    for own in ("name", "assumptions"):
        if own in d.overrides:
            raise ValueError(f"{path}: overrides: {own!r} is not a profile value")
    profile = schema.build(ClusterProfile, {**asdict(profile), **d.overrides}, f"{path}: overrides", prefix=True)
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
        raise ValueError(f"{path}: a deployment is a mapping ({', '.join(f.name for f in fields(DeploymentFile))})")
    d = schema.build(DeploymentFile, {k: v for k, v in doc.items() if v is not None}, str(path), prefix=True)
    profile = _profile(path, d)
    G, n, P = d.prompts, d.n, d.prompt_len
    if G * n > 10**7:
        raise ValueError(f"{path}: prompts x n = {G * n} rows is past the bound of 10^7")
    drafts = (d.drafts.accepted_per_step, d.drafts.k) if d.drafts else None
    for m in d.modes:
        if m.endswith("+drafts") and drafts is None:
            raise ValueError(f"{path}: modes: {m!r} needs the deployment's drafts (accepted_per_step, k)")
    pub = [_figure(path, i, f, drafts) for i, f in enumerate(d.published)] if isinstance(d.published, list) \
        else d.published
    if drafts is None and any(a.startswith("drafts.") for a in d.assumed):
        raise ValueError(f"{path}: assumed names drafts, but the deployment has none")
    L = d.lengths
    inputs = {"prompts": G, "n": n, "prompt_len": P, "lengths.mean": L.mean or profile.gen_len_mean,
              "lengths.sigma": L.sigma, "lengths.max": L.max, "keep_fraction": d.keep_fraction, "seed": d.seed}
    if drafts:
        inputs.update({"drafts.accepted_per_step": drafts[0], "drafts.k": drafts[1]})
    work, drafts = _build(inputs, drafts is not None)
    return Deployment(str(path), profile, list(d.modes), work, drafts, pub, inputs, tuple(d.assumed),
                      dict(d.logprob_passes))


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
