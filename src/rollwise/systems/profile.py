"""Cluster profiles: hardware, model shape and efficiencies, each value with its source (YAML, safe-loaded).

A profile is data, versioned like a cost profile: a figure computed under `h100x16-llama8b-v1` never
changes; a new estimate is `-v2`. Every value is `{value: X, source: "..."}`; a value that no source
gives says `assumption: true`, and reports show the figures' sensitivity to x0.5 and x2 of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

from ..core import schema, yamlsafe
from ..core.schema import Bool, Float, Int, Rule, at_least, checked, finite

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "cluster_profiles"


FRACTION = Rule(lambda v: 0 < v <= 1, "a fraction of peak, in (0, 1]")


@checked
@dataclass(frozen=True)
class ClusterProfile:
    name: str
    gpus: Annotated[Int, at_least(1)]                 # GPUs in the deployment
    gen_gpus: Annotated[Int, at_least(1)]             # GPUs that generate when generation and training are split (async)
    tp: Annotated[Int, at_least(1)]                   # GPUs per generation engine (tensor parallel)
    peak_flops: Annotated[Float, finite(0, strict=True)]  # dense bf16 FLOP/s per GPU
    mem_bw: Annotated[Float, finite(0, strict=True)]      # HBM bytes/s per GPU
    params: Annotated[Float, finite(0, strict=True)]      # policy parameters N
    weight_bytes: Annotated[Float, finite(0)]         # bytes of weights read per decode iteration (N x 2 in bf16)
    kv_bytes_per_token: Annotated[Float, finite(0)]   # KV cache bytes per context token
    mfu_decode: Annotated[Float, FRACTION]            # fraction of peak reached by decode's matmuls when compute-bound
    mfu_prefill: Annotated[Float, FRACTION]
    mfu_train: Annotated[Float, FRACTION]
    iter_overhead_s: Annotated[Float, finite(0)]      # fixed cost of one decode iteration (scheduler, kernel launches)
    concurrency: Annotated[Int, at_least(1)]          # max sequences decoded at once per engine
    weight_sync_s: Annotated[Float, finite(0)]        # trainer -> generator weight transfer per step
    gen_len_mean: Annotated[Float, finite(0)]         # mean response length of the deployment's workload (tokens)
    assumptions: tuple[str, ...] = ()                 # names of values no source gives

    @property
    def engines(self) -> int:
        return max(1, self.gpus // self.tp)


def _entry(v):
    return {"value": v} if not isinstance(v, dict) else v  # a bare number is a value without a source


@checked
@dataclass
class Entry:
    value: Annotated[Float, finite(0)]
    source: str = ""
    assumption: Bool = False


@checked
@dataclass
class ClusterFile:
    """A cluster profile file: every value of ClusterProfile as {value, source[, assumption: true]}."""
    values: dict[str, Annotated[Entry, BeforeValidator(_entry)]]
    name: str | None = None
    version: Int | None = None


def profile_from_mapping(doc, path="cluster profile") -> ClusterProfile:
    """A ClusterProfile from a profile file's mapping; one line naming the file and the field on any error
    (core/schema.py checks the types and ranges declared above)."""
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a cluster profile is a mapping with 'values' of name: {{value, source}}")
    f = schema.build(ClusterFile, doc, path, prefix=True)
    for own in ("name", "assumptions"):
        if own in f.values:
            raise ValueError(f"{path}: values: {own!r} is not a value (the profile's name is a top-level field)")
    assumed = tuple(sorted(k for k, e in f.values.items() if e.assumption))
    p = schema.build(ClusterProfile, {"name": f.name or str(path), "assumptions": assumed,
                                      **{k: e.value for k, e in f.values.items()}}, f"{path}: values", prefix=True)
    if p.gen_gpus > p.gpus:
        raise ValueError(f"{path}: gen_gpus ({p.gen_gpus}) exceeds gpus ({p.gpus})")
    return p


def load_profile(name_or_path: str) -> ClusterProfile:
    """A shipped profile by name (`h100x16-llama8b-v1`) or a YAML file by path: one line on any error."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SHIPPED / f"{name_or_path}.yaml"
        if not path.exists():
            have = ", ".join(sorted(p.stem for p in SHIPPED.glob("*.yaml")))
            raise ValueError(f"no cluster profile {name_or_path!r} (shipped: {have})")
    try:
        doc = yamlsafe.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read ({e})") from None
    except yamlsafe.yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    return profile_from_mapping(doc, str(path))
