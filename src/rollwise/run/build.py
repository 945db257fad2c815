"""What a run is built from, checked before any work: `build_run(cfg) -> Parts` builds every part once (the
task and its prompts, the policy checked against them, the engine, learner, planner, ledger, history, budget,
scorer and step driver) and hands them to whoever runs them: the Trainer and its sources of steps (the
synchronous loop, the async loop) take parts, never build or replace each other's.

Where later parts go: a deployment mode is a source of steps built from these Parts (run/loop.py
`Trainer.source`); an engine-side method is an engine capability (generate/capabilities.py) and never
needs a part of its own here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..control.base import Planner, build_planner
from ..core import registry
from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..core.staleness import ASYNC_MODES, StalenessPolicy
from ..core.task import declares, option
from ..learn.learner import Learner
from ..policy.policy import Policy
from ..policy.warmstart import base_checkpoint, foreign_base
from ..tasks.reward import Scorer, builtin_reward
from ..tasks.shaping import ShapedScorer, build_shaping
from .budget import Budget
from .config import Config, resolve_device, validate
from .driver import StepDriver
from .evaluate import check_finite_weights
from .guard import FiniteGuard


@dataclass
class Parts:
    """Everything a run is made of, built once by `build_run` (in this order: the random draws of a run
    depend on it). `engine` and `driver` are the synchronous loop's; the async loop builds its worker pool
    and a driver over it from these parts, and replaces nothing here."""

    cfg: Config
    task: Any
    pool: list
    heldout: list
    model_path: Any
    device: Any
    policy: Policy
    engine: Any
    learner: Learner
    history: PromptHistory
    ledger: Ledger
    rng: np.random.Generator
    staleness: StalenessPolicy
    planner: Planner
    budget: Budget
    scorer: Any
    driver: StepDriver
    guard: FiniteGuard


def build_run(cfg: Config, log=print) -> Parts:
    """Every part of a training run from its config, checked before any work (one-line errors naming the
    task, the model or the prompt)."""
    validate(cfg)  # a config built in code gets the same checks as one loaded from a file
    torch.manual_seed(cfg.seed)
    task = registry.get("task", cfg.task).obj(**cfg.task_options)
    pool, heldout = task.train_pool(), task.heldout()
    for note in option(task, "notes")():  # e.g. a file task's rows dropped, and why
        log(f"task: {note}")
    if not pool:
        raise ValueError(f"task {cfg.task!r}: the train pool is empty")
    if cfg.eval_size:
        heldout = heldout[: cfg.eval_size]
    if (cfg.eval_every or cfg.eval_every_tokens) and not heldout:
        raise ValueError(f"task {cfg.task!r}: no held-out prompts to evaluate on (set eval_every=0 and "
                         "eval_every_tokens=0 to train without evaluation)")
    model_path = cfg.model or base_checkpoint(task, cfg.warmstart, log=log)
    device = resolve_device(cfg.device)  # the learner and a torch engine run here (config.device)
    if cfg.model and (note := foreign_base(run_model(model_path), task)):
        log(f"warning: {note}")  # said before the prompts are checked: a context error then has its cause
    policy = load_policy(model_path).to(device)
    if declares(task, "use_tokenizer"):  # a chat model's template (the file task): prompts change
        task.use_tokenizer(policy.tokenizer)
        pool, heldout = task.train_pool(), task.heldout()[: cfg.eval_size or None]
    try:
        check_finite_weights(policy)
    except ValueError as e:
        raise ValueError(f"model {model_path}: {e}") from None
    check_prompts(task, pool, heldout, policy, cfg)
    if cfg.mode in ASYNC_MODES and cfg.learner.correction == "none" and "correction" not in cfg.explicit:
        cfg.learner.correction = "areal-decoupled"  # stale tokens need a correction (run/async_loop.py)
    ref = load_policy(model_path).to(device) if cfg.learner.kl_coef > 0 else None
    engine = build_trainer_engine(cfg, policy)
    learner = Learner(policy, cfg.learner, ref, seed=cfg.seed)
    history = PromptHistory(len(pool))
    rng = np.random.default_rng(cfg.seed)
    staleness = StalenessPolicy.for_run(cfg.mode, cfg.max_staleness)  # the run's one bound
    planner = build_planner(cfg.planner, len(pool), rng, cfg.planner_options, staleness)
    # a drafting component's draft tokens are weighed in decoded-token units (its Speculator declaration)
    ledger = Ledger() if planner.draft_cost is None else Ledger(draft_cost=planner.draft_cost)
    budget = Budget.from_config(cfg)  # what ends the run and spaces its evaluations
    scorer = reward_scorer(cfg, task)
    if cfg.reward_shaping:  # e.g. an overlong penalty, added after scoring (tasks/shaping.py)
        scorer = ShapedScorer(scorer, build_shaping(cfg.reward_shaping, cfg.reward_shaping_options, cfg.max_new_tokens))
    driver = StepDriver(engine, ledger, history, scorer, policy)
    guard = FiniteGuard(learner, policy)
    return Parts(cfg, task, pool, heldout, model_path, device, policy, engine, learner, history, ledger, rng,
                 staleness, planner, budget, scorer, driver, guard)


def run_model(path):
    """A run directory -> the model directory its checkpoints save (`<run>/model`); any other path as given."""
    p = Path(path)
    return p / "model" if (p / "model").is_dir() and (p / "metrics.jsonl").exists() else path


def load_policy(path) -> Policy:
    """Policy.load, any failure to read the directory (a missing or damaged weights file, a config that
    does not fit) as one error naming it. A run directory (metrics.jsonl and the model/ its checkpoints
    save) stands for its latest model, as `rollwise export` takes it."""
    path = run_model(path)
    try:
        return Policy.load(path)
    except (ValueError, OSError) as e:
        raise ValueError(str(e) if str(path) in str(e) else f"model {path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - safetensors, transformers and torch raise their own types
        raise ValueError(f"model {path}: cannot load it ({type(e).__name__}: {str(e)[:200]})") from None


def check_prompts(task, pool, heldout, policy, cfg: Config) -> None:
    """Before any training: every prompt is in the policy's vocabulary and fits its context with
    max_new_tokens to spare; for a task whose verifier compares the response with the answer
    (`answers_are_responses`, the file task) every answer can be written within max_new_tokens, unless a
    user reward judges instead. An error names the prompt (a file task: its file and row)."""
    describe = option(task, "describe_prompt")
    check_answers = option(task, "answers_are_responses") and not cfg.reward
    unk = policy.unk_id
    for split, prompts in (("train", pool), ("held-out", heldout)):
        if not prompts:
            continue
        texts = [p.text for p in prompts]
        enc = policy.tokenizer(texts, add_special_tokens=False)["input_ids"]
        ans = policy.tokenizer([p.answer.strip() for p in prompts], add_special_tokens=False)["input_ids"] \
            if check_answers else [None] * len(prompts)
        for i, (p, ids, aids) in enumerate(zip(prompts, enc, ans)):
            where = describe(split, i) if describe else f"{split} prompt {i} ({p.text[:40]!r})"
            if unk is not None and unk in ids:
                raise ValueError(f"{where}: the prompt has text outside the model's vocabulary "
                                 f"({_unknown(policy, p.text)})")
            if len(ids) + cfg.max_new_tokens > policy.max_positions:
                raise ValueError(f"{where}: the prompt is {len(ids)} tokens; with max_new_tokens={cfg.max_new_tokens} "
                                 f"that is more than the model's context of {policy.max_positions} positions")
            if aids is not None:
                if unk is not None and unk in aids:
                    raise ValueError(f"{where}: the answer has text outside the model's vocabulary "
                                     f"({_unknown(policy, p.answer)}), so no response can match it")
                if len(aids) > cfg.max_new_tokens:
                    raise ValueError(f"{where}: the answer is {len(aids)} tokens, more than max_new_tokens="
                                     f"{cfg.max_new_tokens}, so no response can match it")


def _unknown(policy, text: str) -> str:
    bad = sorted({c for c in text if policy.unk_id in policy.tokenizer(c, add_special_tokens=False)["input_ids"]})
    return f"characters {bad}" if bad else "unknown tokens"


def reward_scorer(cfg: Config, task) -> Scorer:
    """The task's verifier, or the run's `reward` (a user's function or "math") in a worker process with a
    timeout and a memory limit."""
    if not cfg.reward:
        return Scorer(task.verify)
    builtin = builtin_reward(cfg.reward, cfg.reward_options)
    spec, path = builtin or (cfg.reward, [])
    return Scorer(spec, trusted=False, timeout_s=cfg.reward_timeout_s, memory_mb=cfg.reward_memory_mb, path=path,
                  own=builtin is not None)


def build_trainer_engine(cfg: Config, policy, **overrides):
    """The engine named by cfg.engine (the registry, or 'module:Class'), over the run's policy. An
    engine that samples something other than a policy (the simulator's) is refused with the reason."""
    entry = registry.get("engine", cfg.engine)  # config.validate has checked it samples from a policy
    kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
              **cfg.engine_options)
    kw.update(overrides)
    return entry.obj.for_policy(policy, **kw)
