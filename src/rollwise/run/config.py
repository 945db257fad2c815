"""Run configuration: one typed dataclass, readable from YAML, overridable by flags.

Unknown keys are an error that names the key (a typo must not silently fall back to a default).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import yaml

from ..core import schema, yamlsafe
from ..core.schema import MEMORY_MB, SEED, TIMEOUT, Float, Int, Rule, at_least, checked, finite, one_of
from ..core.settings import setting
from ..core.staleness import MODES
from ..learn.learner import LearnerConfig
from ..policy.warmstart import WarmStartConfig


@checked
@dataclass
class Config:
    out: str = setting("runs/default", "run directory: metrics.jsonl, checkpoint.pt, config.json, model/")
    model: str | None = setting(None, "local checkpoint directory (a Hugging Face causal LM with its tokenizer); "
                                      "none: the task's embedded warm-started base")
    task: str = setting("arithmetic", "a registered task (arithmetic, chain, file) or 'module:Class'")
    task_options: dict = setting(help="the task's options, e.g. train_path, heldout_path (`rollwise list "
                                      "--options file`)", factory=dict)
    planner: str = setting("uniform", "planner spec: components joined by +, e.g. greso+ar3po")
    planner_options: dict = setting(help="{component name: {option: value}}", factory=dict)
    steps: Annotated[Int, at_least(1)] = setting(150, "train steps (a budget may stop the run earlier)")
    batch_size: Annotated[Int, at_least(1)] = setting(32, "prompts (groups) per train step")
    n: Annotated[Int, at_least(1)] = setting(8, "samples per prompt unless the planner sizes groups itself")
    temperature: Annotated[Float, finite(0)] = setting(1.0, "sampling temperature")
    top_p: Annotated[Float, Rule(lambda v: 0 < v <= 1, "in (0, 1]")] = setting(1.0, "nucleus sampling threshold, in (0, 1]")
    max_new_tokens: Annotated[Int, at_least(1)] | None = setting(None, "response length limit (none: the task's default, else 10)")
    engine: str = setting("torch", "a registered engine (torch, vllm) or 'module:Class'")
    mode: Annotated[str, one_of(*MODES, words=" or ".join(MODES))] = setting("sync", "sync: one step at a time; async: rollout workers run ahead of the learner within "
                                "max_staleness; one-step-off: async with max_staleness 1 (the next step generates "
                                "while this one trains)")
    workers: Int = setting(1, "async: rollout workers (Ray actors), each with its own engine and policy copy; "
                              "0: one worker in this process, without Ray")
    max_staleness: Annotated[Int, at_least(0, "or unset: 1 in async mode, no bound in sync")] | None = setting(None, "the bound on a trained token's age in policy updates "
                                              "(core/staleness.py): async mode always (1 when unset); the sync "
                                              "loop only when set (it then bounds resumed partial rows)")
    engine_options: dict = setting(help="extra keyword arguments for the engine", factory=dict)
    device: str = setting("cpu", "where the learner and the torch engine run: cpu, cuda, cuda:N, auto (cuda if "
                                 "available)")
    seed: Annotated[Int, SEED] = setting(0, "seed of every random stream of the run")
    budget_tokens: Annotated[Int, at_least(0, "0 = no limit")] = setting(0, "stop once this many generated tokens are spent (0: no limit)")
    budget_seconds: Annotated[Float, finite(0, note="0 = no limit")] = setting(0.0, "stop once this many wall seconds of training are spent (evaluations and "
                                         "checkpoints excluded; 0: no limit). A run that ends on it is not a "
                                         "function of its seed: for wall-clock plans, not for resumable figures")
    budget_compute: Annotated[Float, finite(0, note="0 = no limit")] = setting(0.0, "stop once this many compute units are spent under cost_profile: decode, "
                                         "prefill and the learner's passes priced per token (0: no limit; "
                                         "run/budget.py)")
    budget_gpu_seconds: Annotated[Float, finite(0, note="0 = no limit")] = setting(0.0, "stop once this many modelled GPU-seconds are spent: each step's work at "
                                             "cluster_profile's scale (response lengths x length_scale), priced by "
                                             "the step-time model in the run's mode (0: no limit; systems/scale.py)")
    eval_every_gpu_seconds: Annotated[Float, finite(0, note="0 = off")] = setting(0.0, "also evaluate at the first step after each multiple of this many "
                                                 "modelled GPU-seconds (0: off)")
    cluster_profile: str = setting("h100x16-llama8b-v1", "the cluster profile GPU-seconds are modelled on: a "
                                                         "shipped name or a YAML file (systems/profile.py)")
    length_scale: Annotated[Float, finite(0, note="needed by the GPU-second settings")] = setting(0.0, "every response length x this at the cluster profile's scale (the "
                                         "profile's mean generation length over the task's at step 1); needed by "
                                         "budget_gpu_seconds and eval_every_gpu_seconds")
    cost_profile: str = setting("gpu-h100-v1", "the cost profile that prices compute units: a shipped name "
                                               "(gpu-h100-v1, cpu-epyc-v1) or a YAML file")
    eval_every: Annotated[Int, at_least(0, "0 = off")] = setting(10, "steps between held-out evaluations (0: off unless eval_every_tokens is set)")
    eval_every_tokens: Annotated[Int, at_least(0, "0 = off")] = setting(0, "also evaluate at the first step after each multiple of this many "
                                        "generated tokens (0: off)")
    eval_every_compute: Annotated[Float, finite(0, note="0 = off")] = setting(0.0, "also evaluate at the first step after each multiple of this many "
                                             "compute units (0: off)")
    eval_size: Annotated[Int, at_least(0, "0 = all")] = setting(0, "held-out prompts per evaluation (0: all)")
    eval_k: Annotated[Int, at_least(0, "0 = off")] = setting(0, "pass@k from max(eval_samples, eval_k) samples per held-out prompt (0: off)")
    eval_samples: Annotated[Int, at_least(0)] = setting(0, "samples per held-out prompt at the training temperature (0: off): their mean "
                                   "accuracy is eval_sampled_acc@N; pass@k is read from them (>= eval_k)")
    checkpoint_every: Annotated[Int, at_least(1)] = setting(10, "steps between checkpoints")
    reward: str | None = setting(None, "user reward 'module:function', called as fn(response, answer), or 'math' "
                                       "(math-verify); none: the task's own check")
    reward_options: dict = setting(help="the built-in 'math' reward's: {extract: auto|boxed|####|number}",
                                   factory=dict)
    reward_timeout_s: Annotated[Float, TIMEOUT] = setting(5.0, "seconds one call of the reward worker (a group's rollouts) may take")
    reward_memory_mb: Annotated[Int, MEMORY_MB] = setting(4096, "address-space limit of the reward worker process in MB (0: none)")
    reward_shaping: str | None = setting(None, "a registered shaping added to every scored reward, e.g. overlong")
    reward_shaping_options: dict = setting(help="the shaping's options", factory=dict)
    loggers: list[str] = setting(help="jsonl (always written), tensorboard, wandb",
                                 factory=lambda: ["jsonl"])
    max_skipped_steps: Annotated[Int, at_least(1)] = setting(3, "stop once this many steps in a row had a non-finite loss or gradient")
    learner: LearnerConfig = setting(help="the learner's settings", factory=LearnerConfig)
    # None: WarmStartConfig() with the task's `warmstart_defaults` on top (the keys a user sets win)
    warmstart: WarmStartConfig | None = setting(None, "the warm start that builds a base when no model is given "
                                                      "(default: the task's own settings)")

    def __post_init__(self):
        # A task may declare the response length and the warm-start settings it needs (a long-response
        # task needs a larger context); they apply where the user set none. The arithmetic task declares
        # neither: 10 tokens and the plain WarmStartConfig, so its shipped base is found as before.
        if self.max_new_tokens is None:
            self.max_new_tokens = int(task_defaults(self.task)["max_new_tokens"])
        if self.warmstart is None:
            self.warmstart = WarmStartConfig(**task_defaults(self.task)["warmstart"])

    # learner keys the user set (not written to config.json; not a key a config file may set)
    explicit: frozenset = field(default=frozenset(), init=False, repr=False)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("explicit")
        return d


DEFAULT_MAX_NEW_TOKENS = 10


def task_defaults(task: str) -> dict:
    """What a task declares for the runs on it: `max_new_tokens` and `warmstart_defaults`."""
    from ..core import registry

    if not isinstance(task, str):  # read before the fields' types are checked
        raise ValueError(f"task must be a string, got {task!r}")
    obj = registry.get("task", task).obj
    return {"max_new_tokens": getattr(obj, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS),
            "warmstart": dict(getattr(obj, "warmstart_defaults", None) or {})}


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> Config:
    """Config from a YAML file (or defaults), then dotted overrides such as {"learner.lr": 1e-4}."""
    data: dict = {}
    if path:
        text = Path(path).read_text()
        try:
            data = yamlsafe.load(text) or {}
        except yamlsafe.DuplicateKey as e:
            raise ValueError(f"{path}: {e}") from None
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
    for key, value in (overrides or {}).items():
        node = data
        parts = key.split(".")
        for i, p in enumerate(parts[:-1]):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: {'.'.join(parts[:i + 1])} is {node!r}, not a mapping of fields")
        node[parts[-1]] = value
    if isinstance(data.get("warmstart"), dict):  # the task's warm-start defaults under the user's keys
        data["warmstart"] = {**task_defaults(data.get("task", Config.task))["warmstart"], **data["warmstart"]}
    cfg = schema.build(Config, data, str(path) if path else "config")
    learner = data.get("learner")  # the learner keys the user set (async picks a correction only if not)
    cfg.explicit = frozenset(learner) if isinstance(learner, dict) else frozenset()
    validate(cfg)
    return cfg


def parse_sets(items: list[str]) -> dict:
    """`--set KEY=VALUE` items (train, eval, warmstart, bench and sim alike) -> {dotted key: value}. The value
    is YAML (`[1, 2]`, `true`, `{a: 1}`), except that numbers YAML 1.1 reads as strings (3e-4) are numbers.
    A malformed item is one error naming it."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if not key.strip() or any(not part for part in key.split(".")):
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with a key such as learner.lr")
        out[key] = parse_value(text)
    return out


