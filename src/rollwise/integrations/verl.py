"""rollwise planners inside verl's v1 PPO trainer (tested with verl 0.9.1 and transferqueue 0.1.11).

verl loads it from its config, as a custom replay buffer ("sampler")::

    trainer.v1.trainer_mode=sync
    trainer.v1.sampler.custom_sampler.path=pkg://rollwise.integrations.verl
    trainer.v1.sampler.custom_sampler.name=RollwiseReplayBuffer
    +trainer.v1.sampler.sampler_kwargs.planner=greso+dapo

How it hooks in (the choices, and why):

* verl's sync step is: `prepare_step` submits `train_batch_size` prompts from the trainer's dataloader
  (`_next_train_batch` -> `_submit_batch_to_rollout`), generation runs in the background and writes
  trajectories to TransferQueue, then `replay_buffer.sample(...)` picks the groups to train and may call
  `refill_fn(k)` (the trainer's `_add_prompts_to_generate`) for k fresh prompts. Prompts reach the
  generator before `sample` runs, so a replay buffer alone cannot choose them. This one therefore
  routes the trainer's `_next_train_batch` through the planner (on that trainer instance only: the
  trainer is `refill_fn.__self__`): the step's first batch and every refill are the prompts the
  planner chose, each with its own `__rollout_n__` (verl's per-prompt n).
* `sample` runs the step's rounds through rollwise's own `StepDriver.generate`, against
  `TransferQueueEngine`: `submit` hands a round to verl (the first went out with `prepare_step`, later
  ones through `refill_fn`), `poll` waits for its groups in TransferQueue (reward: `rm_scores` summed per
  session; length: its response tokens). So charges, pruned rows and fates are the driver's code, and
  the planner's coroutine decides every round: DAPO refills, AR3PO/AERO/DARS stages (the same prompts
  again, under new uids), pilots, profiles and oracle measurements.
* Before the batch is materialised, each trained group is made one uid in TransferQueue: rows of its
  prompt's later rounds are rewritten under its first round's uid as new sessions, so verl's GRPO
  advantage (grouped by uid) sees one group per prompt. Rows of earlier steps that a component put
  back (AR3PO's reuse) are written the same way from the copy taken when the component kept them (any
  rollout still referenced after the step is a kept one): their fields, behaviour log-probs
  (`rollout_log_probs`) and tags (the step that generated them) as they were. Every other row of the
  step is cleared.
* A planner with a Watcher that reads tokens only (DUET's abort) sends its rows to rollwise's
  segmented agent loop (verl_agent_loop.py): sessions generate in segments of `segment_tokens`, and the
  round's watcher, held by a Ray actor, is consulted between them. Pruned sessions are charged as
  pruned and leave their group; a row kept with an importance weight gets it as `rollout_is_weights`.
* verl's async trainers (`colocate_async`, `separate_async`) run the planner one step ahead
  (verl_async.py): at the end of `sample`, the next step opens and its first round goes to verl, to
  generate while this step trains; the planner still decides each step after the last one's outcomes.
* The zero-variance loss normaliser (`drop_zero_adv`, verl_normaliser.py) runs after verl's own
  `_compute_advantage` (on that trainer instance): zero-advantage rows leave `loss_mask`, the engines'
  token-mean denominator.
* Refused, by name, at build time: trainer modes other than sync, colocate_async and separate_async,
  `parameter_sync_step` != 1, what the async modes cannot run (verl_async.py), verl's own
  `algorithm.filter_groups` (filtering would happen twice), response reuse without behaviour log-probs
  (`calculate_log_probs=false`), a watcher's weights together with `rollout_correction.rollout_is`
  (both write `rollout_is_weights`), the normaliser where it is not rollwise's step (verl_normaliser.py),
  and components verl cannot serve
  (integrations/verl_host.py): the policy in this process (hive, dots, spec-rl), hidden states in
  flight (arrol), rows resumed from their tokens or carried across steps (treepo, april), per-step
  sampling parameters (e3).
* Validation (`partition_id="val"`) is verl's own sampling, untouched.
* Checkpoints: the trainer's `_save_checkpoint` / `_load_checkpoint` (on that instance, as above) also
  write and read `rollwise_planner.pt` in verl's `global_step_N` folder: the planner's state (kept
  responses with their TransferQueue fields), PromptHistory, RNG, steps done and the ledger, as plain
  data; it is written before verl's files, so verl's latest-iteration marker (written last) marks a
  checkpoint that holds it. A resumed run decides as the uninterrupted one would.

`sampler_kwargs`: planner (spec, required), planner_options ({component: kwargs}), seed (0), n (default
`actor_rollout_ref.rollout.n`), success_threshold (1.0), correct_field (a `reward_extra_info` key such
as "acc" to judge correctness by; default: the summed reward), segment_tokens (16: tokens per segment
for a watched planner), drop_zero_adv (false: the zero-variance loss normaliser, verl_normaliser.py).
Tested on CPU against a real TransferQueue with verl's trainer methods bound to a stub (as verl's own
CPU tests do) and a CPU stand-in for the rollout server; a full verl run needs GPUs and is untested here.
"""
from __future__ import annotations

