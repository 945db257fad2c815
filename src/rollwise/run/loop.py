"""The synchronous training loop: Control -> Generate -> Filter -> Replay -> Learn, one step at a time,
with held-out evaluation, JSON-lines metrics and exact kill-and-resume checkpoints.

What protects a run and its directory:
- `--out` is locked (flock on `<out>/.lock`) for the whole run: a second trainer on it fails at once.
- A run writes only its own files (metrics.jsonl, config.json, checkpoint.pt, model/, config_changes.jsonl;
  tensorboard/ and wandb/ if those loggers are on: run/loggers.py) and never replaces one it did not write:
  a directory with those files but no checkpoint is refused unless its config.json is this run's and its
  `.rollwise-run` marker says a run started there never checkpointed (run/rundir.py).
- A resume loads the checkpoint first, refuses a changed config unless allowed (run/config.py:
  RESUME_MAY_CHANGE), and only then writes config.json.
- Checkpoints hold tensors and plain data only and load with `torch.load(weights_only=True)`: a file that
  holds anything else is refused, never unpickled.
- A step whose loss, gradient norm, new weights or new logits are not finite is undone and counted
  (`skipped_steps`); `max_skipped_steps` of them in a row stop the run. No checkpoint holds such weights.
- metrics.jsonl is strict JSON: a non-finite number is written as null and its key listed in `nonfinite`.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import pickle
import random
import re
import sys
from dataclasses import dataclass
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
from ..tasks.reward import Scorer, builtin_reward
from ..tasks.shaping import ShapedScorer, build_shaping
from .config import Config, config_changes, resolve_device, validate, RESUME_MAY_CHANGE
from .driver import StepDriver
from .evaluate import check_finite_weights, evaluate
from .loggers import open_loggers
from . import resume, rundir
from .budget import Budget
from .records import read_rows
from .staleness import StalenessPolicy

CKPT = "checkpoint.pt"
CKPT_FORMAT = 2  # 2: plain data only (weights_only loading), the run's config, skipped-step counters
RUN_FILES = ("metrics.jsonl", "config.json", "model", CKPT)  # what a run writes (and may replace)


class RunStopped(RuntimeError):
    """The run cannot go on, for the reason given (not a bug: the CLI prints it as one line)."""


class Trainer:
    def __init__(self, cfg: Config, log=print, allow_config_change: bool = False):
        validate(cfg)  # a config built in code gets the same checks as one loaded from a file
        self.cfg, self.log, self.allow_config_change = cfg, log, allow_config_change
        self.out = Path(cfg.out)
        torch.manual_seed(cfg.seed)
        self.task = registry.get("task", cfg.task).obj(**cfg.task_options)
        self.pool, self.heldout = self.task.train_pool(), self.task.heldout()
        for note in getattr(self.task, "notes", lambda: [])():  # e.g. a file task's rows dropped, and why
            log(f"task: {note}")
        if not self.pool:
            raise ValueError(f"task {cfg.task!r}: the train pool is empty")
        if cfg.eval_size:
            self.heldout = self.heldout[: cfg.eval_size]
        if (cfg.eval_every or cfg.eval_every_tokens) and not self.heldout:
            raise ValueError(f"task {cfg.task!r}: no held-out prompts to evaluate on (set eval_every=0 and "
                             "eval_every_tokens=0 to train without evaluation)")
        model_path = self.model_path = cfg.model or base_checkpoint(self.task, cfg.warmstart, log=log)
        self.device = resolve_device(cfg.device)  # the learner and a torch engine run here (config.device)
        self.policy = load_policy(model_path).to(self.device)
        if hasattr(self.task, "use_tokenizer"):  # a chat model's template (the file task): prompts change
            self.task.use_tokenizer(self.policy.tokenizer)
            self.pool, self.heldout = self.task.train_pool(), self.task.heldout()[: cfg.eval_size or None]
        try:
            check_finite_weights(self.policy)
        except ValueError as e:
            raise ValueError(f"model {model_path}: {e}") from None
        check_prompts(self.task, self.pool, self.heldout, self.policy, cfg)
        if cfg.mode == "async" and cfg.learner.correction == "none" and "correction" not in cfg.explicit:
            cfg.learner.correction = "areal-decoupled"  # stale tokens need a correction (run/async_loop.py)
        ref = load_policy(model_path).to(self.device) if cfg.learner.kl_coef > 0 else None
        self.engine = build_trainer_engine(cfg, self.policy)
        self.learner = Learner(self.policy, cfg.learner, ref, seed=cfg.seed)
        self.history, self.ledger = PromptHistory(len(self.pool)), Ledger()
        self.rng = np.random.default_rng(cfg.seed)
        self.planner = build_planner(cfg.planner, len(self.pool), self.rng, cfg.planner_options)
        self.staleness = StalenessPolicy.for_run(cfg.mode, cfg.max_staleness)  # the run's one bound
        self.budget = Budget.from_config(cfg)  # what ends the run and spaces its evaluations
        self.planner.staleness = self.staleness
        if self.planner.draft_cost is not None:  # SPEC-RL's draft tokens, in decoded-token units
            self.ledger.draft_cost = self.planner.draft_cost
        self.scorer = reward_scorer(cfg, self.task)
        if cfg.reward_shaping:  # e.g. DAPO's overlong penalty, added after scoring (tasks/shaping.py)
            self.scorer = ShapedScorer(self.scorer, build_shaping(cfg.reward_shaping, cfg.reward_shaping_options,
                                                                  cfg.max_new_tokens))
        self.driver = StepDriver(self.engine, self.ledger, self.history, self.scorer, self.policy)
        self.guard = FiniteGuard(self.learner, self.policy)
        self.step = 0
        self.skip_streak = 0  # steps in a row undone for a non-finite loss, gradient or weight
        self._scorer_seen = (0, 0)  # reward errors and scores at the last metrics row
        self._step_reward_failures = (0, 0)  # the last step's failed and scored rollouts
        self._warned_no_variance = False
        self.loggers = []  # tensorboard, wandb (run/loggers.py): opened by run()

    # ---- one step: the driver runs Control, Generate, Filter, Replay and Learn ----------------
    def train_step(self) -> dict:
        """One synchronous step and its metrics row (no evaluation, logging or checkpoint: `run` does those)."""
        done = self.one_step()
        return self.step_row(done.ctx, done.out, done.view, done.tokens_before)

    def one_step(self) -> "TrainedStep":
        ctx = self.context(self.step)
        tokens_before = self.ledger.budget_tokens()
        try:
            out = self.driver.run_step(self.planner, ctx, self.guard)
        except RuntimeError as e:
            raise self.sampling_failed(e) from None
        self.step += 1
        return TrainedStep(ctx, out, self.ledger_view(), tokens_before, self.budget.spent(self.ledger))

    def sampling_failed(self, e: RuntimeError) -> Exception:
        """torch's multinomial on non-finite probabilities is a stop with a reason, not a crash."""
        if "probability tensor" not in str(e):
            return e
        return RunStopped(f"step {self.step + 1}: sampling failed because the policy's probabilities are not "
                          f"finite ({e}); lower learner.lr or check the model")

    def context(self, step: int) -> StepContext:
        return StepContext(step, self.cfg.batch_size, self.cfg.n, self.pool, self.history, self.ledger, self.rng,
                           self.policy, task=self.task)

    def ledger_view(self) -> dict:
        """The ledger's figures for a metrics row (taken right after a step's rollouts are settled)."""
        led = self.ledger
        return {"tokens": led.budget_tokens(), "rollouts": led.budget_rollouts(),
                **{f"tokens_{k}": v for k, v in led.legacy_tokens().items()},
                **{f"rollouts_{k}": v for k, v in led.legacy_rollouts().items()},
                "tokens_reused": led.reused_tokens, **led.compute_counts(),
                "compute": self.budget.spent(led).compute, **led.breakdown()}

    def step_row(self, ctx: StepContext, out, view: dict, tokens_before: int) -> dict:
        """One metrics.jsonl row for a trained step."""
        stats, batch = out.stats, out.batch
        self._warn_reward_failures(ctx.step + 1)
        self.skip_streak = self.skip_streak + 1 if stats.get("skipped") else 0
        sizes = [g.n for g in batch.groups] or [0]
        generated = list(ctx.groups.values())
        self._warn_no_variance(ctx.step + 1, generated)
        return {"step": ctx.step + 1, "tokens": view["tokens"], "step_tokens": view["tokens"] - tokens_before,
                "rollouts": view["rollouts"], "prompts": len(generated),
                "zero_var_frac_gen": sum(g.zero_variance for g in generated) / max(len(generated), 1),
                "reward_mean": float(np.mean([r.reward for g in generated for r in g.rollouts] or [0])),
                # responses cut at their length limit (finish reason "length") before EOS
                "truncated_frac": float(np.mean([r.finish_reason == "length" for g in generated for r in g.rollouts]
                                                or [0])),
                "group_min": min(sizes), "group_mean": float(np.mean(sizes)), "group_max": max(sizes),
                **{k: v for k, v in view.items() if k not in ("tokens", "rollouts")},
                **out.staleness, **out.persist, **ctx.metrics, **stats, "reward_errors": self.scorer.errors,
                "skipped_steps": self.guard.skipped}

    NO_VARIANCE_STEPS, NO_VARIANCE_FRAC = 3, 0.9  # warn in the first 3 steps if >= 90% of groups are equal

    def _warn_no_variance(self, step: int, groups) -> None:
        """A run whose groups all score alike learns nothing (every advantage is 0); say so once, early,
        with whether the model solves none or all of the prompts (e.g. a base model too weak for the data)."""
        if step > self.NO_VARIANCE_STEPS or self._warned_no_variance or not groups:
            return
        equal = [g for g in groups if g.zero_variance]
        if len(equal) < self.NO_VARIANCE_FRAC * len(groups):
            return
        self._warned_no_variance = True
        right = sum(all(r.correct for r in g.rollouts) for g in equal)
        wrong = sum(not any(r.correct for r in g.rollouts) for g in equal)
        failed, scored = self._step_reward_failures
        if failed:  # the reward, not the model: its failures all score 0
            why = (f"the reward function failed on {failed} of {scored} rollouts this step (they score 0; last error: "
                   f"{self.scorer.last_error}), so this says nothing about the model: fix the reward")
        else:
            why = f"the model solves {'none' if wrong >= right else 'all'} of these prompts"
        self.log(f"warning: step {step}: {len(equal)} of {len(groups)} groups had equal rewards ({wrong} all wrong, "
                 f"{right} all right): nothing to learn; {why}")

    def _warn_reward_failures(self, step: int) -> None:
        """Failed rewards score 0 and the run goes on; when most of a step's fail, say so every step."""
        (e0, s0), self._scorer_seen = self._scorer_seen, (self.scorer.errors, self.scorer.scored)
        failed, scored = self.scorer.errors - e0, self.scorer.scored - s0
        self._step_reward_failures = (failed, scored)  # read by _warn_no_variance
        if scored and failed / scored > 0.5:
            self.log(f"warning: step {step}: the reward function failed on {failed} of {scored} "
                     f"rollouts, which score 0 (last error: {self.scorer.last_error})")

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> list[dict]:
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            with OutLock(self.out):
                return self._run()
        finally:
            self.scorer.close()  # the reward worker never outlives the run
            for logger in self.loggers:
                logger.close()

    def _run(self) -> list[dict]:
        cfg = self.cfg
        resumed = self.load_checkpoint()
        if not resumed:
            self._check_fresh_out()
            rundir.start(self.out)  # before the first step: this directory is a run rollwise started
        # the exact settings of the run, written after a good load: `rollwise train --config <out>/config.json
        # --out NEW` reruns it
        _write_atomic(self.out / "config.json", json.dumps(cfg.to_dict(), indent=2, default=str))
        metrics_file = self.out / "metrics.jsonl"
        rows = _read_metrics(metrics_file, upto=self.step) if resumed else []  # drop lines after the checkpoint
        _write_metrics(metrics_file, rows)
        self.loggers = open_loggers(cfg.loggers, self.out, cfg.to_dict())
        if resumed:
            self.log(f"resuming {self.out} from step {self.step}")
        evals = cfg.eval_every or cfg.eval_every_tokens or cfg.eval_every_compute
        if self.step == 0 and evals:
            rows.append(self._log_row({"step": 0, "tokens": 0, **self._evaluate()}, metrics_file))
        if cfg.mode == "async":
            from .async_loop import AsyncLoop

            source = AsyncLoop(self)
        else:
            source = SyncSteps(self)
        return self._schedule(source, rows, metrics_file, evals)

    def _schedule(self, source, rows: list[dict], metrics_file: Path, evals) -> list[dict]:
        """The one schedule of a run, whoever produces its steps (SyncSteps, or the async loop's learner):
        each trained step becomes a metrics row; evaluations, logging and checkpoints fall as the config
        says; the run ends at its step count or its budget."""
        cfg = self.cfg
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {cfg.planner}", file=sys.stderr,
                   disable=not sys.stderr.isatty() and os.environ.get("ROLLWISE_PROGRESS") != "1")
        before = self.budget.spent(self.ledger)
        try:
            for done in source.steps():
                row = self.step_row(done.ctx, done.out, done.view, done.tokens_before)
                last = self.step >= cfg.steps or self.budget.exhausted_at(done.spent)
                if evals and (last or self._eval_due(before, done.spent)):
                    with source.paused():  # not training time; an async source generates nothing meanwhile
                        row.update(self._evaluate())
                row.update(source.timing())
                rows.append(self._log_row(row, metrics_file))
                before = done.spent
                bar.update(1)
                bar.set_postfix(tokens=row["tokens"], acc=row.get("eval_acc", rows[-1].get("eval_acc")))
                if self.skip_streak >= cfg.max_skipped_steps:
                    raise self.too_many_skips(row)
                if self.step % cfg.checkpoint_every == 0 or last:
                    source.checkpoint()
                if last:
                    break
        finally:
            bar.close()
            source.close()
        return rows

    def too_many_skips(self, row: dict) -> RunStopped:
        return RunStopped(
            f"{self.skip_streak} steps in a row (to step {self.step}) had a non-finite loss, gradient or "
            f"weight and were undone ({', '.join(row.get('nonfinite', [])) or 'new weights or logits'} not finite); "
            f"{self.out / CKPT} holds the last good state. Lower learner.lr, or check the reward and "
            "learner settings")

    def _check_fresh_out(self) -> None:
        """A run that starts from step 0 may replace run files only if this run wrote them: its config.json
        is this config (a run stopped before its first checkpoint). Anything else is refused."""
        present = [f for f in RUN_FILES if (self.out / f).exists()]
        if not present:
            return
        rundir.check_may_start_over(self.out, present, CKPT)  # a run started here, never checkpointed
        recorded = _read_config(self.out / "config.json")
        if recorded is None:
            raise ValueError(f"--out {self.out}: holds {', '.join(present)} but no {CKPT} and no config.json of a "
                             "rollwise run; rollwise never replaces files it did not write: use a new or empty "
                             "directory")
        changes = config_changes(recorded, self.cfg)
        if changes and not self.allow_config_change:
            raise ValueError(f"--out {self.out}: holds a run started with other settings that stopped before its "
                             f"first checkpoint ({_describe(changes)}); use another --out, or "
                             "--allow-config-change to start it over with these settings")
        self.log(f"{self.out}: starting over (its earlier run stopped before its first checkpoint)")
        if changes:
            self._record_changes(changes)

    def _record_changes(self, changes: dict) -> None:
        """A config change allowed on resume is said and recorded next to the run."""
        self.log(f"{self.out}: resuming with changed settings ({_describe(changes)}), as --allow-config-change asks")
        with (self.out / "config_changes.jsonl").open("a") as f:
            f.write(json.dumps({"step": self.step, "changes": {k: list(v) for k, v in changes.items()}},
                               default=str) + "\n")

    def _eval_due(self, before, after) -> bool:
        """Every eval_every steps, or at the first step boundary after each multiple of eval_every_tokens
        generated tokens or eval_every_compute compute units (so every planner is evaluated at the same
        spacing in what the budget counts)."""
        if self.cfg.eval_every and self.step % self.cfg.eval_every == 0:
            return True
        return self.budget.crossed(before, after)

    def _evaluate(self) -> dict:
        with self.ledger.timer("eval"):
            return evaluate(self.policy, self.heldout, self.scorer, self.ledger, self.cfg.max_new_tokens,
                            self.cfg.eval_k, self.cfg.eval_samples, self.cfg.temperature,
                            seed=self.cfg.seed * 1_000_003 + self.step,
                            make_engine=lambda **kw: build_trainer_engine(self.cfg, self.policy, **kw))

    def _log_row(self, row: dict, path: Path) -> dict:
        row = finite_row(row)
        with path.open("a") as f:
            f.write(json.dumps(row, allow_nan=False) + "\n")
        for logger in self.loggers:
            logger.log(row)
        return row

    # ---- checkpoints: everything needed to continue exactly ---------------------------------
    def save_checkpoint(self) -> None:
        try:  # never persist a broken model (the guard makes this a last line of defence)
            check_finite_weights(self.policy)
        except ValueError as e:
            raise RunStopped(f"step {self.step}: not saving a checkpoint: {e}") from None
        state = {
            "format": CKPT_FORMAT, "config": json.dumps(self.cfg.to_dict(), default=str),
            "step": self.step, "policy_version": self.policy.version,
            "model": self.policy.model.state_dict(), "learner": self.learner.state_dict(),
            "engine": self.engine.state_dict(), "torch_rng": torch.get_rng_state(),
            "numpy_rng": self.rng.bit_generator.state, "python_rng": random.getstate(),
            "planner": self.planner.state_dict(), "history": self.history.state_dict(),
            "ledger": self.ledger.state_dict(), "scorer_errors": self.scorer.errors,
            "scorer_scored": self.scorer.scored, "skipped_steps": self.guard.skipped, "skip_streak": self.skip_streak,
        }
        if getattr(self, "async_weights", None):  # async: the weights the next steps sample from
            state["async_weights"] = self.async_weights
        if self.policy.device.type != "cpu":  # a checkpoint holds CPU tensors: it loads on any device
            state = _cpu(state)
        tmp = self.out / (CKPT + ".tmp")
        try:  # a full disk: a stop with the reason, and the previous checkpoint kept
            torch.save(to_plain(state), tmp)
            os.replace(tmp, self.out / CKPT)  # atomic: a kill mid-save leaves the previous checkpoint
            rundir.mark_checkpointed(self.out)
            self.policy.save(self.out / "model")
        except (OSError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "writ" not in str(e):  # torch words a failed write "...writing..."
                raise
            tmp.unlink(missing_ok=True)
            raise RunStopped(f"step {self.step}: cannot write the checkpoint in {self.out} ({type(e).__name__}: "
                             f"{str(e)[:200]}); the last complete {CKPT} is kept: free space, then resume") from None

    def load_checkpoint(self) -> bool:
        path = self.out / CKPT
        if not path.exists():
            return False
        s = read_checkpoint(path)
        changes = config_changes(json.loads(s["config"]), self.cfg)
        if changes and not self.allow_config_change:
            raise ValueError(f"--out {self.out}: the run there was made with other settings ({_describe(changes)}); "
                             f"a resume may change only {', '.join(RESUME_MAY_CHANGE)}. Use another --out, or "
                             "--allow-config-change to resume with the new settings")
        resume.refuse_state_owned(changes, self.out)
        try:
            self.step, self.policy.version = s["step"], s["policy_version"]
            self.policy.model.load_state_dict(s["model"])
            check_finite_weights(self.policy)
            self.learner.load_state_dict(s["learner"])
            resume.apply_optimizer_settings(self.learner.opt, self.cfg.learner)  # an allowed new lr applies
            self.engine_state = s["engine"]
            if self.cfg.mode == "sync":  # (async: the worker pool takes it when it starts)
                self.engine.load_state_dict(self.engine_state)
                self.engine.update_weights(self.policy.version)
            self.async_weights = s.get("async_weights")
            torch.set_rng_state(s["torch_rng"])
            self.rng.bit_generator.state = s["numpy_rng"]
            random.setstate(s["python_rng"])
            self.planner.load_state_dict(s["planner"])
            self.history.load_state_dict(s["history"])
            self.ledger.load_state_dict(s["ledger"])
            self.scorer.errors, self.scorer.scored = s["scorer_errors"], s["scorer_scored"]
            self.guard.skipped, self.skip_streak = s["skipped_steps"], s["skip_streak"]
        except (KeyError, ValueError, RuntimeError, TypeError) as e:
            hint = f" with the changed settings ({_describe(changes)})" if changes else ""
            raise ValueError(f"{path}: does not fit this run{hint}: {type(e).__name__}: {e}") from None
        if changes:
            self._record_changes(changes)
        return True


@dataclass
class TrainedStep:
    """One trained step as a source hands it to the schedule: its context and outcome, the ledger's view
    of it for the metrics row, the budget tokens before it and the budget spent after it."""

    ctx: StepContext
    out: object
    view: dict
    tokens_before: int
    spent: object  # run/budget.py Spent


class SyncSteps:
    """The synchronous source of steps: Control, Generate and Learn, one step at a time (the driver's
    run_step), timed as training; evaluations and checkpoints pause nothing."""

    def __init__(self, tr: "Trainer"):
        self.tr = tr

    def steps(self):
        tr = self.tr
        while tr.step < tr.cfg.steps and not tr.budget.exhausted(tr.ledger):
            with tr.ledger.timer("step"):
                done = tr.one_step()
            yield done

    def paused(self):
        return contextlib.nullcontext()

    def timing(self) -> dict:
        led = self.tr.ledger
        return {"wall_s": led.seconds["step"], "gen_s": led.seconds.get("generate", 0.0)}  # eval excluded

    def checkpoint(self) -> None:
        self.tr.save_checkpoint()

    def close(self) -> None:
        pass


class FiniteGuard:
    """Wraps the learner for the driver: an update whose loss, gradient norm or any other statistic, or
    whose new logits (on a few of the batch's sequences) are not finite is undone: weights, optimizer,
    learner RNG and estimator state go back to before it, and it counts in `skipped`. A snapshot is taken
    before each update: one copy of the weights and optimizer state, about 0.3% of a step of the embedded
    model on a CPU."""

    PROBE_ROWS = 4

    def __init__(self, learner: Learner, policy: Policy):
        self.learner, self.policy = learner, policy
        self.skipped = 0

    @property
    def version(self) -> int:
        return self.learner.version

    def update(self, batch) -> dict:
        snap = (_clone(self.policy.model.state_dict()), _clone(self.learner.state_dict()), self.policy.version)
        stats = self.learner.update(batch)
        if not stats.get("updated"):  # nothing changed
            return stats
        bad = [k for k, v in stats.items() if isinstance(v, float) and not math.isfinite(v)]
        if not bad and self._finite_logits(batch):
            return stats
        self.policy.model.load_state_dict(snap[0])
        self.learner.load_state_dict(snap[1])
        self.policy.version = snap[2]
        self.skipped += 1
        return {**stats, "updated": 0, "skipped": 1}

    @torch.no_grad()
    def _finite_logits(self, batch) -> bool:
        """Finite statistics (the gradient norm among them) from finite weights give finite weights, short of
        an absurd lr; finite weights can still give logits that overflow, which sampling would fail on.
        (Every weight is checked before each checkpoint.)"""
        seqs = [r.prompt_ids + r.token_ids_T.tolist() for r in batch.rollouts[: self.PROBE_ROWS]]
        ids, mask = self.policy._right_padded(seqs)
        return bool(torch.isfinite(self.policy.full_logits(ids, mask)).all())


def _cpu(x):
    """x with every tensor in it (nested dicts, lists, tuples) copied to the CPU."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, dict):
        return type(x)((k, _cpu(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_cpu(v) for v in x)
    return x


def _clone(x):
    """A copy of a state dict: tensors cloned, containers rebuilt, other values deep-copied (a fraction of
    deepcopy's cost on an optimizer state)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return copy.deepcopy(x)


def load_policy(path) -> Policy:
    """Policy.load, any failure to read the directory (a missing or damaged weights file, a config that
    does not fit) as one error naming it."""
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
    describe = getattr(task, "describe_prompt", None)
    check_answers = getattr(task, "answers_are_responses", False) and not cfg.reward
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
    spec, path = builtin_reward(cfg.reward, cfg.reward_options) or (cfg.reward, [])
    return Scorer(spec, trusted=False, timeout_s=cfg.reward_timeout_s, memory_mb=cfg.reward_memory_mb, path=path)


def build_trainer_engine(cfg: Config, policy, **overrides):
    """The engine named by cfg.engine (the registry, or 'module:Class'), over the run's policy. An
    engine that samples something other than a policy (the simulator's) is refused with the reason."""
    entry = registry.get("engine", cfg.engine)  # config.validate has checked it samples from a policy
    kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
              **cfg.engine_options)
    kw.update(overrides)
    return entry.obj.for_policy(policy, **kw)


def _read_metrics(path: Path, upto: int) -> list[dict]:
    """The rows up to the checkpoint's step. A last line cut short by a kill is dropped only when it is a row
    after the checkpoint (the rows still reach the checkpoint's step: the resumed run writes it again);
    if it was the checkpoint's own row, dropping it would lose it, so it is an error naming the line, as
    is any other line that is not JSON (the file is the run's record: never silently rewritten)."""
    rows, cut = read_rows(path)
    rows = [r for r in rows if r.get("step", 0) <= upto]
    if cut is not None and upto and max((r.get("step", 0) for r in rows), default=0) < upto:
        raise ValueError(f"{path}: line {cut} is cut short and the rows stop before the checkpoint's step {upto}, "
                         "so it held a row the checkpoint covers; restore the file (or remove the line and accept "
                         "the gap) before resuming")
    return rows


def _write_metrics(path: Path, rows: list[dict]) -> None:
    _write_atomic(path, "".join(json.dumps(finite_row(r), allow_nan=False) + "\n" for r in rows))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finite_row(row: dict) -> dict:
    """The row as strict JSON can hold it: a non-finite float (NaN, inf) becomes null and its key is listed
    in `nonfinite`, so the file parses everywhere and the loss of the value is visible."""
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return row
    return {**{k: None if k in bad else v for k, v in row.items()},
            "nonfinite": sorted(set(row.get("nonfinite") or []) | set(bad))}


def _read_config(path: Path) -> dict | None:
    """config.json if it is a rollwise run's config (Config's fields only, the core ones present: a record
    of an older version lacks newer fields), else None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    from dataclasses import fields

    known = {f.name for f in fields(Config)}
    if not isinstance(data, dict) or not set(data) <= known or not {"out", "planner", "learner", "seed"} <= set(data):
        return None
    return data


def _describe(changes: dict) -> str:
    return ", ".join(f"{k}: {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}"
                     for k, (a, b) in changes.items())


# ---- --out is one run's: an exclusive lock held while it runs ---------------------------------------

class OutLock:
    """An exclusive `flock` on `<dir>/.lock`, held while a run (or a bench) uses the directory. The OS
    drops it when the process ends, however it ends, so a killed run never leaves a stale lock."""

    def __init__(self, directory: Path, what: str = "--out"):
        self.path, self.what, self.f = Path(directory) / ".lock", what, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # not Unix: no lock
            return self
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise ValueError(f"{self.what} {self.path.parent}: in use by another rollwise process (pid {holder}); "
                             "wait for it to finish or use another directory") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self.f = f
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            self.f.close()  # closing drops the lock
            self.f = None


# ---- checkpoints hold plain data: tensors, numbers, strings, lists, tuples, dicts --------------------

_TAG = "__rollwise__"


def to_plain(x, where: str = "state"):
    """`x` with numpy arrays and scalars, sets and dicts with non-plain keys turned into tagged plain data
    that `torch.load(weights_only=True)` accepts and `from_plain` turns back, bit for bit. Anything else is
    an error naming where it is: a checkpoint never holds an object that needs code to load."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, torch.Tensor)):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"{where}: cannot checkpoint a numpy array of dtype {x.dtype}")
        arr = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("="), copy=False)
        return {_TAG: "ndarray", "dtype": arr.dtype.str, "data": torch.from_numpy(arr.copy())}
    if isinstance(x, np.generic):
        return {_TAG: "npscalar", "dtype": x.dtype.str, "value": x.item()}
    if isinstance(x, (list, tuple)):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(x)]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, (set, frozenset)):
        return {_TAG: "set", "items": [to_plain(v, where) for v in x]}
    if isinstance(x, dict):
        plain_keys = all(isinstance(k, (str, int, float, bool)) and not isinstance(k, np.generic)
                         and k != _TAG for k in x)
        if plain_keys:
            return {k: to_plain(v, f"{where}.{k}") for k, v in x.items()}
        return {_TAG: "dict", "items": [[to_plain(k, where), to_plain(v, f"{where}.{k}")] for k, v in x.items()]}
    raise TypeError(f"{where}: cannot checkpoint a {type(x).__module__}.{type(x).__qualname__}; a state_dict holds "
                    "tensors, numpy arrays and plain Python data only")


