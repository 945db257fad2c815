"""Cluster profiles: hardware, model shape and efficiencies, each value with its source (YAML, safe-loaded).

A profile is data, versioned like a cost profile: a figure computed under `h100x16-llama8b-v1` never
changes; a new estimate is `-v2`. Every value is `{value: X, source: "..."}`; a value that no source
gives says `assumption: true`, and reports show the figures' sensitivity to x0.5 and x2 of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from ..core import yamlsafe

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "cluster_profiles"


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    gpus: int                   # GPUs in the deployment
    gen_gpus: int               # GPUs that generate when generation and training are split (async modes)
    tp: int                     # GPUs per generation engine (tensor parallel)
    peak_flops: float           # dense bf16 FLOP/s per GPU
    mem_bw: float               # HBM bytes/s per GPU
    params: float               # policy parameters N
    weight_bytes: float         # bytes of weights read per decode iteration (N x 2 in bf16)
    kv_bytes_per_token: float   # KV cache bytes per context token
    mfu_decode: float           # fraction of peak reached by decode's matmuls when compute-bound
    mfu_prefill: float
    mfu_train: float
    iter_overhead_s: float      # fixed cost of one decode iteration (scheduler, kernel launches)
    concurrency: int            # max sequences decoded at once per engine
    weight_sync_s: float        # trainer -> generator weight transfer per step
    gen_len_mean: float         # mean response length of the deployment's workload (tokens)
    assumptions: tuple = ()     # names of values no source gives

    @property
    def engines(self) -> int:
        return max(1, self.gpus // self.tp)


def _number(path, key, entry) -> float:
    value = entry.get("value") if isinstance(entry, dict) else entry
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}: {key} must be a finite number >= 0, got {value!r}")
    return value


def profile_from_mapping(doc, path="cluster profile") -> ClusterProfile:
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a cluster profile is a mapping of name: {{value, source}}")
    names = {f.name for f in fields(ClusterProfile)} - {"name", "assumptions"}
    values = doc.get("values")
    if not isinstance(values, dict):
        raise ValueError(f"{path}: needs a 'values' mapping ({', '.join(sorted(names))})")
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(sorted(names))})")
    missing = sorted(names - set(values))
    if missing:
        raise ValueError(f"{path}: missing field {missing[0]!r}")
    got = {k: _number(path, k, v) for k, v in values.items()}
    for k in ("gpus", "gen_gpus", "tp", "concurrency"):
        if got[k] < 1 or got[k] != int(got[k]):
            raise ValueError(f"{path}: {k} must be a whole number >= 1, got {got[k]!r}")
        got[k] = int(got[k])
    for k in ("peak_flops", "mem_bw", "params", "mfu_decode", "mfu_prefill", "mfu_train"):
        if got[k] <= 0:
            raise ValueError(f"{path}: {k} must be > 0")
    for k in ("mfu_decode", "mfu_prefill", "mfu_train"):
        if got[k] > 1:
            raise ValueError(f"{path}: {k} is a fraction of peak, at most 1, got {got[k]!r}")
    if got["gen_gpus"] > got["gpus"]:
        raise ValueError(f"{path}: gen_gpus ({got['gen_gpus']}) exceeds gpus ({got['gpus']})")
    assumed = tuple(sorted(k for k, v in values.items() if isinstance(v, dict) and v.get("assumption")))
    return ClusterProfile(name=str(doc.get("name", path)), assumptions=assumed, **got)


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