import copy
import inspect
import os
import time
import uuid
import warnings
import weakref
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from ..control.base import Planner, Wave
from ..core.ledger import Ledger
from ..core.types import Group, Prompt, Request
from ..generate.capabilities import InFlight
from ..generate.engine import Finished
from ..run.checkpoint import CKPT_FORMAT, read_checkpoint, to_plain
from ..run.driver import StepDriver
from .host import LazyPool
from .verl_agent_loop import AGENT_NAME, SEGMENT_FIELD, WATCH_FIELD, WatchServer
from .verl_host import VerlHost, VerlRollout
from .verl_async import ASYNC_MODES, clear_restored_round, refuse_async, skip_prepared_steps
from .verl_normaliser import install_normaliser, refuse_normaliser

TESTED = {"verl": "0.9.1", "transferqueue": "0.1.11"}
SUPPORTED = ">=0.9.1,<0.10"  # verl versions the integration is built for; others are refused when it is built

try:
    import transfer_queue as tq
    import verl
    from omegaconf import DictConfig, OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from tensordict import NonTensorStack, TensorDict
    from verl.utils import tensordict_utils as tu
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("rollwise.integrations.verl needs verl's v1 trainer and TransferQueue: "
                      "`pip install rollwise[verl]` (on a CPU machine: `bash scripts/setup.sh --with verl-v1`)") from e

# verl internals this module relies on, with the leading parameters it uses.
HOOKS = {
    ("ReplayBuffer", "__init__"): ("self", "trainer_mode", "trainer_config", "max_off_policy_threshold",
                                   "max_off_policy_strategy", "sampler_kwargs", "poll_interval", "refill_fn"),
    ("ReplayBuffer", "sample"): ("self", "global_steps", "partition_id", "batch_size"),
    ("ReplayBuffer", "_sync_metadata_from_transfer_queue"): ("self",),
    ("ReplayBuffer", "_clear_groups"): ("self", "partition_id", "uids"),
    ("ReplayBuffer", "_materialize_batch"): ("self", "partition_id", "selected_prompt_uids", "partition_snapshot"),
    ("ReplayBuffer", "_wait_for_next_poll"): ("self", "partition_id", "last_debug_time"),
    ("PPOTrainer", "_next_train_batch"): ("self", "num_prompts"),
    ("PPOTrainer", "_add_prompts_to_generate"): ("self", "num_prompts"),
    ("PPOTrainer", "_save_checkpoint"): ("self",),
    ("PPOTrainer", "_load_checkpoint"): ("self",),
    ("PPOTrainer", "_compute_advantage"): ("self", "batch", "metrics"),
    ("PPOTrainer", "_add_batch_to_generate"): ("self",),
    ("PPOTrainer", "_submit_batch_to_rollout"): ("self", "batch"),
}
# Source fragments whose absence means the contract moved: the trainer hands its refill method to the
# sampler, submits through _next_train_batch, and the agent loop reads the per-prompt n from the batch.
SOURCE = {
    ("PPOTrainer", "_build_replay_buffer"): "refill_fn=self._add_prompts_to_generate",
    ("PPOTrainer", "_add_prompts_to_generate"): "self._next_train_batch(num_prompts)",
    ("PPOTrainer", "_add_batch_to_generate"): "self._next_train_batch()",
    ("AgentLoopWorkerTQ", "_run_prompt"): '"__rollout_n__"',
    # the zero-variance normaliser: the agent loop writes loss_mask (the engines' token-mean denominator) as a
    # TransferQueue field of its own, and the step computes advantages through the trainer's method
    ("AgentLoopWorkerTQ", "_agent_loop_postprocess"): 'field["loss_mask"] = field["response_mask"]',
    ("PPOTrainer", "_step_once"): "self._compute_advantage(batch, metrics=metrics)",
    # the async modes (verl_async.py): verl's warmup submits through refill_fn's method
    ("PPOTrainer", "_add_async_warmup_batches"): "self._add_prompts_to_generate(missing_prompts)",
    # a checkpoint's folder, where the planner's state goes beside verl's (data.pt, actor/)
    ("PPOTrainer", "_save_checkpoint"): 'self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"',
    # (and, in the async modes, restores TransferQueue there: the buffer then clears the restored round)
    ("PPOTrainer", "_load_checkpoint"): ('self.global_steps = int(global_step_folder.split("global_step_")[-1])',
                                         "tq.load_checkpoint(tq_ckpt_path)"),
}
STATE_FILE = "rollwise_planner.pt"  # the planner, its PromptHistory, RNG and ledger, in global_step_N/
_OPTIONS = {"planner", "planner_options", "seed", "n", "success_threshold", "correct_field", "segment_tokens",
            "drop_zero_adv"}


