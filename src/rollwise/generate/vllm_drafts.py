"""Drafts on the vLLM engine (`engine_options.drafts`): rollwise's drafters inside vLLM's speculative decoding,
and the per-sample counts the ledger charges.

    --set engine_options.drafts.method=history --set engine_options.drafts.num_speculative_tokens=8   (DAS)
    --set engine_options.drafts.method=ngram --set engine_options.drafts.num_speculative_tokens=3     (vLLM's)

`history`: vLLM's `custom_class` proposer (vllm/config/speculative.py, vllm/v1/spec_decode/
custom_class_proposer.py) is `HistoryProposer` below. It lives in vLLM's worker; a Wave's drafter (DAS's
suffix trees over the run's earlier responses: `drafter(request, sample, tokens) -> [token ids]`, the
torch engine's contract) reaches it at submit, pickled with the submitted requests, through
collective_rpc (`install`), as the weights do. vLLM's rejection sampler verifies the drafts (for a draft
with no probabilities of its own, a point mass, which keeps the policy's distribution exactly). As in
the torch engine a draft is cut to the row's room (limit - tokens - 1) and after an end of sequence.

`ngram`: vLLM's own prompt-lookup drafter, on every row (declared as OwnDrafts, charged on every wave).

Counts: vLLM 0.32 returns, per sample, with its last output (`observability_config.
per_request_spec_decode_metrics`, vllm/v1/metrics/stats.py `RequestSpecDecodeMetrics`): every draft token
it scored (`num_draft_tokens`) and a histogram of draft tokens accepted per verification step, which sums
to the accepted total A. vLLM's scheduler counts a step's accepted drafts before its stop check
(vllm/v1/core/sched/scheduler.py, `num_accepted = len(generated_token_ids) - num_sampled`), so tokens
accepted after an end of sequence or the token limit are in A but not in the row. A step's output holds
its accepted drafts and one sampled token, and every output but the last is cut by nothing, so the row's
kept draft tokens are exactly: the sum over its outputs before the last of (tokens - 1, at least 0), plus
min(tokens of the last, its accepted a), where a = A - that sum (`kept_drafts`).

vLLM-CPU's sampled verification is repaired here. Its rejection sampler spreads each request's temperature
(and top-k, top-p) over its draft positions with `expand_kernel`; without Triton the CPU build runs
vllm/utils/cpu_triton_utils.py `_expand_kernel_impl`, which hands the C++ kernel int64 copies of the float
tensors and never copies the result back, so the temperatures it divides the target logits by are
uninitialised memory (vllm/v1/sample/rejection_sampler.py `apply_sampling_constraints`): sampled drafted
rows came out far from the policy's distribution (greedy verification skips it and was exact). `cpu_expand`
replaces that kernel in vLLM's worker (`install_cpu_expand`, with vLLM's own KernelOverride wrapper) where
Triton is absent; with Triton (GPUs) vLLM's kernel runs.
"""
from __future__ import annotations

import numpy as np
import torch

METHODS = ("ngram", "history")
HISTORY_CLASS = f"{__name__}.HistoryProposer"


def speculative_config(drafts: dict) -> dict:
    """vLLM's speculative_config for engine_options.drafts, checked (one-line errors)."""
    if not isinstance(drafts, dict):
        raise ValueError("engine_options.drafts must be a mapping (method, num_speculative_tokens, ...), "
                         f"not {drafts!r}")
    d = dict(drafts)
    method = d.pop("method", None)
    if method not in METHODS:
        why = {"suffix": "vLLM's suffix method needs arctic_inference, which vllm-cpu does not install; "
                         "'history' drafts from DAS's suffix trees instead"}.get(
            method, "vLLM's other methods run a draft model whose forwards the ledger would not charge")
        raise ValueError(f"engine_options.drafts.method must be one of {METHODS}, not {method!r} ({why})")
    k = d.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"engine_options.drafts.num_speculative_tokens must be an integer >= 1, not {k!r}")
    if method == "history":
        extra = sorted(set(d) - {"num_speculative_tokens"})
        if extra:
            raise ValueError(f"engine_options.drafts: method 'history' takes num_speculative_tokens only, not {extra}")
        return {"method": "custom_class", "model": HISTORY_CLASS, "num_speculative_tokens": k}
    return {"method": "ngram", **d}


