"""Compute units: one budget that charges every kind of work a step does, through a named cost profile.

A run's token budget counts decoded tokens only. The work behind a step is more than that: the engine
prefills prompts, resumed prefixes and drafts; the learner runs forward and backward over every trained
token (prompt + response) once per epoch; old and reference log-probs take a forward pass each where
the config computes them; some planners score prompts (HIVE, DOTS) or run an auxiliary head (ARRoL).
A **cost profile** prices each kind per token, relative to one decode token of the policy = 1, and
says where each price comes from. Profiles are YAML data files (assets/cost_profiles/NAME.yaml, read
with yaml.safe_load: no code runs from them), named and versioned: a recorded figure names the profile
it was computed under, and a changed price is a new version, never an edit.

    compute units = decode x decode tokens (every generated token, eval and oracle excluded)
                  + prefill x (prompt + prefix + re-prefilled tokens + draft tokens verified)
                  + learner x learner tokens (prompt + response, already x epochs)
                  + logprob x (old and reference log-prob forward passes x trained tokens)
                  + scoring x prompt-scoring tokens + aux_head x auxiliary-head tokens

Where a count is not yet in a metrics row, `counts_from_row` says so (its `missing` list) instead of
guessing it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated

from ..core import schema
from ..core.schema import Float, Int, checked, finite

PROFILE_DIR = Path(__file__).resolve().parent.parent / "assets" / "cost_profiles"
# per-token prices a profile must give, and the count each one multiplies
RATIOS = {"decode": "decode_tokens", "prefill": "prefill_tokens", "learner": "learner_tokens",
          "logprob": "logprob_tokens", "scoring": "scoring_tokens", "aux_head": "aux_tokens"}
OFF_BUDGET = ("eval", "oracle")  # as core/ledger.py: never charged
DECODED_KINDS = ("decoded", "shared")


@dataclass(frozen=True)
class CostProfile:
    name: str
    version: int
    ratios: dict[str, float]  # per token, relative to one decode token = 1
    sources: dict[str, str]  # where each ratio comes from
    seconds_per_unit: float | None = None  # measured profiles: wall seconds of one decode token
    description: str = ""
    derivation: str = ""
    extra: dict = field(default_factory=dict)  # anything else the file records (machine, measurements)

    def scaled(self, ratio: str, factor: float) -> "CostProfile":
        """The profile with one ratio multiplied (the sensitivity of a figure to that price)."""
        if ratio not in self.ratios:
            raise ValueError(f"cost profile {self.name}: no ratio {ratio!r}")
        return CostProfile(f"{self.name}[{ratio}x{factor:g}]", self.version, {**self.ratios, ratio: self.ratios[ratio] * factor},
                           self.sources, self.seconds_per_unit, self.description, self.derivation, self.extra)


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(spec: str) -> CostProfile:
    """A profile by name (a file shipped in assets/cost_profiles) or by path to a YAML file."""
    path = Path(spec)
    if not (spec.endswith((".yaml", ".yml")) and path.exists()):
        path = PROFILE_DIR / f"{spec}.yaml"
        if not path.exists():
            raise ValueError(f"unknown cost profile {spec!r}; available: {', '.join(available_profiles())}")
    return parse_profile(path.read_text(), str(path))


def yaml_mapping(text: str, where: str, expected: str, error: type[ValueError] = ValueError) -> dict:
    """A YAML document that must be a mapping (core/yamlsafe.py: no code runs, no key given twice); else a
    one-line `error`."""
    import yaml

    from ..core import yamlsafe

    try:
        doc = yamlsafe.load(text)
    except yamlsafe.DuplicateKey as e:
        raise error(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(doc, dict):
        raise error(f"{where}: expected a mapping {expected}")
    return doc


@checked
@dataclass
class Price:
    value: Annotated[Float, finite(0)]  # per token, relative to one decode token = 1
    source: str  # where the value comes from


@checked
@dataclass
class Prices:  # one per key of RATIOS
    decode: Price
    prefill: Price
    learner: Price
    logprob: Price
    scoring: Price
    aux_head: Price


@checked
@dataclass
class ProfileFile:
    """A cost profile file's own fields; any other key is kept as the profile's `extra` record."""
    name: str
    version: Int
    ratios: Prices
    seconds_per_unit: Annotated[Float, finite(0, strict=True)] | None = None
    description: str = ""
    derivation: str = ""


def parse_profile(text: str, where: str = "cost profile") -> CostProfile:
    doc = yaml_mapping(text, where, "with name, version and ratios")
    known = {f.name for f in fields(ProfileFile)}
    p = schema.build(ProfileFile, {k: v for k, v in doc.items() if k in known}, where, prefix=True)
    if p.ratios.decode.value != 1.0:
        raise ValueError(f"{where}: ratios.decode.value must be 1 (the unit), got {p.ratios.decode.value}")
    prices = {name: getattr(p.ratios, name) for name in RATIOS}
    return CostProfile(p.name, p.version, {k: float(v.value) for k, v in prices.items()},
                       {k: v.source for k, v in prices.items()}, p.seconds_per_unit, p.description, p.derivation,
                       {k: v for k, v in doc.items() if k not in known})


def compute_units(counts: dict, profile: CostProfile) -> float:
    """The work of `counts` ({decode_tokens, prefill_tokens, learner_tokens, logprob_tokens,
    scoring_tokens, aux_tokens}) in decode-token units of `profile`. Every count is required: a
    missing one is an error naming it (pass 0 where the work is truly absent)."""
    missing = [c for c in RATIOS.values() if c not in counts]
    if missing:
        raise ValueError(f"compute_units: missing count {', '.join(missing)}")
    return float(sum(profile.ratios[r] * float(counts[c]) for r, c in RATIOS.items()))


def logprob_passes(config: dict | None) -> int:
    """Forward passes over the trained tokens besides the learner's own: the old policy's log-probs
    (`learner.recompute_old`) and the reference model's (`learner.kl_coef` > 0)."""
    learner = (config or {}).get("learner", {})
    return int(bool(learner.get("recompute_old", False))) + int(float(learner.get("kl_coef", 0.0)) > 0)


