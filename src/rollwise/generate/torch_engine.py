"""The built-in torch engine: batched sampling with a KV cache, any mix of n per prompt in one call.

Each distinct prompt is prefilled once and its KV cache repeated for its n samples. Finished rows
(EOS or their length limit) leave the running batch at once, so a long tail of lengths costs only the
long rows, not the whole batch (`transformers`' generate keeps every row to the end).

Returns per-token behaviour log-probs log softmax(logits / T) of the sampled tokens and the per-token
entropy of that distribution. Top-p only narrows what is sampled; the log-probs are of the
temperature-scaled distribution, the one the learner recomputes (RL runs use top-p = 1 by default).

Generation is a resumable `DecodeState`: `poll(max_steps)` advances it token by token, so a caller can
act between tokens (abort a request and get its partial rollout back; look at each sample's tokens and
stop single samples, the Engine protocol's optional in-flight control; requests submitted with
`hidden=True` also show each running sample's last-layer hidden state, ARRoL's input). Submitted
requests are decoded in chunks of at most `max_rows` rows (whole requests), one chunk after the other,
in submission order; the random stream is therefore the same however often the caller polls.

A row that its segment budget stops (a partial rollout, status "partial"), of a request that asks for it
(`SamplingParams.keep_kv`), leaves its KV cache in a small store (`PrefixKV`, at most `prefix_kv_rows`
rows); APRIL's partials, resumed only after the next weight update, do not ask. A request that continues
that very rollout (TreePO's branches: several children of one node) starts from it and prefills only the
row's last token, instead of prompt + prefix again: the prefix's KV is computed once and shared by every
branch. Entries of an older policy version are never used (a weight update empties the store), so a
checkpoint, taken between steps, never needs them. `prefix_kv_rows=0` turns this off (every continuation
re-prefills).

Speculative decoding (the Engine protocol's optional drafts, `submit(requests, drafter=...)`): a
drafter proposes each running row's next tokens (`drafter(request, sample, tokens) -> [token ids]`,
DAS's suffix tree) and the policy verifies them in the row's next forward pass, exactly: the row feeds
its last sampled token and its draft, a token is sampled from the policy at each position in order,
and each draft token is kept while the sample equals it; the first sample that differs (or the one
after a fully kept draft) is the row's next token. Every token is therefore a sample of the policy's
own distribution given its exact prefix (for a point-mass draft, "sample, keep while equal" is the
speculative-sampling rule min(1, p/q) with its residual), so the rows have the plain decoder's
distribution; only the random stream differs (greedy rows give the same tokens). A rejected draft
token's KV stays in the cache with its key masked. A rollout's kept draft tokens are of kind "draft"
(`lineage.tokens_by_kind`) and its request's Finished event counts every draft token scored
(`verified_tokens`), kept or not, for the ledger.

Device: the decode state (KV cache, buffers, the sampling generator) lives on the policy's device;
what leaves the engine (rollouts, peeked tokens and hidden states) is on the CPU.
"""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.registry import register
from ..core.types import Group, Lineage, Request, Rollout
from .capabilities import Drafts, HiddenStates, InFlight
from .continuation import check_request, continued, length_reason, limits, status_of
from .engine import STOP_REASONS, Finished, request_params


