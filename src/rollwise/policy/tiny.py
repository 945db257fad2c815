"""rollwise's own compact decoder-only transformer (the embedded default).

Chosen over a `transformers` Llama of the same width because in rollwise's engine it samples 1.13x
(equal lengths) to 1.5x (long-tail lengths) faster on 2 CPU cores (benchmarks/engine_bench.py); the
training-speed gap (1.3-1.8x in the issue's trial) is not re-measured here. It is saved as a standard
checkpoint directory (config.json + model.safetensors + tokenizer files).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_TYPE = "rollwise-tiny-gpt"


@dataclass
class TinyConfig:
    vocab_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64

    def to_dict(self) -> dict:
        return {"model_type": MODEL_TYPE, **asdict(self)}


class Block(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x_BTC, mask_B1TS, kv):
        B, T, C = x_BTC.shape
        q, k, v = self.qkv(self.ln1(x_BTC)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if kv is not None:
            k, v = torch.cat([kv[0], k], dim=2), torch.cat([kv[1], v], dim=2)
        if mask_B1TS is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_B1TS)
        x_BTC = x_BTC + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x_BTC + self.mlp(self.ln2(x_BTC)), (k, v)


class TinyGPT(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, input_ids_BT, position_ids_BT=None, key_mask_BS=None, cache=None,
                output_hidden=False):
        """key_mask_BS marks real (1) vs left-pad (0) positions over past+current keys.

        Returns logits_BTV, new cache (a list of per-layer (k, v)), and the last hidden states if
        asked. Without a key mask and cache the attention is plain causal (the learner's case)."""
        B, T = input_ids_BT.shape
        past = 0 if cache is None else cache[0][0].shape[2]
        if position_ids_BT is None:
            position_ids_BT = torch.arange(past, past + T, device=input_ids_BT.device).expand(B, T)
        x = self.wte(input_ids_BT) + self.wpe(position_ids_BT)
        mask = None
        if key_mask_BS is not None:
            S = past + T
            q_pos = torch.arange(past, past + T, device=input_ids_BT.device).view(1, 1, T, 1)
            k_pos = torch.arange(S, device=input_ids_BT.device).view(1, 1, 1, S)
            # A pad query attends to itself only, so no row is all-masked (which would give NaN).
            mask = (k_pos <= q_pos) & (key_mask_BS.bool().view(B, 1, 1, S) | (k_pos == q_pos))
        elif cache is not None and T > 1:
            raise ValueError("multi-token input with a cache needs key_mask_BS")
        new_cache = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, mask, None if cache is None else cache[i])
            new_cache.append(kv)
        h = self.ln_f(x)
        logits = self.head(h)
        return (logits, new_cache, h) if output_hidden else (logits, new_cache)
