"""Which models fit one GPU for rollwise's learner with bf16 + LoRA + gradient checkpointing (computed, not
measured: no GPU was available). Prints the markdown table in docs/gpu.md.

    python scripts/gpu_fit.py [--tokens 4096] [--rank 16]

Bytes, for N parameters, L layers, width d, MLP width f, vocabulary V, T tokens per micro-batch
(learner.micro_batch_tokens), LoRA rank r on every linear layer of the blocks:
  weights      4 N              rollwise keeps float32 weights (autocast computes in bf16 from them)
  LoRA         16 P, P = r * sum over adapted layers of (d_in + d_out): float32 weight, grad, AdamW m and v
  checkpoints  4 L T d          each layer's input (the float32 residual stream), kept for the backward
  one layer    T (24 d + 8 f)   the recomputed layer's saved tensors in bf16 (q, k, v, attention out, norms,
                                MLP gate/up/act/product), an estimate
  logits       18 T V           bf16 logits, their float32 copy, log_softmax, its gradient and the entropy's
                                exp (Policy.response_logprobs), the peak of the loss's last step
  guard        12 P             run/guard.py's FiniteGuard copies the trained parameters (the adapter) and
                                AdamW's moments before every update, on the device, to undo a non-finite one
Sampling (the torch engine, between updates) adds its KV cache: 2 L h_kv d_head x 4 bytes (float32) per
token of every row in flight. A KL reference policy (kl_coef > 0) adds another 4 N. Full fine-tuning
instead of LoRA: 16 N for weights, gradients and AdamW's moments, and 12 N for the guard's copy. A model
fits when the learner's total is under 90% of the GPU's memory (the CUDA context, allocator fragmentation and the engine's cache need the rest).
"""
from __future__ import annotations

import argparse

# name: (L, d, f, V, heads, kv_heads, tied embeddings), from the models' published config.json
MODELS = {
    "Qwen2.5-0.5B": (24, 896, 4864, 151936, 14, 2, True),
    "Qwen2.5-1.5B": (28, 1536, 8960, 151936, 12, 2, True),
    "Qwen2.5-3B": (36, 2048, 11008, 151936, 16, 2, True),
    "Qwen2.5-7B": (28, 3584, 18944, 152064, 28, 4, False),
    "Llama-3.1-8B": (32, 4096, 14336, 128256, 32, 8, False),
    "Qwen2.5-14B": (48, 5120, 13824, 152064, 40, 8, False),
    "Qwen2.5-32B": (64, 5120, 27648, 152064, 40, 8, False),
    "Llama-3.1-70B": (80, 8192, 28672, 128256, 64, 8, False),
}
GPUS = {"80 GB": 80e9, "141 GB": 141e9}


def estimate(shape, tokens: int, rank: int) -> dict:
    L, d, f, V, h, kv, tied = shape
    dkv = d // h * kv
    linears = [(d, d), (d, dkv), (d, dkv), (d, d), (d, f), (d, f), (f, d)]  # q k v o gate up down
    n = V * d * (1 if tied else 2) + L * (sum(i * o for i, o in linears) + 2 * d) + d
    lora = rank * L * sum(i + o for i, o in linears)
    parts = {"weights": 4 * n, "lora": 16 * lora, "checkpoints": 4 * L * tokens * d,
             "layer": tokens * (24 * d + 8 * f), "logits": 18 * tokens * V, "guard": 12 * lora}
    return {"params": n, "total": sum(parts.values()), "kv_per_token": 2 * L * dkv * 4, **parts}


def table(tokens: int, rank: int) -> str:
    head = ("| model | params | weights (fp32) | LoRA r=%d state | activations (T=%d) | logits | guard copy |"
            " learner total | KV cache per 1k tokens | fits 80 GB | fits 141 GB |" % (rank, tokens))
    lines = [head, "|" + "---|" * 11]
    for name, shape in MODELS.items():
        e = estimate(shape, tokens, rank)
        fits = ["yes" if e["total"] < 0.9 * cap else "no" for cap in GPUS.values()]
        lines.append(f"| {name} | {e['params'] / 1e9:.2f} B | {e['weights'] / 1e9:.1f} GB | {e['lora'] / 1e9:.2f} GB | "
                     f"{(e['checkpoints'] + e['layer']) / 1e9:.1f} GB | {e['logits'] / 1e9:.1f} GB | {e['guard'] / 1e9:.1f} GB | "
                     f"{e['total'] / 1e9:.1f} GB | {e['kv_per_token'] * 1000 / 1e9:.2f} GB | {fits[0]} | {fits[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per micro-batch (learner.micro_batch_tokens)")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank")
    a = ap.parse_args()
    print(table(a.tokens, a.rank))