def parse_value(text: str):
    """A `--set` value: YAML, except that numbers like 3e-4 (a string to YAML 1.1) are numbers."""
    try:
        v = yamlsafe.load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"--set value {text!r}: not a YAML value ({str(e).splitlines()[0]})") from None
    if isinstance(v, str):
        try:
            return float(text)
        except ValueError:
            pass
    return v


def validate(cfg: Config) -> None:
    """Every field has its type and range, every component name resolves and every `*_options` key is a
    parameter of its component (with a value of the parameter's type), checked before any work is done:
    a bad value is one error naming the field, never a silent default or a failure at the first step."""
    import numpy as np

    from ..control.base import build_planner
    from ..core import registry

    check_fields(cfg)
    check_imported_kinds(cfg)
    for name, opts in cfg.planner_options.items() if isinstance(cfg.planner_options, dict) else ():
        if isinstance(opts, dict) and name in cfg.planner.split("+"):
            check_option_types(registry.get("planner", name).obj, opts, f"planner_options.{name}")
    build_planner(cfg.planner, 1, np.random.default_rng(0), cfg.planner_options)  # names, options, values
    task = registry.get("task", cfg.task).obj
    registry.check_options(task, cfg.task_options, "task_options", label=cfg.task)
    check_option_types(task, cfg.task_options, "task_options")
    if cfg.model is None and not (hasattr(task, "sft_examples") and hasattr(task, "base_fingerprint")):
        # a task with sft_examples and base_fingerprint (arithmetic, chain, file) builds and caches its base
        raise ValueError(f"task {cfg.task!r} has no supervised warm start (sft_examples and base_fingerprint) "
                         "to build a base model from: a run on it needs --model PATH (a local checkpoint "
                         "directory with its tokenizer)")
    engine = registry.get("engine", cfg.engine).obj
    if not hasattr(engine, "for_policy"):
        raise ValueError(f"engine {cfg.engine!r} does not sample from a policy and cannot train one; "
                         "it runs through `rollwise sim` and `rollwise bench --engine sim`")
    if hasattr(engine, "check_available"):  # e.g. vLLM installed: known before any model is loaded
        try:
            engine.check_available()
        except ImportError as e:
            raise ValueError(f"engine {cfg.engine!r}: {e}") from None
    registry.check_options(engine, cfg.engine_options, "engine_options", skip=1, label=cfg.engine)
    check_option_types(engine, cfg.engine_options, "engine_options")
    if cfg.reward_shaping:
        shaping = registry.get("shaping", cfg.reward_shaping).obj
        registry.check_options(shaping, cfg.reward_shaping_options, "reward_shaping_options",
                               label=cfg.reward_shaping)
        check_option_types(shaping, cfg.reward_shaping_options, "reward_shaping_options")
    elif cfg.reward_shaping_options:
        raise ValueError("reward_shaping_options: set, but reward_shaping is not")
    L = cfg.learner
    adv_opts = dict(L.advantage_options)
    tracker = adv_opts.pop("tracker", None)
    adv = registry.get("advantage", L.advantage).obj
    registry.check_options(adv, adv_opts, "learner.advantage_options", skip=1, label=L.advantage)
    check_option_types(adv, adv_opts, "learner.advantage_options")
    estimator = L.recompose_options.get("advantage", L.advantage) if L.recompose != "none" else L.advantage
    if cfg.n < 2 and registry.get("advantage", estimator).facts.get("needs_groups"):
        single = [e.name for e in registry.entries("advantage") if e.facts.get("needs_groups") is False]
        raise ValueError(f"n must be >= 2 with advantage {estimator!r}, got {cfg.n}: it compares rollouts within a "
                         "group, so groups of one rollout all get advantage 0 and nothing is learned "
                         f"(estimators without groups: {', '.join(single)})")
    if tracker is not None:
        if getattr(adv, "tracker", None) is None:
            raise ValueError(f"learner.advantage_options.tracker: advantage {L.advantage!r} keeps no state "
                             "across batches")
        registry.check_options(adv.tracker, tracker, "learner.advantage_options.tracker")
    for kind, name, opts, where, skip in (("loss", L.loss, L.loss_options, "learner.loss_options", 1),
                                          ("aggregation", L.loss_agg, L.loss_agg_options, "learner.loss_agg_options", 3),
                                          ("correction", L.correction, L.correction_options,
                                           "learner.correction_options", 1)):
        obj = registry.get(kind, name).obj
        registry.check_options(obj, opts, where, skip=skip, label=name)
        check_option_types(obj, opts, where)
    if L.recompose != "none":
        rc = registry.get("recompose", L.recompose).obj
        opts = {k: v for k, v in L.recompose_options.items() if k not in ("advantage", "advantage_options")}
        target = rc.__call__ if isinstance(rc, type) else rc
        registry.check_options(target, opts, "learner.recompose_options", skip=4 if isinstance(rc, type) else 3,
                               label=L.recompose)
        check_option_types(target, opts, "learner.recompose_options")
    elif L.recompose_options:
        raise ValueError("learner.recompose_options: set, but learner.recompose is 'none'")


