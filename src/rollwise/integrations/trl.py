"""rollwise planners inside TRL's GRPOTrainer (tested with trl 1.16.0; `pip install rollwise[trl]`).

    from rollwise.integrations.trl import RollwiseGRPOTrainer
    trainer = RollwiseGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=ds,
                                  planner="greso+dapo")
    trainer.train()

How it hooks in (the choices, and why):

* **Selection at generation time, no lag.** TRL makes one *generation batch* (B prompts x G =
  `num_generations` rows) in `_generate_and_score_completions`. This subclass replaces the rows its
  dataloader loaded with the prompts the planner chooses right then, from everything rewarded so far.
  (A `_get_train_sampler` override would lag one generation batch behind the rewards: accelerate's
  dataloader fetches the next batch before the current one is generated. Refill needs prompts chosen
  at generation time anyway.) The dataloader still paces TRL's steps and epochs; its rows are unused.
* **Refill and filtering (DAPO dynamic sampling).** Each planner round is one call of TRL's own
  `_generate_and_score_completions`, so TRL computes rewards and advantages as usual, per round. The
  planner decides which groups train; the batch handed back to TRL is always B blocks of G rows: the
  trained groups first, then (when fewer than B were accepted) blocks that do not train. Rows that do
  not train get a zero loss mask, and `num_items_in_batch` is recounted, so under token-normalised
  losses (`loss_type` dapo, the default, bnpo, cispo, vespo) they are out of the loss and its
  denominator. Under per-sequence losses (grpo, dr_grpo, sapo, luspo) they still count as zero-loss
  rows in the batch mean.
* **Per-prompt group sizes by padding.** TRL groups rewards by `.view(-1, num_generations)`, so a
  prompt keeps a block of G rows; a planner giving it n < G samples generates only n of them (the
  others are not generated: they hold a single EOS token), their rewards are NaN (TRL's nanmean and
  nanstd skip them, so advantages use the n real samples) and their loss mask is zero. n above G is
  capped. Padding needs TRL's own transformers generation: with vLLM (which samples G per prompt) or
  a `rollout_func`, planners that set group sizes are refused. (The experimental async trainer's
  `rollout_worker` needs vLLM and a CUDA path, so it is not used.)
* **History.** Every rolled-out group is recorded in rollwise's PromptHistory from TRL's rewards
  (weighted sum of the reward functions; correct = that sum, or `correct_reward`'s value, >=
  `success_threshold`), so history-based planners (greso, hive's stage 1, prompt-replay, cdas, duet,
  frontier, depo) learn. HIVE's prompt entropy is one prefill-only pass of the trainer's model.
* **Refused**, by name, when the trainer is built: components that need extra samples after seeing
  results (ar3po, aero, dars, pilot-commit, oracle, pvpo, sgpo, cures, dots), per-step sampling
  parameters (e3's temperature), per-prompt sizes where padding is impossible (above). One process
  only (several would have to agree on every planner decision); map-style datasets only (the planner
  indexes the pool). Evaluation runs TRL's own path, untouched. Checkpoints carry the planner's state,
  PromptHistory and RNG (`rollwise_planner.pkl` beside TRL's files), so a resumed run goes on learning.

Per planner step the trainer logs `rollwise/*` metrics and appends a dict to `trainer.rollwise_log`.
"""
from __future__ import annotations

import inspect
import math
import os
import pickle
import warnings
from collections.abc import Callable

import numpy as np
import torch

from ..core.types import Group, Prompt
from .host import LazyPool, PlannerHost, StepResult

TESTED = "1.16.0"
SUPPORTED = (">=1.16.0", "<1.17")  # the hooks below were checked against 1.16.0 only

try:
    import trl
    from datasets import Dataset
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("rollwise.integrations.trl needs TRL: `pip install rollwise[trl]` "
                      "(on a CPU machine: `bash scripts/setup.sh --with trl`)") from e

# The private GRPOTrainer methods this module overrides or calls, and the leading parameters it relies
# on. TRL has changed `_generate_single_turn` four times; a release that changes any of these must fail
# here, with the reason, rather than train wrongly.
HOOKS = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate_single_turn": ("self", "prompt_ids", "images", "multimodal_fields", "num_generations"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_save_checkpoint": ("self", "model", "trial"),
    "_load_optimizer_and_scheduler": ("self", "checkpoint"),
}
STATE_FILE = "rollwise_planner.pkl"  # the planner, its PromptHistory and its RNG, beside TRL's checkpoint
# Keys of `_generate_and_score_completions`'s output that the batch merge knows how to pad.
_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_RIGHT_PADDED = {"completion_ids", "completion_mask", "tool_mask", "old_per_token_logps", "ref_per_token_logps",
                 "sampling_per_token_logps", "importance_sampling_ratio"}
_PER_ROW = {"advantages"}


