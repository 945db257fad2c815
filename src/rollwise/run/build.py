"""What a run is built from, checked before any work: its policy, its prompts against that policy, its
reward scorer and its engine."""
from __future__ import annotations

from pathlib import Path

from ..core import registry
from ..policy.policy import Policy
from ..tasks.reward import Scorer, builtin_reward
from .config import Config


def run_model(path):
    """A run directory -> the model directory its checkpoints save (`<run>/model`); any other path as given."""
    p = Path(path)
    return p / "model" if (p / "model").is_dir() and (p / "metrics.jsonl").exists() else path


def load_policy(path) -> Policy:
    """Policy.load, any failure to read the directory (a missing or damaged weights file, a config that
    does not fit) as one error naming it. A run directory (metrics.jsonl and the model/ its checkpoints
    save) stands for its latest model, as `rollwise export` takes it."""
    path = run_model(path)
    try:
        return Policy.load(path)
    except (ValueError, OSError) as e:
        raise ValueError(str(e) if str(path) in str(e) else f"model {path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - safetensors, transformers and torch raise their own types
        raise ValueError(f"model {path}: cannot load it ({type(e).__name__}: {str(e)[:200]})") from None


def check_prompts(task, pool, heldout, policy, cfg: Config) -> None:
    """Before any training: every prompt is in the policy's vocabulary and fits its context with
    max_new_tokens to spare; for a task whose verifier compares the response with the answer
    (`answers_are_responses`, the file task) every answer can be written within max_new_tokens, unless a
    user reward judges instead. An error names the prompt (a file task: its file and row)."""
    describe = getattr(task, "describe_prompt", None)
    check_answers = getattr(task, "answers_are_responses", False) and not cfg.reward
    unk = policy.unk_id
    for split, prompts in (("train", pool), ("held-out", heldout)):
        if not prompts:
            continue
        texts = [p.text for p in prompts]
        enc = policy.tokenizer(texts, add_special_tokens=False)["input_ids"]
        ans = policy.tokenizer([p.answer.strip() for p in prompts], add_special_tokens=False)["input_ids"] \
            if check_answers else [None] * len(prompts)
        for i, (p, ids, aids) in enumerate(zip(prompts, enc, ans)):
            where = describe(split, i) if describe else f"{split} prompt {i} ({p.text[:40]!r})"
            if unk is not None and unk in ids:
                raise ValueError(f"{where}: the prompt has text outside the model's vocabulary "
                                 f"({_unknown(policy, p.text)})")
            if len(ids) + cfg.max_new_tokens > policy.max_positions:
                raise ValueError(f"{where}: the prompt is {len(ids)} tokens; with max_new_tokens={cfg.max_new_tokens} "
                                 f"that is more than the model's context of {policy.max_positions} positions")
            if aids is not None:
                if unk is not None and unk in aids:
                    raise ValueError(f"{where}: the answer has text outside the model's vocabulary "
                                     f"({_unknown(policy, p.answer)}), so no response can match it")
                if len(aids) > cfg.max_new_tokens:
                    raise ValueError(f"{where}: the answer is {len(aids)} tokens, more than max_new_tokens="
                                     f"{cfg.max_new_tokens}, so no response can match it")


def _unknown(policy, text: str) -> str:
    bad = sorted({c for c in text if policy.unk_id in policy.tokenizer(c, add_special_tokens=False)["input_ids"]})
    return f"characters {bad}" if bad else "unknown tokens"


def reward_scorer(cfg: Config, task) -> Scorer:
    """The task's verifier, or the run's `reward` (a user's function or "math") in a worker process with a
    timeout and a memory limit."""
    if not cfg.reward:
        return Scorer(task.verify)
    builtin = builtin_reward(cfg.reward, cfg.reward_options)
    spec, path = builtin or (cfg.reward, [])
    return Scorer(spec, trusted=False, timeout_s=cfg.reward_timeout_s, memory_mb=cfg.reward_memory_mb, path=path,
                  own=builtin is not None)


def build_trainer_engine(cfg: Config, policy, **overrides):
    """The engine named by cfg.engine (the registry, or 'module:Class'), over the run's policy. An
    engine that samples something other than a policy (the simulator's) is refused with the reason."""
    entry = registry.get("engine", cfg.engine)  # config.validate has checked it samples from a policy
    kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
              **cfg.engine_options)
    kw.update(overrides)
    return entry.obj.for_policy(policy, **kw)