def check_imported_kinds(cfg: Config) -> None:
    """A component named by import path ('module:Attr') is built with the config's options, so it must be
    what its kind expects before anything calls it. The registry refuses any that lacks the registry marker
    (`rollwise_kind`, core/registry.py) for every kind; here a planner must also be a Component subclass and
    a task a class with train_pool/heldout/verify. (Naming a module still imports it: a config file names
    code.)"""
    from ..control.base import Component
    from ..core import registry

    for name in (n.strip() for n in cfg.planner.split("+")):
        if ":" in name:
            obj = registry.get("planner", name).obj
            if not (isinstance(obj, type) and issubclass(obj, Component)):
                raise ValueError(f"planner {name!r} is not a planner component (a subclass of "
                                 "rollwise.control.base.Component)")
    if ":" in cfg.task:
        obj = registry.get("task", cfg.task).obj
        if not (isinstance(obj, type) and all(hasattr(obj, m) for m in ("train_pool", "heldout", "verify"))):
            raise ValueError(f"task {cfg.task!r} is not a task (a class with train_pool, heldout and verify)")


# ---- types and ranges of every field ---------------------------------------------------------------

MAX_TIMEOUT_S = schema.MAX_TIMEOUT_S

# `*_options` keys with a range, whichever component takes them (the type comes from its annotation);
# each is checked at load, before any work: one line naming the option
OPTION_RANGES: dict[str, Rule] = {
    "engine_options.max_rows": at_least(1, "rows decoded at once"),
    "engine_options.prefix_kv_rows": at_least(0, "0 = off"),
    "task_options.pool_size": at_least(1),
    "task_options.verify_timeout_s": TIMEOUT,
    "task_options.verify_memory_mb": MEMORY_MB,
    "task_options.timeout_s": TIMEOUT,
}


