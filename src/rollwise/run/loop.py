"""A run: the Trainer and its one schedule (metrics rows, held-out evaluations, checkpoints, the budget),
whoever produces the steps (SyncSteps here: Control -> Generate -> Filter -> Replay -> Learn, one step at a
time; or the async loop's learner, run/async_loop.py). Its parts live in modules with one job each:
build.py (policy, prompt checks, scorer, engine), guard.py (the finite guard), checkpoint.py (the format),
records.py (metrics.jsonl), rundir.py (the directory's marker and lock), resume.py (allowed changes),
staleness.py (the one staleness policy) and budget.py (what ends a run).

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
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from ..control.base import StepContext
from ..core import registry
from ..core.staleness import ASYNC_MODES
from ..core.task import option
from .config import Config, config_changes, RESUME_MAY_CHANGE
from .evaluate import OUTCOMES, check_finite_weights, evaluate
from . import resume, rundir
from .build import Parts, build_run, build_trainer_engine
from .checkpoint import CKPT, CKPT_FORMAT, CheckpointWriteError, read_checkpoint, recover, save_unit, to_cpu, to_plain
from .loggers import open_loggers
from .progress import Heartbeat, console, say
from .records import finite_row, ledger_view, rows_upto, step_row, write_atomic, write_rows
from .rundir import OutLock, read_run_config
from .stall import StallWatch
from .verdict import EVERY_EVALS, read_outcomes, verdict
from ..policy.warmstart import POOL_SOLVED, memorised_pool, pool_overlap


class RunStopped(RuntimeError):
    """The run cannot go on, for the reason given (not a bug: the CLI prints it as one line)."""


class Trainer:
    """A run: its one schedule over a source of trained steps. Its parts are built by `build_run(cfg)` (or
    handed in, `parts=`) and never replaced: the async loop builds its own worker pool and driver from them."""

    def __init__(self, cfg: Config, log=None, allow_config_change: bool = False, parts: Parts | None = None):
        log = log or say  # what the run says (warnings, the verdict): the 'rollwise' logger unless handed a callable
        parts = parts if parts is not None else build_run(cfg, log)
        self.parts, self.cfg, self.log, self.allow_config_change = parts, cfg, log, allow_config_change
        self.out = Path(cfg.out)
        self.task, self.pool, self.heldout = parts.task, parts.pool, parts.heldout
        self.model_path, self.device, self.policy = parts.model_path, parts.device, parts.policy
        self.engine, self.learner, self.history, self.ledger = parts.engine, parts.learner, parts.history, parts.ledger
        self.rng, self.staleness, self.planner, self.budget = parts.rng, parts.staleness, parts.planner, parts.budget
        self.scorer, self.driver, self.guard = parts.scorer, parts.driver, parts.guard
        self.step = 0
        self.resumed: dict = {}  # what a checkpoint held for a source of steps: "engine", "async_weights"
        self.skip_streak = 0  # steps in a row undone for a non-finite loss, gradient or weight
        self._scorer_seen = (0, 0)  # reward errors and scores at the last metrics row
        self._step_reward_failures = (0, 0)  # the last step's failed and scored rollouts
        self._warned_no_variance = False
        self._equal = [0, 0]  # generated groups whose rollouts were all wrong, all right (for the verdict)
        self._last_row: dict = {}  # the last trained step's row (progress lines)
        self._evals = 0  # evaluations after step 0 this session (the verdict every EVERY_EVALS of them)
        self.stall = StallWatch()  # steps with no update, flat accuracy while entropy collapses (run/stall.py)
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
        return TrainedStep(ctx, out, self.ledger_view(), tokens_before, self.budget.spent(self.ledger), self.step)

    def sampling_failed(self, e: RuntimeError) -> Exception:
        """torch's multinomial on non-finite probabilities is a stop with a reason, not a crash."""
        if "probability tensor" not in str(e):
            return e
        return RunStopped(f"step {self.step + 1}: sampling failed because the policy's probabilities are not "
                          f"finite ({e}); lower learner.lr or check the model")

    def context(self, step: int) -> StepContext:
        return StepContext(step, self.cfg.batch_size, self.cfg.n, self.pool, self.history, self.ledger, self.rng,
                           self.policy, task=self.task, correction=self.cfg.learner.correction)

    def ledger_view(self) -> dict:
        """The ledger's figures for a metrics row (taken right after a step's rollouts are settled)."""
        return ledger_view(self.ledger, self.budget)

    def step_row(self, ctx: StepContext, out, view: dict, tokens_before: int) -> dict:
        """One metrics.jsonl row for a trained step (records.step_row, shared with the simulator)."""
        self._warn_reward_failures(ctx.step + 1)
        self.skip_streak = self.skip_streak + 1 if out.stats.get("skipped") else 0
        # the groups that train (a planner may rebuild them in `finish`: continuations, subsets), or, when none
        # train, the groups generated (a filter refused them all)
        self._warn_no_variance(ctx.step + 1, list(out.batch.groups) or list(ctx.groups.values()))
        for g in ctx.groups.values():
            if g.rollouts and g.zero_variance:
                self._equal[0 if not any(r.correct for r in g.rollouts) else 1] += 1
        if ctx.step == 0:
            self._warn_memorised(list(ctx.groups.values()))
        return step_row(ctx, out, view, tokens_before,
                        extra={"reward_errors": self.scorer.errors, "skipped_steps": self.guard.skipped})

    NO_VARIANCE_STEPS, NO_VARIANCE_FRAC = 3, 0.9  # warn in the first 3 steps if >= 90% of groups are equal

    def _warn_no_variance(self, step: int, groups) -> None:
        """A run whose groups all score alike learns nothing (every advantage is 0); say so once, early,
        with whether the model solves none or all of the prompts (e.g. a base model too weak for the data)."""
        if step > self.NO_VARIANCE_STEPS or self._warned_no_variance or not groups:
            return
        # an estimator that teaches from all-equal groups (RL-ZVP) has something to learn from them
        if registry.get("advantage", self.cfg.learner.advantage).facts.get("zero_variance_signal"):
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

    def _warn_memorised(self, groups) -> None:
        """A base that rollwise warm-started on rows that are most of the train pool, and that solves most of
        the pool at the first step, memorised it (a small reasoning-gym family: 57% of groups all right at
        the start, with no word): say so with both figures and the option that keeps them apart."""
        right = sum(1 for g in groups if g.rollouts and all(r.correct for r in g.rollouts))
        if self.cfg.model or not groups or right / len(groups) < POOL_SOLVED:
            return  # a model of the user's own: its training rows are not rollwise's to count
        try:
            overlap = pool_overlap(self.task)
        except (ValueError, OSError):  # the rows could not be listed again: nothing to say
            return
        line = memorised_pool(overlap, right, len(groups), option(self.task, "sft_apart"))
        if line:
            self.log(line)

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
        heartbeat = Heartbeat("train", self.progress)  # a progress line now and then when stdout is not a tty
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            with OutLock(self.out), heartbeat:
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
        write_atomic(self.out / "config.json", json.dumps(cfg.to_dict(), indent=2, default=str))
        metrics_file = self.out / "metrics.jsonl"
        rows = rows_upto(metrics_file, upto=self.step) if resumed else []  # drop lines after the checkpoint
        write_rows(metrics_file, rows)
        for row in rows:  # a resumed run's stall figures count its earlier steps (their warnings were said)
            self.stall.see(row)
        self.loggers = open_loggers(cfg.loggers, self.out, cfg.to_dict())
        if resumed:
            self.log(f"resuming {self.out} from step {self.step}")
        evals = cfg.eval_every or cfg.eval_every_tokens or cfg.eval_every_compute or cfg.eval_every_gpu_seconds
        if self.step == 0 and evals:
            rows.append(self._log_row({"step": 0, "tokens": 0, **self._evaluate()}, metrics_file))
        return self._schedule(self.source(), rows, metrics_file, evals)

    def source(self):
        """The source of trained steps for the schedule, by the run's mode, built from the run's parts (a
        deployment mode is one more branch here and a class with SyncSteps' five methods)."""
        if self.cfg.mode in ASYNC_MODES:
            from .async_loop import AsyncLoop

            return AsyncLoop(self.parts, self)
        return SyncSteps(self.parts, self)

    def _schedule(self, source, rows: list[dict], metrics_file: Path, evals) -> list[dict]:
        """The one schedule of a run, whoever produces its steps (SyncSteps, or the async loop's learner):
        each trained step becomes a metrics row; evaluations, logging and checkpoints fall as the config
        says; the run ends at its step count or its budget."""
        cfg = self.cfg
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {cfg.planner}", file=sys.stderr,
                   disable=not sys.stderr.isatty() and os.environ.get("ROLLWISE_PROGRESS") != "1")
        before = self.budget.spent(self.ledger)
        # modelled GPU-seconds are read off each step's row (its length shape), not the ledger: the meter
        # recounts a resumed run's recorded rows, and a run already at its budget trains no further step
        meter = self.budget.meter(rows)
        if meter is not None:
            before = replace(before, gpu_s=meter.total)
        try:
            for done in (() if meter is not None and self.budget.exhausted_at(before) else source.steps()):
                self.step = done.step  # the schedule's count: steps trained so far
                row = self.step_row(done.ctx, done.out, done.view, done.tokens_before)
                spent = done.spent
                if meter is not None:
                    spent = replace(spent, gpu_s=meter.add(row))
                    row["model_gpu_s"] = spent.gpu_s
                timing = source.timing()  # training time up to this step's end (read before its evaluation)
                last = self.step >= cfg.steps or self.budget.exhausted_at(spent) \
                    or self.budget.out_of_time(timing["wall_s"])
                if evals and (last or self._eval_due(before, spent)):
                    with source.paused():  # not training time; an async source generates nothing meanwhile
                        row.update(self._evaluate())
                row.update(timing)
                rows.append(self._log_row(row, metrics_file))
                self._last_row = row
                before = spent
                bar.update(1)
                bar.set_postfix(reward=_short(row.get("reward_mean")), ent=_short(row.get("entropy")),
                                zv=_short(row.get("zero_var_frac_gen")), tokens=row["tokens"],
                                acc=row.get("eval_acc", rows[-1].get("eval_acc")))
                if "eval_acc" in row:
                    console().info(f"train: {self.progress()}")  # each evaluation gets its line, tty or not
                    self._evals += 1
                    if self._evals % EVERY_EVALS == 0 and not last:
                        self.log(self.verdict(rows).text())
                if self.skip_streak >= cfg.max_skipped_steps:
                    raise self.too_many_skips(row)
                if self.step % cfg.checkpoint_every == 0 or last:
                    source.checkpoint()
                if last:
                    break
        finally:
            bar.close()
            source.close()
        said = self.verdict(rows)
        if said.kind != "too early":  # the run ended as it should: did it learn (run/verdict.py)
            self.log(said.text())
        for line in self.stall.summary():  # what it did not learn, said last
            self.log(line)
        return rows

    def verdict(self, rows: list[dict]):
        """The learning verdict so far (run/verdict.py), with the per-prompt outcomes this run wrote."""
        return verdict(rows, read_outcomes(self.out), len(self.heldout), tuple(self._equal))

    def progress(self) -> str:
        """The status of a progress line (run/progress.py), read from another thread: the last trained step's
        reward mean, policy entropy, zero-variance share (groups whose rollouts scored alike) and compute
        units, and the last held-out accuracy."""
        ev = self.stall.last_eval
        row = self._last_row
        parts = [f"step {self.step}/{self.cfg.steps}", f"{self.ledger.budget_tokens():,} generated tokens"]
        for key, name in (("compute", "compute"), ("reward_mean", "reward"), ("entropy", "entropy"),
                          ("zero_var_frac_gen", "zero-var")):
            if isinstance(row.get(key), (int, float)):
                parts.append(f"{name} {row[key]:.3g}" if key == "compute" else f"{name} {row[key]:.3f}")
        if ev:
            parts.append(f"held-out {ev[1]:.3f} at step {ev[0]}")
        return ", ".join(parts)

    def too_many_skips(self, row: dict) -> RunStopped:
        return RunStopped(
            f"{self.skip_streak} steps in a row (to step {self.step}) had a non-finite loss, gradient or "
            f"weight and were undone ({', '.join(row.get('nonfinite', [])) or 'new weights or logits'} not finite); "
            f"{self.out / CKPT} holds the last good state. Lower learner.lr, or check the reward and "
            "learner settings")

    def _check_fresh_out(self) -> None:
        """A run that starts from step 0 may replace run files only if this run wrote them: its config.json
        is this config (a run stopped before its first checkpoint). Anything else is refused."""
        present = [f for f in rundir.RUN_FILES if (self.out / f).exists()]
        if not present:
            return
        rundir.check_may_start_over(self.out, present, CKPT)  # a run started here, never checkpointed
        recorded = read_run_config(self.out / "config.json")
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
        outcomes: dict = {}
        with self.ledger.timer("eval"):
            row = evaluate(self.policy, self.heldout, self.scorer, self.ledger, self.cfg.max_new_tokens,
                           self.cfg.eval_k, self.cfg.eval_samples, self.cfg.temperature,
                           seed=self.cfg.seed * 1_000_003 + self.step,
                           make_engine=lambda **kw: build_trainer_engine(self.cfg, self.policy, **kw),
                           outcomes=outcomes)
        # per-prompt results beside metrics.jsonl (a resumed run may repeat a step: the last line holds);
        # an evaluation outside a run (its directory not made yet) writes nothing
        if self.out.is_dir():
            with (self.out / OUTCOMES).open("a") as f:
                f.write(json.dumps({"step": self.step, "prompts": len(self.heldout), **outcomes}) + "\n")
        return row

    def _log_row(self, row: dict, path: Path) -> dict:
        row = finite_row(row)
        with path.open("a") as f:
            f.write(json.dumps(row, allow_nan=False) + "\n")
        for line in self.stall.see(row):
            self.log(line)
        for logger in self.loggers:
            logger.log(row)
        return row

    # ---- checkpoints: everything needed to continue exactly ---------------------------------
    def save_checkpoint(self, engine_state: dict | None = None, extra: dict | None = None) -> None:
        """Save the run. `engine_state`: the sampling side's random streams when a source of steps samples
        with engines of its own (the async loop's workers; default: the run's engine); `extra`: further
        entries it needs to continue exactly (the async loop's weights), saved when not empty."""
        try:  # never persist a broken model (the guard makes this a last line of defence)
            check_finite_weights(self.policy)
        except ValueError as e:
            raise RunStopped(f"step {self.step}: not saving a checkpoint: {e}") from None
        state = {
            "format": CKPT_FORMAT, "config": json.dumps(self.cfg.to_dict(), default=str),
            "step": self.step, "policy_version": self.policy.version,
            "model": self.policy.model.state_dict(), "learner": self.learner.state_dict(),
            "engine": self.engine.state_dict() if engine_state is None else engine_state,
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": self.rng.bit_generator.state,  # (no python `random` state: nothing draws from it)
            "planner": self.planner.state_dict(), "history": self.history.state_dict(),
            "ledger": self.ledger.state_dict(), "scorer_errors": self.scorer.errors,
            "scorer_scored": self.scorer.scored, "skipped_steps": self.guard.skipped, "skip_streak": self.skip_streak,
        }
        for k, v in (extra or {}).items():  # async: the weights the next steps sample from
            if v:
                state[k] = v
        if self.policy.device.type != "cpu":  # a checkpoint holds CPU tensors: it loads on any device
            state = to_cpu(state)
        try:  # checkpoint.pt and model/ as one unit; a full disk: a stop with the reason, the previous one kept
            save_unit(self.out, to_plain(state), self.policy.save, self.step, getattr(self, "saved_step", None))
        except CheckpointWriteError as e:
            raise RunStopped(str(e)) from None
        self.saved_step = self.step
        rundir.mark_checkpointed(self.out)

    def load_checkpoint(self) -> bool:
        recover(self.out)  # what a save killed midway left
        path = self.out / CKPT
        if not path.exists():
            return False
        s = read_checkpoint(path)
        self.saved_step = s.get("step")
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
            self.resumed = {"engine": s["engine"], "async_weights": s.get("async_weights")}
            if self.cfg.mode == "sync":  # (async: the worker pool takes it when it starts)
                self.engine.load_state_dict(s["engine"])
                self.engine.update_weights(self.policy.version)
            torch.set_rng_state(s["torch_rng"])
            self.rng.bit_generator.state = s["numpy_rng"]
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
    step: int  # steps trained once this one is (the schedule's count)