def from_plain(x):
    if isinstance(x, list):
        return [from_plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(from_plain(v) for v in x)
    if isinstance(x, dict):
        tag = x.get(_TAG)
        if tag == "ndarray":
            return x["data"].numpy().view(np.dtype(x["dtype"])).copy()
        if tag == "npscalar":
            return np.dtype(x["dtype"]).type(x["value"])
        if tag == "set":
            return {from_plain(v) for v in x["items"]}
        if tag == "dict":
            return {_hashable(from_plain(k)): from_plain(v) for k, v in x["items"]}
        return {k: from_plain(v) for k, v in x.items()}
    return x


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def read_checkpoint(path: Path) -> dict:
    """A checkpoint's state, loaded with `weights_only=True`: tensors and plain data only, so a crafted
    file cannot run code. Anything else (a foreign pickle, a truncated file, another format) is refused
    with an error naming the file."""
    try:
        raw = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", str(e))  # torch words it both ways
        if not found:  # not a pickle that asks for code: damaged or foreign
            raise ValueError(f"{path}: not a readable checkpoint (its pickle stream is not valid)") from None
        what = f" ({found.group(1)})"
        raise ValueError(f"{path}: refused: it holds objects other than tensors and plain data{what}, which a "
                         "rollwise checkpoint never does; loading it could run code. Remove it, or use another "
                         "--out") from None
    except Exception as e:  # noqa: BLE001 - truncated, not a torch file, unreadable
        first = str(e).split(". ")[0][:200]
        raise ValueError(f"{path}: not a readable checkpoint ({type(e).__name__}: {first})") from None
    if not isinstance(raw, dict) or raw.get("format") != CKPT_FORMAT:
        fmt = raw.get("format") if isinstance(raw, dict) else None
        raise ValueError(f"{path}: checkpoint format {fmt} is not {CKPT_FORMAT} (written by another version of "
                         "rollwise); start a new run in another --out")
    return from_plain(raw)