def ranges() -> dict[str, Rule]:
    """{dotted field: its declared Rule} over Config, its learner and its warm start (core/schema.py)."""
    return schema.rules(Config, nested={"warmstart": WarmStartConfig})


def check_option_ranges(where: str, options: dict) -> None:
    for key, value in options.items() if isinstance(options, dict) else ():
        rule = OPTION_RANGES.get(f"{where}.{key}")
        if rule is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not rule.test(value):
            raise ValueError(f"{where}.{key} must be {rule.words}, got {value!r}")


def check_fields(cfg: Config) -> None:
    """The type and range of every field, declared in the dataclasses' annotations and checked by pydantic
    (core/schema.py; an integral float such as 4e4 for an integer field becomes that integer), then the
    rules that join fields or need the registry. Each failure is one error naming the field:
    `batch_size must be >= 1, got 0`."""
    data = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
    for name in ("learner", "warmstart"):  # a config built in code: its parts as the file would give them
        if dataclasses.is_dataclass(data[name]):
            data[name] = dataclasses.asdict(data[name])
    checked_cfg = schema.build(Config, data)
    for f in dataclasses.fields(cfg):  # converted values (4e4 -> 40000) back into the caller's config
        if f.init:
            setattr(cfg, f.name, getattr(checked_cfg, f.name))
    if not cfg.out.strip():
        raise ValueError("out must name a directory, got an empty string (use --out DIR; '.' for the current one)")
    for name in ("model", "reward"):
        if getattr(cfg, name) is not None and not getattr(cfg, name).strip():
            raise ValueError(f"{name} must not be an empty string")
    resolve_device(cfg.device)
    from ..bench.costs import load_profile

    load_profile(cfg.cost_profile)  # an unknown profile or a bad file: one line naming it
    if cfg.budget_gpu_seconds or cfg.eval_every_gpu_seconds:
        check_gpu_seconds(cfg)
    check_reward(cfg)
    from .loggers import check_loggers

    check_loggers(cfg.loggers)
    if cfg.eval_k and cfg.eval_samples and cfg.eval_samples < cfg.eval_k:
        raise ValueError(f"eval_samples must be >= eval_k ({cfg.eval_k}), got {cfg.eval_samples}")
    ws = cfg.warmstart
    if ws.n_embd % ws.n_head:
        raise ValueError(f"warmstart.n_embd must be a multiple of warmstart.n_head ({ws.n_head}), got {ws.n_embd}")
    if ws.arch == "llama" and (ws.n_embd // ws.n_head) % 2:  # rotary embeddings rotate pairs of dimensions
        raise ValueError(f"warmstart.n_embd / warmstart.n_head must be even for arch llama (rotary embeddings), got "
                         f"{ws.n_embd} / {ws.n_head} = {ws.n_embd // ws.n_head}")
    from ..learn.losses import KL_ESTIMATORS
    from ..policy.lora import check_lora

    check_lora(cfg.learner.lora)
    if cfg.learner.kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"learner.kl_estimator must be one of {', '.join(KL_ESTIMATORS)}, "
                         f"got {cfg.learner.kl_estimator!r}")