def _owners() -> dict:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return {"ReplayBuffer": ReplayBuffer, "PPOTrainer": PPOTrainer, "AgentLoopWorkerTQ": AgentLoopWorkerTQ}


def check_verl() -> None:
    """Raise, in one line, if the installed verl is outside SUPPORTED or changed a hook this integration
    relies on (naming it); warn if verl or transferqueue is not the tested version."""
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    if verl.__version__ not in SpecifierSet(SUPPORTED):
        raise RuntimeError(f"rollwise's verl integration supports verl {SUPPORTED} (tested with {TESTED['verl']}); "
                           f"installed verl {verl.__version__}: install a supported verl")
    owners = _owners()
    problems = []
    for (owner, name), expected in HOOKS.items():
        fn = getattr(owners[owner], name, None)
        if fn is None:
            problems.append(f"{owner}.{name} is gone")
            continue
        params = tuple(inspect.signature(fn).parameters)
        if params[: len(expected)] != expected:
            problems.append(f"{owner}.{name}{params} no longer starts with {expected}")
    for (owner, name), fragments in SOURCE.items():
        fn = getattr(owners[owner], name, None)
        source = inspect.getsource(inspect.unwrap(fn)) if fn is not None else ""
        for fragment in (fragments,) if isinstance(fragments, str) else fragments:
            if fragment not in source:
                problems.append(f"{owner}.{name} no longer contains {fragment}")
    if problems:
        raise RuntimeError(f"rollwise's verl integration was written for verl {TESTED['verl']}; the installed verl "
                           f"{verl.__version__} changed what it relies on: " + "; ".join(problems))
    installed = {"verl": verl.__version__, "transferqueue": version("transferqueue")}
    off = {k: v for k, v in installed.items() if v != TESTED[k]}
    if off:
        warnings.warn(f"rollwise's verl integration is tested with {TESTED}; installed {installed}: the hooks "
                      "match, behaviour is untested", stacklevel=2)


