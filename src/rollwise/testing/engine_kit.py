"""The engine conformance kit: `check_engine(make_engine)` runs the rules of the Engine protocol
(rollwise/generate/engine.py) that apply to an engine, and raises AssertionError naming the first rule
it breaks ("engine contract [n rows]: request 3 asked for n = 5 samples, its group holds 4").

    from rollwise.testing import check_engine

    def test_my_engine_keeps_the_contract():
        policy = ...                                            # a rollwise Policy
        check_engine(lambda **kw: MyEngine.for_policy(policy, **kw), policy=policy)

`make_engine(**kw)` builds a fresh engine at every call. With a `policy` (an engine the Trainer can
use), kw holds the constructor keywords the Trainer passes (temperature, top_p, max_new_tokens, seed)
and the token-level rules are checked against the policy's own scoring; without one (the simulator,
which has no tokens), `make_engine()` is called without keywords and the request rules are checked.

Checks (each names its rule in the message):
  every engine   one Finished per request, exactly once; group of the request's prompt with n rows;
                 version, purpose, fate, finish reason and status of every row; n = 0; abort of a
                 queued request (no rows, 0 prompt tokens); the same samples from two engines built alike
  a policy       token ids [T] and log-probs [T] on the CPU; max_new_tokens and per-request max_tokens
  engine         (0 included); EOS ends a row; a different seed samples differently; log-probs (and
                 entropies, when given) equal to policy.response_logprobs at the row's temperature,
                 greedy rows identical at T = 1; update_weights(version) samples from the policy's
                 current weights; state_dict/load_state_dict reproduce the samples; abort of a running
                 request returns its partial rows with tokens and log-probs; a prefix continues them
                 under a newer version (continuation.py's rules: prefix first, versions, budget, meta);
                 segment budgets stop rows as partials whose greedy continuation, with or without
                 keep_kv, is the uninterrupted greedy row; a prefix that used the budget adds nothing;
                 n != 1 with a prefix is refused
  declared       the engine's typed capabilities (`capabilities = (InFlight(), ...)`,
                 rollwise.generate.capabilities): each one's methods exist and its submit keywords are
                 taken ("declared capabilities"), then each one's own check: InFlight ("inflight"): peek
                 shows each running sample's tokens, stop ends samples as "stop"/"pruned" rows holding
                 exactly those tokens; HiddenStates ("hidden_states"): submit(hidden=True)/peek(hidden=True)
                 give a 1-D hidden state per running sample and the same samples as without; Drafts
                 ("drafts"): submit(drafter=f) gives greedy rows identical to plain ones whatever f
                 proposes, kept draft tokens of kind "draft" and Finished.verified_tokens >= the tokens
                 kept. A capability defined elsewhere (a third party's) is checked by its own `check`.

update_weights is checked by changing the policy's weights in place (as the learner does) and putting
them back afterwards. The checks take seconds on the tiny model; an engine whose numerics differ
from the policy's forward (bf16 on a GPU) passes a larger `logprob_tol`, or None to skip those checks.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect

import torch

from ..core.types import Prompt, Request, SamplingParams
from ..generate import capabilities as engine_caps
from ..generate.continuation import FINISH_STATUS
from ..generate.engine import Finished, number

CAPABILITIES = ("inflight", "hidden_states", "drafts")  # the optional parts of the protocol rollwise ships
PROMPTS = (Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350"), Prompt(2, "7=", "7"))
MAX_NEW = 8  # the engines' max_new_tokens unless a check says otherwise


def check_engine(make_engine, *, policy=None, capabilities=None, prompts=None, logprob_tol: float | None = 1e-4
                 ) -> list[str]:
    """Run the conformance checks (module docstring) on engines from `make_engine`; returns the names
    of the checks that ran. `capabilities`: the optional parts to check, by name or EngineCapability class
    (default: every one the engine declares in `capabilities`); `prompts`: Prompts the policy can encode
    (default: three short sums, in any character tokenizer)."""
    kit = _Kit(make_engine, policy, tuple(prompts or PROMPTS), logprob_tol)
    first = kit.engine()
    have = {type(c): c for c in engine_caps.declared(first)}
    if capabilities is None:
        kinds = list(have)
    else:
        known = engine_caps.known()
        unknown = sorted(c for c in capabilities if isinstance(c, str) and c not in known)
        if unknown:
            raise ValueError(f"check_engine: unknown capabilities {unknown} (known: {', '.join(known)})")
        kinds = [known[c] if isinstance(c, str) else c for c in capabilities]
    for kind in kinds:
        if kind not in have:
            _fail("capabilities", f"{kind.name or kind.__name__!r} is claimed but the engine does not declare it "
                                  f"(capabilities = ({kind.__name__}(), ...))")
    checks = [("requests and groups", lambda: kit.groups(first)), ("abort of a queued request", kit.abort_queued),
              ("seeded determinism", kit.determinism)]
    if policy is not None:
        checks.append(("max_tokens and EOS", kit.limits))
        if logprob_tol is not None:
            checks.append(("log-probs", kit.logprobs_at_temperature))
        checks += [("update_weights", kit.update_weights), ("state_dict round trip", kit.state_round_trip),
                   ("abort of a running request", kit.abort_running),
                   ("segment budgets and continuations", kit.segments)]
    if kinds:
        checks.append(("declared capabilities", lambda: kit.declarations(first, [have[k] for k in kinds])))
    order = {name: i for i, name in enumerate(CAPABILITIES)}  # rollwise's own first, in a fixed order
    for kind in sorted(kinds, key=lambda k: order.get(k.name, len(order))):
        if kind.needs_policy and policy is None:
            continue
        checks.append((kind.title or kind.__name__, lambda cap=have[kind]: cap.check(kit)))
    for _, run in checks:
        run()
    return [name for name, _ in checks]


def declared(engine) -> set[str]:
    """The names of the capabilities an engine declares (its typed `capabilities`), as the driver reads them."""
    return {c.name or type(c).__name__ for c in engine_caps.declared(engine)}


def _fail(rule: str, detail: str):
    raise AssertionError(f"engine contract [{rule}]: {detail}")


def _require(ok, rule: str, detail) -> None:
    if not ok:
        _fail(rule, detail() if callable(detail) else detail)


def _same_requests(reqs: list[Request]) -> list[Request]:
    """Fresh Request objects equal to these (same ids): the same work for another engine."""
    return [dataclasses.replace(r) for r in reqs]


class _Kit:
    def __init__(self, make_engine, policy, prompts, tol):
        self.make, self.policy, self.prompts, self.tol = make_engine, policy, prompts, tol
        self.next_id = 0

    # ---- plumbing ------------------------------------------------------------------------------
    def engine(self, **kw):
        if self.policy is None:
            return self.make()
        return self.make(**{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": MAX_NEW, "seed": 0, **kw})

    def requests(self, ns, **kw) -> list[Request]:
        reqs = [Request(self.prompts[i % len(self.prompts)], n, **kw) for i, n in enumerate(ns)]
        self.next_id = number(reqs, self.next_id)
        return reqs

    def run(self, eng, reqs: list[Request]) -> list[Finished]:
        eng.submit(reqs)
        return self.drain(eng, reqs, {})

    def drain(self, eng, reqs: list[Request], got: dict) -> list[Finished]:
        """Poll until every request in `reqs` has come back once (`got`: those already back)."""
        rule = "one Finished per request"
        ids = {r.id for r in reqs}
        for _ in range(100_000):  # a guard against an engine that never finishes, not a limit
            if len(got) == len(reqs):
                break
            events = eng.poll()
            _require(events or eng.pending, rule, lambda: f"poll() returned nothing while {len(reqs) - len(got)} "
                     "requests are unanswered, and pending is 0")
            for e in events:
                self.take(got, e, ids)
        _require(len(got) == len(reqs), rule, f"{len(reqs) - len(got)} requests never came back")
        _require(eng.pending == 0, rule, lambda: f"pending is {eng.pending} after every request came back")
        return [got[r.id] for r in reqs]

    def take(self, got: dict, e, ids: set) -> None:
        _require(isinstance(e, Finished), "poll returns Finished events", lambda: f"got a {type(e).__name__}")
        rid = e.request.id
        _require(rid in ids, "one Finished per request", f"an event for request {rid}, which is not in flight")
        _require(rid not in got, "one Finished per request", f"request {rid} came back twice")
        got[rid] = e

    # ---- what every returned row must satisfy -----------------------------------------------------
    def check_groups(self, events, reqs, version: int, limit=lambda r: MAX_NEW, aborted: bool = False) -> None:
        """Each event's group against its request; token rules when there is a policy. `limit(r)`: the
        new tokens request r may generate; `aborted`: rows may be fewer than n."""
        for e, r in zip(events, reqs):
            g = e.group
            _require(e.request.id == r.id, "request order", f"event for request {e.request.id} where {r.id} was due")
            _require(g.prompt == r.prompt, "group of its request", f"request {r.id}: its group's prompt is {g.prompt}")
            if aborted:
                _require(g.n <= r.n, "n rows", f"request {r.id} asked for {r.n} samples, its group holds {g.n}")
            else:
                _require(g.n == r.n, "n rows", f"request {r.id} asked for n = {r.n} samples, its group holds {g.n}")
            if r.n == 0:
                _require(e.prompt_tokens == 0, "prompt_tokens", f"request {r.id} (n = 0) reports {e.prompt_tokens} "
                         "prompt tokens; nothing was prefilled for it")
            for j, row in enumerate(g.rollouts):
                self.check_row(row, r, f"request {r.id} row {j}", version, limit(r))

    def check_row(self, row, r: Request, where: str, version: int, limit: int) -> None:
        _require(row.prompt_id == r.prompt.id, "group of its request", f"{where}: prompt_id {row.prompt_id}")
        _require(row.purpose == r.purpose, "purpose", f"{where}: purpose {row.purpose!r}, the request's is {r.purpose!r}")
        _require(row.fate == "new", "fate", f"{where}: fate {row.fate!r}; engines return rows of fate 'new'")
        if r.prefix is not None:
            _require(row.policy_version == r.prefix.policy_version, "prefix continuation", f"{where}: policy_version "
                     f"{row.policy_version}; a continuation keeps its prefix's ({r.prefix.policy_version})")
        else:
            _require(row.policy_version == version, "update_weights", f"{where}: policy_version {row.policy_version}, "
                     f"expected {version} (the version last passed to update_weights)")
        _require(FINISH_STATUS.get(row.finish_reason) == row.status, "finish reason and status",
                 f"{where}: finish_reason {row.finish_reason!r} with status {row.status!r} "
                 f"(the pairs: {FINISH_STATUS})")
        if self.policy is None:
            _require(row.num_tokens >= 0, "token shapes", f"{where}: num_tokens {row.num_tokens}")
            return
        t, lp = row.token_ids_T, row.logprobs_T
        _require(isinstance(t, torch.Tensor) and t.dim() == 1 and t.dtype == torch.long and t.device.type == "cpu",
                 "token shapes", lambda: f"{where}: token_ids_T must be a 1-D LongTensor on the CPU, got {t!r}")
        _require(isinstance(lp, torch.Tensor) and lp.shape == t.shape and lp.is_floating_point()
                 and lp.device.type == "cpu", "token shapes",
                 lambda: f"{where}: logprobs_T must be a float tensor on the CPU shaped like token_ids_T {tuple(t.shape)}")
        _require(bool(torch.isfinite(lp).all()) and bool((lp <= 1e-6).all()), "log-probs",
                 f"{where}: log-probs must be finite and <= 0")
        if row.entropy_T is not None:
            _require(row.entropy_T.shape == t.shape, "token shapes", f"{where}: entropy_T is not shaped like the tokens")
            mean = float(row.entropy_T.mean()) if row.num_tokens else 0.0
            _require(abs(row.entropy - mean) <= 1e-4 * max(1.0, abs(mean)), "entropy",
                     f"{where}: entropy {row.entropy} is not the mean of entropy_T ({mean})")
        _require(list(row.prompt_ids) == self.policy.encode(r.prompt.text), "prompt_ids",
                 f"{where}: prompt_ids are not the policy's encoding of the prompt")
        toks, eos = t.tolist(), self.policy.eos_id
        new = row.num_tokens - (r.prefix.num_tokens if r.prefix is not None else 0)
        _require(new <= limit, "max_tokens", f"{where}: {new} new tokens where the request allows {limit}")
        _require(eos not in toks[:-1], "eos", f"{where}: EOS at position {toks.index(eos) if eos in toks else -1} "
                 f"of {len(toks)}: a row ends at its EOS")
        _require((row.finish_reason == "eos") == (bool(toks) and toks[-1] == eos), "eos",
                 f"{where}: finish_reason {row.finish_reason!r} but the last token is "
                 f"{'EOS' if toks and toks[-1] == eos else 'not EOS'}")
        if row.finish_reason == "length":
            _require(new == limit, "max_tokens", f"{where}: finish 'length' after {new} new tokens of its {limit}")

    def check_logprobs(self, rows, temperature: float, rule: str, hint: str = "") -> None:
        """The rows' log-probs (and entropies, where given) are the policy's own at `temperature`."""
        rows = [r for r in rows if r.num_tokens]
        if self.tol is None or not rows:
            return
        with torch.no_grad():
            lp, ent, _ = self.policy.response_logprobs([list(r.prompt_ids) for r in rows],
                                                       [r.token_ids_T.tolist() for r in rows], temperature)
        for i, r in enumerate(rows):
            k = r.num_tokens
            d = float((lp[i, :k].float().cpu() - r.logprobs_T.float()).abs().max())
            _require(d <= self.tol, rule, f"row {i} (prompt {r.prompt_id}): log-probs differ from the policy's "
                     f"log softmax(logits / {temperature}) by up to {d:.2e} > {self.tol}{hint}")
            if r.entropy_T is not None:
                d = float((ent[i, :k].float().cpu() - r.entropy_T.float()).abs().max())
                _require(d <= self.tol, rule, f"row {i} (prompt {r.prompt_id}): entropy_T differs from the "
                         f"policy's by up to {d:.2e} > {self.tol}")

    def check_continuation(self, row, req: Request, version: int, where: str) -> None:
        """continuation.py's rules for a row that continues req.prefix."""
        pre, rule = req.prefix, "prefix continuation"
        k, new = pre.num_tokens, row.num_tokens - pre.num_tokens
        _require(new >= 0 and torch.equal(row.token_ids_T[:k], pre.token_ids_T), rule,
                 f"{where}: the row does not start with its prefix's {k} tokens")
        _require(torch.equal(row.logprobs_T[:k], pre.logprobs_T), rule,
                 f"{where}: the prefix's log-probs were not kept as they were")
        pv = pre.versions_T if pre.versions_T is not None else torch.full((k,), pre.policy_version)
        want = torch.cat([pv, torch.full((new,), version)]).tolist()
        got = row.versions_T.tolist() if row.versions_T is not None else [row.policy_version] * row.num_tokens
        _require(got == want, rule, f"{where}: token versions {got}, expected {want} (the prefix's, then the "
                 "engine's version)")
        _require(row.lineage.prefix is pre, rule, f"{where}: lineage.prefix must be the continued rollout")
        _require(row.lineage.tokens_by_kind == {"decoded": new}, rule,
                 f"{where}: lineage.tokens_by_kind is {row.lineage.tokens_by_kind}, expected {{'decoded': {new}}} "
                 "(a continuation is charged its new tokens only)")

    # ---- the checks ------------------------------------------------------------------------------
    def groups(self, eng) -> None:
        eng.update_weights(3)
        _require(eng.version == 3, "update_weights", f"version is {eng.version} after update_weights(3)")
        reqs = self.requests([3, 1, 0, 5])
        reqs[1].purpose = "eval"
        self.check_groups(self.run(eng, reqs), reqs, 3)

    def abort_queued(self) -> None:
        eng = self.engine()
        a, b = self.requests([2, 2])
        eng.submit([a, b])
        gone = eng.abort([b.id])
        _require([e.request.id for e in gone] == [b.id], "abort", lambda: f"abort([{b.id}]) of a request not yet "
                 f"polled returned events for {[e.request.id for e in gone]}")
        _require(gone[0].group.n == 0 and gone[0].prompt_tokens == 0, "abort", lambda: f"a request aborted before it "
                 f"started comes back with no rows and prompt_tokens 0, not {gone[0].group.n} rows and "
                 f"{gone[0].prompt_tokens} tokens")
        _require(eng.pending == 1, "abort", lambda: f"pending is {eng.pending} after aborting 1 of 2 requests")
        self.check_groups(self.drain(eng, [a], {}), [a], eng.version)

    def determinism(self) -> None:
        reqs = self.requests([4, 4, 2])
        a, b = self.run(self.engine(), reqs), self.run(self.engine(), _same_requests(reqs))
        _require(self._samples(a) == self._samples(b), "seeded determinism",
                 "two engines built with the same arguments returned different samples for the same requests")
        if self.policy is None:
            return
        for x, y in zip(_rows(a), _rows(b)):
            _require(torch.allclose(x.logprobs_T, y.logprobs_T, atol=self.tol or 1e-4), "seeded determinism",
                     "two engines built with the same arguments returned different log-probs for the same tokens")
        c = self.run(self.engine(seed=1), _same_requests(reqs))
        _require(self._samples(a) != self._samples(c), "seeded determinism",
                 "seed=0 and seed=1 returned the same samples: the seed keyword is ignored")

    def _samples(self, events) -> list:
        if self.policy is None:
            return [(r.num_tokens, r.correct, r.finish_reason) for r in _rows(events)]
        return [(r.token_ids_T.tolist(), r.finish_reason) for r in _rows(events)]

    def limits(self) -> None:
        eng = self.engine(max_new_tokens=5)
        reqs = self.requests([4, 4, 2, 0])
        reqs[1].sampling, reqs[2].sampling = SamplingParams(max_tokens=2), SamplingParams(max_tokens=0)
        limit = {reqs[0].id: 5, reqs[1].id: 2, reqs[2].id: 0, reqs[3].id: 5}
        events = self.run(eng, reqs)
        self.check_groups(events, reqs, eng.version, limit=lambda r: limit[r.id])
        _require(all(r.finish_reason == "length" and not r.num_tokens for r in events[2].group.rollouts), "max_tokens",
                 "a request with max_tokens 0 comes back at once: rows with no tokens, finish 'length'")
        greedy, reqs = self.engine(temperature=0.0, max_new_tokens=5), self.requests([3])
        self.check_groups(self.run(greedy, reqs), reqs, greedy.version, limit=lambda r: 5)

    def logprobs_at_temperature(self) -> None:
        eng = self.engine()
        reqs = self.requests([3, 2, 3])
        reqs[1].sampling, reqs[2].sampling = SamplingParams(temperature=0.7), SamplingParams(temperature=0.0)
        events = self.run(eng, reqs)
        self.check_groups(events, reqs, eng.version)
        for e, t in zip(events, (1.0, 0.7, 1.0)):
            rows = e.group.rollouts
            _require(all(r.temperature == t for r in rows), "log-probs",
                     f"request {e.request.id}: rows must carry temperature {t} (greedy rows 1.0), got "
                     f"{[r.temperature for r in rows]}")
            self.check_logprobs(rows, t, "log-probs")
        greedy = [r.token_ids_T.tolist() for r in events[2].group.rollouts]
        _require(all(g == greedy[0] for g in greedy), "log-probs", "the greedy rows of one request differ")

    def update_weights(self) -> None:
        pol, eng = self.policy, self.engine()
        v = eng.version
        params = list(pol.model.parameters())
        saved = [p.detach().clone() for p in params]
        probe = ([pol.encode(self.prompts[0].text)], [pol.encode(self.prompts[1].text)])
        with torch.no_grad():
            before = pol.response_logprobs(*probe)[0]
        try:
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():  # the learner's step, as it happens: the shared policy changes in place
                for p in params:
                    p.mul_(1 + 0.3 * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
                moved = float((pol.response_logprobs(*probe)[0] - before).abs().max())
            if self.tol is not None and moved <= 100 * self.tol:
                _fail("update_weights", f"the kit's change of the weights moved the policy's log-probs by only "
                                        f"{moved:.2e}; it cannot tell old weights from new ones on this model")
            eng.update_weights(v + 1)
            _require(eng.version == v + 1, "update_weights", f"version is {eng.version} after update_weights({v + 1})")
            reqs = self.requests([2, 2])
            events = self.run(eng, reqs)
            self.check_groups(events, reqs, v + 1)
            self.check_logprobs(_rows(events), 1.0, "update_weights",
                                " (after update_weights the engine must sample from the policy's current weights)")
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)
            eng.update_weights(v + 2)  # an engine that shares its sampler (vLLM) holds the weights again

    def state_round_trip(self) -> None:
        a = self.engine()
        self.run(a, self.requests([2, 2]))
        state = copy.deepcopy(a.state_dict())
        reqs = self.requests([3, 3])
        ya = self.run(a, reqs)
        b = self.engine()
        b.load_state_dict(copy.deepcopy(state))
        yb = self.run(b, _same_requests(reqs))
        _require(self._samples(ya) == self._samples(yb), "state_dict round trip",
                 "an engine that loaded another's state_dict drew other samples than that engine did after saving it")

    def abort_running(self) -> None:
        eng = self.engine(max_new_tokens=16)
        a, b = self.requests([4, 1])
        eng.submit([a, b])
        got, ids = {}, {a.id, b.id}
        for e in eng.poll(max_steps=3):
            self.take(got, e, ids)
        if a.id in got:
            _fail("abort", "every sample of a 16-token request ended within poll(max_steps=3); the kit needs "
                           "prompts this model answers at length (pass prompts=...)")
        gone = eng.abort([a.id])
        _require([e.request.id for e in gone] == [a.id], "abort",
                 lambda: f"abort([{a.id}]) of a running request returned events for {[e.request.id for e in gone]}")
        self.take(got, gone[0], ids)
        self.check_groups(gone, [a], eng.version, limit=lambda r: 16, aborted=True)
        rows = gone[0].group.rollouts
        partial = [r for r in rows if r.status == "aborted"]
        _require(partial and all(0 < r.num_tokens < 16 for r in partial), "abort",
                 lambda: "abort of a running request must return its samples' partial rows with the tokens so far "
                         f"(status 'aborted'); got {[(r.status, r.num_tokens) for r in rows]}")
        self.check_logprobs(rows, 1.0, "abort")
        self.drain(eng, [a, b], got)
        # resume a partial under a newer version: the prefix first, the budget less its tokens
        v = eng.version
        eng.update_weights(v + 1)
        p = partial[0]
        req = Request(next(q for q in self.prompts if q.id == p.prompt_id), 1, prefix=p)
        self.next_id = number([req], self.next_id)
        out = self.run(eng, [req])
        self.check_groups(out, [req], v + 1, limit=lambda r: 16 - p.num_tokens)
        row = out[0].group.rollouts[0]
        self.check_continuation(row, req, v + 1, f"request {req.id}")
        self.check_logprobs([row], 1.0, "prefix continuation")  # the same weights throughout

    def segments(self) -> None:
        """Greedy rows cut into 4-token segments and continued are the uninterrupted greedy rows."""
        rule = "segment budget"
        eng = self.engine(temperature=0.0, max_new_tokens=12)
        whole = _rows(self.run(eng, self.requests([1] * len(self.prompts))))
        seg = SamplingParams(max_tokens=12, segment_tokens=4)
        reqs = self.requests([1] * len(self.prompts), sampling=seg)
        first = self.run(eng, reqs)
        self.check_groups(first, reqs, eng.version, limit=lambda r: 4)
        heads = _rows(first)
        for w, h in zip(whole, heads):
            _require(h.token_ids_T.tolist() == w.token_ids_T.tolist()[:4], rule,
                     f"prompt {w.prompt_id}: the first greedy segment is not the start of the greedy row")
            _require(h.finish_reason == ("budget" if w.num_tokens > 4 else w.finish_reason), rule,
                     f"prompt {w.prompt_id}: a row its segment budget stops ends 'budget' (status 'partial'); "
                     f"got {h.finish_reason!r}")
        if not any(h.status == "partial" for h in heads):
            _fail(rule, "no greedy row ran past 4 tokens; the kit needs prompts this model answers at length")
        for keep_kv in (True, False):  # keep_kv only lets an engine keep the KV: the same rows either way
            rows = list(heads)
            while any(r.status == "partial" for r in rows):
                cont = [i for i, r in enumerate(rows) if r.status == "partial"]
                reqs = [Request(next(q for q in self.prompts if q.id == rows[i].prompt_id), 1, prefix=rows[i],
                                sampling=dataclasses.replace(seg, keep_kv=keep_kv)) for i in cont]
                self.next_id = number(reqs, self.next_id)
                out = self.run(eng, reqs)
                self.check_groups(out, reqs, eng.version, limit=lambda r: min(4, 12 - r.prefix.num_tokens))
                for i, e in zip(cont, out):
                    self.check_continuation(e.group.rollouts[0], e.request, eng.version, f"request {e.request.id}")
                    rows[i] = e.group.rollouts[0]
            for w, r in zip(whole, rows):
                _require(r.token_ids_T.tolist() == w.token_ids_T.tolist() and r.finish_reason == w.finish_reason,
                         rule, f"prompt {w.prompt_id} (keep_kv={keep_kv}): continued greedy segments give "
                         f"{r.token_ids_T.tolist()} ({r.finish_reason}), the uninterrupted greedy row "
                         f"{w.token_ids_T.tolist()} ({w.finish_reason})")
                if self.tol is not None:
                    _require(torch.allclose(r.logprobs_T, w.logprobs_T, atol=self.tol), rule,
                             f"prompt {w.prompt_id}: continued segments' log-probs differ from the whole row's")
        # a prefix that used its whole budget adds nothing; n must be 1 with a prefix
        p = next(h for h in heads if h.status == "partial")
        prompt = next(q for q in self.prompts if q.id == p.prompt_id)
        (req,) = reqs = [Request(prompt, 1, sampling=SamplingParams(max_tokens=3), prefix=p)]
        self.next_id = number(reqs, self.next_id)
        row = _rows(self.run(eng, reqs))[0]
        _require(row.token_ids_T.tolist() == p.token_ids_T.tolist() and row.finish_reason == "length"
                 and row.status == "done", "prefix continuation", lambda: "a prefix of 4 tokens with max_tokens 3 "
                 f"comes back at once, unchanged, finish 'length'; got {row.num_tokens} tokens, {row.finish_reason!r}")
        self.check_continuation(row, req, eng.version, f"request {req.id}")
        bad = [Request(prompt, 2, prefix=p)]
        self.next_id = number(bad, self.next_id)
        try:
            eng.submit(bad)
        except ValueError:
            pass
        else:
            _fail("prefix continuation", "submit accepted a request with a prefix and n = 2 (must be a ValueError)")

    def inflight(self) -> None:
        rule = "peek and stop"
        eng = self.engine(max_new_tokens=16)
        (a,) = reqs = self.requests([3])
        eng.submit(reqs)
        got = {}
        for e in eng.poll(max_steps=2):
            self.take(got, e, {a.id})
        seen = eng.peek([a.id]).get(a.id)
        _require(seen is not None and len(seen) == 3, rule,
                 f"peek([{a.id}]) of a running request with 3 samples must list 3 samples, got {seen!r}")
        running = [j for j, t in enumerate(seen) if t is not None]
        _require(all(isinstance(seen[j], torch.Tensor) and seen[j].dim() == 1 for j in running), rule,
                 "peek lists a 1-D LongTensor of tokens (or None) per sample")
        if len(running) < 2:
            _fail(rule, "fewer than 2 of 3 samples still ran after poll(max_steps=2); the kit needs longer answers")
        j0, j1 = running[:2]
        try:
            eng.stop(a.id, [j0], "no such reason")
        except ValueError:
            pass
        else:
            _fail(rule, "stop accepted the reason 'no such reason' (only 'stop' and 'pruned')")
        eng.stop(a.id, [j0], "pruned")
        eng.stop(a.id, [j1], "stop")
        rows = self.drain(eng, reqs, got)[0].group.rollouts
        _require(len(rows) == 3, rule, f"the stopped request came back with {len(rows)} of its 3 rows")
        for j, reason in ((j0, "pruned"), (j1, "stop")):
            r = rows[j]
            _require(r.finish_reason == reason and r.status == ("pruned" if reason == "pruned" else "done"), rule,
                     f"sample {j} stopped with {reason!r} came back as ({r.finish_reason!r}, {r.status!r})")
            _require(r.token_ids_T.tolist() == seen[j].tolist(), rule,
                     f"sample {j} stopped after peek showed {seen[j].tolist()} came back with {r.token_ids_T.tolist()}")
        self.check_logprobs(rows, 1.0, rule)
        try:
            eng.stop(a.id, [0], "stop")
        except ValueError:
            pass
        else:
            _fail(rule, "stop of a request that has come back must be a ValueError")
        _require(eng.peek([a.id]) == {}, rule, "peek of a request that has come back must be empty")

    def hidden(self) -> None:
        rule = "hidden states"
        eng = self.engine(max_new_tokens=16)
        reqs = self.requests([2, 1])
        eng.submit(reqs, hidden=True)
        got = {}
        for e in eng.poll(max_steps=2):
            self.take(got, e, {r.id for r in reqs})
        seen = eng.peek([r.id for r in reqs], hidden=True)
        pairs = [s for ss in seen.values() for s in ss if s is not None]
        _require(pairs, rule, "peek(hidden=True) showed no running sample after poll(max_steps=2)")
        for s in pairs:
            _require(isinstance(s, tuple) and len(s) == 2 and s[1].dim() == 1 and s[1].is_floating_point()
                     and bool(torch.isfinite(s[1]).all()), rule,
                     "peek(hidden=True) gives a pair (tokens_T, h_D) per running sample, h_D a finite 1-D float tensor")
        _require(len({s[1].shape for s in pairs}) == 1, rule, "hidden states of one model differ in size")
        with_hidden = self.drain(eng, reqs, got)
        plain = self.run(self.engine(max_new_tokens=16), _same_requests(reqs))
        _require(self._samples(with_hidden) == self._samples(plain), rule,
                 "submit(hidden=True) changed the samples (it must only keep the hidden states)")

    def declarations(self, eng, caps) -> None:
        """What every declared capability adds exists: its methods are callable and engine.submit takes its
        keywords (by name, or through **kwargs)."""
        rule = "declared capabilities"
        params = inspect.signature(eng.submit).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for cap in caps:
            for m in cap.methods:
                _require(callable(getattr(eng, m, None)), rule,
                         f"{type(cap).__name__} is declared but the engine has no {m}() method")
            for key in cap.options:
                _require(takes_any or key in params, rule,
                         f"{type(cap).__name__} is declared but submit() does not take its keyword {key!r}")

    def drafts(self) -> None:
        """Greedy rows decoded with a drafter (the plain rows' own continuation for even samples, a wrong
        one for odd samples) are the plain greedy rows; what was kept was scored."""
        rule = "drafts"
        reqs = self.requests([2, 1])
        plain = self.run(self.engine(temperature=0.0, max_new_tokens=16), reqs)
        want = {e.request.id: [r.token_ids_T.tolist() for r in e.group.rollouts] for e in plain}

        def drafter(req, sample, tokens):
            row = want[req.id][sample]
            return row[len(tokens):len(tokens) + 3] if sample % 2 == 0 else [row[-1]] * 3

        eng = self.engine(temperature=0.0, max_new_tokens=16)
        again = _same_requests(reqs)
        eng.submit(again, drafter=drafter)
        got = self.drain(eng, again, {})
        _require({e.request.id: [r.token_ids_T.tolist() for r in e.group.rollouts] for e in got} == want, rule,
                 "greedy rows decoded with a drafter differ from the plain greedy rows (verification must be exact)")
        for e in got:
            kept = sum(r.tokens_by_kind().get("draft", 0) for r in e.group.rollouts)
            _require(e.verified_tokens >= kept, rule, f"request {e.request.id} kept {kept} draft tokens but "
                     f"Finished.verified_tokens says {e.verified_tokens} were scored")
        _require(any(r.tokens_by_kind().get("draft", 0) for e in got for r in e.group.rollouts)
                 or all(len(x) < 3 for rows in want.values() for x in rows), rule,
                 "no draft token was kept though the drafter proposed each row's own continuation")


def _rows(events) -> list:
    return [r for e in events for r in e.group.rollouts]
