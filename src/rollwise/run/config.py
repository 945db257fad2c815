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
    max_new_tokens: int | None = None  # None: the task's default (its `max_new_tokens` attribute), else 10
    engine: str = "torch"  # a registered engine, or 'module:Class'
    engine_options: dict = field(default_factory=dict)  # extra keyword arguments for the engine
    seed: int = 0
    budget_tokens: int = 0  # stop once this many generated tokens are spent (0 = no limit)
    eval_every: int = 10  # steps between held-out evaluations (0: off unless eval_every_tokens is set)
    eval_every_tokens: int = 0  # also evaluate at the first step after each multiple of this many tokens
    eval_size: int = 0  # held-out prompts per evaluation (0 = all)
    eval_k: int = 0  # pass@k with k samples per held-out prompt (0 = off)
    eval_samples: int = 0  # samples per prompt for pass@k (>= k)
    checkpoint_every: int = 10
    reward: str | None = None  # "module:function" user reward, called as fn(response, answer)
    reward_timeout_s: float = 5.0
    reward_shaping: str | None = None  # a registered `shaping` added to every scored reward, e.g. "overlong"
    reward_shaping_options: dict = field(default_factory=dict)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    # None: WarmStartConfig() with the task's `warmstart_defaults` on top (the keys a user sets win)
    warmstart: WarmStartConfig | None = None

    def __post_init__(self):
        # A task may declare the response length and the warm-start settings it needs (a long-response
        # task needs a larger context); they apply where the user set none. The arithmetic task declares
        # neither: 10 tokens and the plain WarmStartConfig, so its shipped base is found as before.
        if self.max_new_tokens is None:
            self.max_new_tokens = int(task_defaults(self.task)["max_new_tokens"])
        if self.warmstart is None:
            self.warmstart = WarmStartConfig(**task_defaults(self.task)["warmstart"])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


DEFAULT_MAX_NEW_TOKENS = 10


def task_defaults(task: str) -> dict:
    """What a task declares for the runs on it: `max_new_tokens` and `warmstart_defaults`."""
    from ..core import registry

    obj = registry.get("task", task).obj
    return {"max_new_tokens": getattr(obj, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS),
            "warmstart": dict(getattr(obj, "warmstart_defaults", None) or {})}


def _build(cls, data: dict, where: str):
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        if k not in known:
            raise ValueError(f"{where}: unknown key {k!r}; known keys: {', '.join(sorted(known))}")
        sub = {"learner": LearnerConfig, "warmstart": WarmStartConfig}.get(k) if cls is Config else None
        if sub is WarmStartConfig and isinstance(v, dict):  # the task's defaults under the user's keys
            v = {**task_defaults(data.get("task", Config.task))["warmstart"], **v}
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
    cfg = _build(Config, data, str(path) if path else "config")
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Every component name resolves and every `*_options` key is a parameter of its component, checked
    before any work is done: a typo is an error naming the key and the component, never a silent
    default or a failure at the first step."""
    import numpy as np

    from ..control.base import build_planner
    from ..core import registry

    build_planner(cfg.planner, 1, np.random.default_rng(0), cfg.planner_options)  # names, options, values
    registry.check_options(registry.get("task", cfg.task).obj, cfg.task_options, "task_options", label=cfg.task)
    engine = registry.get("engine", cfg.engine).obj
    if not hasattr(engine, "for_policy"):
        raise ValueError(f"engine {cfg.engine!r} does not sample from a policy and cannot train one; "
                         "it runs through `rollwise sim` and `rollwise bench --engine sim`")
    registry.check_options(engine, cfg.engine_options, "engine_options", skip=1, label=cfg.engine)
    if cfg.reward_shaping:
        registry.check_options(registry.get("shaping", cfg.reward_shaping).obj, cfg.reward_shaping_options,
                               "reward_shaping_options", label=cfg.reward_shaping)
    elif cfg.reward_shaping_options:
        raise ValueError("reward_shaping_options: set, but reward_shaping is not")
    L = cfg.learner
    adv_opts = dict(L.advantage_options)
    tracker = adv_opts.pop("tracker", None)
    adv = registry.get("advantage", L.advantage).obj
    registry.check_options(adv, adv_opts, "learner.advantage_options", skip=1, label=L.advantage)
    if tracker is not None:
        if getattr(adv, "tracker", None) is None:
            raise ValueError(f"learner.advantage_options.tracker: advantage {L.advantage!r} keeps no state "
                             "across batches")
        registry.check_options(adv.tracker, tracker, "learner.advantage_options.tracker")
    registry.check_options(registry.get("loss", L.loss).obj, L.loss_options, "learner.loss_options", skip=1,
                           label=L.loss)
    registry.check_options(registry.get("aggregation", L.loss_agg).obj, L.loss_agg_options,
                           "learner.loss_agg_options", skip=3, label=L.loss_agg)
    registry.check_options(registry.get("correction", L.correction).obj, L.correction_options,
                           "learner.correction_options", skip=1, label=L.correction)
    if L.recompose != "none":
        rc = registry.get("recompose", L.recompose).obj
        opts = {k: v for k, v in L.recompose_options.items() if k not in ("advantage", "advantage_options")}
        registry.check_options(rc.__call__ if isinstance(rc, type) else rc, opts, "learner.recompose_options",
                               skip=4 if isinstance(rc, type) else 3, label=L.recompose)
    elif L.recompose_options:
        raise ValueError("learner.recompose_options: set, but learner.recompose is 'none'")