def check_gpu_seconds(cfg: Config) -> None:
    """A GPU-second budget or spacing needs its length scale and a cluster profile that loads."""
    from ..systems.profile import load_profile as load_cluster

    if not cfg.length_scale:
        raise ValueError("length_scale must be > 0 with budget_gpu_seconds or eval_every_gpu_seconds (response "
                         "lengths x it at cluster_profile's scale), got 0")
    try:
        load_cluster(cfg.cluster_profile)
    except ValueError as e:
        raise ValueError(f"cluster_profile: {e}") from None


def check_reward(cfg: Config) -> None:
    """`reward` is 'module:function' or the built-in "math" (math-verify installed); only "math" takes
    `reward_options`: {"extract": how its answer is found in the response}."""
    from ..tasks.reward import MATH_EXTRACTS

    if cfg.reward == "math":
        import importlib.util

        if importlib.util.find_spec("math_verify") is None:
            raise ValueError("reward 'math' needs the math-verify package: pip install 'rollwise[math]'")
        for k, v in cfg.reward_options.items():
            if k != "extract":
                raise ValueError(f"reward_options: unknown key {k!r} for reward 'math'; known keys: extract")
            if v not in MATH_EXTRACTS:
                raise ValueError(f"reward_options.extract must be one of {', '.join(MATH_EXTRACTS)}, got {v!r}")
        return
    if cfg.reward_options:
        raise ValueError(f"reward_options: set, but only the built-in reward 'math' takes options "
                         f"(reward is {cfg.reward!r})")
    if cfg.reward is not None:
        module, _, attr = cfg.reward.partition(":")
        if not module.strip() or not attr.strip():
            raise ValueError(f"reward must be 'module:function' or 'math', got {cfg.reward!r}")
        from ..core.trust import check_code

        check_code("reward", cfg.reward, extra_path=[os.getcwd()])  # the user's own code, not shutil:rmtree


