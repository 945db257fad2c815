"""The learner: a Batch of groups -> one policy update (advantages, loss, correction, AdamW).

Parts are looked up by name in the registry, so this file never changes when a new estimator,
loss or correction is added. A rollout may carry a per-rollout importance weight (`meta["is_weight"]`,
e.g. DUET's 1/q for a sample that survived its abort gate): detached, it multiplies every token's loss of
that row, on top of the correction's per-token weights. An estimator that keeps state across batches declares a tracker
(`advantages.tracks`, e.g. MSSR's per-prompt baseline); the learner owns it and checkpoints it along
with a stateful recomposer's buffer (RoRecomp).

Device: advantages, recomposition and minibatch order are computed on the CPU from the rollouts (batch
data); the tensors that meet the policy's log-probs (advantages, behaviour log-probs, masks, weights)
are moved to the policy's device once per update.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch

from ..core import registry
from ..core.schema import Bool, Float, Int, Pair, Rule, at_least, checked, finite, one_of
from ..core.settings import setting
from ..core.types import Batch
from ..policy.lora import apply_lora
from .advantages import batch_input
from .corrections import CorrectionInput
from .losses import KL_ESTIMATORS, AggTotals, LossInput, kl_penalty
from .precision import autocast, check_precision


@checked
@dataclass
class LearnerConfig:
    lr: Annotated[Float, finite(0, strict=True)] = setting(1e-4, "AdamW learning rate")
    weight_decay: Annotated[Float, finite(0)] = setting(0.0, "AdamW weight decay")
    betas: Annotated[Pair, Rule(lambda v: all(0 <= b < 1 for b in v), "two numbers in [0, 1)")] = setting((0.9, 0.999), "AdamW betas, two numbers in [0, 1)")
    grad_clip: Annotated[Float, Rule(lambda v: v > 0, "> 0 (inf = no clipping)")] = setting(1.0, "clip the gradient's global norm to this (inf: no clipping)")
    minibatches: Annotated[Int, at_least(1)] = setting(2, "optimizer steps per rollout batch")
    epochs: Annotated[Int, at_least(1)] = setting(1, "passes over the rollout batch")
    micro_batch_rows: Annotated[Int, at_least(1)] = setting(128, "rows per forward/backward (memory only; results do not change)")
    micro_batch_tokens: Annotated[Int, at_least(1, "or unset: micro-batches by rows")] | None = setting(None, "instead of micro_batch_rows: at most this many tokens per "
                                                   "forward/backward, counted padded (rows x longest prompt + "
                                                   "response); a longer row goes alone (None: by rows)")
    precision: Annotated[str, one_of("fp32", "bf16", words="fp32 or bf16")] = setting("fp32", "fp32, or bf16: autocast forward passes over float32 weights, optimizer "
                                     "state and log-prob/loss arithmetic (docs/gpu.md)")
    lora: dict = setting(help="LoRA through peft, adapter-only training of a Hugging Face model: {r: 16, alpha: 32, "
                              "dropout: 0.0, target_modules: all-linear} (empty: full fine-tuning)", factory=dict)
    gradient_checkpointing: Bool = setting(False, "recompute activations in the backward pass (Hugging Face "
                                                  "models): less memory, ~1/3 more learner compute")
    advantage: str = setting("grpo", "advantage estimator (`rollwise list`), e.g. grpo, rloo, mc-grpo")
    advantage_options: dict = setting(help="the estimator's options; \"tracker\": options of the estimator's "
                                           "tracker (state kept across batches, e.g. MSSR's)", factory=dict)
    loss: str = setting("ppo-clip", "policy loss, e.g. ppo-clip, gspo, cispo")
    loss_options: dict = setting(help="the loss's options, e.g. {clip_low: 0.2, clip_high: 0.28}", factory=dict)
    loss_agg: str = setting("token-mean", "how token losses are aggregated, e.g. token-mean, seq-mean-token-mean")
    loss_agg_options: dict = setting(help="the aggregation's options", factory=dict)
    correction: str = setting("none", "off-policy correction, e.g. tis-token, areal-decoupled (none: off)")
    correction_options: dict = setting(help="the correction's options", factory=dict)
    recompose: str = setting("none", "batch recomposition between Replay and the learner: rorecomp, shuffle-r1 "
                                     "(none: off)")
    recompose_options: dict = setting(help="the recomposer's options; \"advantage\"/\"advantage_options\" "
                                           "override the learner's estimator for it", factory=dict)
    kl_coef: Annotated[Float, finite(0)] = setting(0.0, "KL(pi_theta || pi_ref) penalty, aggregated like the loss; > 0 needs a "
                                  "reference policy")
    kl_estimator: str = setting("k3", "verl's kl_loss_type names: k1|kl, abs, k2|mse, k3|low_var_kl; a "
                                      "trailing + uses the k2 gradient")
    # Skip rows whose advantage is 0 everywhere: without a KL term they carry no gradient. They also
    # leave the denominators (token-mean counts only the rows kept). Ignored when kl_coef > 0, where
    # such a row still carries the KL gradient.
    drop_zero_adv: Bool = setting(True, "skip rows whose advantage is 0 everywhere (they carry no gradient "
                                        "without KL; ignored when kl_coef > 0)")
    recompute_old: Bool = setting(True, "pi_old from a fresh forward pass (false: the behaviour log-probs mu)")


class Learner:
    def __init__(self, policy, cfg: LearnerConfig, ref_policy=None, seed: int = 0):
        self.policy, self.cfg, self.ref = policy, cfg, ref_policy
        if cfg.kl_coef > 0 and ref_policy is None:
            raise ValueError("kl_coef > 0 needs a reference policy")
        if cfg.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"unknown kl_estimator {cfg.kl_estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")
        dev = getattr(policy, "device", "cpu")  # a policy without one (a test double) is on the CPU
        check_precision(cfg.precision, dev)
        self.autocast = lambda: autocast(cfg.precision, dev)  # around forward passes only (learn/precision.py)
        if cfg.lora:
            apply_lora(policy, cfg.lora)  # wraps policy.model in place (policy/lora.py)
        if cfg.gradient_checkpointing:
            enable_checkpointing(policy)
        trained = [p for p in policy.model.parameters() if p.requires_grad]  # all, or LoRA's adapters
        self.opt = torch.optim.AdamW(trained, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.gen = torch.Generator(device="cpu").manual_seed(seed)  # minibatch shuffling (on the CPU, any device)
        self.loss = registry.get("loss", cfg.loss).obj
        self.agg = registry.get("aggregation", cfg.loss_agg).obj
        self.correction = registry.get("correction", cfg.correction).obj
        rc = None if cfg.recompose == "none" else registry.get("recompose", cfg.recompose).obj
        self.recompose = rc() if isinstance(rc, type) else rc  # a class is a stateful recomposer (RoRecomp)
        self.recompose_options = dict(cfg.recompose_options)
        # One estimator per learner, run before any recomposition (spec E4). An `advantage` named in
        # recompose_options overrides learner.advantage (the recomposer is then its only consumer); its
        # options then default to none, as the learner's belong to another estimator.
        name = self.recompose_options.pop("advantage", cfg.advantage)
        options = self.recompose_options.pop("advantage_options",
                                             cfg.advantage_options if name == cfg.advantage else {})
        self.advantage = registry.get("advantage", name).obj
        self.advantage_options = dict(options or {})
        tracker_options = self.advantage_options.pop("tracker", None)
        factory = getattr(self.advantage, "tracker", None)  # state kept across batches (advantages.tracks)
        if factory is None and tracker_options is not None:
            raise ValueError(f"advantage {name!r} keeps no state across batches: advantage_options.tracker "
                             "does not apply")
        self.tracker = factory(**(tracker_options or {})) if factory is not None else None

    def advantages(self, batch: Batch) -> torch.Tensor:
        """Advantages of every rollout of `batch` in its own groups: [N], or [N, T] for token-level
        estimators. A tracker gives the estimator only what earlier batches taught it (MSSR's baseline is
        the prior, spec D9), then records this batch's outcomes for the next ones."""
        if not batch.rollouts:
            return torch.zeros(0, device="cpu")
        inp = batch_input(batch)
        if self.tracker is not None:
            inp = self.tracker.fill(inp, batch)
        adv = self.advantage(inp, **self.advantage_options)
        if self.tracker is not None:
            self.tracker.observe(batch)
        return adv

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        adv = self.advantages(batch)  # group statistics first, recomposition second (spec E4)
        if self.recompose is not None:
            batch = self.recompose(batch, self.gen, adv, **self.recompose_options)
            adv = batch.adv_N
        rollouts = batch.rollouts
        stats = {"batch_groups": len(batch.groups), "batch_rollouts": len(rollouts),
                 "zero_var_frac": (sum(g.zero_variance for g in batch.groups) / len(batch.groups)
                                   if batch.groups else 0.0)}
        if not rollouts:
            return stats | {"updated": 0}
        prompts = [r.prompt_ids for r in rollouts]
        responses = [r.token_ids_T.tolist() for r in rollouts]
        self._temps = [float(r.temperature) for r in rollouts]  # score each row as it was sampled
        dev = getattr(self.policy, "device", "cpu")  # a policy without one (a test double) is on the CPU
        behav_NT = _pad([r.logprobs_T for r in rollouts]).to(dev)
        mask_NT = _pad([torch.ones(r.num_tokens, device="cpu") for r in rollouts]).to(dev)
        row_w = [float(getattr(r, "meta", {}).get("is_weight", 1.0)) for r in rollouts]
        # None: nothing to multiply
        row_w_N = torch.tensor(row_w, device=dev) if any(w != 1.0 for w in row_w) else None
        adv = adv.to(dev)
        adv_NT = (adv.unsqueeze(1) if adv.dim() == 1 else adv).expand_as(mask_NT) * mask_NT
        stats["mean_abs_adv"] = float(adv_NT.abs().sum(1).div(mask_NT.sum(1).clamp(min=1)).mean())

        rows = torch.arange(len(rollouts), device="cpu")  # row indices stay on the CPU; they index device tensors
        if cfg.drop_zero_adv and cfg.kl_coef == 0:  # a zero-advantage row still has a KL gradient
            rows = rows[(adv_NT != 0).any(1).cpu()]
        stats["learn_rows"] = int(rows.numel())
        if rows.numel() == 0:
            return stats | {"updated": 0}

        with torch.no_grad():  # pi_old and pi_ref, once per batch
            old_NT = (self._logp(prompts, responses, rows)[0] if cfg.recompute_old else behav_NT[rows])
            ref_NT = self._logp(prompts, responses, rows, policy=self.ref)[0] if cfg.kl_coef > 0 else None

        self.policy.model.train()
        log = {"loss": 0.0, "entropy": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0}
        n_updates = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(rows.numel(), generator=self.gen, device="cpu")
            for mb in order.chunk(min(cfg.minibatches, rows.numel())):
                totals = AggTotals(tokens=int(mask_NT[rows[mb]].sum()), seqs=int(mb.numel()))
                self.opt.zero_grad(set_to_none=True)
                for part in self._micro_batches(rows[mb].tolist(), prompts, responses):
                    micro = mb[part]
                    idx = rows[micro]
                    logp, ent = self._logp(prompts, responses, idx, with_grad=True)
                    T = logp.shape[1]
                    m, old, beh = mask_NT[idx, :T], old_NT[micro, :T], behav_NT[idx, :T]
                    weight, keep = self.correction(CorrectionInput(logp, old, beh, m), **cfg.correction_options)
                    if row_w_N is not None:
                        weight = weight * row_w_N[idx].unsqueeze(1)
                    m0, m = m, m * keep  # m0: pre-mask, for the denominators (spec E2)
                    loss_NT, lstats = self.loss(LossInput(logp, old, adv_NT[idx, :T], m, weight), **cfg.loss_options)
                    if ref_NT is not None:  # KL(pi || ref) per token (losses.kl_penalty)
                        kl_NT = kl_penalty(logp, ref_NT[micro, :T], cfg.kl_estimator)
                        loss_NT = loss_NT + cfg.kl_coef * kl_NT
                        log["kl"] += float((kl_NT.detach() * m).sum()) / max(totals.tokens, 1)
                    loss = self.agg(loss_NT * keep, m0, totals, **cfg.loss_agg_options)
                    loss.backward()
                    log["loss"] += float(loss.detach())
                    log["entropy"] += float((ent * m).sum()) / max(totals.tokens, 1)
                    log["clip_frac"] += float((lstats["clipped_NT"].float() * m).sum()) / max(totals.tokens, 1)
                gn = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), cfg.grad_clip)
                log["grad_norm"] += float(gn)
                self.opt.step()
                n_updates += 1
        self.policy.model.eval()
        self.policy.version += 1
        stats.update({k: v / n_updates for k, v in log.items()})
        stats["updated"] = 1
        row_tokens = int(mask_NT[rows].sum() + sum(len(prompts[i]) for i in rows.tolist()))  # prompt + response
        stats["learner_tokens"] = row_tokens * cfg.epochs  # forward + backward
        stats["old_logprob_tokens"] = row_tokens if cfg.recompute_old else 0  # one no-grad forward each
        stats["ref_logprob_tokens"] = row_tokens if cfg.kl_coef > 0 else 0
        return stats

    def _logp(self, prompts, responses, idx, policy=None, with_grad=False):
        """Response log-probs for rows idx, in micro-batches when no grad is needed."""
        policy = policy or self.policy
        idx = idx.tolist()
        if with_grad:
            with self.autocast():
                lp, ent, _ = policy.response_logprobs([prompts[i] for i in idx], [responses[i] for i in idx],
                                                      self._temperature(idx))
            return lp, ent
        outs, T = [], max(len(responses[i]) for i in idx)
        for positions in self._micro_batches(idx, prompts, responses):
            part = [idx[j] for j in positions]
            with self.autocast():
                lp, _, _ = policy.response_logprobs([prompts[i] for i in part], [responses[i] for i in part],
                                                    self._temperature(part))
            outs.append(torch.nn.functional.pad(lp, (0, T - lp.shape[1])))
        return torch.cat(outs), None

    def _micro_batches(self, idx: list[int], prompts, responses) -> list[list[int]]:
        """Positions into `idx`, in micro-batches by rows or by the token budget."""
        return micro_batches([len(prompts[i]) + len(responses[i]) for i in idx], self.cfg.micro_batch_rows,
                             self.cfg.micro_batch_tokens)

    def _temperature(self, idx: list[int]):
        """The rows' sampling temperature: one float when they share it (the usual case), else a list."""
        ts = [self._temps[i] for i in idx]
        return ts[0] if all(t == ts[0] for t in ts) else ts

    @property
    def version(self) -> int:
        return self.policy.version

    def state_dict(self) -> dict:
        s = {"opt": self.opt.state_dict(), "gen": self.gen.get_state()}
        if self.tracker is not None:
            s["tracker"] = self.tracker.state_dict()
        if hasattr(self.recompose, "state_dict"):
            s["recompose"] = self.recompose.state_dict()
        return s

    def load_state_dict(self, s: dict) -> None:
        self.opt.load_state_dict(s["opt"])
        self.gen.set_state(s["gen"])
        if self.tracker is not None and "tracker" in s:  # absent in checkpoints from before trackers
            self.tracker.load_state_dict(s["tracker"])
        if hasattr(self.recompose, "load_state_dict") and "recompose" in s:
            self.recompose.load_state_dict(s["recompose"])