class RollwiseReplayBuffer(ReplayBuffer):
    """verl v1 custom sampler running a rollwise planner (see the module docstring)."""

    def __init__(self, trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                 sampler_kwargs, poll_interval: float = 2.0, refill_fn=None, **kwargs):
        check_verl()
        super().__init__(trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                         sampler_kwargs, poll_interval=poll_interval, refill_fn=refill_fn, **kwargs)
        self.host_name = f"verl {verl.__version__} v1 trainer"
        if trainer_mode not in ("sync",) + ASYNC_MODES:
            raise ValueError(f"{self.host_name}: a rollwise planner runs in trainer_mode sync, colocate_async or "
                             f"separate_async (got {trainer_mode!r})")
        self.ahead = trainer_mode in ASYNC_MODES  # the next step's first round goes out while this one trains
        if int((trainer_config or {}).get("parameter_sync_step", 1)) != 1:
            raise ValueError(f"{self.host_name}: a rollwise planner needs trainer.v1.{trainer_mode}.parameter_sync_step=1 "
                             "(one planner step per update)")
        trainer = getattr(refill_fn, "__self__", None)
        if trainer is None or not callable(getattr(trainer, "_next_train_batch", None)):
            raise ValueError(f"{self.host_name}: RollwiseReplayBuffer needs verl's refill_fn (the trainer's bound "
                             "_add_prompts_to_generate), to route the trainer's prompts through the planner")
        opts = OmegaConf.to_container(sampler_kwargs, resolve=True) if isinstance(sampler_kwargs, DictConfig) \
            else dict(sampler_kwargs or {})
        unknown = set(opts) - _OPTIONS
        if unknown or "planner" not in opts:
            raise ValueError(f"{self.host_name}: sampler_kwargs needs 'planner' and takes {sorted(_OPTIONS)}; "
                             f"got {sorted(opts)}")
        self.spec, self.options = opts["planner"], opts.get("planner_options")
        self.seed, self.n = int(opts.get("seed", 0)), opts.get("n")
        self.threshold, self.correct_field = float(opts.get("success_threshold", 1.0)), opts.get("correct_field")
        self.segment_tokens = int(opts.get("segment_tokens", 16))
        self.drop_zero_adv = bool(opts.get("drop_zero_adv", False))
        self.trainer = trainer
        # refuse what verl cannot serve, by name, before any GPU work starts (the pool size is known only
        # once the trainer has built its dataset: a one-prompt stand-in pool here)
        probe = VerlHost(self.spec, LazyPool(1, _blank_prompt), batch_size=1, n=1, host=self.host_name,
                         options=self.options)
        self.watched = probe.planner.needs_inflight  # rounds go through rollwise's segmented agent loop
        self.correction = _refuse_what_this_config_cannot_serve(probe.planner, trainer.config, self.host_name,
                                                                self.watched, self.segment_tokens)
        if self.ahead:
            refuse_async(trainer_mode, trainer_config, max_off_policy_threshold, self.host_name)
            skip_prepared_steps(trainer, self)  # prepare_step submits nothing for a step opened ahead
        trainer._next_train_batch = self._next_train_batch  # this trainer's prompts now come from the planner
        _checkpoint_with(trainer, self)  # and its checkpoints carry the planner's state
        self.normaliser_log: list[dict] = []  # per step: rows and tokens the normaliser took out of the denominator
        if self.drop_zero_adv:  # the zero-variance normaliser, after verl's own advantages (verl_normaliser.py)
            refuse_normaliser(trainer.config, self.host_name)
            install_normaliser(trainer, self.normaliser_log)
        self.host: VerlHost | None = None
        self.ledger = Ledger()  # rollwise's token accounting of this run, written by rollwise's StepDriver
        self.engine = TransferQueueEngine(self)
        self.watch_server, self.watch_server_name = _start_watch_server() if self.watched else (None, None)
        self.log: list[dict] = []  # one entry per planner step
        self._wave = None  # the round being generated: a list of Requests or a Wave (requests + watch)
        self._round: dict[str, Request] = {}  # uid -> request, for the round being generated
        self._submitted = False  # the round's prompts are with verl already (a step's first, from prepare_step)
        self._first: dict[int, str] = {}  # prompt id -> its first uid this step (where its merged group lives)
        self._step_uids: set[str] = set()  # every uid of the step
        self._queued: list[Request] = []  # a round waiting for refill_fn
        self._version: dict[str, int] = {}  # uid -> the trainer's global step when its round was submitted
        self._before_open: dict | None = None  # async modes: the planner's state before the open step opened
        self._round_collected = False  # sample() is collecting the open step

    @property
    def step_open(self) -> bool:
        """A step's rounds are out (async modes: between steps, the next step's first round)."""
        return bool(self._step_uids)

    # ---- prompts in: the trainer's _next_train_batch ------------------------------------------
    def _next_train_batch(self, num_prompts: int | None = None):
        """The trainer's batch source: a new step's first round (num_prompts None, from prepare_step) or
        the round this sampler queued (num_prompts = its size, via refill_fn)."""
        if self.host is None:
            self.host = self._build_host()
        if num_prompts is None or (self.ahead and not self._queued and not self._step_uids):
            # a new step's first round: prepare_step's, or in the async modes verl's warmup (before step 1)
            if self._step_uids:
                raise RuntimeError(f"{self.host_name}: a new step began before the last one was sampled")
            requests = self._open_step(int(self.trainer.global_steps))
        else:
            if num_prompts != len(self._queued):
                raise RuntimeError(f"{self.host_name}: asked for {num_prompts} prompts, the planner queued "
                                   f"{len(self._queued)} (only this sampler may call refill_fn)")
            requests, self._queued = self._queued, []
        return self._batch(requests)

    def _open_step(self, step: int) -> list[Request]:
        """The planner opens `step`; its first round's requests (they go to verl with the caller's batch)."""
        if self.ahead:  # what a checkpoint taken while this step is open holds (verl_async.py)
            self._before_open = copy.deepcopy(self._state_dict())
        self._wave = self.host.start(step)
        if not self._wave:
            raise RuntimeError(f"planner {self.host.name!r} chose no prompt after a full pass over the pool")
        self._submitted = True
        return _requests(self._wave)

    def _open_next_step(self, global_steps: int) -> None:
        """Async modes, at the end of step `global_steps`'s sample: the next step's first round goes to verl
        now, to generate while this step trains (not after the last step)."""
        last = getattr(self.trainer, "total_training_steps", None)
        if last is not None and global_steps >= int(last):
            return
        self.trainer._submit_batch_to_rollout(self._batch(self._open_step(global_steps + 1)))

    def _build_host(self) -> VerlHost:
        cfg = self.trainer.config
        n = int(self.n if self.n is not None else cfg.actor_rollout_ref.rollout.n)
        dataset = self.trainer.train_dataset
        if self.watched and len(dataset) and "raw_prompt" not in dataset[0]:
            raise ValueError(f"{self.host_name}: the train dataset's rows have no 'raw_prompt' column (row 0 has "
                             f"{sorted(dataset[0])}), which rollwise's segmented agent loop reads")
        pool = LazyPool(len(dataset), _blank_prompt)
        return VerlHost(self.spec, pool, batch_size=int(cfg.data.train_batch_size), n=n, host=self.host_name,
                        seed=self.seed, options=self.options)

    # ---- checkpoints: the planner's state in verl's global_step_N folder ------------------------
    def state_dict(self) -> dict:
        """The planner's state (components, PromptHistory, RNG, steps done) and the run's ledger: what a
        resumed run needs to decide as the uninterrupted one would. Between steps only; in the async modes,
        between steps the next step is open already, and its state from before it opened is returned."""
        if self._step_uids:
            if self.ahead and self._before_open is not None and not self._round_collected:
                return self._before_open
            raise RuntimeError(f"{self.host_name}: cannot save the planner in the middle of a step")
        return self._state_dict()

    def _state_dict(self) -> dict:
        host = self.host if self.host is not None else self._build_host()
        return {"format": CKPT_FORMAT, "planner": self.spec, "options": self.options,
                "host": host.state_dict(), "ledger": self.ledger.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("planner") != self.spec or state.get("options") != self.options:
            raise ValueError(f"{self.host_name}: the checkpoint's planner {state.get('planner')!r} "
                             f"(options {state.get('options')}) is not this run's {self.spec!r} "
                             f"(options {self.options})")
        host = self._build_host()
        host.load_state_dict(state["host"])
        self.host = host
        self.ledger.load_state_dict(state["ledger"])
        self._before_open = None

    def save_state(self, folder: str) -> str:
        """Write the state into a checkpoint folder (plain data: it loads without running code)."""
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, STATE_FILE)
        tmp = path + ".tmp"
        torch.save(to_plain(self.state_dict()), tmp)
        os.replace(tmp, path)  # a kill mid-save leaves no half-written state
        return path

    def load_state(self, folder: str) -> bool:
        """Read the state a checkpoint folder holds; False (with a warning) if it holds none."""
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            warnings.warn(f"{path} is missing (a checkpoint saved without rollwise's planner state): the planner "
                          "starts afresh, with an empty PromptHistory", stacklevel=2)
            return False
        self.load_state_dict(read_checkpoint(Path(path)))
        return True

    def _batch(self, requests: list[Request]):
        """The rows of the requested prompts, as the trainer's dataloader would give them, with a fresh
        uid and the planner's n per prompt (and, for a watched round, rollwise's segmented agent loop)."""
        rows = [self.trainer.train_dataset[r.prompt.id] for r in requests]
        batch = self.trainer.train_dataloader.collate_fn(rows)
        uids = [str(uuid.uuid4()) for _ in requests]
        batch["uid"] = np.array(uids, dtype=object)
        batch["__rollout_n__"] = torch.tensor([r.n for r in requests], dtype=torch.long)
        if self.watched:
            batch["agent_name"] = np.array([AGENT_NAME] * len(requests), dtype=object)
            batch[WATCH_FIELD] = np.array([self.watch_server_name] * len(requests), dtype=object)
            batch[SEGMENT_FIELD] = torch.full((len(requests),), self.segment_tokens, dtype=torch.long)
            watch = self._wave.watch if isinstance(self._wave, Wave) else None
            ctx_metrics = self.host.ctx.metrics
            _call(self.watch_server.open, (watch, ctx_metrics), dict(zip(uids, range(len(requests)))),
                  {u: r.n for u, r in zip(uids, requests)})
        td = tu.get_tensordict(batch)
        tu.assign_non_tensor_data(td, "global_steps", self.trainer.global_steps)
        self._round = dict(zip(uids, requests))
        for uid, r in zip(uids, requests):
            self._version[uid] = int(self.trainer.global_steps)
            self._first.setdefault(r.prompt.id, uid)
            self._step_uids.add(uid)
        return td

    # ---- the step: rounds through rollwise's driver, then the batch ----------------------------
    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != "train":  # validation: verl's own sampling
            return super().sample(global_steps, partition_id, batch_size)
        if not self._step_uids:
            raise RuntimeError(f"{self.host_name}: sample() before any prompt was submitted through the planner")
        self._round_collected = True  # the open step is being sampled: its pre-open state is no longer a checkpoint
        rows, metrics, refs = self._collect()
        self._save_what_components_keep(refs, partition_id)
        keep = self._write_batch(rows, partition_id)
        self._sync_metadata_from_transfer_queue()
        meta = self._materialize_batch(partition_id, keep, dict(self.partitions[partition_id]))
        self._first, self._step_uids, self._version = {}, set(), {}
        self._round_collected, self._before_open = False, None
        self.log.append(metrics)
        if self.ahead:
            self._open_next_step(global_steps)
        return meta, {f"training/rollwise/{k}": float(v) for k, v in metrics.items() if k != "step"}

    def _collect(self):
        """Every round of the step through rollwise's StepDriver (charges, pruned rows), the planner's
        batch settled and observed. Returns the trained rows as plain data ([(prompt id, [(keys, saved,
        is_weight)])]), the step's metrics, and weak references to every rollout generated this step."""
        driver = StepDriver(self.engine, self.ledger, None)
        before = _fate_tokens(self.ledger)
        wave = self._wave
        while wave:
            self._wave = wave
            wave = self.host.send(driver.generate(wave))
        self._wave = None
        driver.settle(self.host.assembled, None)
        result = self.host.finish()
        rows = [(g.prompt.id, [(r.keys, r.saved, r.meta.get("is_weight")) for r in g.rollouts])
                for g in result.trained if g.n > 0]
        if not rows:
            self._write_batch([], "train")  # leave nothing of the step behind
            self._first, self._step_uids = {}, set()
            raise RuntimeError(f"planner {self.host.name!r} kept no group this step ({result.rounds} rounds); "
                               "verl cannot train on an empty batch (allow more refill rounds, e.g. dapo max_rounds)")
        metrics = {"step": result.step, **result.metrics, **_fate_tokens(self.ledger, before)}
        refs = [weakref.ref(r) for g in self.engine.take_generated() for r in g.rollouts]
        return rows, metrics, refs

    def _save_what_components_keep(self, refs, partition_id: str) -> None:
        """A rollout still alive once the step's own references are gone is kept by a planner component
        (AR3PO's stored correct responses, pilot-commit's pilots): copy its fields and tags out of
        TransferQueue now, before verl clears them, so it can be trained in a later step."""
        kept = [r for ref in refs for r in [ref()] if r is not None and r.saved is None and r.keys]
        for r in kept:
            r.saved = (tq.kv_batch_get(keys=list(r.keys), partition_id=partition_id),
                       [dict(self.partitions[partition_id][k]) for k in r.keys])

    def _write_batch(self, rows, partition_id: str) -> list[str]:
        """Make TransferQueue hold exactly the trained rows, one uid per trained group, its sessions
        0..n-1 in the group's order: a prompt's rows from later rounds (stages) and rows from earlier
        steps (AR3PO's reuse, committed pilots) are written under the uid of its first round; every
        other row of the step is cleared. Returns the groups' uids. With in-flight weights, every trained row gets `rollout_is_weights` (verl's policy
        loss multiplies each token's loss by it)."""
        partition = self.partitions[partition_id]
        keep: list[str] = []
        kept_keys: set[str] = set()
        moved: list[tuple[TensorDict, list, list[str]]] = []
        weights: dict[str, float] = {}
        for pid, group in rows:
            uid = self._first.get(pid) or str(uuid.uuid4())
            keep.append(uid)
            for session, (keys, saved, weight) in enumerate(group):  # sessions 0..n-1 in the group's order
                new_keys = [f"{uid}_{session}_{k.split('_')[2]}" for k in keys]
                if saved is None and list(keys) == new_keys:
                    tags = [partition[k] for k in keys]
                else:  # a later round's row, a row that moved up, or one saved from an earlier step
                    data, tags = saved if saved is not None else (
                        tq.kv_batch_get(keys=list(keys), partition_id=partition_id), [dict(partition[k]) for k in keys])
                    data = data.clone()
                    data["uid"] = NonTensorStack(*[uid] * len(keys))
                    data["session_id"] = NonTensorStack(*[session] * len(keys))
                    moved.append((data, tags, new_keys))  # written once every row has been read
                kept_keys.update(new_keys)
                for k, tag in zip(new_keys, tags):  # (weight, response tokens) per trained output
                    weights[k] = (1.0 if weight is None else float(weight), int(tag.get("response_len", 0)))
        for data, tags, new_keys in moved:
            tq.kv_batch_put(keys=new_keys, partition_id=partition_id, fields=data, tags=tags)
        if any(w != 1.0 for w, _ in weights.values()):
            keys = sorted(weights)
            nested = torch.nested.as_nested_tensor([torch.full((weights[k][1],), weights[k][0]) for k in keys],
                                                   layout=torch.jagged)
            tq.kv_batch_put(keys=keys, partition_id=partition_id,
                            fields=TensorDict({"rollout_is_weights": nested}, batch_size=len(keys)))
        step_keys = [k for k in partition if k.split("_")[0] in self._step_uids and k not in kept_keys]
        drop = step_keys + sorted(self._step_uids - set(keep))
        if drop:
            tq.kv_clear(keys=drop, partition_id=partition_id)
        return keep

    # ---- one round: what TransferQueueEngine asks -------------------------------------------
    def submit_round(self, requests: list[Request]) -> None:
        if self._submitted:  # the step's first round went out with prepare_step
            self._submitted = False
            return
        self._queued = list(requests)
        self.refill_fn(len(requests))  # -> the trainer's _add_prompts_to_generate -> self._next_train_batch

    def collect_round(self, requests: list[Request]) -> list[Finished]:
        """Wait for the round's groups; one Finished per request, in order, with the watcher's decisions
        applied as rollwise's driver applies them (pruned rows marked, weights and meta attached)."""
        partition_id = "train"
        by_request = {id(r): uid for uid, r in self._round.items()}
        last_debug = time.time()
        while True:
            self._sync_metadata_from_transfer_queue()
            terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
            if all(uid in terminal for uid in self._round):
                break
            last_debug = self._wait_for_next_poll(partition_id, last_debug)
        decisions = {}
        if self.watched:
            decisions, metrics = _call(self.watch_server.close)
            self.host.ctx.metrics.update(metrics)
        events = self._read_round(partition_id, decisions)
        self._round = {}
        return [events[by_request[id(r)]] for r in requests]

    def _read_round(self, partition_id: str, decisions: dict) -> dict[str, Finished]:
        """One VerlRollout per session: its reward the summed `rm_scores` of its last output, its length
        the response tokens of all its outputs, its keys; prompt tokens are every session's prefill."""
        partition = self.partitions[partition_id]
        by_uid: dict[str, list[str]] = defaultdict(list)
        for key in partition:
            uid = key.split("_")[0]
            if uid in self._round:
                by_uid[uid].append(key)
        keys = [k for uid in self._round for k in sorted(by_uid[uid], key=_session_index)]
        fields = ["rm_scores"] + (["extra_fields"] if self.correct_field else [])
        values = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=fields) if keys else {}
        scores = list(values["rm_scores"]) if keys else []
        extras = list(values["extra_fields"]) if keys and self.correct_field else [None] * len(keys)
        sessions: dict[str, dict[int, dict]] = defaultdict(dict)
        for key, score, extra in zip(keys, scores, extras):
            uid, session, _ = key.split("_")
            s = sessions[uid].setdefault(int(session), {"reward": 0.0, "length": 0, "prompt": 0, "keys": []})
            s["reward"] = float(score.sum().item())  # sorted by index: the last output's reward stays
            s["length"] += int(partition[key].get("response_len", 0))
            s["prompt"] = s["prompt"] or int(partition[key].get("prompt_len", 0))
            s["keys"].append(key)
            s["extra"] = extra
        out = {}
        for uid, r in self._round.items():
            rollouts = []
            for j, s in sorted(sessions[uid].items()):
                correct = (_extra_value(s["extra"], self.correct_field) if self.correct_field else s["reward"]) \
                    >= self.threshold
                ro = VerlRollout(r.prompt.id, s["length"], bool(correct), s["reward"], purpose=r.purpose,
                                 policy_version=self._version.get(uid, int(self.trainer.global_steps)),
                                 keys=tuple(s["keys"]))
                for d in decisions.get((uid, j), []):  # as StepDriver._decide and the engine's stop do
                    ro.meta.update(d.meta or {})
                    if d.weight is not None:
                        ro.meta["is_weight"] = float(d.weight)
                    if d.action != "keep":
                        ro.status = "pruned" if d.action == "pruned" else "done"
                        ro.finish_reason = "pruned" if d.action == "pruned" else "stop"
                rollouts.append(ro)
            first = next(iter(sessions[uid].values()), {"prompt": 0})  # the prompt once per request, as engines count
            out[uid] = Finished(r, Group(r.prompt, rollouts), first["prompt"])
        return out


