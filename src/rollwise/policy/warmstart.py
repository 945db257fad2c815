"""Warm start: a short supervised pass on a task that produces a base checkpoint, the starting point of
RL. The embedded default's base ships inside the package (`rollwise/assets/bases/<task>/`), so every user
and every bench starts from the same weights and nothing is rebuilt; any other (task, settings) pair is
built once and cached by a hash of everything that shapes it.

The build is deterministic: one torch thread and deterministic algorithms while it runs, every random
draw seeded, so a rebuild of the shipped base reproduces its weights on a machine of this kind
(`benchmarks/rebuild_base.py` checks it). Any task can be warm-started if it provides
`sft_examples(n, seed) -> [(prompt, answer, level)]` and `base_fingerprint()` (what about the task shapes
its base: for the arithmetic task, its seed and held-out set, not the train pool's size or mix). A task
read from files (`tasks/files.py`) also provides `sft_rows()` (its rows must fit `block_size`, checked
first), `alphabet()` (the tokenizer gets every character of its data) and `report_pool_size`.

Two architectures (`warmstart.arch`): `tiny`, rollwise's TinyGPT (the shipped bases), and `llama`, a
Hugging Face `LlamaForCausalLM` of the same layers/heads/width/context over the same character tokenizer,
saved as a standard HF checkpoint (a second model family for checking that a result transfers). The
supervised loop is one for both: only the model's construction (`new_policy`) differs.

The base must have a spread of pass rates (near 1 on easy levels, near 0 on the hardest, many prompts
in between): that spread is what makes rollout efficiency matter. `report.json` in the checkpoint
directory records its per-level held-out accuracy; `build.json` records how it was built.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F

from ..core.schema import Float, Int, SEED, at_least, checked, finite, one_of
from ..core.settings import setting
from ..core.task import declares, option
from ..tasks.reward import Scorer
from .policy import Policy
from .tiny import TinyConfig, TinyGPT
from .tokenizer import char_tokenizer, extend_alphabet

ARCHS = ("tiny", "llama")
LR_DECAYS = ("constant", "cosine")
# (n_layer, n_head, n_embd) where the user sets none. The llama default is the shape of llama2.c's
# stories15M (6 layers, 6 heads, width 288, MLP 768): about 6.0M parameters over the character vocabulary
# (the 15M of that model is mostly its 32k-token embedding); tiny's is the shipped bases' 0.8M.
ARCH_DIMS = {"tiny": (4, 4, 128), "llama": (6, 6, 288)}
WARMSTART_VERSION = 2  # bump when the recipe changes, so stale caches and shipped bases are not reused
SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "bases"


@checked
@dataclass
class WarmStartConfig:
    # 600 steps: past the supervised jump (0.07 held-out at 250 steps, 0.58 at 500)
    steps: Annotated[Int, at_least(1)] = setting(600, "supervised steps of the warm start that builds a base model")
    batch_size: Annotated[Int, at_least(1)] = setting(64, "warm start: examples per step")
    lr: Annotated[Float, finite(0, strict=True)] = setting(1e-3, "warm start: learning rate")
    warmup: Annotated[Int, at_least(1)] = setting(50, "warm start: linear warm-up steps")
    lr_decay: Annotated[str, one_of(*LR_DECAYS)] = setting("constant", "warm start: the learning rate after warm-up, constant (the shipped "
                                        "bases) or cosine (a half cosine towards 0 at the last step)")
    seed: Annotated[Int, SEED] = setting(0, "warm start: seed of the initial weights and the example order")
    arch: Annotated[str, one_of(*ARCHS)] = setting("tiny", "the base's architecture: tiny (rollwise's TinyGPT) or llama (a Hugging Face "
                                "LlamaForCausalLM over the same character tokenizer)")
    n_layer: Annotated[Int, at_least(1)] | None = setting(None, "base model: layers (none: 4 for tiny, 6 for llama)")
    n_head: Annotated[Int, at_least(1)] | None = setting(None, "base model: attention heads (none: 4 for tiny, 6 for llama)")
    n_embd: Annotated[Int, at_least(1)] | None = setting(None, "base model: width, a multiple of n_head (none: 128 for tiny, 288 for llama)")
    block_size: Annotated[Int, at_least(2)] = setting(64, "base model: context in tokens (prompt + response)")
    # a file task's base also gets every character of its rows
    extra_chars: str = setting("", "characters added to the character tokenizer's alphabet (e.g. ones the model "
                                   "should be able to write that the data lacks)")

    def __post_init__(self):
        if self.lr_decay not in LR_DECAYS:
            raise ValueError(f"warmstart.lr_decay must be one of {', '.join(LR_DECAYS)}, got {self.lr_decay!r}")
        if not isinstance(self.arch, str) or self.arch not in ARCHS:
            raise ValueError(f"warmstart.arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        for name, default in zip(("n_layer", "n_head", "n_embd"), ARCH_DIMS[self.arch]):
            if getattr(self, name) is None:
                setattr(self, name, default)


def default_cache_dir() -> Path:
    return Path(os.environ.get("ROLLWISE_CACHE", Path.home() / ".cache" / "rollwise"))


def _settings(cfg: WarmStartConfig) -> dict:
    """The warm-start settings as hashed: `extra_chars` only when set, `arch` only when not tiny and
    `lr_decay` only when not constant, so the keys of the bases built before they existed (the shipped
    ones) do not change."""
    d = asdict(cfg)
    if not d["extra_chars"]:
        del d["extra_chars"]
    if d["lr_decay"] == "constant":
        del d["lr_decay"]
    if d["arch"] == "tiny":
        del d["arch"]
    return d


def fingerprint(task, cfg: WarmStartConfig) -> str:
    """A hash of everything that shapes the base: the recipe version, the warm-start settings, the task
    and what of it the base depends on."""
    name = option(task, "name")
    return hashlib.sha256(json.dumps([WARMSTART_VERSION, _settings(cfg), name, task.base_fingerprint()],
                                     sort_keys=True, default=str).encode()).hexdigest()[:12]


def base_alphabet(task, cfg: WarmStartConfig) -> str:
    """The tiny tokenizer's alphabet for this base: `CHARS`, then (sorted) `cfg.extra_chars` and the
    characters of the task's data (`task.alphabet()`, a file task's rows) that `CHARS` lacks. For the
    procedural tasks with default settings it is `CHARS`, so their tokenizer is today's."""
    data = option(task, "alphabet")()
    return extend_alphabet(cfg.extra_chars, data)


