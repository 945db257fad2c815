"""LoRA through peft (`learner.lora: {r, alpha, dropout, target_modules}`): adapter-only training of a
Hugging Face policy.

The learner wraps `policy.model` in a peft model in place (`apply_lora`): the base weights are frozen and
only the adapters reach AdamW. How each consumer sees it:
- the torch engine shares the policy in memory (update_weights without a state_dict), so it samples from
  the very module the learner trains, base + adapter unmerged: its log-probs equal the learner's, with no
  second copy of the weights and no merge per step. Merging into the shared weights would break training
  (merge/unmerge rounds the frozen base every step), and a merged copy would double the weight memory; the
  cost is the adapter's extra matmuls, 2 r (d_in + d_out) FLOPs per adapted layer and token, a few percent
  at r = 16 on a 0.5B model.
- vLLM holds its own copy of the base weights: at each update it gets the merged weights under the base
  model's names (`sampling_weights`, W + the adapter's delta per adapted layer, computed without copying the
  model), through `weight_sync: reload`. Untested: vLLM was not run with LoRA (no GPU; its CPU build is
  slow to start). vLLM's own LoRA support (adapters loaded per request) would send only the adapter but
  needs `enable_lora` and per-request LoRARequests through the engine; left for when a GPU measures it.
- checkpoints (run/loop.py) hold the peft model's state_dict: the frozen base and the adapter, so a resume
  continues exactly; `Policy.save` writes the merged model (`sampling_weights`: a plain checkpoint every
  reader loads) and the adapter beside it in `adapter/` (peft's format), which `rollwise export --adapter`
  writes out.
"""
from __future__ import annotations

LORA_KEYS = {"r": int, "alpha": (int, float), "dropout": (int, float), "target_modules": (list, str)}
DEFAULTS = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}


def check_lora(options: dict) -> None:
    """One-line ValueError for an unknown key or a value of the wrong kind in learner.lora."""
    for k, v in options.items():
        if k not in LORA_KEYS:
            raise ValueError(f"learner.lora: unknown key {k!r}; expected {', '.join(LORA_KEYS)}")
        if not isinstance(v, LORA_KEYS[k]) or isinstance(v, bool):
            raise ValueError(f"learner.lora.{k}: got {v!r} of the wrong type")
    if options.get("r", 1) < 1:
        raise ValueError(f"learner.lora.r must be >= 1, got {options['r']}")
    if not 0 <= options.get("dropout", 0) < 1:
        raise ValueError(f"learner.lora.dropout must be in [0, 1), got {options['dropout']}")


def apply_lora(policy, options: dict) -> None:
    """Wrap policy.model in a peft LoRA model (in place); the tiny model refuses with one line."""
    check_lora(options)
    if getattr(policy, "kind", None) != "hf":
        raise ValueError("learner.lora: the tiny model does not support LoRA (peft adapts Hugging Face models; "
                         "use --model with a Hugging Face checkpoint, or leave learner.lora empty)")
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ValueError("learner.lora needs peft: pip install 'rollwise[lora]'") from None
    o = {**DEFAULTS, **options}
    cfg = LoraConfig(r=o["r"], lora_alpha=o["alpha"], lora_dropout=o["dropout"], target_modules=o["target_modules"],
                     task_type="CAUSAL_LM")
    training = policy.model.training
    policy.model = get_peft_model(policy.model, cfg)
    policy.model.train(training)


def is_lora(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def sampling_weights(policy) -> dict:
    """The weights an engine with its own copy samples from, by the base model's parameter names: the
    policy's parameters, with each adapted layer's weight merged (base + the adapter's delta)."""
    if not is_lora(policy.model):
        return dict(policy.model.named_parameters())
    from peft.tuners.lora import LoraLayer

    base = policy.model.get_base_model()
    deltas = {f"{name}.weight": mod.get_delta_weight(mod.active_adapters[0])
              for name, mod in base.named_modules() if isinstance(mod, LoraLayer)}
    out = {}
    for name, p in base.named_parameters():
        if "lora_" in name:
            continue
        name = name.replace(".base_layer.", ".")
        out[name] = p.detach() + deltas[name].detach() if name in deltas else p.detach()
    return out