def counts_from_row(row: dict, config: dict | None = None) -> tuple[dict, list[str]]:
    """The cumulative counts compute_units needs, read from one metrics row (cumulative fields), and
    the names of those the row does not carry (set to 0 in the counts returned).

    decode: the ledger's breakdown `tok/<purpose>/<fate>/<kind>`, purposes other than eval and oracle,
    kinds decoded and shared (older rows without a breakdown: tokens_train + pilot + discarded +
    profile). prefill: `prompt_tokens` (prompts, prefixes, re-prefills and HIVE/DOTS prompt scoring,
    which the driver charges there) + `tok/verified`. learner: `learner_tokens` (already x epochs).
    logprob: logprob_passes(config) x learner_tokens / epochs. scoring and aux: `scoring_tokens`,
    `aux_tokens` when a row separates them, else 0 (prompt scoring is inside prompt_tokens)."""
    missing = []
    breakdown = {k: v for k, v in row.items() if k.startswith("tok/") and k.count("/") == 3}
    if breakdown:
        decode = sum(v for k, v in breakdown.items()
                     if k.split("/")[1] not in OFF_BUDGET and k.split("/")[3] in DECODED_KINDS)
    elif "tokens_train" in row:
        decode = sum(row.get(f"tokens_{p}", 0) for p in ("train", "pilot", "discarded", "profile"))
    else:
        decode = 0
        if row.get("step", 0) != 0:  # the step-0 row (the base's evaluation) has spent nothing
            missing.append("decode_tokens")
    counts = {"decode_tokens": decode}
    for name in ("prompt_tokens", "learner_tokens"):
        if name not in row and row.get("step", 0) != 0:
            missing.append(name)
    counts["prefill_tokens"] = row.get("prompt_tokens", 0) + row.get("tok/verified", 0)
    counts["learner_tokens"] = row.get("learner_tokens", 0)
    if "old_logprob_tokens" in row:  # rows since 0.4 count the learner's log-prob passes themselves
        counts["logprob_tokens"] = row["old_logprob_tokens"] + row.get("ref_logprob_tokens", 0)
    else:  # older rows: one pass per trained token for each that the config computes
        epochs = max(int((config or {}).get("learner", {}).get("epochs", 1)), 1)
        counts["logprob_tokens"] = logprob_passes(config) * counts["learner_tokens"] / epochs
    counts["scoring_tokens"] = row.get("scoring_tokens", 0)
    counts["aux_tokens"] = row.get("aux_tokens", 0)
    return counts, missing


def compute_curve(rows: list[dict], profile: CostProfile, config: dict | None = None) -> tuple[list[float], list[str]]:
    """Cumulative compute units at every row of a run (the x axis of its compute curve), and the
    counts that some row lacked (the units then leave that work out)."""
    xs, missing = [], set()
    for r in rows:
        counts, miss = counts_from_row(r, config)
        xs.append(compute_units(counts, profile))
        missing.update(miss)
    return xs, sorted(missing)


def formula(profile: CostProfile) -> str:
    """The formula with the profile's prices, as the record writes it."""
    r = profile.ratios
    return (f"compute units ({profile.name} v{profile.version}) = {r['decode']:g} x decode tokens + "
            f"{r['prefill']:g} x prefill tokens + {r['learner']:g} x learner tokens (prompt+response, x epochs) + "
            f"{r['logprob']:g} x old/ref log-prob tokens + {r['scoring']:g} x prompt-scoring tokens + "
            f"{r['aux_head']:g} x aux-head tokens")
