"""The synchronous training loop: Control -> Generate -> Filter -> Replay -> Learn, one step at a time,
with held-out evaluation, JSON-lines metrics and exact kill-and-resume checkpoints."""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..control.base import StepContext, build_planner
from ..core import registry
from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..learn.learner import Learner
from ..policy.policy import Policy
from ..policy.warmstart import base_checkpoint
from ..tasks.reward import Scorer, load_reward_fn
from ..tasks.shaping import ShapedScorer, build_shaping
from .config import Config
from .driver import StepDriver
from .evaluate import evaluate

CKPT = "checkpoint.pt"


class Trainer:
    def __init__(self, cfg: Config, log=print):
        self.cfg, self.log = cfg, log
        self.out = Path(cfg.out)
        torch.manual_seed(cfg.seed)
        self.task = registry.get("task", cfg.task).obj(**cfg.task_options)
        self.pool, self.heldout = self.task.train_pool(), self.task.heldout()
        if cfg.eval_size:
            self.heldout = self.heldout[: cfg.eval_size]
        model_path = cfg.model or base_checkpoint(self.task, cfg.warmstart, log=log)
        self.policy = Policy.load(model_path)
        ref = Policy.load(model_path) if cfg.learner.kl_coef > 0 else None
        self.engine = build_trainer_engine(cfg, self.policy)
        self.learner = Learner(self.policy, cfg.learner, ref, seed=cfg.seed)
        self.history, self.ledger = PromptHistory(len(self.pool)), Ledger()
        self.rng = np.random.default_rng(cfg.seed)
        self.planner = build_planner(cfg.planner, len(self.pool), self.rng, cfg.planner_options)
        if cfg.reward:
            self.scorer = Scorer(load_reward_fn(cfg.reward), trusted=False, timeout_s=cfg.reward_timeout_s)
        else:
            self.scorer = Scorer(self.task.verify)
        if cfg.reward_shaping:  # e.g. DAPO's overlong penalty, added after scoring (tasks/shaping.py)
            self.scorer = ShapedScorer(self.scorer, build_shaping(cfg.reward_shaping, cfg.reward_shaping_options,
                                                                  cfg.max_new_tokens))
        self.driver = StepDriver(self.engine, self.ledger, self.history, self.scorer, self.policy)
        self.step = 0

    # ---- one step: the driver runs Control, Generate, Filter, Replay and Learn ----------------
    def train_step(self) -> dict:
        ctx = StepContext(self.step, self.cfg.batch_size, self.cfg.n, self.pool, self.history,
                          self.ledger, self.rng, self.policy)
        tokens_before = self.ledger.budget_tokens()
        out = self.driver.run_step(self.planner, ctx, self.learner)
        stats, batch = out.stats, out.batch
        self.ledger.learner_tokens += stats.pop("learner_tokens", 0)
        self.step += 1
        sizes = [g.n for g in batch.groups] or [0]
        generated = list(ctx.groups.values())
        return {"step": self.step, "tokens": self.ledger.budget_tokens(),
                "step_tokens": self.ledger.budget_tokens() - tokens_before,
                "rollouts": self.ledger.budget_rollouts(), "prompts": len(generated),
                "zero_var_frac_gen": sum(g.zero_variance for g in generated) / max(len(generated), 1),
                "reward_mean": float(np.mean([r.reward for g in generated for r in g.rollouts] or [0])),
                # responses cut at their length limit (finish reason "length") before EOS
                "truncated_frac": float(np.mean([r.finish_reason == "length" for g in generated for r in g.rollouts]
                                                or [0])),
                "group_min": min(sizes), "group_mean": float(np.mean(sizes)), "group_max": max(sizes),
                **{f"tokens_{k}": v for k, v in self.ledger.legacy_tokens().items()},
                **{f"rollouts_{k}": v for k, v in self.ledger.legacy_rollouts().items()},
                "tokens_reused": self.ledger.reused_tokens, **self.ledger.breakdown(),
                **out.staleness,
                **out.persist, **ctx.metrics, **stats, "reward_errors": self.scorer.errors}

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> list[dict]:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        resumed = self.load_checkpoint()
        # the exact settings of the run, written after a good load: `rollwise train --config <out>/config.json
        # --out NEW` reruns it
        (self.out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
        metrics_file = self.out / "metrics.jsonl"
        rows = _read_metrics(metrics_file, upto=self.step) if resumed else []  # drop lines after the checkpoint
        _write_metrics(metrics_file, rows)
        if resumed:
            self.log(f"resuming {self.out} from step {self.step}")
        evals = cfg.eval_every or cfg.eval_every_tokens
        if self.step == 0 and evals:
            rows.append(self._log_row({"step": 0, "tokens": 0, **self._evaluate()}, metrics_file))
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {cfg.planner}", file=sys.stderr,
                   disable=not sys.stderr.isatty() and os.environ.get("ROLLWISE_PROGRESS") != "1")
        while self.step < cfg.steps and not (cfg.budget_tokens and self.ledger.budget_tokens() >= cfg.budget_tokens):
            tokens_before = self.ledger.budget_tokens()
            with self.ledger.timer("step"):
                row = self.train_step()
            last = self.step >= cfg.steps or (cfg.budget_tokens and self.ledger.budget_tokens() >= cfg.budget_tokens)
            if evals and (last or self._eval_due(tokens_before)):
                row.update(self._evaluate())
            row["wall_s"] = self.ledger.seconds["step"]  # training wall time, eval excluded
            row["gen_s"] = self.ledger.seconds.get("generate", 0.0)
            rows.append(self._log_row(row, metrics_file))
            bar.update(1)
            bar.set_postfix(tokens=row["tokens"], acc=row.get("eval_acc", rows[-1].get("eval_acc")))
            if self.step % cfg.checkpoint_every == 0 or last:
                self.save_checkpoint()
        bar.close()
        return rows

    def _eval_due(self, tokens_before: int) -> bool:
        """Every eval_every steps, or at the first step boundary after each multiple of
        eval_every_tokens generated tokens (so every planner is evaluated at the same token spacing)."""
        cfg = self.cfg
        if cfg.eval_every and self.step % cfg.eval_every == 0:
            return True
        n = cfg.eval_every_tokens
        return bool(n) and self.ledger.budget_tokens() // n > tokens_before // n

    def _evaluate(self) -> dict:
        with self.ledger.timer("eval"):
            return evaluate(self.policy, self.heldout, self.scorer, self.ledger, self.cfg.max_new_tokens,
                            self.cfg.eval_k, self.cfg.eval_samples, self.cfg.temperature,
                            seed=self.cfg.seed * 1_000_003 + self.step,
                            make_engine=lambda **kw: build_trainer_engine(self.cfg, self.policy, **kw))

    def _log_row(self, row: dict, path: Path) -> dict:
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    # ---- checkpoints: everything needed to continue exactly ---------------------------------
    def save_checkpoint(self) -> None:
        state = {
            "step": self.step, "policy_version": self.policy.version,
            "model": self.policy.model.state_dict(), "learner": self.learner.state_dict(),
            "engine": self.engine.state_dict(), "torch_rng": torch.get_rng_state(),
            "numpy_rng": self.rng.bit_generator.state, "python_rng": random.getstate(),
            "planner": self.planner.state_dict(), "history": self.history.state_dict(),
            "ledger": self.ledger.state_dict(), "scorer_errors": self.scorer.errors,
        }
        tmp = self.out / (CKPT + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.out / CKPT)  # atomic: a kill mid-save leaves the previous checkpoint
        self.policy.save(self.out / "model")

    def load_checkpoint(self) -> bool:
        path = self.out / CKPT
        if not path.exists():
            return False
        s = torch.load(path, weights_only=False)
        self.step, self.policy.version = s["step"], s["policy_version"]
        self.policy.model.load_state_dict(s["model"])
        self.learner.load_state_dict(s["learner"])
        self.engine.load_state_dict(s["engine"] if "engine" in s else {"gen": s["engine_rng"]})
        self.engine.update_weights(self.policy.version)
        torch.set_rng_state(s["torch_rng"])
        self.rng.bit_generator.state = s["numpy_rng"]
        random.setstate(s["python_rng"])
        self.planner.load_state_dict(s["planner"])
        self.history.load_state_dict(s["history"])
        self.ledger.load_state_dict(s["ledger"])
        self.scorer.errors = s["scorer_errors"]
        return True


def build_trainer_engine(cfg: Config, policy, **overrides):
    """The engine named by cfg.engine (the registry, or 'module:Class'), over the run's policy. An
    engine that samples something other than a policy (the simulator's) is refused with the reason."""
    entry = registry.get("engine", cfg.engine)  # config.validate has checked it samples from a policy
    kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
              **cfg.engine_options)
    kw.update(overrides)
    return entry.obj.for_policy(policy, **kw)


def _read_metrics(path: Path, upto: int) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["step"] <= upto]


def _write_metrics(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
