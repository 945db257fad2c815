"""Run configuration: one typed dataclass, readable from YAML, overridable by flags.

Unknown keys are an error that names the key (a typo must not silently fall back to a default).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..learn.learner import LearnerConfig
from ..policy.warmstart import WarmStartConfig


@dataclass
class Config:
    out: str = "runs/default"
    model: str | None = None  # local checkpoint directory; None = the embedded warm-started base
    task: str = "arithmetic"
    task_options: dict = field(default_factory=dict)
    planner: str = "uniform"  # e.g. "greso+ar3po"
    planner_options: dict = field(default_factory=dict)  # {component name: {kwarg: value}}
    steps: int = 150
    batch_size: int = 32  # prompts (groups) per train step
    n: int = 8  # default samples per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 10
    seed: int = 0
    budget_tokens: int = 0  # stop once this many generated tokens are spent (0 = no limit)
    eval_every: int = 10
    eval_size: int = 0  # held-out prompts per evaluation (0 = all)
    eval_k: int = 0  # pass@k with k samples per held-out prompt (0 = off)
    eval_samples: int = 0  # samples per prompt for pass@k (>= k)
    checkpoint_every: int = 10
    reward: str | None = None  # "module:function" user reward, called as fn(response, answer)
    reward_timeout_s: float = 5.0
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls, data: dict, where: str):
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        if k not in known:
            raise ValueError(f"{where}: unknown key {k!r}; known keys: {', '.join(sorted(known))}")
        sub = {"learner": LearnerConfig, "warmstart": WarmStartConfig}.get(k) if cls is Config else None
        if sub is not None and isinstance(v, dict):
            v = _build(sub, v, f"{where}.{k}")
        elif isinstance(v, list) and k == "betas":
            v = tuple(v)
        kwargs[k] = v
    return cls(**kwargs)


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> Config:
    """Config from a YAML file (or defaults), then dotted overrides such as {"learner.lr": 1e-4}."""
    data: dict = {}
    if path:
        text = Path(path).read_text()
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
    for key, value in (overrides or {}).items():
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return _build(Config, data, str(path) if path else "config")
