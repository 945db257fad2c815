"""RL-ZVP: learn from zero-variance groups instead of dropping them (an advantage estimator).

Paper: Le, Jeon, Vu, Lai, Yang, "No Prompt Left Behind: Exploiting Zero-Variance Prompts in LLM
Reinforcement Learning via Entropy-Guided Advantage Shaping", arXiv 2509.21880 (ICLR 2026). The project
page (bltnynk.github.io/publications/rl-zvp) says "Code (To be released)": nothing here is [CODE]. Tags:
[PAPER] the paper's own method text (section 3.2, eq. 5, footnote 3, section 4.3 and appendix C, read in
full), [ABS] its abstract, [INF] rollwise's choice.

**The counter-hypothesis to selection.** Every selector in rollwise (DAPO's refill, GRESO, SPEED-RL, PCL,
...) spends compute to *avoid* groups whose rewards are all equal, because GRPO gives them advantage 0 and
the learner skips them (`learner.drop_zero_adv`). RL-ZVP says those groups carry signal: reward the
all-right ones and penalise the all-wrong ones, shaped per token by entropy [ABS]. If it is right, the
zero-variance share of a batch is not waste, and a selector's savings are smaller than their 1/(1 - p0)
ceiling suggests; a bench arm `uniform` + `--advantage rl-zvp` against a selector with `grpo` is the test.

Rule [PAPER eq. 5, with eq. 1 for the rest]::

    group with reward spread (std > 0):  A_i,t = (r_i - mean) / (std + eps), GRPO unchanged    [PAPER]
    zero-variance group, R_i > 0 (a "positive prompt"):   A_i,t =  alpha H_i,t               [PAPER]
    zero-variance group, R_i <= 0 (a "negative prompt"):  A_i,t = -alpha (max_k H_i,k - H_i,t) [PAPER]

with H_i,t the entropy of the next-token distribution at token t of response i, detached (a scalar
factor, not a differentiable term: footnote 3) [PAPER], and the max over the response's own tokens
k = 1..|o_i| [PAPER]. A high-entropy token of a right answer (a "forking" token) is pushed up most; in a
wrong answer the high-entropy tokens are penalised least, so the paths they open stay explorable [PAPER].
alpha = 0.1 is the paper's best (0.05 and 0.3 fall off sharply; 0.1 and 0.2 best) [PAPER section 4.3].
There is no clipping of the shaped advantage in the paper: alpha alone keeps it small (top-20% token
entropies of 2..10 at the start of training), and the PPO ratio clip applies as for any row [PAPER eq. 6];
`max_abs` (off by default) is rollwise's optional cap [INF].

rollwise's choices [INF]:
  * H_i,t is the *sampling* distribution's entropy as the engine recorded it (`Rollout.entropy_T`, at the
    sampling temperature), computed once per batch before the update. The paper's verl implementation
    reads the entropy of the policy being trained; with `learner.recompute_old` both are pi_old for the
    first minibatch, and the advantage is fixed for the step as every estimator here. A rollout without
    per-token entropies (restored from an old checkpoint) repeats its mean: a negative row then gets 0.
  * "R_i > 0" is read on the group's common reward (they are equal), so a zero-variance group of reward 0
    is negative and one of any positive reward positive, as the paper writes it for 0/1 rewards.
  * A group of one rollout counts as zero-variance (std of one value is 0, as eq. 5 reads): it gets the
    shaped advantage. The run's `n >= 2` rule still applies (`needs_groups`).
  * `positive` / `negative` switch either branch off: the paper's ablations "w/o positive prompts",
    "w/o negative prompts" [PAPER Table 2]; `entropy_scaling=False` is its "w/o entropy scaling"
    ablation, A = +alpha / -alpha on every token (the paper writes "sample-level +1/-1"; alpha keeps the
    scale) [PAPER+INF].

What it costs: nothing for the estimator, but the rows it gives a non-zero advantage now *train*: the
learner's `drop_zero_adv` keeps every row with any non-zero token, and the ledger charges learner tokens
(prompt + response, x epochs) and the pi_old pass for the rows trained (Learner.update `learn_rows`,
`learner_tokens`), so an RL-ZVP arm pays for the zero-variance rows it learns from. A negative row whose
tokens all share one entropy (a one-token response) is still all 0 and is still skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from ..core import schema
from ..core.registry import register
from ..core.schema import Bool, Float, Rule, checked, finite
from .advantages import AdvInput, _as_rewards, _grpo64, _require, group_flat


@checked
@dataclass(frozen=True)
class ZVPOptions:
    """RL-ZVP's options, checked by core/schema.py (one line naming the bad one)."""

    alpha: Annotated[Float, finite(0, strict=True)] = 0.1
    positive: Bool = True
    negative: Bool = True
    entropy_scaling: Bool = True
    max_abs: Annotated[Float, Rule(lambda v: v > 0, "> 0 (inf: no cap)")] = float("inf")
    eps: Annotated[Float, finite(0, strict=True)] = 1e-6