def shipped_base(key: str) -> Path | None:
    """The shipped base built with this fingerprint, if the package has one."""
    if not SHIPPED.is_dir():
        return None
    for d in sorted(SHIPPED.iterdir()):
        build = d / "build.json"
        if build.exists() and json.loads(build.read_text()).get("fingerprint") == key:
            return d
    return None


def base_checkpoint(task, cfg: WarmStartConfig | None = None, cache_dir: Path | None = None, log=print) -> Path:
    """Path of the base checkpoint for (task, cfg): the shipped one when it matches, else the cached one,
    building it first if needed."""
    cfg = cfg or WarmStartConfig()
    key = fingerprint(task, cfg)
    shipped = shipped_base(key)
    if shipped is not None:
        return shipped
    path = (cache_dir or default_cache_dir()) / f"base-{key}"
    if (path / "report.json").exists():
        return path
    log(f"warm start: building the base checkpoint ({cfg.steps} supervised steps) -> {path}")
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    report = build_base(task, cfg, tmp, log=log)
    try:
        tmp.rename(path)  # atomic: a half-built base is never picked up
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    levels = ", ".join(f"L{k[len('eval_acc_L'):]} {v:.2f}" for k, v in report.items() if k.startswith("eval_acc_L"))
    log(f"warm start: base held-out accuracy by level: {levels}" if levels else
        f"warm start: base held-out accuracy {report['eval_acc']:.2f}")
    return path


