"""Held-out evaluation: greedy accuracy (with its standard error), per-level accuracy, and - as papers
report it - the mean accuracy of n samples per prompt at the training temperature (`eval_sampled_acc@n`,
"avg@n"; with its standard error over prompts) and pass@k from those n samples with the unbiased
estimator of Chen et al. (2021). Greedy accuracy can stay flat while a policy sharpens (its entropy
collapses); the sampled figure moves with it. Eval rollouts are charged to the ledger as `eval` (off
budget). Sampling uses its own engine and generator seeded by the caller (the run: by its seed and step),
so evaluation is a pure function of the weights and never shifts the training random stream.
"""
from __future__ import annotations

from math import comb

import numpy as np

from ..core.ledger import Ledger
from ..core.types import Prompt, Request, SamplingParams
from ..generate.engine import run_sync
from ..generate.torch_engine import TorchEngine
from ..tasks.reward import Scorer


OUTCOMES = "eval_outcomes.jsonl"  # a run's per-prompt evaluation results, one line per evaluation


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@k needs k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def evaluate(policy, prompts: list[Prompt], scorer: Scorer, ledger: Ledger | None = None,
             max_new_tokens: int = 16, k: int = 0, n_samples: int = 0, temperature: float = 1.0,
             seed: int = 0, make_engine=None, outcomes: dict | None = None) -> dict[str, float]:
    """Greedy accuracy, and with n_samples (or k) > 0 the sampled accuracy of max(n_samples, k) samples per
    prompt at `temperature` (and pass@k when k > 0), through the Engine protocol. `make_engine(**kw)` builds
    the run's engine kind over `policy` (default: the torch engine); sampling gets its own engine seeded
    with `seed`. `outcomes`, when given, receives each prompt's result in held-out order (compact, for
    intervals that resample prompts: issue 47): "greedy" the correct bits packed as hex, and
    "sampled@N" each prompt's count of correct samples, one byte each, as hex."""
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
    if outcomes is not None:
        outcomes["greedy"] = np.packbits(correct.astype(np.uint8)).tobytes().hex()
    # greedy response lengths and the share cut at max_new_tokens (long-response tasks)
    out["eval_len_mean"] = float(np.mean([g.rollouts[0].num_tokens for g in res])) if res else 0.0
    out["eval_truncated_frac"] = float(np.mean([g.rollouts[0].finish_reason == "length" for g in res])) if res else 0.0
    levels = np.array([p.level for p in prompts])
    for lv in sorted(set(levels.tolist())):
        if lv >= 0:
            out[f"eval_acc_L{lv}"] = float(correct[levels == lv].mean())
    n_samples = max(n_samples, k)
    if n_samples > 0:
        sampler = make_engine(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        res = _run(sampler, [Request(p, n_samples, "eval", id=i) for i, p in enumerate(prompts)], ledger)
        cs = np.array([sum(s.correct for s in scorer.judge_many([(r.text, p.answer) for r in g.rollouts]))
                       for g, p in zip(res, prompts)], float)
        per_prompt = cs / n_samples
        if outcomes is not None and n_samples <= 255:
            outcomes[f"sampled@{n_samples}"] = cs.astype(np.uint8).tobytes().hex()
        out[f"eval_sampled_acc@{n_samples}"] = float(per_prompt.mean())
        out[f"eval_sampled_se@{n_samples}"] = float(per_prompt.std(ddof=1) / np.sqrt(len(cs))) if len(cs) > 1 else 0.0
        if k > 0:
            out[f"eval_pass@{k}"] = float(np.mean([pass_at_k(n_samples, int(c), k) for c in cs]))
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
    """Generate; charge as eval (off budget) and settle at once: eval rollouts are never trained. Their
    prompts' prefill is not charged either: the ledger's `prompt_tokens` is prefill the compute budget
    prices, and evaluation is off the budget (before, every evaluation's prefill was in it, so turning
    sampled evaluation on moved a run's compute)."""
    events = run_sync(engine, requests)
    groups = [e.group for e in events]
    if ledger is not None:
        ledger.charge(groups)
        ledger.settle(groups, "open", "scored")
    return groups


def unpack_outcomes(record: dict, prompts: int) -> dict[str, np.ndarray]:
    """The per-prompt results `evaluate(outcomes=...)` packed: {"greedy": 0/1 floats, "sampled@N": the share
    of N samples correct}, each of length `prompts`."""
    out = {}
    for key, h in record.items():
        raw = np.frombuffer(bytes.fromhex(h), np.uint8) if isinstance(h, str) else None
        if raw is None:
            continue
        if key == "greedy":
            out[key] = np.unpackbits(raw)[:prompts].astype(float)
        elif key.startswith("sampled@"):
            out[key] = raw[:prompts].astype(float) / int(key.split("@")[1])
    return out
