"""Held-out evaluation: greedy accuracy (with its standard error), per-level accuracy, and pass@k
with the unbiased estimator of Chen et al. (2021). Eval rollouts are charged to the ledger as `eval`
(off budget). Sampling for pass@k uses its own generator seeded by the step, so evaluation is a pure
function of the weights and never shifts the training random stream.
"""
from __future__ import annotations

from math import comb

import numpy as np

from ..core.ledger import Ledger
from ..core.types import Prompt, Request, SamplingParams
from ..generate.engine import run_sync
from ..generate.torch_engine import TorchEngine
from ..tasks.reward import Scorer


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@k needs k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def evaluate(policy, prompts: list[Prompt], scorer: Scorer, ledger: Ledger | None = None,
             max_new_tokens: int = 16, k: int = 0, n_samples: int = 0, temperature: float = 1.0,
             seed: int = 0, make_engine=None) -> dict[str, float]:
    """Greedy accuracy (and pass@k) through the Engine protocol. `make_engine(**kw)` builds the
    run's engine kind over `policy` (default: the torch engine); pass@k gets its own seeded engine."""
    check_finite_weights(policy)
    if not prompts:
        raise ValueError("evaluation needs at least one held-out prompt")
    make_engine = make_engine or (lambda **kw: TorchEngine(policy, **kw))
    out: dict[str, float] = {}
    greedy = make_engine(temperature=0.0, max_new_tokens=max_new_tokens)
    res = _run(greedy, [Request(p, 1, "eval", SamplingParams(temperature=0.0), id=i) for i, p in enumerate(prompts)],
               ledger)
    pairs = [(g.rollouts[0].text, p.answer) for g, p in zip(res, prompts)]
    # a user reward is called in chunks, each one call of its worker under one timeout
    scores = [s for i in range(0, len(pairs), EVAL_CALL) for s in scorer.judge_many(pairs[i: i + EVAL_CALL])]
    correct = np.array([s.correct for s in scores], float)
    out["eval_acc"] = float(correct.mean())
    out["eval_se"] = float(correct.std(ddof=1) / np.sqrt(len(correct))) if len(correct) > 1 else 0.0
    # greedy response lengths and the share cut at max_new_tokens (long-response tasks)
    out["eval_len_mean"] = float(np.mean([g.rollouts[0].num_tokens for g in res])) if res else 0.0
    out["eval_truncated_frac"] = float(np.mean([g.rollouts[0].finish_reason == "length" for g in res])) if res else 0.0
    levels = np.array([p.level for p in prompts])
    for lv in sorted(set(levels.tolist())):
        if lv >= 0:
            out[f"eval_acc_L{lv}"] = float(correct[levels == lv].mean())
    if k > 0:
        n_samples = max(n_samples, k)
        sampler = make_engine(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        res = _run(sampler, [Request(p, n_samples, "eval", id=i) for i, p in enumerate(prompts)], ledger)
        cs = [sum(s.correct for s in scorer.judge_many([(r.text, p.answer) for r in g.rollouts]))
              for g, p in zip(res, prompts)]
        out[f"eval_pass@{k}"] = float(np.mean([pass_at_k(n_samples, c, k) for c in cs]))
    return out


EVAL_CALL = 16  # greedy responses per call of a user reward's worker


def check_finite_weights(policy) -> None:
    """A model with a NaN or infinite weight samples garbage or fails mid-run: refuse it up front, with
    how much of it is bad, rather than report an accuracy of 0."""
    import torch

    bad = [n for n, p in policy.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        total = sum(1 for _ in policy.model.parameters())
        raise ValueError(f"the model has non-finite weights (NaN or inf) in {len(bad)} of its {total} tensors "
                         f"(first: {bad[0]}); it cannot be evaluated or trained")


def _run(engine, requests: list[Request], ledger: Ledger | None):
    """Generate; charge as eval (off budget) and settle at once: eval rollouts are never trained."""
    events = run_sync(engine, requests)
    groups = [e.group for e in events]
    if ledger is not None:
        ledger.charge(groups, sum(e.prompt_tokens for e in events))
        ledger.settle(groups, "open", "scored")
    return groups
