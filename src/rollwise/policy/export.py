"""Export a trained policy as a standard Hugging Face checkpoint that `AutoModelForCausalLM.from_pretrained`
loads without rollwise installed.

rollwise's tiny model is a GPT-2 block for block: learned positions, pre-LayerNorm (eps 1e-5), fused qkv
with biases, exact GELU MLP of width 4C, an untied output head without bias. So its weights map onto
`GPT2LMHeadModel` one to one (GPT-2's Conv1D stores each linear transposed), and the exported model
computes the same function: tests/test_export.py checks the logits and greedy generations agree. A run
on a Hugging Face model (`--model`) already saves `model/` with `save_pretrained`; exporting it copies it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as hf_logging

from .policy import Policy

# TinyGPT parameter -> GPT-2 parameter, per block ({i}); True where GPT-2's Conv1D wants the transpose
_BLOCK = {
    "ln1.weight": ("ln_1.weight", False), "ln1.bias": ("ln_1.bias", False),
    "qkv.weight": ("attn.c_attn.weight", True), "qkv.bias": ("attn.c_attn.bias", False),
    "proj.weight": ("attn.c_proj.weight", True), "proj.bias": ("attn.c_proj.bias", False),
    "ln2.weight": ("ln_2.weight", False), "ln2.bias": ("ln_2.bias", False),
    "mlp.0.weight": ("mlp.c_fc.weight", True), "mlp.0.bias": ("mlp.c_fc.bias", False),
    "mlp.2.weight": ("mlp.c_proj.weight", True), "mlp.2.bias": ("mlp.c_proj.bias", False),
}
_TOP = {"wte.weight": "transformer.wte.weight", "wpe.weight": "transformer.wpe.weight",
        "ln_f.weight": "transformer.ln_f.weight", "ln_f.bias": "transformer.ln_f.bias",
        "head.weight": "lm_head.weight"}


def tiny_to_gpt2(policy: Policy) -> GPT2LMHeadModel:
    """The tiny model's weights in a `GPT2LMHeadModel` that computes the same logits."""
    if policy.kind != "tiny":
        raise ValueError("tiny_to_gpt2: the policy is not rollwise's tiny model")
    c = policy.model.config
    tok = policy.tokenizer
    config = GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer,
                        n_head=c.n_head, n_inner=4 * c.n_embd, activation_function="gelu",  # exact, as nn.GELU()
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        tie_word_embeddings=False, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    gpt2 = GPT2LMHeadModel(config)
    state = {}
    for name, w in policy.model.state_dict().items():
        if name in _TOP:
            state[_TOP[name]] = w
            continue
        _, i, rest = name.split(".", 2)  # blocks.<i>.<rest>
        target, transpose = _BLOCK[rest]
        state[f"transformer.h.{i}.{target}"] = w.t() if transpose else w
    missing, unexpected = gpt2.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=False)
    missing = [k for k in missing if not k.endswith("attn.bias") and not k.endswith("masked_bias")]  # buffers
    if missing or unexpected:
        raise RuntimeError(f"tiny_to_gpt2: unmapped weights (missing {missing}, unexpected {unexpected})")
    return gpt2.eval()


def export_checkpoint(src: str | Path, out: str | Path, adapter: bool = False) -> Path:
    """Write `src` (a checkpoint directory, or a run directory holding `model/`) to `out` as a Hugging Face
    checkpoint: config.json, model.safetensors and the tokenizer files. A LoRA run's model is saved merged
    (policy/lora.py); `adapter=True` writes its adapter instead (peft's adapter_config.json and weights,
    loaded with `PeftModel.from_pretrained(base, out)`)."""
    src, out = Path(src), Path(out)
    if (src / "model" / "config.json").exists():
        src = src / "model"  # a run directory (its config.json is the run's): its latest saved policy
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out {out}: exists and is not empty (rollwise never overwrites a directory)")
    if adapter:
        if not (src / "adapter" / "adapter_config.json").exists():
            raise ValueError(f"--adapter: {src} holds no LoRA adapter (the run did not set learner.lora)")
        shutil.copytree(src / "adapter", out, dirs_exist_ok=True)
        return out
    from ..run.evaluate import check_finite_weights
    from ..run.build import load_policy

    policy = load_policy(src)  # a missing or damaged model is one error naming it
    try:  # as train and eval do: a model with NaN or inf weights is not written as if it were one
        check_finite_weights(policy)
    except ValueError as e:
        raise ValueError(f"--model {src}: {str(e).split(';')[0]}; not exporting it") from None
    model = tiny_to_gpt2(policy) if policy.kind == "tiny" else policy.model
    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # one line of output, not a shard-writing bar
    with torch.no_grad():
        model.save_pretrained(str(out))
    policy.tokenizer.save_pretrained(str(out))
    return out
