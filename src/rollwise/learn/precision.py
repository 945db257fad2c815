"""The learner's numeric precision: `fp32` (the default) or `bf16` mixed precision.

bf16 is PyTorch autocast around the learner's forward passes only: the weights, their gradients and
AdamW's moments stay float32 (the "master weights"), matmuls run in bfloat16, and everything after the
logits is float32 — `Policy.response_logprobs` casts the logits to float32 before log_softmax/gather, and
the loss, aggregation and corrections run outside the autocast region. The engine samples from the same
float32 weights, so the behaviour log-probs it records are float32; the gap between them and the bf16
learner's is what an off-policy correction (e.g. tis-token) corrects, as with vLLM.
"""
from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str, device: torch.device | str) -> None:
    """One-line ValueError when `precision` is unknown or `device` cannot run it."""
    if precision not in PRECISIONS:
        raise ValueError(f"learner.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    device = torch.device(device)
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"learner.precision: bf16 asked for, but {torch.cuda.get_device_name(device)} does not "
                         "support bfloat16 (use fp32)")


def autocast(precision: str, device: torch.device | str):
    """The context the learner's forward passes run in: bf16 autocast on the device, or nothing (fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