class TransferQueueEngine:
    """rollwise's Engine protocol over verl's generation, so that a round runs through rollwise's own
    StepDriver.generate (its charges, its pruning): `submit` hands the round to verl (refill_fn),
    `poll` waits for it in TransferQueue. The watcher runs in verl's agent loops between segments, so
    nothing is running here to peek at: `peek` shows nothing and `stop` is never asked."""

    capabilities = (InFlight(),)  # peek shows nothing; stop is never asked (module docstring)

    def __init__(self, buffer: RollwiseReplayBuffer):
        self.buffer = buffer
        self._waiting: list[Request] = []
        self._generated: list[Group] = []

    def submit(self, requests: list[Request]) -> None:
        self.buffer.submit_round(requests)
        self._waiting = list(requests)

    @property
    def pending(self) -> int:
        return len(self._waiting)

    def poll(self, max_steps=None) -> list[Finished]:
        events = self.buffer.collect_round(self._waiting) if self._waiting else []
        self._waiting = []
        self._generated += [e.group for e in events]
        return events

    def peek(self, request_ids, hidden=False) -> dict:
        return {}

    def stop(self, request_id, samples, reason):
        raise ValueError("verl's agent loop stops samples between segments; nothing runs in this process")

    def abort(self, request_ids) -> list:
        return []

    def update_weights(self, version, state_dict=None) -> None:
        pass

    def take_generated(self) -> list[Group]:
        """Every group this engine returned since the last call (the step's rollouts)."""
        out, self._generated = self._generated, []
        return out