@register("engine", "torch", provenance="INF", summary="built-in KV-cache sampler; finished rows leave the batch")
class TorchEngine:
    # peek/stop; submit(..., hidden=True) / peek(..., hidden=True); submit(..., drafter=f): speculative decoding
    capabilities = (InFlight(), HiddenStates(), Drafts())

    def __init__(self, policy, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                 seed: int = 0, max_rows: int = 1024, prefix_kv_rows: int = 256):
        if not temperature >= 0 or not 0 < top_p <= 1 or max_new_tokens < 1 or prefix_kv_rows < 0:
            raise ValueError("engine: need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1, prefix_kv_rows >= 0")
        self.policy, self.temperature, self.top_p = policy, temperature, top_p
        self.max_new_tokens, self.max_rows = max_new_tokens, max_rows
        # on the device that samples (a policy without a device, a test double, is on the CPU)
        self.gen = torch.Generator(device=getattr(policy, "device", "cpu")).manual_seed(seed)
        self.version = policy.version
        self._queue: list[Request] = []
        self._state: DecodeState | None = None
        self._hidden: set[int] = set()  # ids of requests whose decode state keeps hidden states
        self._drafters: dict = {}  # request id -> its drafter (speculative decoding)
        self.prefix_kv = PrefixKV(prefix_kv_rows)

    @classmethod
    def for_policy(cls, policy, **kwargs) -> "TorchEngine":
        return cls(policy, **kwargs)

    def state_dict(self) -> dict:
        s = {"gen": self.gen.get_state()}
        if self.gen.device.type != "cpu":  # a CPU generator's state is saved as before (no device key)
            s["gen_device"] = self.gen.device.type
        return s

    def load_state_dict(self, s: dict) -> None:
        if s.get("gen_device", "cpu") == self.gen.device.type:
            self.gen.set_state(s["gen"])
        else:  # resumed on another kind of device: its generator cannot take the state; a seed drawn from it
            src = torch.Generator(device="cpu")
            if s.get("gen_device", "cpu") == "cpu":
                src.set_state(s["gen"])
            else:
                src.manual_seed(int.from_bytes(bytes(s["gen"].tolist()[:8]), "little"))
            self.gen.manual_seed(int(torch.randint(2 ** 62, (1,), generator=src, device="cpu")))

    # ---- the Engine protocol ---------------------------------------------------------------
    def submit(self, requests: list[Request], hidden: bool = False, drafter=None) -> None:
        """Queue requests; `hidden`: their chunk keeps each running row's last-layer hidden state for
        peek (the same forward passes, so the same tokens and random draws); `drafter`: their rows are
        decoded speculatively, verifying its drafts (module docstring)."""
        for r in requests:
            check_request(r)
        if hidden and drafter is not None:
            raise ValueError("submit: hidden states and drafts cannot be asked of the same requests")
        if hidden:
            self._hidden.update(r.id for r in requests)
        if drafter is not None:
            self._drafters.update((r.id, drafter) for r in requests)
        self._queue.extend(requests)

    @property
    def pending(self) -> int:
        return len(self._queue) + (len(self._state.requests) - len(self._state.reported) if self._state else 0)

    def poll(self, max_steps: int | None = None) -> list[Finished]:
        events: list[Finished] = []
        steps = 0
        while max_steps is None or steps < max_steps:
            if self._state is None:
                if not self._queue:
                    break
                self._state = DecodeState(self, self._next_chunk())
            if not self._state.done:
                self._state.step()
                steps += 1
            events += self._state.collect()
            if self._state.done:
                self._forget(self._state.requests)
                self._state = None
        return events

    def abort(self, request_ids) -> list[Finished]:
        ids = set(request_ids)
        out = []
        if self._state is not None:
            out += self._state.abort(ids)
            if self._state.done:
                self._forget(self._state.requests)
                self._state = None
        for r in [r for r in self._queue if r.id in ids]:  # never started: no tokens
            self._queue.remove(r)
            self._forget([r])
            out.append(Finished(r, Group(r.prompt, []), 0))
        return out

    def peek(self, request_ids, hidden: bool = False) -> dict[int, list]:
        """The tokens each sample of these running requests has so far (None: it has stopped); with
        `hidden` (requests submitted with hidden=True) a pair (tokens_T, h_D) per running sample."""
        return self._state.peek(set(request_ids), hidden) if self._state is not None else {}

    def stop(self, request_id: int, samples, reason: str) -> None:
        """End these samples of a running request now, as "stop" (done) or "pruned" rows."""
        if reason not in STOP_REASONS:
            raise ValueError(f"stop: reason must be one of {STOP_REASONS}, not {reason!r}")
        if self._state is None or not self._state.stop(request_id, samples, reason):
            raise ValueError(f"stop: request {request_id} is not running")

    def update_weights(self, version: int, state_dict=None) -> None:
        if state_dict is not None:  # the learner's policy is shared in memory unless weights are sent
            self.policy.model.load_state_dict(state_dict)
        if state_dict is not None or int(version) != self.version:
            self.prefix_kv.clear()  # KV computed by other weights
        self.version = int(version)

    # ---- helpers -------------------------------------------------------------------------
    def _forget(self, requests: list[Request]) -> None:
        for r in requests:
            self._hidden.discard(r.id)
            self._drafters.pop(r.id, None)

    def _next_chunk(self) -> list[Request]:
        chunk, rows = [], 0
        while self._queue and (not chunk or rows + self._queue[0].n <= self.max_rows):
            r = self._queue.pop(0)
            chunk.append(r)
            rows += r.n
        return chunk

    def params(self, req: Request) -> tuple[float, float, int]:
        return request_params(req, self.temperature, self.top_p, self.max_new_tokens)