def zvp_token_advantage(entropy_NT: torch.Tensor, mask_NT: torch.Tensor, positive_N: torch.Tensor,
                        alpha: float, entropy_scaling: bool = True) -> torch.Tensor:
    """Eq. 5 on every row (float64): alpha H for positive rows, -alpha (max_k H - H) for the others, the max
    over each row's own masked tokens; 0 off the mask. The caller picks the zero-variance rows."""
    m = mask_NT.double() > 0
    H = entropy_NT.detach().double().masked_fill(~m, 0.0)
    if not entropy_scaling:
        return torch.where(positive_N[:, None], alpha, -alpha) * m
    h_max = H.masked_fill(~m, -torch.inf).amax(1, keepdim=True).clamp(min=0.0)  # a row with no tokens: 0
    return torch.where(positive_N[:, None], alpha * H, -alpha * (h_max - H)) * m


@register("advantage", "rl-zvp", needs_groups=True, zero_variance_signal=True, provenance="PAPER+INF",
          summary="RL-ZVP: GRPO where rewards differ; all-equal groups get +alpha*H (all right) or "
                  "-alpha*(max H - H) (all wrong) per token instead of 0")
def rl_zvp(inp: AdvInput, alpha: float = 0.1, positive: bool = True, negative: bool = True,
           entropy_scaling: bool = True, max_abs: float = float("inf"), eps: float = 1e-6) -> torch.Tensor:
    """RL-ZVP (Le et al., 2025, "No Prompt Left Behind: Exploiting Zero-Variance Prompts in LLM
    Reinforcement Learning via Entropy-Guided Advantage Shaping", arXiv 2509.21880). [PAPER eq. 5; INF:
    see learn/zvp.py] The counter-hypothesis to selection: zero-variance groups train, with a token-level
    advantage alpha H (all right) or -alpha (max H - H) (all wrong); other groups get GRPO's. Needs
    entropy_NT and mask_NT; returns [N, T]."""
    o = schema.build(ZVPOptions, {"alpha": alpha, "positive": positive, "negative": negative,
                                  "entropy_scaling": entropy_scaling, "max_abs": max_abs, "eps": eps},
                     where="rl-zvp", prefix=True)
    ent = _require(inp, "entropy_NT", "rl-zvp", "per-token entropies of the sampling distribution, [N, T]")
    mask = _require(inp, "mask_NT", "rl-zvp", "the response mask, [N, T]")
    r, g, G = inp.rewards_N.double(), inp.group_N, inp.num_groups
    base_NT = _grpo64(r, g, G, eps=o.eps)[:, None] * mask.double()  # 0 on zero-variance groups
    flat_N = group_flat(r, g, G)
    pos_N = r > 0
    shaped_NT = zvp_token_advantage(ent, mask, pos_N, o.alpha, o.entropy_scaling).clamp(-o.max_abs, o.max_abs)
    take_N = flat_N & ((pos_N & o.positive) | (~pos_N & o.negative))
    return _as_rewards(torch.where(take_N[:, None], shaped_NT, base_NT) + 0.0, inp)  # + 0.0: no -0.0 at the max