class SyncSteps:
    """The synchronous source of steps: Control, Generate and Learn, one step at a time (the driver's
    run_step, through `run.one_step`), timed as training; evaluations and checkpoints pause nothing.
    `parts`: the run's; `run`: the Trainer, for its step count, its steps and its checkpoints (read, never
    rewired)."""

    def __init__(self, parts: Parts, run: "Trainer"):
        self.ledger, self.budget, self.steps_total, self.run = parts.ledger, parts.budget, parts.cfg.steps, run

    def steps(self):
        while self.run.step < self.steps_total and not self.budget.exhausted(self.ledger) \
                and not self.budget.out_of_time(self.ledger.seconds.get("step", 0.0)):
            with self.ledger.timer("step"):
                done = self.run.one_step()
            yield done

    def paused(self):
        return contextlib.nullcontext()

    def timing(self) -> dict:
        led = self.ledger
        return {"wall_s": led.seconds["step"], "cpu_s": led.seconds["step_cpu"],  # eval excluded
                "gen_s": led.seconds.get("generate", 0.0)}

    def checkpoint(self) -> None:
        self.run.save_checkpoint()

    def close(self) -> None:
        pass


def _short(x):
    return round(x, 3) if isinstance(x, float) else x


def _describe(changes: dict) -> str:
    return ", ".join(f"{k}: {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}"
                     for k, (a, b) in changes.items())