def micro_batches(lengths: list[int], max_rows: int, max_tokens: int | None = None) -> list[list[int]]:
    """Split positions 0..len(lengths)-1, in order, into micro-batches: `max_rows` each, or with `max_tokens`
    as many as keep the padded size (rows x longest row, what the forward holds) within it; a row longer
    than the budget goes alone. Gradient accumulation over any split gives the same gradient."""
    if max_tokens is None:
        return [list(range(s, min(s + max_rows, len(lengths)))) for s in range(0, len(lengths), max_rows)]
    out, longest = [], 0
    for j, n in enumerate(lengths):
        if out and (len(out[-1]) + 1) * max(longest, n) <= max_tokens:
            out[-1].append(j)
            longest = max(longest, n)
        else:
            out.append([j])
            longest = n
    return out


def enable_checkpointing(policy) -> None:
    """Gradient checkpointing through the Hugging Face model's own switch (active in train mode only, so
    the engine's cached decoding is unaffected); the tiny model has none: one-line error."""
    model = policy.model
    if getattr(policy, "kind", None) == "tiny" or not hasattr(model, "gradient_checkpointing_enable"):
        raise ValueError("learner.gradient_checkpointing: the tiny model does not support it (it is a Hugging "
                         "Face model feature; use --model with a Hugging Face checkpoint, or set it false)")
    # non-reentrant: works when the inputs do not require grad (a frozen embedding under LoRA).
    # transformers >= 5.2x renamed the switch (the old name warns); the GPU machine's 5.17 has the old one.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _pad(seqs: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence([s.float() for s in seqs], batch_first=True)
