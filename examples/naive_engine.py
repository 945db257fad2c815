"""A third-party engine written from the Engine protocol alone (docs/engines.md): every running sample
gains one token per decode step from the policy's full forward pass over its context (no KV cache:
short, and slow). It passes rollwise.testing.check_engine (tests/test_engine_conformance.py runs it).

    PYTHONPATH=. rollwise train --engine examples.naive_engine:NaiveEngine --steps 2
"""
import torch
import torch.nn.functional as F

from rollwise.core.types import Group, Lineage, Rollout
from rollwise.generate.continuation import check_request, continued, length_reason, limits, status_of
from rollwise.generate.engine import Finished, request_params


class NaiveEngine:
    def __init__(self, policy, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16, seed: int = 0):
        if top_p != 1.0:
            raise ValueError("NaiveEngine samples the whole distribution: top_p must be 1")
        self.policy, self.temperature, self.top_p, self.max_new_tokens = policy, temperature, top_p, max_new_tokens
        self.gen = torch.Generator().manual_seed(seed)
        self.version = policy.version
        self._live = {}  # request id -> (request, its Limits, temperature, its rows)

    @classmethod
    def for_policy(cls, policy, **options) -> "NaiveEngine":
        return cls(policy, **options)

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, s: dict) -> None:
        self.gen.set_state(s["gen"])

    # ---- the Engine protocol ---------------------------------------------------------------------
    def submit(self, requests) -> None:
        for r in requests:
            check_request(r)  # n >= 0, and 1 with a prefix
            t, _, max_tokens = request_params(r, self.temperature, self.top_p, self.max_new_tokens)
            lim = limits(r, self.policy.encode(r.prompt.text), max_tokens, self.policy.max_positions)
            rows = [{"tokens": [], "logprobs": [], "entropy": [], "versions": [],
                     "reason": None if lim.limit else length_reason(0, lim.full)} for _ in range(r.n)]
            self._live[r.id] = (r, lim, t, rows)

    @property
    def pending(self) -> int:
        return len(self._live)

    def poll(self, max_steps=None) -> list[Finished]:
        steps = 0
        while max_steps is None or steps < max_steps:
            running = [(lim, t, row) for _, lim, t, rows in self._live.values() for row in rows if not row["reason"]]
            if not running:
                break
            for lim, t, row in running:
                self._decode(lim, t, row)
            steps += 1
        done = [rid for rid, (_, _, _, rows) in self._live.items() if all(row["reason"] for row in rows)]
        return [self._finished(*self._live.pop(rid)) for rid in done]

    def abort(self, request_ids) -> list[Finished]:
        out = []
        for rid in [rid for rid in request_ids if rid in self._live]:
            req, lim, t, rows = self._live.pop(rid)
            for row in rows:
                row["reason"] = row["reason"] or "aborted"
            # a sample aborted before its first token is left out
            out.append(self._finished(req, lim, t, [x for x in rows if x["tokens"] or x["reason"] != "aborted"]))
        return out

    def update_weights(self, version: int, state_dict=None) -> None:
        if state_dict is not None:
            self.policy.model.load_state_dict(state_dict)
        self.version = int(version)  # otherwise the policy was updated in place: nothing to copy

    # ---- helpers ---------------------------------------------------------------------------------
    @torch.no_grad()
    def _decode(self, lim, t: float, row: dict) -> None:
        """One token for one row: log softmax(logits / T) of the sampled token, the protocol's log-prob."""
        ids = torch.tensor([lim.context + row["tokens"]], device=self.policy.device)
        logits = self.policy.full_logits(ids, torch.ones_like(ids))[0, -1].float().cpu()
        logp = F.log_softmax(logits / (t if t > 0 else 1.0), dim=-1)  # greedy rows: log-probs at T = 1
        tok = int(logits.argmax()) if t == 0 else int(torch.multinomial(logp.exp(), 1, generator=self.gen))
        row["tokens"].append(tok)
        row["logprobs"].append(float(logp[tok]))
        row["entropy"].append(float(-(logp.exp() * logp).sum()))
        row["versions"].append(self.version)
        if tok == self.policy.eos_id:
            row["reason"] = "eos"
        elif len(row["tokens"]) >= lim.limit:
            row["reason"] = length_reason(len(row["tokens"]), lim.full)  # "length", or "budget" for a segment

    def _finished(self, req, lim, t: float, rows: list) -> Finished:
        out = [self._rollout(req, lim, t, row) for row in rows]
        started = any(row["tokens"] for row in rows)
        return Finished(req, Group(req.prompt, out), len(lim.context) if started else 0)

    def _rollout(self, req, lim, t: float, row: dict) -> Rollout:
        toks = torch.tensor(row["tokens"], dtype=torch.long)
        lps = torch.tensor(row["logprobs"], dtype=torch.float32)
        ents = torch.tensor(row["entropy"], dtype=torch.float32)
        vers = torch.tensor(row["versions"] or [self.version], dtype=torch.long)
        version, lineage = int(vers[0]), Lineage()
        versions = vers if len(set(row["versions"])) > 1 else None
        if req.prefix is not None:  # the prefix's tokens first, as continuation.py assembles them
            c = continued(req.prefix, toks, lps, ents, vers[:len(toks)])
            toks, lps, ents, versions, lineage = c.token_ids_T, c.logprobs_T, c.entropy_T, c.versions_T, c.lineage
            version = req.prefix.policy_version
        return Rollout(
            prompt_id=req.prompt.id, prompt_ids=lim.prompt_ids, token_ids_T=toks, logprobs_T=lps,
            text=self.policy.decode(toks.tolist()), finish_reason=row["reason"], policy_version=version,
            purpose=req.purpose, entropy=float(ents.mean()) if len(ents) else 0.0, status=status_of(row["reason"]),
            temperature=t if t > 0 else 1.0, entropy_T=ents, versions_T=versions, lineage=lineage)