def kept_drafts(lengths: list[int], accepted: int, k: int) -> int:
    """Draft tokens a finished sample kept, from the token count of each of its outputs (one per engine step)
    and vLLM's accepted total (module docstring). Raises if vLLM's counts disagree with its outputs."""
    if not lengths:
        return 0
    before = sum(max(n - 1, 0) for n in lengths[:-1])
    last = accepted - before
    if not 0 <= last <= k:
        raise RuntimeError(f"vLLM's draft counts disagree with its outputs: {accepted} drafts accepted, "
                           f"{before} before the last step, whose {lengths[-1]} tokens allow 0..{k}")
    return before + min(lengths[-1], last)


def cpu_expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:
    """vLLM's expand_kernel (vllm/v1/sample/rejection_sampler.py): request i's value (replace_from replaced by
    replace_to) at each of its positions cu_num_tokens[i-1]:cu_num_tokens[i] of output, in output's dtype."""
    cu = cu_num_tokens.to(torch.long)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output[:int(cu[-1]) if len(cu) else 0] = vals.repeat_interleave(counts).to(output.dtype)


def install_cpu_expand() -> bool:
    """In vLLM's worker: replace vLLM-CPU's broken expand kernel (module docstring) where Triton is absent, as
    vLLM's register_kernels would but for the rejection sampler's dispatcher alone (register_kernels scans
    every loaded module and fails on some, e.g. once numba is loaded). True when replaced."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON or not current_platform.is_cpu():
        return False
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.triton_utils.dispatcher import KernelOverride

    owner = rs._expand  # the dispatcher expand_batch_to_tokens calls; it launches owner.kernel
    if "kernel" not in vars(owner):
        raise RuntimeError("vLLM's rejection sampler changed (vllm/v1/sample/rejection_sampler.py _expand has no "
                           "kernel): check whether its CPU expand kernel is still broken before using drafts")
    wrapper = KernelOverride(rs.expand_kernel, cpu_expand)
    owner.kernel = wrapper
    vars(owner).pop("_kernel_arg_names", None)  # re-derived from the wrapper, as register_kernels does
    rs.expand_kernel = wrapper
    return True


def parse_request_id(req_id: str) -> tuple[str, int]:
    """(the engine's request id `owner:rid`, sample index) of a vLLM engine-core request id: vLLM appends
    8 random characters after a '-' (vllm/v1/engine/input_processor.py assign_request_id) and names the
    i-th child of a request with n > 1 `i_<id>` (vllm/v1/engine/parallel_sampling.py get_child_info)."""
    rid = req_id.rsplit("-", 1)[0]
    if "_" in rid:
        i, rid = rid.split("_", 1)
        return rid, int(i)
    return rid, 0


class HistoryProposer:
    """vLLM's custom_class proposer, in its worker: the drafter installed for a request proposes its rows'
    drafts; a row of a request with none gets none. `rows`: vLLM request id -> (rollwise Request, context
    length, token limit, EOS id)."""

    def __init__(self, vllm_config):
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.runner = None  # the worker's model runner (its input batch names each row's request)
        self.drafters: dict = {}  # vLLM request id (owner:rid) -> the drafter
        self.rows: dict = {}

    def load_model(self, *args, **kwargs) -> None:
        """No model: vLLM's CPU runner calls this on every drafter."""

    def install(self, runner, drafter, rows: dict) -> None:
        self.runner = runner
        for vid, row in rows.items():
            self.drafters[vid], self.rows[vid] = drafter, row

    def forget(self, vids) -> None:
        for vid in vids:
            self.drafters.pop(vid, None)
            self.rows.pop(vid, None)

    def propose(self, sampled_token_ids, num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings=None) -> list[list[int]]:
        out = []
        for i, sampled in enumerate(sampled_token_ids):
            out.append(self._draft(i, num_tokens_no_spec, token_ids_cpu) if sampled and self.drafters else [])
        return out

    def _draft(self, i: int, num_tokens_no_spec, token_ids_cpu) -> list[int]:
        vid, sample = parse_request_id(self.runner.input_batch.req_ids[i])
        drafter = self.drafters.get(vid)
        if drafter is None:
            return []
        req, context, limit, eos = self.rows[vid]
        tokens = token_ids_cpu[i, context:int(num_tokens_no_spec[i])].tolist()
        room = min(limit - len(tokens) - 1, self.k)  # the draft, all kept, plus the sample after it must fit
        if room <= 0:
            return []
        prop = [int(x) for x in list(drafter(req, sample, tokens))[:room]]
        if eos in prop:  # nothing after an end of sequence can be kept
            prop = prop[:prop.index(eos) + 1]
        return prop