def check_trl(cls: type = GRPOTrainer) -> None:
    """Raise, naming the hook, if the installed TRL changed a method this integration overrides; warn
    if its version is outside the tested range."""
    from packaging.version import Version

    problems = []
    for name, expected in HOOKS.items():
        fn = getattr(cls, name, None)
        if fn is None:
            problems.append(f"{cls.__name__}.{name} is gone")
            continue
        params = tuple(inspect.signature(fn).parameters)
        if params[: len(expected)] != expected:
            problems.append(f"{cls.__name__}.{name}{params} no longer starts with {expected}")
    if problems:
        raise RuntimeError(f"rollwise's TRL integration was written for trl {TESTED}; the installed trl "
                           f"{trl.__version__} changed the hooks it uses: " + "; ".join(problems))
    v = Version(trl.__version__)
    if not (Version(SUPPORTED[0][2:]) <= v < Version(SUPPORTED[1][1:])):
        warnings.warn(f"rollwise's TRL integration is tested with trl {TESTED} (supported {','.join(SUPPORTED)}); "
                      f"trl {trl.__version__} is installed: its hook signatures match, behaviour is untested",
                      stacklevel=2)


class RollwiseGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose prompts, group sizes and trained groups come from a rollwise planner.

    `planner`: a spec such as "greso+dapo"; `planner_options`: {component: kwargs}; `planner_seed`
    (default `args.seed`). `n`: the planner's default group size (default `num_generations`; set it
    below `num_generations` to leave room for planners that give some prompts more samples).
    `answer_column`: the dataset column planners see as the answer (informational only).
    `success_threshold` / `correct_reward`: what counts as a correct sample in PromptHistory (the
    weighted reward sum, or the named reward function's value, >= the threshold)."""

    def __init__(self, *args, planner: str, planner_options: dict | None = None, planner_seed: int | None = None,
                 n: int | None = None, success_threshold: float = 1.0, correct_reward: str | None = None,
                 answer_column: str = "answer", **kwargs):
        check_trl()
        super().__init__(*args, **kwargs)
        host = f"TRL {trl.__version__} GRPOTrainer"
        if self.accelerator.num_processes != 1:
            raise ValueError(f"{host} with a rollwise planner runs on one process (every process would have to "
                             f"make the same planner decisions); found {self.accelerator.num_processes}")
        if not isinstance(self.train_dataset, Dataset):
            raise TypeError(f"{host} with a rollwise planner needs a map-style datasets.Dataset (the planner "
                            f"indexes the prompt pool); got {type(self.train_dataset).__name__}")
        if correct_reward is not None and correct_reward not in self.reward_func_names:
            raise ValueError(f"correct_reward={correct_reward!r} is not one of the reward functions "
                             f"{self.reward_func_names}")
        self._answer_column, self._threshold = answer_column, float(success_threshold)
        self._correct_col = None if correct_reward is None else self.reward_func_names.index(correct_reward)
        G = self.num_generations
        pool = LazyPool(len(self.train_dataset), self._rollwise_prompt)
        self.rollwise = PlannerHost(
            planner, pool, batch_size=self.args.generation_batch_size // G, n=n or G, host=host,
            seed=self.args.seed if planner_seed is None else planner_seed, options=planner_options, max_n=G,
            per_prompt_n=not self.use_vllm and self.rollout_func is None, prompt_stats=self._rollwise_prompt_stats)
        self.rollwise_log: list[dict] = []
        self._rollwise_live: list[bool] | None = None  # rows to generate in this round (None: all)
        self._rollwise_pad: torch.Tensor | None = None  # rows that are padding in this round
        self._rollwise_rewards: torch.Tensor | None = None  # this round's rewards_per_func

    # ---- the pool -------------------------------------------------------------------------
    def _rollwise_row(self, i: int) -> dict:
        return dict(self.train_dataset[int(i)])

    def _rollwise_prompt(self, i: int) -> Prompt:
        row = self._rollwise_row(i)
        prompt = row["prompt"]
        if not isinstance(prompt, str):  # conversational: the text the model is prompted with
            prompt = self.processing_class.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True,
                                                               **self.chat_template_kwargs)
        return Prompt(int(i), prompt, str(row.get(self._answer_column, "")))

    def _rollwise_prompt_stats(self, texts: list[str]):
        """HIVE's prompt entropy (mean next-token entropy over the prompt) and DOTS' embedding (mean-pooled
        last hidden state): one prefill-only pass of the trainer's model, without gradients."""
        tok = self._tokenizer
        conversational = not isinstance(self.train_dataset[0]["prompt"], str)
        ids = tok(texts, add_special_tokens=not conversational)["input_ids"]
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        model.eval()
        ents, embs = [], []
        try:
            with torch.no_grad():
                for s in range(0, len(ids), 64):
                    seqs = ids[s: s + 64]
                    L = max(len(x) for x in seqs)
                    inp = torch.full((len(seqs), L), tok.pad_token_id, dtype=torch.long)
                    mask = torch.zeros((len(seqs), L), dtype=torch.long)
                    for r, x in enumerate(seqs):
                        inp[r, : len(x)], mask[r, : len(x)] = torch.tensor(x), 1
                    out = model(input_ids=inp.to(self.accelerator.device), attention_mask=mask.to(self.accelerator.device),
                                output_hidden_states=True, use_cache=False)
                    logp = torch.log_softmax(out.logits.float(), dim=-1)
                    ent = -(logp.exp() * logp).sum(-1).cpu()
                    m = mask.float()
                    ents.append(((ent * m).sum(1) / m.sum(1)).numpy())
                    hid = out.hidden_states[-1].float().cpu()
                    embs.append(((hid * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)).numpy())
        finally:
            model.train(was_training)
        self._metrics["train"]["rollwise/prompt_stats_tokens"].append(float(sum(len(x) for x in ids)))
        return np.concatenate(ents), np.concatenate(embs)

    # ---- one generation batch = one planner step ---------------------------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation: TRL's own batch, untouched
            return super()._generate_and_score_completions(inputs)
        host = self.rollwise
        requests = host.start()
        if not requests:
            raise RuntimeError(f"planner {host.name!r} chose no prompt after a full pass over the pool "
                               "(every candidate was skipped); the trainer has nothing to generate")
        rounds = []
        while requests:
            out, groups = self._rollwise_round(requests)
            rounds.append((out, requests, groups))
            requests = host.send(groups)
        result = host.finish()
        self._rollwise_report(result)
        return self._rollwise_batch(rounds, result)

    def _rollwise_round(self, requests) -> tuple[dict, list[Group]]:
        """Generate and score one round with TRL's own method: each prompt a block of G rows, of which
        the first n are sampled. Returns TRL's output and one light Group per request."""
        G = self.num_generations
        rows, live = [], []
        for r in requests:
            row = self._rollwise_row(r.prompt.id)
            rows += [dict(row) for _ in range(G)]
            live += [True] * r.n + [False] * (G - r.n)
        self._rollwise_live = None if all(live) else live
        self._rollwise_pad = torch.tensor([not x for x in live])
        try:
            out = super()._generate_and_score_completions(rows)
            rewards_per_func = self._rollwise_rewards
        finally:
            self._rollwise_live, self._rollwise_pad, self._rollwise_rewards = None, None, None
        if rewards_per_func is None or rewards_per_func.shape[0] != len(rows):
            raise RuntimeError("TRL's _generate_and_score_completions did not score this round through "
                               "_calculate_rewards: the integration does not match the installed TRL")
        total = torch.nan_to_num((rewards_per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1), nan=0.0)
        judged = total if self._correct_col is None else torch.nan_to_num(rewards_per_func[:, self._correct_col])
        correct = judged >= self._threshold
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        lengths = mask.sum(1).cpu()
        groups = []
        for b, r in enumerate(requests):
            s = slice(b * G, b * G + r.n)
            groups.append(Group.from_outcomes(r.prompt, total[s].tolist(), lengths[s].tolist(), correct[s].tolist()))
        return out, groups

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        # The round's padding rows are not generated; the mask is consumed by the first call of a round
        # (tool-calling turns after it generate as usual).
        live, self._rollwise_live = self._rollwise_live, None
        if live is None:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        if len(live) != len(prompt_ids):
            raise RuntimeError(f"TRL generated {len(prompt_ids)} rows for a round of {len(live)}: the integration "
                               "does not match the installed TRL")
        images = args[0] if args else kwargs.get("images")
        fields = args[1] if len(args) > 1 else kwargs.get("multimodal_fields")
        if images is not None or fields:
            raise ValueError("per-prompt group sizes (padding) are not supported with multimodal prompts")
        keep = [ids for ids, x in zip(prompt_ids, live) if x]
        completion_ids, logprobs = super()._generate_single_turn(keep, *args, **kwargs)
        eos = self.eos_token_ids[0]
        it = iter(range(len(keep)))
        out_ids, out_lp = [], []
        for x in live:
            j = next(it) if x else None
            out_ids.append(completion_ids[j] if x else [eos])
            if logprobs is not None:
                out_lp.append(logprobs[j] if x else [0.0])
        return out_ids, (out_lp if logprobs is not None else None)

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        if self._rollwise_pad is not None:  # inside a planner round
            rewards_per_func[self._rollwise_pad.to(rewards_per_func.device)] = math.nan  # padding: no reward
            self._rollwise_rewards = rewards_per_func.detach().float().cpu().clone()
        return rewards_per_func

    # ---- checkpoints: the planner's state beside TRL's (as TRL keeps its entropy controller's) ---------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            with open(os.path.join(folder, STATE_FILE), "wb") as f:
                pickle.dump(self.rollwise.state_dict(), f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = None if checkpoint is None else os.path.join(checkpoint, STATE_FILE)
        if path is not None and os.path.exists(path):
            with open(path, "rb") as f:
                self.rollwise.load_state_dict(pickle.load(f))

    # ---- the batch TRL trains on -----------------------------------------------------------
    def _rollwise_batch(self, rounds, result: StepResult) -> dict:
        """B blocks of G rows from the rounds' outputs: the trained groups first, then blocks that do not
        train (rejected groups, or copies when fewer than B blocks were generated), loss-masked."""
        G, B = self.num_generations, self.rollwise.batch_size
        where = {id(g): (k, b, r.n) for k, (_, reqs, groups) in enumerate(rounds)
                 for b, (r, g) in enumerate(zip(reqs, groups))}
        if any(id(g) not in where for g in result.trained):
            raise RuntimeError(f"planner {self.rollwise.name!r} trains groups that were not generated in this step; "
                               "TRL can only train on rows it generated now")
        if len(result.trained) > B:
            raise RuntimeError(f"planner {self.rollwise.name!r} trained {len(result.trained)} groups; TRL's batch holds {B}")
        blocks = [(*where[id(g)], True) for g in result.trained]
        trained_ids = {id(g) for g in result.trained}
        spare = [where[id(g)] for _, _, groups in rounds for g in groups if id(g) not in trained_ids]
        source = spare or [blk[:3] for blk in blocks]
        for i in range(B - len(blocks)):  # fill to TRL's fixed batch shape with rows that do not train
            blocks.append((*source[i % len(source)], False))
        outs = [out for out, _, _ in rounds]
        for out in outs:
            unknown = set(out) - _LEFT_PADDED - _RIGHT_PADDED - _PER_ROW - {"num_items_in_batch"}
            if unknown:
                raise ValueError(f"TRL's batch has fields {sorted(unknown)} that the rollwise integration cannot "
                                 "merge (multimodal inputs are not supported)")
        rows = [(k, b * G + j) for k, b, _, _ in blocks for j in range(G)]
        trains = torch.tensor([t and j < n for _, _, n, t in blocks for j in range(G)])
        merged = {}
        for key in outs[0]:
            if key == "num_items_in_batch":
                continue
            parts = [outs[k][key][i] for k, i in rows]
            if key in _PER_ROW:
                merged[key] = torch.stack(parts)
            else:
                width = max(p.shape[-1] for p in parts)
                fill = self._tokenizer.pad_token_id if key in ("prompt_ids", "completion_ids") else (
                    1 if key == "tool_mask" else 0)
                side = "left" if key in _LEFT_PADDED else "right"
                merged[key] = torch.stack([_pad_to(p, width, fill, side) for p in parts])
        keep = trains.to(merged["completion_mask"].device)
        merged["completion_mask"] = merged["completion_mask"] * keep.unsqueeze(1).to(merged["completion_mask"].dtype)
        merged["advantages"] = merged["advantages"] * keep.to(merged["advantages"].dtype).view(
            -1, *([1] * (merged["advantages"].dim() - 1)))
        loss_mask = merged["completion_mask"] if "tool_mask" not in merged else merged["completion_mask"] * merged["tool_mask"]
        merged["num_items_in_batch"] = loss_mask.sum()
        return merged

    def _rollwise_report(self, result: StepResult) -> None:
        m = result.metrics
        for key in ("rounds", "tokens", "samples", "trained_groups", "filtered_groups", "zero_variance_trained",
                    "capped_requests", "skipped"):
            if key in m:
                self._metrics["train"][f"rollwise/{key}"].append(float(m[key]))
        self.rollwise_log.append({"step": result.step, "global_step": int(self.state.global_step), **m})


def _pad_to(t: torch.Tensor, width: int, fill, side: str) -> torch.Tensor:
    short = width - t.shape[-1]
    if short <= 0:
        return t
    pad = torch.full((*t.shape[:-1], short), fill, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if side == "left" else [t, pad], dim=-1)


def arithmetic_dataset(prompts: list[Prompt]) -> Dataset:
    """A TRL train set from rollwise prompts: columns prompt, answer (and level)."""
    return Dataset.from_dict({"prompt": [p.text for p in prompts], "answer": [p.answer for p in prompts],
                              "level": [p.level for p in prompts]})


def verifier_reward(verify: Callable[[str, str], float], answer_column: str = "answer"):
    """A TRL reward function from a rollwise task's `verify(response, answer)`."""
    def reward(prompts, completions, **kwargs):
        answers = kwargs[answer_column]
        return [float(verify(c if isinstance(c, str) else c[-1]["content"], a)) for c, a in zip(completions, answers)]
    reward.__name__ = "verify"
    return reward