def foreign_base(path, task) -> str | None:
    """One line where `path` is a base rollwise warm-started (its build.json) for another task or other task
    options than `task` (what its base_fingerprint covers: for reasoning-gym the family, its options, the
    data seed and split sizes); None for a match or a model of any other origin. A base built for other
    options trains on prompts it was not fitted to, or on held-out prompts it was warm-started on."""
    build = Path(path) / "build.json"
    if not build.is_file() or not declares(task, "base_fingerprint"):
        return None
    try:
        b = json.loads(build.read_text())
    except (OSError, ValueError):
        return None
    name = option(task, "name")
    mine = json.loads(json.dumps(task.base_fingerprint(), default=str))
    if b.get("task") == name and b.get("task_fingerprint") == mine:
        return None
    return (f"model {path} was warm-started for task {b.get('task')!r} {json.dumps(b.get('task_fingerprint'))} "
            f"(its build.json), not for this run's {name!r} {json.dumps(mine)}: pass the task options it was built "
            "with (or build a base for these)")


@contextmanager
def deterministic():
    """One torch thread and deterministic algorithms: the build's floating-point sums then do not
    depend on the machine's core count or load (2 threads gave a different base than 1)."""
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


def build_base(task, cfg: WarmStartConfig, out: Path, log=print, command: str = "") -> dict:
    """Warm-start a base into `out` (config.json, model.safetensors, tokenizer.json, report.json,
    build.json) and return its report."""
    t0 = time.time()
    with deterministic():
        policy = supervised_warm_start(task, cfg, log)
        report = base_report(policy, task)
    out = Path(out)
    policy.save(out)
    (out / "report.json").write_text(json.dumps({"config": _settings(cfg), **report}, indent=2))
    (out / "build.json").write_text(json.dumps({
        "fingerprint": fingerprint(task, cfg), "task": option(task, "name"),
        "task_fingerprint": task.base_fingerprint(), "warmstart": _settings(cfg), "version": WARMSTART_VERSION,
        "torch": torch.__version__, "seconds": round(time.time() - t0, 1), "command": command}, indent=2,
        default=str))
    return report


