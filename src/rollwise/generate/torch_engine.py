"""The built-in torch engine: batched sampling with a KV cache, any mix of n per prompt in one call.

Each distinct prompt is prefilled once and its KV cache repeated for its n samples. Finished rows
(EOS or the length limit) leave the running batch at once, so a long-tail of lengths costs only the
long rows, not the whole batch (`transformers`' generate keeps every row to the end).
Returns per-token behaviour log-probs log softmax(logits / T) of the sampled tokens and the mean
per-token entropy of that distribution. Top-p only narrows what is sampled; the log-probs are of the
temperature-scaled distribution, the one the learner recomputes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.registry import register
from ..core.types import Request, Rollout


@register("engine", "torch", provenance="INF", summary="built-in KV-cache sampler; finished rows leave the batch")
class TorchEngine:
    def __init__(self, policy, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                 seed: int = 0, max_rows: int = 1024):
        if temperature < 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
            raise ValueError("engine: need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1")
        self.policy, self.temperature, self.top_p = policy, temperature, top_p
        self.max_new_tokens, self.max_rows = max_new_tokens, max_rows
        self.gen = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def generate(self, requests: list[Request], greedy: bool = False) -> tuple[list[list[Rollout]], int]:
        """-> (rollouts per request, prompt tokens prefilled). Requests are split into chunks of at
        most `max_rows` rows (whole requests) to bound memory."""
        out: list[list[Rollout]] = []
        prefilled = 0
        chunk: list[Request] = []
        rows = 0
        for req in requests + [None]:
            if req is None or (chunk and rows + req.n > self.max_rows):
                if chunk:
                    res, pt = self._generate_chunk(chunk, greedy)
                    out += res
                    prefilled += pt
                chunk, rows = [], 0
            if req is not None:
                chunk.append(req)
                rows += req.n
        return out, prefilled

    def _sample(self, logits_BV: torch.Tensor, greedy: bool):
        logits_BV = logits_BV.float()
        t = 1.0 if greedy or self.temperature == 0 else self.temperature
        logp_BV = F.log_softmax(logits_BV / t, dim=-1)
        if greedy or self.temperature == 0:
            tok_B = logits_BV.argmax(-1)
        else:
            probs = logp_BV.exp()
            if self.top_p < 1.0:
                sp, si = probs.sort(-1, descending=True)
                drop = sp.cumsum(-1) - sp > self.top_p  # keep the smallest prefix with mass >= top_p
                sp = sp.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, si, sp)
            tok_B = torch.multinomial(probs, 1, generator=self.gen).squeeze(-1)
        lp_B = logp_BV.gather(-1, tok_B.unsqueeze(-1)).squeeze(-1)
        ent_B = -(logp_BV.exp() * logp_BV).sum(-1)
        return tok_B, lp_B, ent_B

    def _generate_chunk(self, requests: list[Request], greedy: bool):
        pol = self.policy
        prompt_ids = [pol.encode(r.prompt.text) for r in requests]
        U = len(requests)
        Lp = max(len(p) for p in prompt_ids)
        max_new = min(self.max_new_tokens, pol.max_positions - Lp)
        if max_new < 1:
            raise ValueError(f"prompt of {Lp} tokens leaves no room to generate (model context {pol.max_positions})")
        ids_UL = torch.full((U, Lp), pol.pad_id, dtype=torch.long)
        mask_UL = torch.zeros((U, Lp), dtype=torch.long)
        for i, p in enumerate(prompt_ids):  # left padding: every prompt ends at column Lp - 1
            ids_UL[i, Lp - len(p):] = torch.tensor(p)
            mask_UL[i, Lp - len(p):] = 1
        pos_UL = (mask_UL.cumsum(1) - 1).clamp(min=0)
        logits, cache = pol.forward(ids_UL, mask_UL, pos_UL, None)

        row_src = torch.repeat_interleave(torch.arange(U), torch.tensor([r.n for r in requests]))
        R = int(row_src.numel())
        cache = pol.select_cache(cache, row_src)
        last_logits = logits[row_src, -1]
        key_mask = mask_UL[row_src]
        pos = pos_UL[row_src, -1] + 1
        active = torch.arange(R)  # which original rows are still running
        tok_buf = torch.full((R, max_new), pol.pad_id, dtype=torch.long)
        lp_buf = torch.zeros((R, max_new))
        ent_sum = torch.zeros(R)
        length = torch.zeros(R, dtype=torch.long)
        hit_eos = torch.zeros(R, dtype=torch.bool)
        for t in range(max_new):
            tok, lp, ent = self._sample(last_logits, greedy)
            tok_buf[active, t], lp_buf[active, t] = tok, lp
            ent_sum[active] += ent
            length[active] += 1
            done = tok == pol.eos_id
            hit_eos[active[done]] = True
            if t == max_new - 1:
                break
            if done.any():  # finished rows leave the running batch
                keep = (~done).nonzero().squeeze(-1)
                if keep.numel() == 0:
                    break
                active, tok, pos, key_mask = active[keep], tok[keep], pos[keep], key_mask[keep]
                cache = pol.select_cache(cache, keep)
            key_mask = torch.cat([key_mask, torch.ones(len(active), 1, dtype=torch.long)], dim=1)
            logits, cache = pol.forward(tok.unsqueeze(1), key_mask, pos.unsqueeze(1), cache)
            last_logits = logits[:, -1]
            pos = pos + 1

        results: list[list[Rollout]] = []
        row = 0
        for req, p_ids in zip(requests, prompt_ids):
            group = []
            for _ in range(req.n):
                k = int(length[row])
                toks = tok_buf[row, :k].clone()
                group.append(Rollout(
                    prompt_id=req.prompt.id, prompt_ids=p_ids, token_ids_T=toks,
                    logprobs_T=lp_buf[row, :k].clone(), text=pol.decode(toks.tolist()),
                    finish_reason="eos" if hit_eos[row] else "length", policy_version=pol.version,
                    purpose=req.purpose, entropy=float(ent_sum[row] / max(k, 1))))
                row += 1
            results.append(group)
        return results, sum(len(p) for p in prompt_ids)
