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
* `sample` waits for the round's groups, reads their rewards (`rm_scores` summed per trajectory) and
  lengths, and hands them to the planner, which asks for a refill round (DAPO dynamic sampling) or
  returns the batch. Groups that do not train (zero-variance, surplus) are cleared from TransferQueue;
  the batch is the trained groups' trajectories. verl's advantages group by uid, so group sizes may
  differ. Every group rolled out is recorded in PromptHistory, so history-based planners learn.
* Refused, by name: trainer modes other than "sync" (the async modes sample stale, partly generated
  groups, which the planner's step model does not describe), `parameter_sync_step` != 1, verl's own
  `algorithm.filter_groups` (filtering would happen twice), and components verl cannot serve here:
  extra samples after seeing results (ar3po, aero, dars, pilot-commit, oracle, pvpo, sgpo, cures,
  dots), the policy (hive, dots, cures: the model lives in remote workers), per-step sampling
  parameters (e3).
* Validation (`partition_id="val"`) is verl's own sampling, untouched.

`sampler_kwargs`: planner (spec, required), planner_options ({component: kwargs}), seed (0), n (default
`actor_rollout_ref.rollout.n`), success_threshold (1.0), correct_field (a `reward_extra_info` key such
as "acc" to judge correctness by; default: the summed reward).
Tested on CPU against a real TransferQueue with verl's trainer methods bound to a stub (as verl's own
CPU tests do); a full verl run needs GPUs and is untested here.
"""
from __future__ import annotations

import inspect
import time
import uuid
import warnings
from collections import defaultdict

import numpy as np
import torch

from ..core.types import Group, Prompt, Request
from .host import LazyPool, PlannerHost

TESTED = {"verl": "0.9.1", "transferqueue": "0.1.11"}

try:
    import transfer_queue as tq
    import verl
    from omegaconf import DictConfig, OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
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
}
# Source fragments whose absence means the contract moved: the trainer hands its refill method to the
# sampler, submits through _next_train_batch, and the agent loop reads the per-prompt n from the batch.
SOURCE = {
    ("PPOTrainer", "_build_replay_buffer"): "refill_fn=self._add_prompts_to_generate",
    ("PPOTrainer", "_add_prompts_to_generate"): "self._next_train_batch(num_prompts)",
    ("PPOTrainer", "_add_batch_to_generate"): "self._next_train_batch()",
    ("AgentLoopWorkerTQ", "_run_prompt"): '"__rollout_n__"',
}
_OPTIONS = {"planner", "planner_options", "seed", "n", "success_threshold", "correct_field"}


def _owners() -> dict:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return {"ReplayBuffer": ReplayBuffer, "PPOTrainer": PPOTrainer, "AgentLoopWorkerTQ": AgentLoopWorkerTQ}


def check_verl() -> None:
    """Raise, naming the hook, if the installed verl changed what this integration relies on; warn if
    verl or transferqueue is not the tested version."""
    from importlib.metadata import version

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
    for (owner, name), fragment in SOURCE.items():
        fn = getattr(owners[owner], name, None)
        if fn is None or fragment not in inspect.getsource(inspect.unwrap(fn)):
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
        if trainer_mode != "sync":
            raise ValueError(f"{self.host_name}: a rollwise planner runs in trainer_mode=sync only (got {trainer_mode!r}): "
                             "the async modes train on stale, partly generated groups, outside a planner step")
        if int((trainer_config or {}).get("parameter_sync_step", 1)) != 1:
            raise ValueError(f"{self.host_name}: a rollwise planner needs parameter_sync_step=1 (one sample per step)")
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
        # refuse what verl cannot serve now, by name, before any GPU work starts (the pool size is known
        # only once the trainer has built its dataset)
        PlannerHost(self.spec, LazyPool(1, _blank_prompt), batch_size=1, n=1, host=self.host_name,
                    options=self.options)
        self.trainer = trainer
        trainer._next_train_batch = self._next_train_batch  # this trainer's prompts now come from the planner
        self.host: PlannerHost | None = None
        self.log: list[dict] = []  # one entry per planner step
        self._round: dict[str, Request] = {}  # uid -> request, for the round being generated
        self._uids: dict[int, str] = {}  # prompt id -> uid, for the whole step
        self._queued: list[Request] = []  # a refill round, waiting for refill_fn

    # ---- prompts in: the trainer's _next_train_batch ------------------------------------------
    def _next_train_batch(self, num_prompts: int | None = None):
        """The trainer's batch source: a new step's first round (num_prompts None, from prepare_step) or
        the refill round this sampler queued (num_prompts = its size, via refill_fn)."""
        if self.host is None:
            self.host = self._build_host()
        if num_prompts is None:
            if self._uids:
                raise RuntimeError(f"{self.host_name}: a new step began before the last one was sampled")
            requests = self.host.start(int(self.trainer.global_steps))
            if not requests:
                raise RuntimeError(f"planner {self.host.name!r} chose no prompt after a full pass over the pool")
        else:
            if num_prompts != len(self._queued):
                raise RuntimeError(f"{self.host_name}: asked for {num_prompts} prompts, the planner queued "
                                   f"{len(self._queued)} (only this sampler may call refill_fn)")
            requests, self._queued = self._queued, []
        return self._batch(requests)

    def _build_host(self) -> PlannerHost:
        cfg = self.trainer.config
        filter_groups = cfg.algorithm.get("filter_groups", None) if "algorithm" in cfg else None
        if filter_groups is not None and filter_groups.get("enable", False):
            raise ValueError(f"{self.host_name}: disable algorithm.filter_groups with a rollwise planner "
                             "(the planner filters groups; verl's filter would run a second time)")
        n = int(self.n if self.n is not None else cfg.actor_rollout_ref.rollout.n)
        pool = LazyPool(len(self.trainer.train_dataset), _blank_prompt)
        return PlannerHost(self.spec, pool, batch_size=int(cfg.data.train_batch_size), n=n, host=self.host_name,
                           seed=self.seed, options=self.options)

    def _batch(self, requests: list[Request]):
        """The rows of the requested prompts, as the trainer's dataloader would give them, with a fresh
        uid and the planner's n per prompt."""
        rows = [self.trainer.train_dataset[r.prompt.id] for r in requests]
        batch = self.trainer.train_dataloader.collate_fn(rows)
        uids = [str(uuid.uuid4()) for _ in requests]
        batch["uid"] = np.array(uids, dtype=object)
        batch["__rollout_n__"] = torch.tensor([r.n for r in requests], dtype=torch.long)
        td = tu.get_tensordict(batch)
        tu.assign_non_tensor_data(td, "global_steps", self.trainer.global_steps)
        for uid, r in zip(uids, requests):
            self._round[uid] = r
            self._uids[r.prompt.id] = uid
        return td

    # ---- groups out: sample -------------------------------------------------------------------
    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != "train":  # validation: verl's own sampling
            return super().sample(global_steps, partition_id, batch_size)
        if not self._round:
            raise RuntimeError(f"{self.host_name}: sample() before any prompt was submitted through the planner")
        last_debug = time.time()
        while True:
            self._sync_metadata_from_transfer_queue()
            terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
            if any(uid not in terminal for uid in self._round):
                last_debug = self._wait_for_next_poll(partition_id, last_debug)
                continue
            requests = self.host.send(self._read_groups(partition_id))
            self._round = {}
            if not requests:
                break
            self._queued = list(requests)
            self.refill_fn(len(requests))  # -> the trainer's _add_prompts_to_generate -> self._next_train_batch
        result = self.host.finish()
        trained = [self._uids[g.prompt.id] for g in result.trained if g.n > 0]
        if not trained:
            raise RuntimeError(f"planner {self.host.name!r} kept no group this step ({result.rounds} rounds); "
                               "verl cannot train on an empty batch (allow more refill rounds, e.g. dapo max_rounds)")
        self._clear_groups(partition_id, set(self._uids.values()) - set(trained))
        meta = self._materialize_batch(partition_id, trained, dict(self.partitions[partition_id]))
        self._uids = {}
        self.log.append({"step": result.step, **result.metrics})
        return meta, {f"training/rollwise/{k}": float(v) for k, v in result.metrics.items()}

    def _read_groups(self, partition_id: str) -> list[Group]:
        """One light Group per request of the round: a sample per session, its reward the summed
        `rm_scores` of its last output, its length the response tokens of all its outputs."""
        by_uid: dict[str, list[str]] = defaultdict(list)
        for key in self.partitions[partition_id]:
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
            s = sessions[uid].setdefault(int(session), {"reward": 0.0, "length": 0, "extra": None})
            s["reward"] = float(score.sum().item())  # sorted by index: the last output's reward stays
            s["length"] += int(self.partitions[partition_id][key].get("response_len", 0))
            s["extra"] = extra
        groups = []
        for uid, r in self._round.items():
            ss = [sessions[uid][k] for k in sorted(sessions[uid])]
            rewards = [s["reward"] for s in ss]
            if self.correct_field:
                correct = [_extra_value(s["extra"], self.correct_field) >= self.threshold for s in ss]
            else:
                correct = [x >= self.threshold for x in rewards]
            groups.append(Group.from_outcomes(r.prompt, rewards, [s["length"] for s in ss], correct))
        return groups


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