def _checkpoint_with(trainer, buffer: RollwiseReplayBuffer) -> None:
    """Route this trainer instance's checkpoints through the buffer too: its `_save_checkpoint` writes the
    planner's state into the global_step_N folder first (verl's latest-iteration marker, written last,
    then marks a checkpoint that holds it), and `_load_checkpoint` reads it from the folder verl resumed."""
    save, load = getattr(trainer, "_save_checkpoint", None), getattr(trainer, "_load_checkpoint", None)
    if not (callable(save) and callable(load)):  # a trainer that does not checkpoint
        return

    def _save_checkpoint():
        folder = os.path.join(trainer.config.trainer.default_local_dir, f"global_step_{trainer.global_steps}")
        buffer.save_state(folder)
        return save()

    def _load_checkpoint():
        out = load()
        folder = _resumed_folder(trainer)
        if folder is not None:
            buffer.load_state(folder)
            if buffer.ahead:  # verl restored the open step's first round; the planner opens it again
                clear_restored_round(trainer)
        return out

    trainer._save_checkpoint, trainer._load_checkpoint = _save_checkpoint, _load_checkpoint


def _resumed_folder(trainer) -> str | None:
    """The global_step_N folder verl's `_load_checkpoint` just resumed from (None: it started afresh), found
    as verl finds it."""
    cfg = trainer.config.trainer
    if cfg.resume_mode == "disable" or not trainer.global_steps:
        return None
    if cfg.resume_mode == "resume_path":
        folder = cfg.resume_from_path
    else:  # "auto": the latest checkpoint, whose step verl has set
        folder = os.path.join(cfg.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def _blank_prompt(i: int) -> Prompt:
    # verl's dataset tokenizes when indexed; planners that run here read prompt ids and history only
    return Prompt(int(i), "", "")


def _session_index(key: str) -> tuple[int, int]:
    _, session, index = key.split("_")
    return int(session), int(index)


def _extra_value(extra, name: str) -> float:
    fields = getattr(extra, "data", extra)
    info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
    if name not in info:
        raise RuntimeError(f"correct_field {name!r} is not in the trajectory's reward_extra_info {sorted(info)}")
    return float(info[name])


def _requests(wave) -> list[Request]:
    return wave.requests if isinstance(wave, Wave) else list(wave)


def _start_watch_server():
    """The round watcher's home: a named Ray actor, which verl's agent loops (remote workers) find by name."""
    import ray

    name = f"rollwise-watch-{uuid.uuid4().hex[:12]}"
    return ray.remote(WatchServer).options(name=name, num_cpus=0).remote(), name


def _call(method, *args):
    """Call a WatchServer method, on a Ray actor or in this process."""
    if hasattr(method, "remote"):
        import ray

        return ray.get(method.remote(*args))
    return method(*args)


def _fate_tokens(ledger: Ledger, before: dict | None = None) -> dict[str, int]:
    """Generated tokens by fate (and reused tokens), minus `before`: one step's charges."""
    out = {f"tokens_{fate}": ledger.count(fate=fate) for fate in ("trained", "discarded", "pruned", "scored")}
    out["tokens_reused"] = ledger.reused_tokens
    out["prompt_tokens"] = ledger.prompt_tokens
    return {k: v - (before or {}).get(k, 0) for k, v in out.items()}


def _refuse_what_this_config_cannot_serve(planner: Planner, cfg, host: str, watched: bool, segment_tokens: int) -> str:
    """Refuse, in one line naming the setting, what the trainer's config and the planner cannot do
    together; return the correction verl applies to rows reused from earlier steps (for the log)."""
    algo = cfg.get("algorithm", {}) if cfg is not None else {}
    if (algo.get("filter_groups") or {}).get("enable", False):
        raise ValueError(f"{host}: disable algorithm.filter_groups with a rollwise planner "
                         "(the planner filters groups; verl's filter would run a second time)")
    corr = algo.get("rollout_correction") or {}
    reusers = [c.name for c in planner.components if getattr(c, "reuse", "none") != "none"]
    rollout = cfg.actor_rollout_ref.rollout if cfg is not None and "actor_rollout_ref" in cfg else {}
    if reusers and not rollout.get("calculate_log_probs", True):
        raise ValueError(f"{host}: {', '.join(reusers)} reuses responses of earlier steps, whose behaviour log-probs "
                         "verl keeps only with actor_rollout_ref.rollout.calculate_log_probs=true "
                         f"(or set {reusers[0]} reuse=none)")
    if watched and corr.get("rollout_is"):
        raise ValueError(f"{host}: {', '.join(c.name for c in planner.components if c.needs_inflight)} gives rows "
                         "importance weights in verl's rollout_is_weights, which algorithm.rollout_correction.rollout_is "
                         "also writes; unset one of them")
    if watched and segment_tokens < 1:
        raise ValueError(f"{host}: sampler_kwargs.segment_tokens must be >= 1 (got {segment_tokens})")
    if corr.get("bypass_mode"):
        return "bypass: old_log_probs are the behaviour log-probs, so PPO's ratio corrects reused rows"
    if corr.get("rollout_is"):
        return f"rollout_is={corr['rollout_is']}: importance weights pi_old/mu on reused rows"
    return "none: old_log_probs are recomputed, so reused rows count as on-policy (rollwise's default)"
