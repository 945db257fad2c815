"""Numerical equivalence with TRL 1.16's GRPO loss (`GRPOTrainer._compute_loss`), values and gradients.

TRL computes its loss inside the trainer, from the model's log-probs. The test runs TRL's own method on
a stand-in trainer whose model returns the test's log-probs, so every line of TRL's loss arithmetic runs
as released; rollwise's loss and aggregation run on the same float64 inputs and must agree within 1e-6.
Skipped when TRL is not installed (`bash scripts/setup.sh --with trl`).

Mapping (TRL loss_type -> rollwise loss + aggregation):
- grpo    -> ppo-clip + seq-mean-token-mean
- bnpo    -> ppo-clip + token-mean
- dapo    -> ppo-clip + token-mean (TRL divides by num_items_in_batch: the batch's response tokens)
- dr_grpo -> ppo-clip + seq-mean-token-sum-norm with max_len = max_completion_length
- cispo   -> cispo with clip_low = 1 (no lower bound) and clip_high = TRL's epsilon_high - 1 (TRL's bound
  is on the ratio itself)
- beta > 0: TRL adds k3 (unclamped) per token before aggregating, as rollwise's learner adds its KL term;
  rollwise clamps k3 at 10 as verl does, so the inputs stay inside that range.
Differences kept out of the inputs, not hidden: TRL does not clamp the log-ratio (rollwise clamps at
+-20 as verl does), and TRL's grpo mean counts empty rows (rollwise's counts the minibatch's sequences,
the same when no row is empty).
"""
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer", exc_type=ImportError)

from rollwise.core import registry  # noqa: E402
from rollwise.learn.losses import AggTotals, LossInput, kl_penalty  # noqa: E402

F64 = torch.float64
TOL = 1e-6


class _Accelerator:
    num_processes, sync_gradients = 1, True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


class _TRL:
    """What `_compute_loss` reads of a GRPOTrainer; the model's log-probs are the test's."""

    def __init__(self, logp_NT, loss_type, eps_low, eps_high, beta=0.0):
        self._logp = logp_NT
        self.loss_type, self.epsilon_low, self.epsilon_high, self.beta = loss_type, eps_low, eps_high, beta
        self.importance_sampling_level, self.top_entropy_quantile, self.off_policy_mask_threshold = "token", 1.0, None
        self.args = SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1)
        self.use_vllm = self.vllm_importance_sampling_correction = False
        self.model = SimpleNamespace(training=True)
        self.current_gradient_accumulation_steps = 1
        self.aux_loss_enabled = self._entropy_bonus_enabled = False
        self.max_completion_length = logp_NT.shape[1]
        self._metrics = defaultdict(lambda: defaultdict(list))
        self.accelerator = _Accelerator()

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self._logp, torch.zeros_like(self._logp), None


def inputs(seed, N=6, T=7):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    lengths[0], lengths[-1] = 1, T
    mask = (torch.arange(T)[None] < lengths[:, None]).to(F64)
    old = -torch.rand(N, T, generator=gen, dtype=F64) * 4
    logp = old + torch.randn(N, T, generator=gen, dtype=F64) * 0.4  # ratios on both sides of the clips
    adv = torch.randn(N, 1, generator=gen, dtype=F64).expand(N, T).clone()
    adv[1] = 0.0
    ref = logp + torch.randn(N, T, generator=gen, dtype=F64) * 0.5
    return old, logp, adv, mask, ref


def trl_loss(loss_type, eps_low, eps_high, old, logp0, adv, mask, ref=None, beta=0.0):
    logp = logp0.clone().requires_grad_(True)
    N, T = logp.shape
    batch = {"prompt_ids": torch.zeros(N, 1, dtype=torch.long), "prompt_mask": torch.ones(N, 1, dtype=F64),
             "completion_ids": torch.zeros(N, T, dtype=torch.long), "completion_mask": mask,
             "advantages": adv, "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    if ref is not None:
        batch["ref_per_token_logps"] = ref
    loss = grpo_trainer.GRPOTrainer._compute_loss(_TRL(logp, loss_type, eps_low, eps_high, beta), None, batch)
    return loss, torch.autograd.grad(loss, logp)[0]


def rollwise_loss(loss, loss_opts, agg, agg_opts, old, logp0, adv, mask, ref=None, beta=0.0):
    logp = logp0.clone().requires_grad_(True)
    loss_NT, _ = registry.get("loss", loss).obj(LossInput(logp, old, adv, mask), **loss_opts)
    if beta:
        loss_NT = loss_NT + beta * kl_penalty(logp, ref, "k3")
    totals = AggTotals(tokens=int(mask.sum()), seqs=mask.shape[0])
    value = registry.get("aggregation", agg).obj(loss_NT, mask, totals, **agg_opts)
    return value, torch.autograd.grad(value, logp)[0]


CASES = [  # TRL loss_type, its eps_low/high -> rollwise loss (options), aggregation (options)
    ("grpo", 0.2, 0.28, "ppo-clip", {"clip_low": 0.2, "clip_high": 0.28}, "seq-mean-token-mean", {}),
    ("bnpo", 0.2, 0.28, "ppo-clip", {"clip_low": 0.2, "clip_high": 0.28}, "token-mean", {}),
    ("dapo", 0.2, 0.28, "ppo-clip", {"clip_low": 0.2, "clip_high": 0.28}, "token-mean", {}),
    ("dapo", 0.1, 0.1, "ppo-clip", {"clip_low": 0.1, "clip_high": 0.1}, "token-mean", {}),
    ("dr_grpo", 0.2, 0.28, "ppo-clip", {"clip_low": 0.2, "clip_high": 0.28}, "seq-mean-token-sum-norm",
     {"max_len": 7}),
    ("cispo", 0.2, 1.5, "cispo", {"clip_low": 1.0, "clip_high": 0.5}, "token-mean", {}),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_losses_match_trl(seed, case):
    trl_type, lo, hi, loss, loss_opts, agg, agg_opts = case
    old, logp, adv, mask, _ = inputs(seed)
    v_trl, g_trl = trl_loss(trl_type, lo, hi, old, logp, adv, mask)
    v_ours, g_ours = rollwise_loss(loss, loss_opts, agg, agg_opts, old, logp, adv, mask)
    assert torch.allclose(v_ours, v_trl.to(F64), rtol=TOL, atol=TOL), (v_ours.item(), v_trl.item())
    assert torch.allclose(g_ours, g_trl, rtol=TOL, atol=TOL), (g_ours - g_trl).abs().max().item()


@pytest.mark.parametrize("seed", [0, 1])
def test_kl_term_matches_trl(seed):
    old, logp, adv, mask, ref = inputs(seed)
    v_trl, g_trl = trl_loss("bnpo", 0.2, 0.28, old, logp, adv, mask, ref=ref, beta=0.04)
    v_ours, g_ours = rollwise_loss("ppo-clip", {"clip_low": 0.2, "clip_high": 0.28}, "token-mean", {},
                                   old, logp, adv, mask, ref=ref, beta=0.04)
    assert torch.allclose(v_ours, v_trl.to(F64), rtol=TOL, atol=TOL)
    assert torch.allclose(g_ours, g_trl, rtol=TOL, atol=TOL)