def llama_intermediate(n_embd: int) -> int:
    """The Llama MLP width for a model width: 2/3 of 4 x n_embd rounded up to a multiple of 32 (llama2.c's
    rule; 768 for 288)."""
    return -(-int(2 * 4 * n_embd / 3) // 32) * 32


def new_policy(cfg: WarmStartConfig, tok) -> Policy:
    """A freshly initialised model of `cfg.arch` over `tok`, drawn from torch's current seed."""
    if cfg.arch == "tiny":
        return Policy(TinyGPT(TinyConfig(vocab_size=len(tok), n_layer=cfg.n_layer, n_head=cfg.n_head,
                                         n_embd=cfg.n_embd, block_size=cfg.block_size)), tok, "tiny")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.n_embd, intermediate_size=llama_intermediate(cfg.n_embd),
                         num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head,
                         max_position_embeddings=cfg.block_size, bos_token_id=None, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    return Policy(LlamaForCausalLM(config), tok, "hf")


def supervised_warm_start(task, cfg: WarmStartConfig, log=print, on_step=None) -> Policy:
    torch.manual_seed(cfg.seed)
    policy = new_policy(cfg, char_tokenizer(base_alphabet(task, cfg)))
    model = policy.model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    if declares(task, "sft_rows"):  # a task read from files: every distinct row must fit the context
        check_context(task, policy, cfg)
    examples = task.sft_examples(cfg.steps * cfg.batch_size, seed=10_000 + cfg.seed)
    if not declares(task, "sft_rows"):  # an embedded task: its examples must fit too, before any step
        check_context(task, policy, cfg, examples)
    for line in option(task, "sft_notes")():  # e.g. where a file task's rows came from
        log(f"warm start: {line}")
    if option(task, "sft_group_by_length"):  # a long-response task: little padding per batch
        examples = group_by_length(examples, cfg.batch_size, np.random.default_rng(cfg.seed))
    t0 = time.time()
    model.train()
    for step in range(cfg.steps):
        rows = examples[step * cfg.batch_size: (step + 1) * cfg.batch_size]
        seqs, starts = [], []
        for text, ans, _ in rows:
            p = policy.encode(text)
            seqs.append(p + policy.encode(ans) + [policy.eos_id])
            starts.append(len(p))
        ids, mask = policy._right_padded(seqs)
        logits = policy.full_logits(ids, mask)[:, :-1]
        target = ids[:, 1:].clone()
        pos = torch.arange(target.shape[1]).unsqueeze(0)
        loss_mask = (pos >= torch.tensor(starts).unsqueeze(1) - 1) & mask[:, 1:].bool()
        target[~loss_mask] = -100  # train on the answer and EOS only
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
        for group in opt.param_groups:
            group["lr"] = warmstart_lr(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 100 == 0:
            log(f"  sft step {step + 1}/{cfg.steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
        if on_step is not None:
            model.eval()
            on_step(step + 1, policy)
            model.train()
    model.eval()
    return policy


def warmstart_lr(cfg: WarmStartConfig, step: int) -> float:
    """The learning rate of supervised step `step` (from 0): linear warm-up over `cfg.warmup` steps, then
    constant, or (`lr_decay: cosine`) a half cosine from `cfg.lr` towards 0 just after the last step. With
    a constant rate a base is wherever its last batches leave it; the decay is there to damp that."""
    warm = cfg.lr * min(1.0, (step + 1) / cfg.warmup)
    if cfg.lr_decay == "constant" or step + 1 <= cfg.warmup:
        return warm
    done = (step + 1 - cfg.warmup) / (cfg.steps - cfg.warmup + 1)  # in (0, 1): the last step still learns
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * done))


def check_context(task, policy: Policy, cfg: WarmStartConfig, examples: list | None = None) -> None:
    """Every supervised row (prompt + response + EOS) fits `block_size`, else one error naming the first
    row that does not (`task.describe_sft(i)`: its file and row; an embedded task's `examples`: the
    example) and the size that fits them all and, for training, every prompt plus the task's
    max_new_tokens."""
    rows = task.sft_rows() if examples is None else list(dict.fromkeys((t, r, lv) for t, r, lv in examples))
    need = [len(policy.encode(text)) + len(policy.encode(resp)) + 1 for text, resp, _ in rows]
    longest = max(need)
    if longest <= cfg.block_size:
        return
    i = next(i for i, n in enumerate(need) if n > cfg.block_size)
    text, resp, _ = rows[i]
    where = task.describe_sft(i) if examples is None else f"warm-start example {text!r} -> {resp!r}"
    new = option(task, "max_new_tokens") or 10  # the run's default when the task declares none
    prompts = max(len(policy.encode(p.text)) for p in [*task.train_pool(), *task.heldout()]) + new
    raise ValueError(f"{where}: prompt {len(policy.encode(text))} + response {len(policy.encode(resp))} + EOS = "
                     f"{need[i]} tokens, more than the base's context warmstart.block_size={cfg.block_size}; the "
                     f"longest row needs {longest}, and training needs {prompts} (the longest prompt + max_new_tokens="
                     f"{new}): --set warmstart.block_size={max(longest, prompts)}")


def group_by_length(examples: list, batch_size: int, rng: np.random.Generator, window: int = 16) -> list:
    """The examples reordered so that each batch (consecutive `batch_size` of them) holds responses of
    similar length: within each window of `window` batches, sort by response length, cut into batches
    and shuffle their order (the length grouping of Hugging Face's Trainer). Batches are padded to their
    longest row, so with lengths from 15 to 200 tokens this halves the tokens a step computes."""
    out = []
    span = batch_size * window
    for s in range(0, len(examples), span):
        chunk = sorted(examples[s: s + span], key=lambda e: len(e[1]))
        batches = [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
        for b in rng.permutation(len(batches)):
            out += batches[b]
    return out


# Rows the report decodes at once. The engine's default (1024) held a KV cache of ~400 MB for the tiny
# model at a 96-token context, the largest part of a file task's warm-start peak (docs/robustness.md, "What a
# warm start and a run cost"); 256 rows decode as fast on a CPU. Greedy answers do not depend on it; the
# pass-rate sample's draws do.
REPORT_ROWS = 256


def base_report(policy: Policy, task, max_new_tokens: int = 16) -> dict:
    from ..core.types import Request
    from ..generate.engine import run_sync
    from ..generate.torch_engine import TorchEngine
    from ..run.evaluate import evaluate

    max_new_tokens = option(task, "max_new_tokens") or max_new_tokens
    if declares(task, "sft_rows"):  # a task read from files: room for its longest response or answer
        max_new_tokens = max(len(policy.encode(r)) for r in
                             [resp for _, resp, _ in task.sft_rows()] + [p.answer for p in task.heldout()]) + 8
    scorer = Scorer(task.verify)
    engine = lambda **kw: TorchEngine(policy, max_rows=REPORT_ROWS, **kw)  # noqa: E731
    out = evaluate(policy, task.heldout(), scorer, max_new_tokens=max_new_tokens, make_engine=engine)
    # Spread of per-prompt pass rates over the train pool (8 samples each): the share of prompts
    # whose GRPO group could be informative is what rollout efficiency works on.
    pool = task.train_pool()
    cap = option(task, "report_pool_size")  # a large file: the statistics of a seeded sample
    if cap is not None and len(pool) > cap:
        pool = [pool[i] for i in sorted(np.random.default_rng(0).choice(len(pool), cap, replace=False))]
    res = run_sync(engine(seed=1, max_new_tokens=max_new_tokens), [Request(p, 8, id=i) for i, p in enumerate(pool)])
    rates = np.array([sum(scorer.judge(r.text, p.answer).correct for r in e.group.rollouts) / 8
                      for e, p in zip(res, pool)])
    out["pool_all_correct"] = float((rates == 1).mean())
    out["pool_all_wrong"] = float((rates == 0).mean())
    out["pool_mixed"] = float(((rates > 0) & (rates < 1)).mean())
    if cap is not None:
        out["pool_prompts"] = len(pool)
    return out


# ---- the small-family guard: a warm start that memorised the train pool ---------------------------------
POOL_OVERLAP = 0.5  # train-pool prompts that are warm-start rows, from which the overlap is the story
POOL_SOLVED = 0.5  # groups all right at the first step, from which the pool is "mostly solved"


def pool_overlap(task) -> tuple[int, int] | None:
    """(train-pool prompts whose text is a warm-start row, train-pool prompts), for a task whose warm-start
    rows are a set it can list (`sft_distinct()`, reasoning-gym; `sft_rows()`, a file task); None for a task
    that generates its warm-start examples afresh (the embedded ones)."""
    rows = task.sft_distinct() if declares(task, "sft_distinct") else task.sft_rows() if declares(task, "sft_rows") \
        else None
    if rows is None:
        return None
    texts = {q for q, _, _ in rows}
    pool = task.train_pool()
    return sum(p.text in texts for p in pool), len(pool)


def memorised_pool(overlap: tuple[int, int] | None, all_right: int, groups: int, apart: str | None) -> str | None:
    """The warning for a run whose first step finds the train pool mostly solved (`all_right` of `groups`
    groups all right) where most of the pool is warm-start rows: the base memorised the pool, so RL has
    little left to learn on it. None when either figure is below its threshold. `apart`: the task's option
    that keeps the warm start's rows out of the pool."""
    if overlap is None or not overlap[1] or not groups:
        return None
    shared, pool = overlap
    if shared / pool < POOL_OVERLAP or all_right / groups < POOL_SOLVED:
        return None
    fix = f"; {apart} keeps them apart" if apart else ""
    return (f"warning: {all_right / groups:.0%} of the first step's groups were all right, and {shared} of the "
            f"{pool} train-pool prompts ({shared / pool:.0%}) are warm-start rows: the base has memorised most of the "
            f"pool it trains on, so the run has little to learn there and its held-out figure is what to read{fix}")
