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
* **Rounds: refill, stages, pilots.** Each round of the planner's own `plan()` coroutine (run by
  PlannerHost, as the StepDriver runs it: the first wave, a DAPO refill, an AR3PO/AERO/DARS stage for
  prompts already rolled out, a pilot, a profile) is one call of TRL's own
  `_generate_and_score_completions`. The planner merges stages into each prompt's group.
* **The batch.** The trained groups' rows, whole (every stage; AR3PO's reused response as a row of its
  stored tokens), then rows that do not train up to TRL's shape (>= B x G rows, a multiple of
  steps_per_generation). Advantages are recomputed over each whole group with TRL's formula
  (`trl_advantages`); rows that do not train get a zero loss mask and `num_items_in_batch` is
  recounted, so under token-normalised losses (`loss_type` dapo, the default, bnpo, cispo, vespo)
  they are out of the loss and its denominator; under per-sequence losses (grpo, dr_grpo, sapo,
  luspo) they still count as zero-loss rows in the batch mean. A reused response keeps its behaviour
  log-probs (scored right after its round) and step; `correction=` names a rollwise correction whose
  per-token weights multiply its advantages.
* **In flight (DUET's abort, ARRoL).** The round's watcher rides on TRL's own `model.generate` call as a
  per-row StoppingCriteria (`_Watch`), consulted after every decode step as the driver's peek/stop; stopped
  rows keep the tokens they had, pruned rows get a NaN reward and leave their groups, weights (1/q)
  multiply advantages. A watcher that reads hidden states (ARRoL's quality head) gets each running row's
  last-layer hidden state (after the final norm, as rollwise's torch engine gives it) from a forward hook
  on the model's decoder, registered for that generate call only and removed after it, also on error.
  transformers computes a token's hidden state in the pass that samples the next token, so such a
  watcher sees each row one decode step late and a row it ends drops the one token it was given past
  the decision (decoded, not charged). Under vLLM colocate (one process, no tensor parallelism, no sleep
  mode) the integration steps TRL's in-process vLLM itself (`_rollwise_watched_vllm`): one request per
  row, the watcher consulted after every engine step, rows it ends aborted (`LLMEngine.abort_request`)
  with exactly the tokens it saw; tokens only (vLLM shows no hidden states). vLLM server mode cannot:
  `trl vllm-serve` 1.16 has no abort endpoint. Not with tools nor mask_truncated_completions.
* **Per-prompt group sizes by padding.** TRL groups rewards by `.view(-1, num_generations)`, so a
  prompt keeps a block of G rows; a planner giving it n < G samples generates only n of them (the
  others are not generated: they hold a single EOS token), their rewards are NaN (TRL's nanmean and
  nanstd skip them, so advantages use the n real samples) and their loss mask is zero. n above G is
  capped. Under vLLM (colocate or server) the same padding holds: the round's live rows go to vLLM as
  one request each (the prompt repeated, n = 1), so vLLM samples exactly the rows a round needs (TRL's
  server path would otherwise ask n = G of every G-th row; server mode is tested through a stand-in
  for TRL's VLLMClient only). With a `rollout_func` (it samples every
  row), planners that set group sizes are refused. On vLLM's CPU build TRL's colocate weight sync
  fails (see `_cpu_weight_sync`); there the weights go in through vLLM's `reload_weights`. (The
  experimental async trainer's `rollout_worker` needs vLLM and a CUDA path, so it is not used.)
* **History.** Every rolled-out group is recorded in rollwise's PromptHistory from TRL's rewards
  (weighted sum of the reward functions; correct = that sum, or `correct_reward`'s value, >=
  `success_threshold`), so history-based planners (greso, hive's stage 1, prompt-replay, cdas, duet,
  frontier, depo) learn. HIVE's prompt entropy is one prefill-only pass of the trainer's model.
* **Refused**, by name and generation mode, when the trainer is built: stages and pilots with a
  rollout_func; in-flight control outside TRL's transformers generation and vLLM colocate, hidden states in flight (arrol)
  there and with a model without a decoder module to hook, per-step sampling parameters (e3's
  temperature), rows continued from their tokens (treepo), partial rollouts (april), per-prompt sizes
  where padding is impossible (above), a TRL version outside SUPPORTED, a dataset without a `prompt`
  column. One process
  only (several would have to agree on every planner decision); map-style datasets only (the planner
  indexes the pool). Evaluation runs TRL's own path, untouched. Checkpoints carry the planner's state,
  PromptHistory and RNG (`rollwise_planner.pkl` beside TRL's files), so a resumed run goes on learning.

Per planner step the trainer logs `rollwise/*` metrics and appends a dict to `trainer.rollwise_log`.
"""
from __future__ import annotations

import functools
import inspect
import math
import os
import pickle
from collections.abc import Callable

import numpy as np
import torch

from ..control.capabilities import PromptStats, find
from ..core.types import Group, Prompt, Rollout
from .host import LazyPool, PlannerHost, StepResult

TESTED = "1.16.0"
SUPPORTED = (">=1.16.0", "<1.17")  # the hooks below were checked against 1.16.0 only

try:
    import trl
    from datasets import Dataset
    from transformers import StoppingCriteria
    from trl import GRPOTrainer
    from trl.trainer.utils import nanstd
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
    """Raise, naming the hook, if the installed TRL changed a method this integration overrides, or if its
    version is outside the supported range (the in-flight and stage hooks rely on TRL's internals)."""
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
        raise RuntimeError(f"rollwise's TRL integration supports trl {','.join(SUPPORTED)} (tested with {TESTED}); "
                           f"trl {trl.__version__} is installed: install trl=={TESTED}")


class RollwiseGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose prompts, group sizes, stages and trained groups come from a rollwise planner.

    `planner`: a spec such as "greso+dapo" or "ar3po"; `planner_options`: {component: kwargs};
    `planner_seed` (default `args.seed`). `n`: the planner's default group size (default
    `num_generations`; set it below `num_generations` to leave room for planners that give some prompts
    more samples in one round). `answer_column`: the dataset column planners see as the answer
    (informational). `success_threshold` / `correct_reward`: what counts as a correct sample in
    PromptHistory (the weighted reward sum, or the named reward function's value, >= the threshold).
    `correction` / `correction_options`: a rollwise off-policy correction by name (`tis-token`,
    `mis-seq`, ...; default "none": on-policy, as rollwise's learner) applied to responses reused from
    an earlier step (AR3PO), from their stored behaviour log-probs. `drop_zero_adv`: the zero-variance
    loss normaliser (rollwise's learner's `drop_zero_adv`, TRL issue #6367): rows whose advantage is 0
    everywhere (every row of a group whose rewards are all equal) leave the loss mask and so the
    token-mean denominator `num_items_in_batch` (loss types dapo, bnpo, cispo, vespo; per-sequence
    losses still count them as zero-loss rows); refused with beta > 0, where such a row carries the KL
    gradient."""

    def __init__(self, *args, planner: str, planner_options: dict | None = None, planner_seed: int | None = None,
                 n: int | None = None, success_threshold: float = 1.0, correct_reward: str | None = None,
                 answer_column: str = "answer", correction: str = "none", correction_options: dict | None = None,
                 drop_zero_adv: bool = False, **kwargs):
        check_trl()
        beta = getattr(kwargs.get("args", args[2] if len(args) > 2 else None), "beta", 0.0)
        if drop_zero_adv and beta:  # checked first: TRL builds its reference model for beta > 0
            raise ValueError(f"drop_zero_adv=True with beta={beta}: a zero-advantage row still carries the KL "
                             "gradient (rollwise's learner ignores drop_zero_adv there); set beta=0 or drop it")
        super().__init__(*args, **kwargs)
        mode = generation_mode(self)
        host = f"TRL {trl.__version__} GRPOTrainer ({mode})"
        if self.accelerator.num_processes != 1:
            raise ValueError(f"{host} with a rollwise planner runs on one process (every process would have to "
                             f"make the same planner decisions); found {self.accelerator.num_processes}")
        if not isinstance(self.train_dataset, Dataset):
            raise TypeError(f"{host} with a rollwise planner needs a map-style datasets.Dataset (the planner "
                            f"indexes the prompt pool); got {type(self.train_dataset).__name__}")
        columns = list(self.train_dataset.column_names)
        if "prompt" not in columns:
            raise ValueError(f"{host}: the train dataset has no 'prompt' column (its columns: {', '.join(columns)})")
        if answer_column != "answer" and answer_column not in columns:
            raise ValueError(f"{host}: answer_column={answer_column!r} is not a column of the train dataset "
                             f"(its columns: {', '.join(columns)})")
        if correct_reward is not None and correct_reward not in self.reward_func_names:
            raise ValueError(f"correct_reward={correct_reward!r} is not one of the reward functions "
                             f"{self.reward_func_names}")
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(f"{host}: rollwise recomputes advantages over each trained group from the summed reward "
                             f"(TRL's sum_then_normalize); multi_objective_aggregation="
                             f"{self.multi_objective_aggregation!r} is not supported")
        from ..core import registry

        self._correction = registry.get("correction", correction).obj
        self._correction_options = dict(correction_options or {})
        registry.check_options(self._correction, self._correction_options, "correction_options")
        self._correction_name = correction
        self._drop_zero_adv = bool(drop_zero_adv)
        self._answer_column, self._threshold = answer_column, float(success_threshold)
        self._correct_col = None if correct_reward is None else self.reward_func_names.index(correct_reward)
        G = self.num_generations
        # Rows can be left out and rounds can be any size where TRL generates here, and under vLLM, where the
        # integration asks for exactly the round's rows (each prompt repeated, n = 1 per request); not through
        # a rollout_func (it samples every row) nor transformers' continuous batching
        own = mode.startswith("transformers") or self.use_vllm
        if self.use_vllm and self.args.vllm_mode == "colocate":
            _cpu_weight_sync(self.vllm_generation)
        inflight = mode == "transformers generation"  # not with tools, nor with mask_truncated_completions
        # vLLM colocate: the integration steps TRL's in-process vLLM itself and aborts single requests (one
        # process, no tensor parallelism, no sleep mode; not with tools nor mask_truncated_completions)
        inflight |= (mode == "vLLM colocate mode" and self.vllm_generation.tensor_parallel_size == 1
                     and not self.vllm_generation.enable_sleep_mode)
        # hidden states in flight (ARRoL) come from a forward hook on the model's decoder during generation
        hidden = inflight and not self.use_vllm and _decoder(self.accelerator.unwrap_model(self.model)) is not None
        pool = LazyPool(len(self.train_dataset), self._rollwise_prompt)
        self.rollwise = PlannerHost(
            planner, pool, batch_size=self.args.generation_batch_size // G, n=n or G, host=host,
            seed=self.args.seed if planner_seed is None else planner_seed, options=planner_options, max_n=G,
            per_prompt_n=own, prompt_stats=self._rollwise_prompt_stats, sampling=own, inflight=inflight,
            hidden=hidden, policy=_TokenizerView(self._tokenizer))
        # a component whose need for the policy is the prompt_stats prefill pass (declared PromptStats) is served
        bad = [c.name for c in self.rollwise.planner.components if c.needs_policy and not find([c], PromptStats)]
        if bad:
            raise ValueError(f"{host} cannot run planner {self.rollwise.name!r}: {', '.join(bad)} needs the policy "
                             "itself (per-response gradients), which the integration does not hand to planners")
        # behaviour log-probs are kept with each rollout where a planner may store responses for reuse
        self._keep_logps = self.rollwise.planner.needs_sampling or correction != "none"
        self.rollwise_log: list[dict] = []
        self._rollwise_live: list[bool] | None = None  # rows to generate in this round (None: all)
        self._rollwise_pad: torch.Tensor | None = None  # rows that are padding (or pruned) in this round
        self._rollwise_rewards: torch.Tensor | None = None  # this round's rewards_per_func
        self._rollwise_watch: _Watch | None = None  # this round's in-flight watcher
        self._rollwise_where: dict[int, tuple[int, int]] = {}  # id(rollout) -> (round, row) of this step

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
        outs = []
        self._rollwise_where = {}
        while requests:  # every round (first wave, stage, pilot, refill) is one call of TRL's own generation
            out, groups = self._rollwise_round(requests, host.watch, len(outs), host.watch_hidden)
            outs.append(out)
            requests = host.send(groups)
        result = host.finish()
        batch = self._rollwise_batch(outs, result)
        self._rollwise_report(result)
        return batch

    def _rollwise_round(self, requests, watch, k: int, hidden: bool = False) -> tuple[dict, list[Group]]:
        """Generate and score one round with TRL's own method: each request a block of G rows, of which
        the first n are sampled (the rest is padding, never generated). With a watcher, generation stops
        single rows as it decides (`hidden`: it reads each running row's last hidden state too).
        Returns TRL's output and one Group of Rollouts per request."""
        G = self.num_generations
        rows, live, slots = [], [], []
        for b, r in enumerate(requests):
            row = self._rollwise_row(r.prompt.id)
            rows += [dict(row) for _ in range(G)]
            live += [True] * r.n + [False] * (G - r.n)
            slots += [(b, j) for j in range(r.n)]
        self._rollwise_live = None if all(live) else live
        self._rollwise_pad = torch.tensor([not x for x in live])
        self._rollwise_watch = None if watch is None else _Watch(
            watch, slots, [r.n for r in requests], [b * G + j for b, j in slots], self.eos_token_ids,
            self.max_completion_length, hidden)
        try:
            out = super()._generate_and_score_completions(rows)
            rewards_per_func, watched = self._rollwise_rewards, self._rollwise_watch
        finally:
            self._rollwise_live, self._rollwise_pad, self._rollwise_rewards = None, None, None
            self._rollwise_watch = None
        if rewards_per_func is None or rewards_per_func.shape[0] != len(rows):
            raise RuntimeError("TRL's _generate_and_score_completions did not score this round through "
                               "_calculate_rewards: the integration does not match the installed TRL")
        if watched is not None and not watched.calls:
            raise RuntimeError("TRL's generation did not pass through model.generate's stopping criteria: the "
                               "in-flight integration does not match the installed TRL")
        total = torch.nan_to_num((rewards_per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1), nan=0.0)
        judged = total if self._correct_col is None else torch.nan_to_num(rewards_per_func[:, self._correct_col])
        correct = judged >= self._threshold
        logps = None
        if self._keep_logps:  # the behaviour log-probs (mu) of what was sampled: the same model, just now
            logps = out.get("old_per_token_logps")
            if logps is None:
                logps = self._rollwise_logps(out)
        version, eos = int(self.state.global_step), set(self.eos_token_ids)
        groups = []
        for b, r in enumerate(requests):
            rollouts = []
            for j in range(r.n):
                i = b * G + j
                keep = out["completion_mask"][i].bool()
                toks = out["completion_ids"][i][keep].cpu()
                action = watched.actions.get(i) if watched is not None else None
                finish = action or ("eos" if len(toks) and int(toks[-1]) in eos else "length")
                ro = Rollout(r.prompt.id, out["prompt_ids"][i][out["prompt_mask"][i].bool()].tolist(), toks,
                             logps[i][keep].float().cpu() if logps is not None else torch.zeros(len(toks)),
                             "", finish, version, r.purpose, reward=float(total[i]), correct=bool(correct[i]),
                             status="pruned" if action == "pruned" else "done", temperature=float(self.temperature),
                             meta=dict(watched.marks.get(i, {})) if watched is not None else {})
                self._rollwise_where[id(ro)] = (k, i)
                rollouts.append(ro)
            groups.append(Group(r.prompt, rollouts))
        return out, groups

    def _rollwise_logps(self, out: dict, rows=None) -> torch.Tensor:
        """Per-token log-probs of the current model over `out`'s rows (TRL's own scoring pass, no grad)."""
        prompt_completion = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, prompt_completion, attention, out["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size)
        return logps

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        # The round's padding rows are not generated; the mask is consumed by the first call of a round
        # (tool-calling turns after it generate as usual). A watcher rides on TRL's own model.generate call.
        live, self._rollwise_live = self._rollwise_live, None
        watch = self._rollwise_watch
        if live is None and watch is None:
            if self.use_vllm and self._rollwise_pad is not None:  # a planner round: one request per row
                args, kwargs = _one_per_row(args, kwargs)
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        live = live or [True] * len(prompt_ids)
        if len(live) != len(prompt_ids):
            raise RuntimeError(f"TRL generated {len(prompt_ids)} rows for a round of {len(live)}: the integration "
                               "does not match the installed TRL")
        images = args[0] if args else kwargs.get("images")
        fields = args[1] if len(args) > 1 else kwargs.get("multimodal_fields")
        if images is not None or fields:
            raise ValueError("per-prompt group sizes (padding) are not supported with multimodal prompts")
        keep = [ids for ids, x in zip(prompt_ids, live) if x]
        if self.use_vllm:  # the round's rows are not blocks of G: one vLLM request (n = 1) per row
            args, kwargs = _one_per_row(args, kwargs)
        if watch is None:
            completion_ids, logprobs = super()._generate_single_turn(keep, *args, **kwargs)
        elif self.use_vllm:
            completion_ids, logprobs = self._rollwise_watched_vllm(watch, keep)
        else:
            completion_ids, logprobs = self._rollwise_watched(watch, keep, *args, **kwargs)
        eos = self.eos_token_ids[0]
        it = iter(range(len(keep)))
        out_ids, out_lp = [], []
        for x in live:
            j = next(it) if x else None
            out_ids.append(completion_ids[j] if x else [eos])
            if logprobs is not None:
                out_lp.append(logprobs[j] if x else [0.0])
        return out_ids, (out_lp if logprobs is not None else None)

    def _rollwise_watched(self, watch: "_Watch", prompt_ids, *args, **kwargs):
        """TRL's transformers generation with the watcher as a per-row stopping criterion of its
        model.generate call (bound on the model for this call only); rows the watcher ended keep exactly
        the tokens they had when it decided, and pruned rows become padding (no reward, no loss). A
        watcher that reads hidden states gets them from a forward hook on the model's decoder, which
        keeps the last position's hidden state of every forward (removed when generation ends)."""
        from transformers import StoppingCriteriaList

        model = self.accelerator.unwrap_model(self.model)
        model.generate = functools.partial(model.generate, stopping_criteria=StoppingCriteriaList([watch]))
        hook = _decoder(model).register_forward_hook(watch.keep_hidden) if watch.hidden else None
        try:
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        finally:
            model.__dict__.pop("generate", None)
            if hook is not None:
                hook.remove()
        for r, cut in watch.cut.items():
            completion_ids[r] = list(completion_ids[r][:cut])
            if logprobs is not None:
                logprobs[r] = list(logprobs[r][:cut])
        for row, action in watch.actions.items():  # keyed by the round's row (padding rows included)
            if action == "pruned":
                self._rollwise_pad[row] = True
        return completion_ids, logprobs

    def _rollwise_watched_vllm(self, watch: "_Watch", prompt_ids):
        """TRL's colocate vLLM call, stepped here so that the watcher can end single rows: each row is one
        request (n = 1, TRL's sampling parameters); after every engine step (one token per running row) the
        watcher sees each running row's tokens, as under transformers' generate (rows that vLLM started
        later, past its max_num_seqs, are shown at their own lengths), and a row it ends is aborted in vLLM
        (`LLMEngine.abort_request`), keeping exactly the tokens it was shown.
        Returns what TRL's `_generate_single_turn` returns: completion ids and the sampled tokens' log-probs."""
        import uuid

        from trl.generation.vllm_generation import extract_logprobs
        from vllm import SamplingParams

        gen = self.vllm_generation
        if self.state.global_step != self._last_loaded_step:  # as TRL's own vLLM path does
            gen.sync_weights()
            self._last_loaded_step = self.state.global_step
        params = SamplingParams(**{"n": 1, "repetition_penalty": gen.repetition_penalty, "temperature": gen.temperature,
                                   "top_p": gen.top_p, "top_k": gen.top_k, "min_p": 0.0 if gen.min_p is None else gen.min_p,
                                   "max_tokens": gen.max_completion_length, "logprobs": gen.logprobs,
                                   **gen.generation_kwargs})
        engine = gen.llm.llm_engine
        tag = uuid.uuid4().hex
        ids = [f"rollwise-{tag}-{r}" for r in range(len(prompt_ids))]
        for rid, ids_ in zip(ids, prompt_ids):
            engine.add_request(rid, {"prompt_token_ids": list(ids_)}, params)
        latest, row = {}, {rid: r for r, rid in enumerate(ids)}
        watch.prompt_len = 0
        try:
            while engine.has_unfinished_requests():
                for o in engine.step():
                    if o.request_id in row:
                        latest[o.request_id] = o
                        if o.finished:
                            watch.ended[row[o.request_id]] = True
                by_length: dict[int, list[int]] = {}  # rows that started later (vLLM's max_num_seqs) run behind
                for r, rid in enumerate(ids):
                    if not watch.ended[r] and rid in latest:
                        by_length.setdefault(len(latest[rid].outputs[0].token_ids), []).append(r)
                before = set(watch.cut)
                for k, rows in sorted(by_length.items()):
                    comp = torch.zeros((len(ids), k), dtype=torch.long)
                    for r in rows:
                        comp[r] = torch.tensor(list(latest[ids[r]].outputs[0].token_ids))
                    watch.calls += 1
                    watch._consult(comp, None, only=set(rows))
                ended = [ids[r] for r in set(watch.cut) - before]
                if ended:
                    engine.abort_request(ended)
        except BaseException:
            engine.abort_request([rid for rid in ids if rid not in latest or not latest[rid].finished])
            raise
        outs = [latest[rid] for rid in ids]
        completion_ids = [list(o.outputs[0].token_ids) for o in outs]
        logprobs, _ = extract_logprobs(outs)
        logprobs = None if logprobs is None else [[lp[0] for lp in seq] for seq in logprobs]
        for r, cut in watch.cut.items():  # exactly the tokens the watcher was shown
            completion_ids[r] = completion_ids[r][:cut]
            if logprobs is not None:
                logprobs[r] = logprobs[r][:cut]
        for row_, action in watch.actions.items():
            if action == "pruned":
                self._rollwise_pad[row_] = True
        return completion_ids, logprobs

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        if self._rollwise_pad is not None:  # inside a planner round
            rewards_per_func[self._rollwise_pad.to(rewards_per_func.device)] = math.nan  # padding, pruned: no reward
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
    def _rollwise_batch(self, outs: list[dict], result: StepResult) -> dict:
        """The trained groups' rows, whole (every stage of a prompt merged, reused responses included),
        then rows that do not train up to TRL's batch shape (at least B x G rows, a multiple of
        steps_per_generation). Advantages are recomputed over each whole group with TRL's formula;
        in-flight importance weights (DUET's 1/q) and the reuse correction multiply them."""
        G, B = self.num_generations, self.rollwise.batch_size
        for out in outs:
            unknown = set(out) - _LEFT_PADDED - _RIGHT_PADDED - _PER_ROW - {"num_items_in_batch"}
            if unknown:
                raise ValueError(f"TRL's batch has fields {sorted(unknown)} that the rollwise integration cannot "
                                 "merge (multimodal inputs are not supported)")
        trained = [(self._rollwise_where.get(id(r)), r) for g in result.trained for r in g.rollouts]
        used = {src for src, _ in trained if src is not None}
        spare = [(k, i) for k, out in enumerate(outs) for i in range(out["completion_ids"].shape[0]) if (k, i) not in used]
        spg = self.args.steps_per_generation
        size = -(-max(B * G, len(trained)) // spg) * spg
        fill = spare or sorted(used)
        entries = [src if src is not None else r for src, r in trained]
        entries += [fill[i % len(fill)] for i in range(size - len(trained))]
        dev = outs[0]["completion_ids"].device
        merged = {}
        for key in outs[0]:
            if key in ("num_items_in_batch", "advantages"):
                continue
            parts = [outs[e[0]][key][e[1]] if isinstance(e, tuple) else
                     _reused_part(e, key, dev, outs[0][key].shape[-1] == 1) for e in entries]
            width = max(p.shape[-1] for p in parts)
            fill_value = self._tokenizer.pad_token_id if key in ("prompt_ids", "completion_ids") else (
                1 if key == "tool_mask" else 0)
            side = "left" if key in _LEFT_PADDED else "right"
            merged[key] = torch.stack([_pad_to(p, width, fill_value, side) for p in parts])
        at = [i for i, e in enumerate(entries) if not isinstance(e, tuple)]
        current = None
        if at and ({"old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"} & set(merged)
                   or self._correction_name != "none"):
            rows = {k: merged[k][at] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
            current = self._rollwise_logps(rows)  # the current policy on the reused rows
            # A reused row trains as if sampled now (PPO ratio 1, vLLM importance ratio 1, as under
            # transformers generation): its staleness is what `correction=` weighs, from its stored mu
            for key in ("old_per_token_logps", "sampling_per_token_logps"):
                if key in merged:
                    merged[key][at] = current.to(merged[key].dtype)
            if "ref_per_token_logps" in merged:
                if self.ref_model is None:
                    raise RuntimeError("reused responses need reference log-probs, and this trainer has no ref_model "
                                       "(a PEFT reference): set beta=0 or give ref_model")
                prompt_completion = torch.cat([rows["prompt_ids"], rows["completion_ids"]], dim=1)
                with torch.no_grad():
                    ref, _, _ = self._get_per_token_logps_and_entropies(
                        self.ref_model, prompt_completion, torch.cat([rows["prompt_mask"], rows["completion_mask"]], 1),
                        rows["completion_ids"].size(1))
                merged["ref_per_token_logps"][at] = ref.to(merged["ref_per_token_logps"].dtype)
        # the loss mask: trained rows only
        n = len(trained)
        trains = torch.tensor([i < n for i in range(size)], device=dev)
        merged["completion_mask"] = merged["completion_mask"] * trains.unsqueeze(1).to(merged["completion_mask"].dtype)
        # advantages over each whole group, TRL's normalisation; row weights and the reuse correction
        adv = torch.zeros(size, device=dev)
        flat = trl_advantages([[r.reward for r in g.rollouts] for g in result.trained], self.scale_rewards)
        adv[:n] = flat.to(dev)
        adv[:n] *= torch.tensor([float(r.meta.get("is_weight", 1.0)) for _, r in trained], device=dev)
        if at and self._correction_name != "none":
            mask = merged["completion_mask"][at].float()
            mu = torch.stack([_pad_to(merged_mu, mask.shape[1], 0.0, "right") for merged_mu in
                              [entries[i].logprobs_T.to(dev).float() for i in at]])
            from ..learn.corrections import CorrectionInput

            w, keep = self._correction(CorrectionInput(current.float(), current.float(), mu, mask), **self._correction_options)
            factor = torch.ones_like(merged["completion_mask"], dtype=torch.float32)
            factor[at] = (w * keep).float()
            adv = adv.unsqueeze(1) * factor  # TRL's loss takes (B, T) advantages as they are
        if self._drop_zero_adv:  # the zero-variance normaliser: rows with no signal leave the denominator
            flat = adv[:n] if adv.dim() == 1 else adv[:n].abs().amax(1)
            dead = torch.zeros(size, dtype=torch.bool, device=dev)
            dead[:n] = flat == 0
            merged["completion_mask"] = merged["completion_mask"] * (~dead).unsqueeze(1).to(merged["completion_mask"].dtype)
            result.metrics["zero_adv_rows"] = int(dead.sum())
        merged["advantages"] = adv
        loss_mask = merged["completion_mask"] if "tool_mask" not in merged else merged["completion_mask"] * merged["tool_mask"]
        merged["num_items_in_batch"] = loss_mask.sum()
        ages = [int(self.state.global_step) - r.policy_version for _, r in trained if _ is None]
        if ages:
            result.metrics["reused_age"] = float(np.mean(ages))
        return merged

    def _rollwise_report(self, result: StepResult) -> None:
        m = result.metrics
        for key in ("rounds", "tokens", "samples", "trained_groups", "filtered_groups", "zero_variance_trained",
                    "capped_requests", "skipped", "generated_tokens", "pruned_samples", "pruned_tokens",
                    "reused_samples", "reused_age", "measurement_tokens", "zero_adv_rows"):
            if key in m:
                self._metrics["train"][f"rollwise/{key}"].append(float(m[key]))
        self.rollwise_log.append({"step": result.step, "global_step": int(self.state.global_step), **m})


def trl_advantages(rewards: list[list[float]], scale_rewards: str = "group") -> torch.Tensor:
    """Advantages of whole groups (any sizes), flattened in order, by TRL's sum_then_normalize formula:
    r - group mean, divided by (std + 1e-4) with TRL's own `nanstd` (Bessel-corrected), the group's std
    for scale_rewards="group", the batch's for "batch", no division for "none"; NaN (a group of one) -> 0;
    a group whose rewards are all equal -> exactly 0 (as rollwise's grpo: the mean of equal floats can be
    off by a rounding error, which drop_zero_adv would otherwise keep).
    tests/test_integrations_trl_stages.py checks it against the advantages TRL's own code computes."""
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', not {scale_rewards!r}")
    parts = [torch.tensor(rs, dtype=torch.float32) for rs in rewards]
    if not parts:
        return torch.zeros(0)
    everything = torch.cat(parts)
    batch_std = nanstd(everything) if everything.numel() > 1 else torch.tensor(0.0)
    out = []
    for x in parts:
        a = x - torch.nanmean(x)
        if scale_rewards != "none":
            std = batch_std if scale_rewards == "batch" else nanstd(x)
            a = a / (std + 1e-4)
        seen = x[~x.isnan()]
        if seen.numel() and (seen == seen[0]).all():
            a = torch.zeros_like(a)
        out.append(torch.nan_to_num(a, nan=0.0))
    return torch.cat(out)


def generation_mode(trainer) -> str:
    """Which of TRL's generation paths the trainer uses: what decides which components it can serve."""
    if trainer.use_vllm:
        mode = f"vLLM {getattr(trainer.args, 'vllm_mode', '')} mode".replace("  ", " ")
    elif trainer.rollout_func is not None:
        return "rollout_func"
    elif trainer.use_transformers_continuous_batching:
        return "transformers continuous batching"
    else:
        mode = "transformers generation"
    if trainer.tools:  # multi-turn: in-flight control is refused
        mode += " with tools"
    if trainer.args.mask_truncated_completions:  # a row stopped after its answer has no EOS: TRL would mask it
        mode += " with mask_truncated_completions"
    return mode


class _TokenizerView:
    """What planners see as ctx.policy inside TRL: the trainer's tokenizer, for text options (DUET's marker)."""

    def __init__(self, tokenizer):
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])


class _Watch(StoppingCriteria):
    """A round's in-flight watcher as a per-row stopping criterion of transformers' generate, which calls it
    after every decode step. It shows the watcher {request index: [each sample's tokens so far, or None once
    it ended]} for requests with a sample still running, as the StepDriver does, and ends the rows it stops
    or prunes. `slots[r]` is generated row r's (request index, sample); `rows[r]` its row in TRL's round.

    With `hidden` each running sample is a pair (tokens_T, h_D), h_D the last layer's hidden state (after
    the final norm) at its last token, as rollwise's torch engine shows it. transformers computes that
    hidden state in the forward pass that samples the *next* token, so the hook's h at call K belongs to
    token K-1: a hidden watcher is shown every row as it was one token earlier (K-1 tokens, h at token
    K-1), exactly what the driver shows at K-1, and a row it ends keeps K-1 tokens. The K-th token each
    such row was already given is dropped (decoded, never charged: one token per ended row)."""

    def __init__(self, watch, slots, sizes, rows, eos_ids, max_new: int, hidden: bool = False):
        self.watch, self.slots, self.sizes, self.rows, self.max_new = watch, slots, sizes, rows, int(max_new)
        self.hidden = bool(hidden)
        self.index = {s: r for r, s in enumerate(slots)}
        self.eos = torch.tensor(list(eos_ids))
        self.ended = torch.zeros(len(slots), dtype=torch.bool)
        self.cut: dict[int, int] = {}  # generated row -> tokens it keeps (the watcher ended it)
        self.actions: dict[int, str] = {}  # TRL row -> "stop" / "pruned"
        self.marks: dict[int, dict] = {}  # TRL row -> Rollout.meta entries (is_weight, ...)
        self.prompt_len: int | None = None
        self.h_BD: torch.Tensor | None = None  # the decoder's output at the last position of the latest forward
        self.calls = 0

    def keep_hidden(self, module, args, output) -> None:
        """Forward hook on the decoder: keep the last position's hidden state of each row (on the CPU)."""
        h_BTD = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        self.h_BD = h_BTD[:, -1].detach().float().cpu()

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.prompt_len is None:  # first call: one token generated past the (left-padded) prompts
            self.prompt_len = input_ids.shape[1] - 1
        comp = input_ids[:, self.prompt_len:].cpu()
        new_eos = torch.isin(comp[:, -1], self.eos)
        if not self.hidden:
            self.ended |= new_eos  # ended on its own (rows after EOS stay ended)
            self._consult(comp, None)
            return self.ended.clone().to(input_ids.device)
        if self.h_BD is None or self.h_BD.shape[0] != comp.shape[0]:
            raise RuntimeError("the decoder's forward hook did not see TRL's generation batch (rows "
                               f"{None if self.h_BD is None else self.h_BD.shape[0]}, generated {comp.shape[0]}): "
                               "the hidden-state integration does not match the installed TRL or model")
        if comp.shape[1] > 1:  # the rows as they were one token ago, with their hidden states then
            self._consult(comp[:, :-1], self.h_BD)
        self.ended |= new_eos
        return self.ended.clone().to(input_ids.device)

    def _consult(self, comp, h_BD, only: set | None = None) -> None:
        """Show the watcher the running rows (`only`: those rows, all `comp.shape[1]` tokens long)."""
        k = comp.shape[1]
        running: dict[int, list] = {}
        for r, (b, j) in enumerate(self.slots):
            if not self.ended[r] and k < self.max_new and (only is None or r in only):
                running.setdefault(b, [None] * self.sizes[b])[j] = \
                    comp[r].clone() if h_BD is None else (comp[r].clone(), h_BD[r].clone())
        for d in (self.watch(running) if running else []):
            if d.action not in ("keep", "stop", "pruned"):
                raise ValueError(f"in-flight decision: action must be 'keep', 'stop' or 'pruned', not {d.action!r}")
            r = self.index[(d.index, d.sample)]
            if d.weight is not None or d.meta:
                m = self.marks.setdefault(self.rows[r], {})
                m.update(d.meta or {})
                if d.weight is not None:
                    m["is_weight"] = float(d.weight)
            if d.action != "keep" and not self.ended[r]:
                self.ended[r] = True
                self.cut[r] = k
                self.actions[self.rows[r]] = d.action


def _one_per_row(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`_generate_single_turn`'s (images, multimodal_fields, num_generations, ...) with num_generations = 1:
    TRL's vLLM server path asks for n = num_generations samples of every num_generations-th prompt, which
    is right for blocks of G rows only; with 1 every row is its own request (colocate already sends n = 1)."""
    if len(args) > 2:
        return (*args[:2], 1, *args[3:]), kwargs
    return args, {**kwargs, "num_generations": 1}


def _cpu_weight_sync(generation) -> None:
    """On vLLM's CPU build, TRL's colocate weight sync (`model.load_weights` per parameter) fails: the CPU
    backend re-packs linear weights after loading and drops their `weight_loader` ("'Parameter' object has
    no attribute 'weight_loader'", vLLM 0.32). There the trainer's weights go in through the worker's
    `reload_weights`, as rollwise's own vLLM engine does (generate/vllm_engine.py). GPU builds keep TRL's."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return

    def sync_weights():
        seen, weights = set(), []
        for name, param in generation._iter_named_params():
            if param.data_ptr() not in seen:  # tied weights once: vLLM ties them itself
                seen.add(param.data_ptr())
                weights.append((name, param.detach().to("cpu").contiguous()))
        generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                                "is_checkpoint_format": True})
        generation.llm.reset_prefix_cache()

    generation.sync_weights = sync_weights


def _decoder(model):
    """The module whose output's last_hidden_state is the last layer's hidden states after the final norm
    (what rollwise's engine shows ARRoL): a transformers causal LM's decoder, or None if it has none."""
    get = getattr(model, "get_decoder", None)
    try:
        dec = get() if callable(get) else None
    except Exception:  # noqa: BLE001 - a model without a separable decoder
        return None
    return dec if isinstance(dec, torch.nn.Module) and dec is not model else None


def _reused_part(r: Rollout, key: str, device, per_sequence: bool = False) -> torch.Tensor:
    """A response reused from an earlier step as one row of TRL's batch (log-prob fields are filled in later;
    its vLLM importance ratio is 1, per token or, `per_sequence`, one per row)."""
    p = torch.tensor(list(r.prompt_ids), dtype=torch.long, device=device)
    c = r.token_ids_T.to(device=device, dtype=torch.long)
    if key == "prompt_ids":
        return p
    if key == "prompt_mask":
        return torch.ones_like(p)
    if key == "completion_ids":
        return c
    if key in ("completion_mask", "tool_mask"):
        return torch.ones_like(c)
    if key in ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"):
        return torch.zeros(len(c), device=device)
    if key == "importance_sampling_ratio":
        return torch.ones(1 if per_sequence else len(c), device=device)
    raise ValueError(f"a reused response cannot fill TRL's batch field {key!r}")


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
