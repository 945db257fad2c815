"""Policy: a causal LM plus its tokenizer behind one small interface that the engine, the learner
and the planners use. Two backends: rollwise's TinyGPT (the embedded default) and any local Hugging
Face causal-LM checkpoint (`AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`).

Device: the model lives on `policy.device` (`Policy.load(path, device=...)`, `policy.to(device)`); every
tensor the policy builds for the model is made there, and what it hands back as data (prompt_stats) is on
the CPU. Token ids and log-probs stored in rollouts stay on the CPU; callers pass them as lists.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from .lora import is_lora, sampling_weights
from .tiny import MODEL_TYPE, TinyConfig, TinyGPT


class Policy:
    def __init__(self, model: torch.nn.Module, tokenizer, kind: str):
        self.model, self.tokenizer, self.kind = model, tokenizer, kind
        self.version = 0  # bumped by the learner after every update
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.unk_id = tokenizer.unk_token_id
        # transformers renamed `past_key_values` to `cache` in 5.x; pass whichever this version takes
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    # ---- loading and saving --------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, device: str | torch.device | None = None) -> "Policy":
        """The checkpoint at `path`, its weights read on the CPU and then moved to `device` (default: CPU)."""
        policy = cls._load(Path(path))
        return policy.to(device) if device is not None else policy

    @classmethod
    def _load(cls, path: Path) -> "Policy":
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{path}: not a checkpoint directory (no config.json)")
        cfg = json.loads(cfg_file.read_text())
        if cfg.get("model_type") == MODEL_TYPE:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
            cfg.pop("model_type")
            with torch.device("cpu"):  # built and read on the CPU whatever the default device; moved by load()
                model = TinyGPT(TinyConfig(**cfg))
            model.load_state_dict(load_file(str(path / "model.safetensors"), device="cpu"))
            return cls(model, tokenizer, "tiny")
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        with torch.device("cpu"):
            model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                         dtype=torch.float32)
        if tokenizer.eos_token_id is None:
            raise ValueError(f"{path}: tokenizer has no eos token; rollwise needs one to stop sampling")
        return cls(model, tokenizer, "hf")

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.kind == "tiny":
            (path / "config.json").write_text(json.dumps(self.model.config.to_dict(), indent=2))
            save_file({k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()},
                      str(path / "model.safetensors"))
        elif is_lora(self.model):  # the merged model, which every reader loads, and the adapter (policy/lora.py)
            merged = {k: v.cpu() for k, v in sampling_weights(self).items()}  # one layer at a time on the device
            self.model.get_base_model().save_pretrained(str(path), state_dict=merged)
            self.model.save_pretrained(str(path / "adapter"))
            self.tokenizer.save_pretrained(str(path / "adapter"))
        else:
            self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (the device every model input is built on)."""
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> "Policy":
        """Move the model to `device` (in place); returns the policy."""
        self.model.to(device)
        return self

    @property
    def max_positions(self) -> int:
        if self.kind == "tiny":
            return self.model.config.block_size
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 20))

    # ---- text <-> ids ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.kind == "tiny" and self.unk_id is not None and self.unk_id in ids:
            bad = sorted({c for c in text if self.tokenizer.convert_tokens_to_ids(c) == self.unk_id})
            raise ValueError(f"prompt {text!r} has characters outside the tiny model's vocabulary: {bad}")
        return ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ---- forward passes ------------------------------------------------------------------
    def forward(self, input_ids_BT, key_mask_BS, position_ids_BT, cache=None, output_hidden=False):
        """One incremental forward: returns logits_BTV and the updated KV cache, and with `output_hidden`
        the last layer's hidden states h_BTD (after the final norm, as `full_logits` gives them)."""
        if self.kind == "tiny":
            return self.model(input_ids_BT, position_ids_BT, key_mask_BS, cache, output_hidden=output_hidden)
        if cache is None:
            from transformers import DynamicCache
            cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=input_ids_BT, attention_mask=key_mask_BS, position_ids=position_ids_BT,
                         use_cache=True, output_hidden_states=output_hidden, **{self._cache_kwarg: cache})
        if output_hidden:
            return out.logits, out.past_key_values, out.hidden_states[-1]
        return out.logits, out.past_key_values

    def select_cache(self, cache, index_B: torch.Tensor):
        """Keep (and possibly repeat) rows of the KV cache: finished rows leave the batch here."""
        if self.kind == "tiny":
            return [(k.index_select(0, index_B), v.index_select(0, index_B)) for k, v in cache]
        cache.batch_select_indices(index_B)
        return cache

    def cache_layers(self, cache) -> list | None:
        """The cache as per-layer (keys, values), each [B, heads, S, head_dim]; None when it is not plain
        full attention (a sliding-window or otherwise special layer), whose KV cannot be moved between rows."""
        if self.kind == "tiny":
            return list(cache)
        from transformers.cache_utils import DynamicLayer

        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            return None
        return [(layer.keys, layer.values) for layer in cache.layers]

    def make_cache(self, layers: list):
        """A cache holding these per-layer (keys, values), for `forward` to continue from."""
        if self.kind == "tiny":
            return list(layers)
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=layers)

    def _right_padded(self, seqs: list[list[int]]):
        """ids and mask [B, L], right-padded, on the policy's device (built on the CPU, moved once)."""
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long, device="cpu")
        mask = torch.zeros((len(seqs), L), dtype=torch.long, device="cpu")
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long, device="cpu")
            mask[i, : len(s)] = 1
        dev = self.device
        return ids.to(dev), mask.to(dev)

    def full_logits(self, input_ids_BT, mask_BT, output_hidden=False):
        """Logits over right-padded full sequences (no cache): the learner's forward."""
        if self.kind == "tiny":
            out = self.model(input_ids_BT, None, None, None, output_hidden=output_hidden)
            return (out[0], out[2]) if output_hidden else out[0]
        out = self.model(input_ids=input_ids_BT, attention_mask=mask_BT,
                         output_hidden_states=output_hidden, use_cache=False)
        return (out.logits, out.hidden_states[-1]) if output_hidden else out.logits

    def response_logprobs(self, prompts: list[list[int]], responses: list[list[int]],
                          temperature: float | list[float] = 1.0):
        """log pi(response token | prefix) and the per-token entropy, right-padded to [N, T], at the
        sampling temperature (one for all rows, or one per row).

        Returns logp_NT (differentiable), entropy_NT (detached) and mask_NT (1 on response tokens).
        """
        seqs = [p + r for p, r in zip(prompts, responses)]
        ids, mask = self._right_padded(seqs)
        dev = ids.device
        if isinstance(temperature, (list, tuple)):
            temperature = torch.tensor(temperature, dtype=torch.float32, device=dev).clamp(min=1e-6).view(-1, 1, 1)
        else:
            temperature = max(temperature, 1e-6)
        logits = self.full_logits(ids, mask)[:, :-1].float() / temperature
        logp_all = F.log_softmax(logits, dim=-1)
        tok_logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).detach()
        T = max(len(r) for r in responses)
        N = len(seqs)
        logp_NT = torch.zeros(N, T, device=dev)
        ent_NT = torch.zeros(N, T, device=dev)
        mask_NT = torch.zeros(N, T, device=dev)
        rows, cols, src = [], [], []
        for i, (p, r) in enumerate(zip(prompts, responses)):
            k = len(r)
            rows += [i] * k
            cols += list(range(k))
            src += list(range(len(p) - 1, len(p) - 1 + k))
        rows_t, cols_t, src_t = (torch.tensor(x, dtype=torch.long, device="cpu").to(dev) for x in (rows, cols, src))
        logp_NT = logp_NT.index_put((rows_t, cols_t), tok_logp[rows_t, src_t])
        ent_NT[rows_t, cols_t] = entropy[rows_t, src_t]
        mask_NT[rows_t, cols_t] = 1.0
        return logp_NT, ent_NT, mask_NT

    @torch.no_grad()
    def prompt_stats(self, texts: list[str], batch_rows: int = 256):
        """One prefill-only pass: mean next-token entropy over each prompt (HIVE's prompt entropy)
        and its mean-pooled last hidden state (DOTS' embedding). Returns (entropy_K, embed_KD)."""
        ents, embs = [], []
        for s in range(0, len(texts), batch_rows):
            seqs = [self.encode(t) for t in texts[s: s + batch_rows]]
            ids, mask = self._right_padded(seqs)
            logits, hidden = self.full_logits(ids, mask, output_hidden=True)
            logp = F.log_softmax(logits.float(), dim=-1)
            ent = -(logp.exp() * logp).sum(-1)
            m = mask.float()
            ents.append(((ent * m).sum(1) / m.sum(1)).cpu().numpy())
            embs.append(((hidden.float() * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)).cpu().numpy())
        return np.concatenate(ents), np.concatenate(embs)