def check_option_types(obj, options: dict, where: str) -> None:
    """Each option's value against the annotation of the parameter it sets (a component's constructor or
    function), converted in place like check_fields does (core/schema.py); parameters without a usable
    annotation pass."""
    if not isinstance(options, dict) or not options:
        return
    hints = {}
    for target in ((obj, getattr(obj, "__init__", None)) if isinstance(obj, type) else (obj,)):
        try:
            hints.update(typing.get_type_hints(target))
        except Exception:  # noqa: BLE001 - an annotation that does not resolve is not checked
            pass
    for key, value in list(options.items()):
        if isinstance(value, float) and math.isnan(value):  # no option means anything by NaN
            raise ValueError(f"{where}.{key} must be a number, got nan")
        # a mapping is checked too (`--set task_options.pool_size.x=1` makes pool_size {x: 1})
        if key in hints:
            options[key] = schema.check(hints[key], value, f"{where}.{key}")
    check_option_ranges(where, options)


def resolve_device(device: str) -> str:
    """The `device` field as a torch device string: "cpu", "cuda", "cuda:N", or "auto" (cuda when
    torch.cuda.is_available(), else cpu). Anything else, or a CUDA device this torch cannot use, is one
    ValueError naming the field."""
    import torch

    if not isinstance(device, str) or not re.fullmatch(r"cpu|auto|cuda(:\d+)?", device):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} asked for, but torch.cuda.is_available() is False "
                             f"(this torch is {torch.__version__})")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device: {device!r} asked for, but this machine has {torch.cuda.device_count()} "
                             "CUDA device(s)")
    return device


# ---- what a resume may change -----------------------------------------------------------------------

# Fields a resumed run may change: where it stops, how often it evaluates and checkpoints, and where the
# run lives. None of them changes what a step computes. Any other change needs allow_config_change.
# `device` may change too: a checkpoint holds CPU tensors and loads on any device (another device rounds
# differently, so a resume there continues the run, not bit for bit).
RESUME_MAY_CHANGE = ("out", "steps", "budget_tokens", "budget_compute", "budget_gpu_seconds", "eval_every",
                     "eval_every_tokens", "eval_every_compute", "eval_every_gpu_seconds", "checkpoint_every", "loggers",
                     "device")


def flat(d: dict, prefix: str = "") -> dict:
    """{"learner": {"lr": x}} -> {"learner.lr": x}, values normalised as JSON writes them."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k in ("learner", "warmstart"):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = json.loads(json.dumps(v, default=str))
    return out


def config_changes(recorded: dict, cfg: Config) -> dict[str, tuple]:
    """{field: (recorded value, new value)} for every field a resume may not change. A field the record
    lacks (added to Config since) counts as its default; one Config no longer has is ignored."""
    new = flat(cfg.to_dict())
    old = {**flat(Config().to_dict()), **{k: v for k, v in flat(recorded).items() if k in new}}
    if old.get("max_staleness") == 1 and new.get("max_staleness") is None:
        old["max_staleness"] = None  # written when unset before 0.4 (the sync loop ignored it; async's default)
    return {k: (old.get(k), new.get(k)) for k in sorted(new)
            if k not in RESUME_MAY_CHANGE and old.get(k) != new.get(k)}