@dataclass
class KVEntry:
    """The KV of one stopped row: per layer (keys, values) [heads, L, head_dim] for its L = context +
    response - 1 tokens (the last sampled token was never fed), under policy `version`."""

    layers: list
    length: int
    version: int


class PrefixKV:
    """KV of rows stopped by their segment budget, keyed by the rollout that came back for the row (the
    object a continuing Request carries as its prefix). At most `rows` entries, the oldest dropped first."""

    def __init__(self, rows: int):
        self.rows = int(rows)
        self._entries: OrderedDict[int, tuple] = OrderedDict()  # id(rollout) -> (weakref to it, KVEntry)
        self.hits = self.reused_tokens = 0  # continuations served, and prefill tokens they skipped

    def put(self, rollout: Rollout, entry: KVEntry) -> None:
        key = id(rollout)
        self._entries.pop(key, None)
        self._entries[key] = (weakref.ref(rollout), entry)
        while len(self._entries) > self.rows:
            self._entries.popitem(last=False)

    def get(self, rollout: Rollout, version: int, length: int) -> KVEntry | None:
        """The entry for this very rollout (not another object that reused its id), of this version and
        covering exactly `length` tokens; else None."""
        found = self._entries.get(id(rollout))
        if found is None or found[0]() is not rollout or found[1].version != version or found[1].length != length:
            return None
        self._entries.move_to_end(id(rollout))
        return found[1]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class DecodeState:
    """One chunk of requests being decoded: the KV cache, the running rows and their buffers.
    `step()` samples one token for every running row; finished rows leave the batch."""

    def __init__(self, engine: TorchEngine, requests: list[Request]):
        self.engine, self.requests, self.reported = engine, requests, set()
        pol = self.pol = engine.policy
        U = len(requests)
        params = [engine.params(r) for r in requests]
        # per request: prompt + prefix to prefill, and the length limits (continuation.py's rules)
        lims = [limits(r, pol.encode(r.prompt.text), m, pol.max_positions) for r, (_, _, m) in zip(requests, params)]
        self.prompt_ids = [x.prompt_ids for x in lims]
        contexts = [x.context for x in lims]
        ns = [r.n for r in requests]
        dev = self.dev = getattr(pol, "device", torch.device("cpu"))
        row_src = torch.repeat_interleave(torch.arange(U, device=dev), torch.tensor(ns, dtype=torch.long, device=dev))
        R = self.R = int(row_src.numel())
        self.row_req = row_src
        self.limit = torch.tensor([x.limit for x, n in zip(lims, ns) for _ in range(n)], dtype=torch.long, device=dev)
        self.full_limit = torch.tensor([x.full for x, n in zip(lims, ns) for _ in range(n)], dtype=torch.long, device=dev)
        temps = [params[u][0] for u in row_src.tolist()]
        tops = [params[u][1] for u in row_src.tolist()]
        # one temperature and top-p for the whole chunk (the usual case) keeps the scalar arithmetic
        self.t_scalar = temps[0] if temps and all(t == temps[0] for t in temps) else None
        self.p_scalar = tops[0] if tops and all(p == tops[0] for p in tops) else None
        self.temp_R = torch.tensor(temps, dtype=torch.float32, device=dev)
        self.top_R = torch.tensor(tops, dtype=torch.float32, device=dev)
        max_new = int(self.limit.max()) if R else 0
        self.tok_buf = torch.full((R, max(max_new, 1)), pol.pad_id, dtype=torch.long, device=dev)
        self.lp_buf = torch.zeros((R, max(max_new, 1)), device=dev)
        self.ent_buf = torch.zeros((R, max(max_new, 1)), device=dev)
        self.ent_sum = torch.zeros(R, device=dev)
        self.length = torch.zeros(R, dtype=torch.long, device=dev)
        self.hit_eos = torch.zeros(R, dtype=torch.bool, device=dev)
        self.finished = self.limit == 0  # rows with nothing to generate are done at once
        self.aborted = torch.zeros(R, dtype=torch.bool, device=dev)
        self.stopped: dict[int, str] = {}  # row -> how a caller ended it (engine.stop)
        self.version = engine.version
        self.t = 0
        self.keep_hidden = any(r.id in engine._hidden for r in requests)
        self.last_hidden = None  # h_BD of the running rows at their last token (keep_hidden only)
        self.kept_kv: dict[int, list] = {}  # row -> its KV, for the rows a segment budget stopped
        keep = [r.sampling.keep_kv and r.sampling.segment_tokens is not None and engine.prefix_kv.rows > 0
                for r in requests]
        self.keep_R = torch.tensor([keep[u] for u in row_src.tolist()], dtype=torch.bool, device=dev) if any(keep) else None
        self.context_len = [len(contexts[u]) for u in row_src.tolist()]
        # speculative decoding: each request's drafter (None: plain), each row's sampled token not yet fed
        # (after the first step), its kept draft tokens and every draft token scored for it
        self.drafters = [engine._drafters.get(r.id) for r in requests]
        if any(d is not None for d in self.drafters) and self.keep_hidden:
            raise ValueError("a chunk cannot both keep hidden states and verify drafts")
        self.speculative = any(d is not None for d in self.drafters)
        self.pending = None
        self.drafted = torch.zeros(R, dtype=torch.long, device=dev)
        self.verified = [0] * R
        self.first_row = [0] + list(itertools.accumulate(ns))[:-1]  # each request's first row
        self.prompt_tokens = [len(c) for c in contexts]  # prefilled per request (fewer where KV is kept)
        self.active = torch.arange(R, device=dev)[~self.finished]
        if len(self.active) == 0:
            self.prompt_tokens = [0] * U  # nothing to generate: nothing prefilled
            return
        # a continuation of a rollout whose KV is kept starts from it: only its last token is prefilled
        hits = [engine.prefix_kv.get(r.prefix, self.version, len(c) - 1) if r.prefix is not None and r.n else None
                for r, c in zip(requests, contexts)]
        past = [e.length if e is not None else 0 for e in hits]
        tails = [c[p:] for c, p in zip(contexts, past)]
        # prefill every distinct context once (left padding: every context ends at column Lp - 1)
        Lp = max(len(c) for c in tails)
        ids_UL = torch.full((U, Lp), pol.pad_id, dtype=torch.long, device="cpu")
        mask_UL = torch.zeros((U, Lp), dtype=torch.long, device="cpu")
        for i, c in enumerate(tails):  # built on the CPU, moved once
            ids_UL[i, Lp - len(c):] = torch.tensor(c, dtype=torch.long, device="cpu")
            mask_UL[i, Lp - len(c):] = 1
        ids_UL, mask_UL = ids_UL.to(dev), mask_UL.to(dev)
        past_U = torch.tensor(past, dtype=torch.long, device=dev)
        pos_UL = (mask_UL.cumsum(1) - 1).clamp(min=0) + past_U.unsqueeze(1)
        cache = None
        if any(e is not None for e in hits):  # the kept KV, left-padded to the longest, before the tails
            cache, kv_mask = self._kept_cache(hits, max(past))
            mask_UL = torch.cat([kv_mask, mask_UL], dim=1)
            engine.prefix_kv.hits += sum(e is not None for e in hits)
            engine.prefix_kv.reused_tokens += sum(past)
            self.prompt_tokens = [len(c) for c in tails]
        with torch.no_grad():
            logits, cache, h = self._forward(ids_UL, mask_UL, pos_UL, cache)
        src = row_src[self.active]
        self.cache = pol.select_cache(cache, src)
        self.last_logits = logits[src, -1]
        if h is not None:
            self.last_hidden = h[src, -1]
        self.key_mask = mask_UL[src]
        self.pos = pos_UL[src, -1] + 1

    def _kept_cache(self, hits: list, S: int):
        """A cache of U rows holding each hit's kept KV right-aligned in S columns (zeros and key mask 0
        elsewhere), and that key mask [U, S]."""
        first = next(e for e in hits if e is not None)
        layers = []
        for li, (k0, v0) in enumerate(first.layers):
            K = k0.new_zeros((len(hits), k0.shape[0], S, k0.shape[2]))
            V = v0.new_zeros((len(hits), v0.shape[0], S, v0.shape[2]))
            for u, e in enumerate(hits):
                if e is not None:
                    K[u, :, S - e.length:], V[u, :, S - e.length:] = e.layers[li]
            layers.append((K, V))
        mask = torch.zeros((len(hits), S), dtype=torch.long, device=self.dev)
        for u, e in enumerate(hits):
            if e is not None:
                mask[u, S - e.length:] = 1
        return self.pol.make_cache(layers), mask

    def _keep_kv(self, sel: torch.Tensor, act: torch.Tensor) -> None:
        """Copy out the KV of the running rows `sel` (a mask over `act`) before they leave the batch."""
        idx = sel.nonzero().squeeze(-1).tolist()
        if not idx:
            return
        layers = self.pol.cache_layers(self.cache)
        if layers is None:  # a cache whose rows cannot be moved (sliding window): continuations re-prefill
            return
        for j in idx:
            real = self.key_mask[j].bool()
            self.kept_kv[int(act[j])] = [(k[j][:, real].clone(), v[j][:, real].clone()) for k, v in layers]

    @property
    def done(self) -> bool:
        return len(self.active) == 0

    @torch.no_grad()
    def step(self) -> None:
        """Sample one token for every running row; rows that hit EOS or their limit leave. (With a
        drafter: one verification pass, which may give a row several tokens: _spec_step.)"""
        if self.speculative:
            return self._spec_step()
        act, pol = self.active, self.pol
        tok, lp, ent = self._sample(self.last_logits, act)
        t = self.t
        self.tok_buf[act, t], self.lp_buf[act, t], self.ent_buf[act, t] = tok, lp, ent
        self.ent_sum[act] += ent
        self.length[act] += 1
        eos = tok == pol.eos_id
        self.hit_eos[act[eos]] = True
        done = eos | (self.length[act] >= self.limit[act])
        self.t += 1
        if self.keep_R is not None:  # rows their segment budget stops keep their KV for a continuation
            self._keep_kv(done & ~eos & (self.length[act] < self.full_limit[act]) & self.keep_R[act], act)
        if done.all():
            self.finished[act] = True
            self.active = act[:0]
            return
        if done.any():  # finished rows leave the running batch
            self.finished[act[done]] = True
            keep = (~done).nonzero().squeeze(-1)
            act, tok = act[keep], tok[keep]
            self.pos, self.key_mask = self.pos[keep], self.key_mask[keep]
            self.cache = pol.select_cache(self.cache, keep)
        self.active = act
        self.key_mask = torch.cat([self.key_mask, torch.ones(len(act), 1, dtype=torch.long, device=self.dev)], dim=1)
        logits, self.cache, h = self._forward(tok.unsqueeze(1), self.key_mask, self.pos.unsqueeze(1), self.cache)
        self.last_logits = logits[:, -1]
        if h is not None:
            self.last_hidden = h[:, -1]
        self.pos = self.pos + 1

    def _spec_step(self) -> None:
        """One speculative step for every running row: feed its pending token and its draft, sample the
        policy at each position in order, keep draft tokens while the sample equals them; the first
        sample that differs (or the one after the whole draft) becomes the row's pending token. The
        first step has no pending token yet: it samples one from the prefill's logits."""
        act, pol = self.active, self.pol
        if self.pending is None:
            tok, lp, ent = self._sample(self.last_logits, act)
            self.last_logits = None  # from now on the rows' next distributions come with their drafts
            ended = self._emit(act, tok, lp, ent)
            self.pending = tok
            self._drop(ended)
            return
        B = len(act)
        rows, lengths, lims = act.tolist(), self.length[act].tolist(), self.limit[act].tolist()
        drafts = []
        for row, n_have, lim in zip(rows, lengths, lims):
            u = int(self.row_req[row])
            room = lim - n_have - 1  # the draft, all kept, plus the sample after it must fit
            d = self.drafters[u]
            prop = list(d(self.requests[u], row - self.first_row[u], self.tok_buf[row, :n_have].tolist())) \
                if d is not None and room > 0 else []
            prop = [int(x) for x in prop[:room]]
            if pol.eos_id in prop:  # nothing after an end of sequence can be kept
                prop = prop[:prop.index(pol.eos_id) + 1]
            drafts.append(prop)
            self.verified[row] += len(prop)
        K = max(len(d) for d in drafts)
        k_B = torch.tensor([len(d) for d in drafts], dtype=torch.long, device=self.dev)
        ids_BF = torch.full((B, K + 1), pol.pad_id, dtype=torch.long, device="cpu")
        ids_BF[:, 0] = self.pending.cpu()
        for j, d in enumerate(drafts):
            if d:
                ids_BF[j, 1:1 + len(d)] = torch.tensor(d, dtype=torch.long)
        ids_BF = ids_BF.to(self.dev)
        cols_F = torch.arange(K + 1, device=self.dev)
        fed_BF = (cols_F.unsqueeze(0) <= k_B.unsqueeze(1)).long()
        key_mask = torch.cat([self.key_mask, fed_BF], dim=1)
        # a row's padding (a shorter draft than the longest) sits at its last real position: masked, and never
        # past the model's positions
        pos_BF = self.pos.unsqueeze(1) + torch.minimum(cols_F.unsqueeze(0), k_B.unsqueeze(1))
        logits_BFV, self.cache = pol.forward(ids_BF, key_mask, pos_BF, self.cache)
        # sample position by position; a row stays open while its samples equal its draft
        open_B = torch.ones(B, dtype=torch.bool, device=self.dev)
        kept_B = torch.zeros(B, dtype=torch.long, device=self.dev)
        pending_B = self.pending.clone()
        ended_B = torch.zeros(B, dtype=torch.bool, device=self.dev)
        for i in range(K + 1):
            at = open_B.nonzero().squeeze(-1)
            if len(at) == 0:
                break
            tok, lp, ent = self._sample(logits_BFV[at, i], act[at])
            hit = (i < k_B[at]) & (tok == ids_BF[at, (i + 1) if i < K else i])
            self.drafted[act[at[hit]]] += 1
            ended_B[at] = self._emit(act[at], tok, lp, ent)
            kept_B[at[hit]] += 1
            pending_B[at] = tok
            open_B[at] = hit & ~ended_B[at]
        # the columns fed this step that stay: the pending token and the kept draft tokens
        self.key_mask = torch.cat([self.key_mask, (cols_F.unsqueeze(0) <= kept_B.unsqueeze(1)).long()], dim=1)
        self.pos = self.pos + 1 + kept_B
        self.pending = pending_B
        self.t += 1
        self._drop(ended_B)

    def _emit(self, rows: torch.Tensor, tok: torch.Tensor, lp: torch.Tensor, ent: torch.Tensor) -> torch.Tensor:
        """Append one token to each of these rows at its own length (speculative steps); returns which of
        them ended (EOS or their limit)."""
        at = self.length[rows]
        self.tok_buf[rows, at], self.lp_buf[rows, at], self.ent_buf[rows, at] = tok, lp, ent
        self.ent_sum[rows] += ent
        self.length[rows] += 1
        eos = tok == self.pol.eos_id
        self.hit_eos[rows[eos]] = True
        return eos | (self.length[rows] >= self.limit[rows])

    def _drop(self, ended_B: torch.Tensor) -> None:
        """Rows that ended in a speculative step leave the running batch."""
        if not ended_B.any():
            return
        act = self.active
        self.finished[act[ended_B]] = True
        keep = (~ended_B).nonzero().squeeze(-1)
        self.active = act[keep]
        if len(keep):
            self.pos, self.key_mask, self.pending = self.pos[keep], self.key_mask[keep], self.pending[keep]
            self.cache = self.pol.select_cache(self.cache, keep)

    def _forward(self, *args):
        """The policy's forward: (logits, cache, the last layer's hidden states, or None unless kept).
        Without hidden states it is the plain call, so a run that keeps none is unchanged."""
        if not self.keep_hidden:
            return (*self.pol.forward(*args), None)
        return self.pol.forward(*args, output_hidden=True)

    def _sample(self, logits_BV: torch.Tensor, rows: torch.Tensor):
        """Tokens, their log-probs and the entropies for the running `rows`. One temperature and top-p
        for the whole chunk (the usual case) is computed with scalars, exactly as a plain sampler."""
        logits_BV = logits_BV.float()
        if self.t_scalar is not None:
            greedy_B = torch.full((len(rows),), self.t_scalar == 0, device=self.dev)
            logp_BV = F.log_softmax(logits_BV / (1.0 if self.t_scalar == 0 else self.t_scalar), dim=-1)
        else:
            t_B = self.temp_R[rows]
            greedy_B = t_B == 0
            logp_BV = F.log_softmax(logits_BV / torch.where(greedy_B, 1.0, t_B).unsqueeze(1), dim=-1)
        samp = (~greedy_B).nonzero().squeeze(-1)
        tok_B = logits_BV.argmax(-1) if len(samp) < len(rows) else None
        if len(samp):
            probs = logp_BV.exp() if tok_B is None else logp_BV[samp].exp()
            if self.p_scalar is None:  # per-row top-p; rows at 1 keep their whole distribution
                top_B = self.top_R[rows[samp]]
                top = torch.where(top_B >= 1.0, float("inf"), top_B).unsqueeze(1)
            else:
                top = self.p_scalar if self.p_scalar < 1.0 else None
            if top is not None:
                sp, si = probs.sort(-1, descending=True)
                drop = sp.cumsum(-1) - sp > top  # keep the smallest prefix with mass >= top_p
                sp = sp.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, si, sp)
            drawn = torch.multinomial(probs, 1, generator=self.engine.gen).squeeze(-1)
            if tok_B is None:
                tok_B = drawn
            else:
                tok_B[samp] = drawn
        lp_B = logp_BV.gather(-1, tok_B.unsqueeze(-1)).squeeze(-1)
        ent_B = -(logp_BV.exp() * logp_BV).sum(-1)
        return tok_B, lp_B, ent_B

    # ---- results -------------------------------------------------------------------------
    def collect(self) -> list[Finished]:
        """Finished events for requests whose rows are all finished and not yet reported."""
        out = []
        fin = self.finished.tolist()
        start = 0
        for u, req in enumerate(self.requests):
            rows = range(start, start + req.n)
            start += req.n
            if u not in self.reported and all(fin[i] for i in rows):
                self.reported.add(u)
                out.append(Finished(req, Group(req.prompt, [self._rollout(u, i) for i in rows]),
                                    self.prompt_tokens[u] if req.n else 0, sum(self.verified[i] for i in rows)))
        return out

    def abort(self, ids: set[int]) -> list[Finished]:
        """Stop the unfinished rows of these requests; their tokens so far come back as partials."""
        fin = self.finished.tolist()
        rows = [i for i in range(self.R) if not fin[i] and self.requests[int(self.row_req[i])].id in ids]
        if rows:
            self.aborted[torch.tensor(rows, dtype=torch.long, device=self.dev)] = True
            self._leave(rows)
        return [e for e in self.collect() if e.request.id in ids]

    def peek(self, ids: set[int], hidden: bool = False) -> dict[int, list]:
        if hidden and not self.keep_hidden:
            raise ValueError("peek: hidden states were not kept for these requests (submit them with hidden=True)")
        out, start = {}, 0
        fin, lengths = self.finished.tolist(), self.length.tolist()
        at = {row: k for k, row in enumerate(self.active.tolist())} if hidden else {}  # row -> index in h_BD
        tok_buf = self.tok_buf.cpu()  # what leaves the engine is on the CPU (no copy on a CPU engine)
        last_hidden = self.last_hidden.cpu() if hidden and self.last_hidden is not None else None
        for u, req in enumerate(self.requests):
            if req.id in ids and u not in self.reported:
                out[req.id] = [None if fin[i] else (tok_buf[i, :lengths[i]], last_hidden[at[i]])
                               if hidden else tok_buf[i, :lengths[i]] for i in range(start, start + req.n)]
            start += req.n
        return out

    def stop(self, request_id: int, samples, reason: str) -> bool:
        """End these samples of a request (a sample already finished keeps its own end); False if the
        request is not in this chunk or already reported."""
        start = 0
        for u, req in enumerate(self.requests):
            if req.id == request_id and u not in self.reported:
                fin = self.finished.tolist()
                rows = [start + j for j in samples if 0 <= j < req.n and not fin[start + j]]
                for i in rows:
                    self.stopped[i] = reason
                self._leave(rows)
                return True
            start += req.n
        return False

    def _leave(self, rows: list[int]) -> None:
        """Rows that end now (aborted or stopped) leave the running batch and its KV cache."""
        if not rows:
            return
        self.finished[torch.tensor(rows, dtype=torch.long, device=self.dev)] = True
        keep = (~self.finished[self.active]).nonzero().squeeze(-1)
        self.active = self.active[keep]
        if len(keep):
            self.pos, self.key_mask = self.pos[keep], self.key_mask[keep]
            self.cache = self.pol.select_cache(self.cache, keep)
            if self.last_logits is not None:
                self.last_logits = self.last_logits[keep]
            if self.pending is not None:
                self.pending = self.pending[keep]
            if self.last_hidden is not None:
                self.last_hidden = self.last_hidden[keep]

    def _rollout(self, u: int, row: int) -> Rollout:
        req, k = self.requests[u], int(self.length[row])
        # a rollout is data: its tensors are CPU copies
        toks, lps, ents = (b[row, :k].to("cpu", copy=True) for b in (self.tok_buf, self.lp_buf, self.ent_buf))
        ent_mean = float(self.ent_sum[row] / max(k, 1))
        versions = None
        pre = req.prefix
        full = int(self.full_limit[row])
        if self.hit_eos[row]:
            reason = "eos"
        elif row in self.stopped:  # ended by the caller: "stop" keeps it as done, "pruned" drops it
            reason = self.stopped[row]
        elif self.aborted[row] and k < full:  # a row that spent its whole budget is a length stop, even if aborted
            reason = "aborted"
        else:  # at its limit: its whole budget ("length") or its segment budget ("budget")
            reason = length_reason(k, full)
        lineage = Lineage()
        if pre is not None:  # a resumed partial: the prefix's tokens come first, with their versions
            c = continued(pre, toks, lps, ents, torch.full((k,), self.version, device="cpu"))
            toks, lps, ents, versions, lineage = c.token_ids_T, c.logprobs_T, c.entropy_T, c.versions_T, c.lineage
            ent_mean = float(ents.mean()) if len(ents) else 0.0
        drafted = int(self.drafted[row])
        if drafted:  # kept draft tokens were verified, not decoded (the ledger's kind "draft")
            lineage.tokens_by_kind = {"decoded": k - drafted, "draft": drafted}
        t = self.engine.params(req)[0]
        status = status_of(reason)
        out = Rollout(
            prompt_id=req.prompt.id, prompt_ids=self.prompt_ids[u], token_ids_T=toks, logprobs_T=lps,
            text=self.pol.decode(toks.tolist()), finish_reason=reason,
            policy_version=pre.policy_version if pre is not None else self.version, purpose=req.purpose,
            entropy=ent_mean, status=status, temperature=t if t > 0 else 1.0, entropy_T=ents,
            versions_T=versions, lineage=lineage)
        kv = self.kept_kv.pop(row, None)
        if kv is not None and status == "partial":
            self.engine.prefix_kv.put(out, KVEntry(kv, self.context_len[row] + k - 1, self.version))
        return out
