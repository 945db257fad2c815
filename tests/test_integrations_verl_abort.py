"""DUET's in-flight abort (`duet-abort`) inside verl's v1 trainer: generation in segments, the planner's watcher
consulted between them through a Ray actor, pruned rows charged as pruned; checked against the same step
in rollwise's own driver on the same samples.

verl's rollout servers need GPUs, so the server here is a CPU stand-in with the interface verl's agent
loop calls (`generate(request_id=, prompt_ids=, sampling_params=)` -> verl's TokenOutput, continuing
prompt + prefix up to `max_tokens`). The agent loop is `generate_segmented`, the loop rollwise's
RollwiseAgentLoop runs, driven per session as AgentLoopWorkerTQ drives its agent loops, writing what it
writes to a real (CPU) TransferQueue. Skipped unless verl's v1 trainer and transferqueue are installed.
"""
import asyncio

import pytest
import torch

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)
ray = pytest.importorskip("ray")

from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from rollwise.control.base import build_planner  # noqa: E402
from rollwise.integrations.verl_agent_loop import (AGENT_NAME, SEGMENT_FIELD, WATCH_FIELD,  # noqa: E402
                                                   WatchServer, generate_segmented)

from fakes import TokenEngine, make_ctx, run_step as driver_step  # noqa: E402
from test_integrations_verl import make_buffer, make_trainer, train_keys_left, transfer_queue  # noqa: E402,F401

MARK = [90, 91]
LENGTHS = {(0, 0): 10, (0, 1): 3, (1, 0): 12, (1, 1): 12}  # prompt 0: a marker row and a short one
SCRIPT = {(0, 0): [0, 1, *MARK]}
MAX_TOKENS = 20
DUET = {"duet-abort": {"h_abort": 4, "grace": 1, "q": 0.5, "marker": MARK}}


def token(pid, j, k):
    """Token k of sample j of prompt pid, as fakes.TokenEngine writes it (its log-prob: -0.01 * (k + 1))."""
    ids = SCRIPT.get((pid, j))
    return ids[k] if ids is not None and k < len(ids) else k


def correct(pid, j):
    return j == 0


class StandInServer:
    """The interface of verl's LLMServerClient.generate on CPU: sample (pid, j) continues from the tokens
    after the prompt, at most max_tokens more; "completed" once the sample's own length is reached."""

    def __init__(self):
        self.samples = {}  # request_id -> (pid, j); its prompt is what the first call of the request sends
        self.prompt_len = {}
        self.decoded = 0
        self.calls = 0

    async def generate(self, *, request_id, prompt_ids, sampling_params):
        pid, j = self.samples[request_id]
        have = len(prompt_ids) - self.prompt_len.setdefault(request_id, len(prompt_ids))
        end = min(LENGTHS[pid, j], have + int(sampling_params["max_tokens"]))
        toks = [token(pid, j, k) for k in range(have, end)]
        self.decoded += len(toks)
        self.calls += 1
        return TokenOutput(token_ids=toks, log_probs=[-0.01 * (k + 1) for k in range(have, end)],
                           stop_reason="completed" if end >= LENGTHS[pid, j] else "length")


class SegmentedAgentLoop:
    """What AgentLoopWorkerTQ does with rollwise's agent loop: every session of every row runs
    generate_segmented against the server, consulting the WatchServer actor named in the row; each
    session's output and tags go to TransferQueue, then the prompt's status."""

    def __init__(self):
        self.server = StandInServer()
        self.segments = []

    def generate_sequences(self, batch):
        assert list(batch["agent_name"]) == [AGENT_NAME] * len(batch)  # rows go to rollwise's agent loop
        asyncio.run(self._run(batch))

    async def _run(self, batch):
        sessions = []
        for i in range(len(batch)):
            uid, pid, n = batch["uid"][i], int(batch["index"][i]), int(batch["__rollout_n__"][i])
            watch = ray.get_actor(batch[WATCH_FIELD][i])
            for s in range(n):
                self.server.samples[f"{uid}_{s}"] = (pid, s)
                sessions.append(self._session(uid, pid, s, watch, int(batch[SEGMENT_FIELD][i]),
                                              int(batch["global_steps"])))
        await asyncio.gather(*sessions)
        for i in range(len(batch)):
            tq.kv_put(key=batch["uid"][i], partition_id="train", tag={"status": "finished"})

    async def _session(self, uid, pid, s, watch, segment, step):
        async def decide(tokens):
            return await watch.decide.remote(uid, s, tokens)

        got = await generate_segmented(self.server.generate, f"{uid}_{s}", [1, 2], {"temperature": 1.0},
                                       MAX_TOKENS, segment, decide)
        self.segments.append(got.segments)
        scores = torch.zeros(len(got.token_ids))
        scores[-1] = float(correct(pid, s) and got.finish != "pruned")
        tq.kv_put(key=f"{uid}_{s}_0", partition_id="train",
                  fields={"responses": torch.tensor(got.token_ids), "rollout_log_probs": torch.tensor(got.log_probs),
                          "rm_scores": scores, "uid": uid, "session_id": s, "index": pid,
                          "extra_fields": {"rollwise_status": "pruned" if got.finish == "pruned" else "done"}},
                  tag={"status": "success", "prompt_len": 2, "response_len": len(got.token_ids),
                       "seq_len": 2 + len(got.token_ids), "global_steps": step})


def driver_run(seed):
    ctx = make_ctx(2, B=2, n=2, seed=seed)
    engine = TokenEngine(lambda pid, j: LENGTHS[pid, j], max_tokens=MAX_TOKENS,
                         script=lambda pid, j: SCRIPT.get((pid, j)), correct=correct)
    planner = build_planner("duet-abort", 2, ctx.rng, DUET)
    ctx.step = 1
    batch, _, _ = driver_step(planner, ctx, engine)
    return ctx, engine, batch


def verl_run(seed, segment_tokens):
    trainer = make_trainer(train_batch_size=2, n=2)
    trainer.train_dataset = trainer.train_dataset[:2]
    trainer.agent_loop_manager = loop = SegmentedAgentLoop()
    buffer = make_buffer(trainer, "duet-abort", seed=seed, planner_options=DUET, segment_tokens=segment_tokens)
    trainer.global_steps = 1
    trainer.prepare_step()
    meta, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    data = tq.kv_batch_get(keys=list(meta.keys), partition_id="train", select_fields=["index", "responses"])
    weights = {}
    if "rollout_is_weights" in tq.kv_batch_get(keys=list(meta.keys)[:1], partition_id="train"):
        w = tq.kv_batch_get(keys=list(meta.keys), partition_id="train", select_fields=["rollout_is_weights"])
        weights = {key: w["rollout_is_weights"][k].tolist() for k, key in enumerate(meta.keys)}
    groups = {}
    for k, key in enumerate(meta.keys):
        groups.setdefault(int(data["index"][k]), []).append((key, data["responses"][k].tolist()))
    tq.kv_clear(keys=list(meta.keys), partition_id="train")
    return buffer, loop, groups, weights, metrics


@pytest.mark.parametrize("seed", [0, 3])
def test_duet_abort_step_in_verl_matches_rollwise_driver(transfer_queue, seed):
    """With one-token segments the watcher sees every token, as in rollwise's driver: the same samples stop
    and are pruned on the same token, the same rows train with the same weights, the same charges."""
    ctx, engine, batch = driver_run(seed)
    buffer, loop, groups, weights, metrics = verl_run(seed, segment_tokens=1)
    assert {g.prompt.id: [r.token_ids_T.tolist() for r in g.rollouts] for g in batch.groups} == \
        {pid: [t for _, t in sorted(rows)] for pid, rows in groups.items()}
    for fate in ("open", "trained", "discarded", "pruned", "scored"):
        assert buffer.ledger.count(fate=fate) == ctx.ledger.count(fate=fate), fate
        assert buffer.ledger.count_rollouts(fate=fate) == ctx.ledger.count_rollouts(fate=fate), fate
    assert buffer.ledger.prompt_tokens == ctx.ledger.prompt_tokens
    assert loop.server.decoded == engine.decoded == buffer.ledger.count()  # every decoded token charged once
    duet = {k: v for k, v in ctx.metrics.items() if k.startswith("duet/")}
    assert duet == {k[len("training/rollwise/"):]: v for k, v in metrics.items() if "duet/" in k}
    assert duet["duet/stopped"] == 1  # prompt 0's marker row stops at 4 + grace tokens
    # the rows kept past the gate carry 1/q into verl's policy loss (rollout_is_weights, every token)
    driver_w = sorted(r.meta.get("is_weight", 1.0) for g in batch.groups for r in g.rollouts)
    verl_w = sorted(ws[0] for ws in weights.values()) if weights else [1.0] * len(driver_w)
    assert driver_w == verl_w and all(len(set(ws)) == 1 for ws in weights.values())
    assert not train_keys_left()  # pruned rows were cleared from TransferQueue


def test_seeds_cover_a_pruned_and_a_weighted_row():
    """The two seeds above are chosen so that the comparison sees a row pruned and a row kept with 1/q."""
    seen = set()
    for seed in (0, 3):
        ctx, _, _ = driver_run(seed)
        seen |= {k for k, v in ctx.metrics.items() if v}
    assert {"duet/pruned", "duet/kept"} <= seen


def test_longer_segments_decide_at_segment_boundaries_and_charge_every_token(transfer_queue):
    """segment_tokens = 4: a decision lands at the end of the segment in which the rule fires, so a stopped or
    pruned row holds up to 3 tokens more than in the driver; every token decoded is charged, fewer calls."""
    ctx, engine, batch = driver_run(0)
    buffer, loop, groups, _, metrics = verl_run(0, segment_tokens=4)
    assert loop.server.decoded == buffer.ledger.count() >= engine.decoded
    assert buffer.ledger.count(fate="pruned") >= ctx.ledger.count(fate="pruned")
    stopped = [t for _, t in groups[0] if t[2:4] == MARK]
    assert [len(t) for t in stopped] == [8]  # the rule fires at 5 tokens; the segment ends at 8
    assert max(loop.segments) <= -(-MAX_TOKENS // 4)


def test_watch_server_shows_the_watcher_one_sample_and_records_its_decisions():
    from rollwise.control.base import Decision

    shown = []

    def watch(running):
        shown.append({i: [None if s is None else s.tolist() for s in ss] for i, ss in running.items()})
        metrics["calls"] = metrics.get("calls", 0) + 1
        return [Decision(1, 1, "keep", weight=2.0), Decision(1, 1, "pruned"), Decision(0, 0, "stop")]

    metrics = {"before": 1.0}
    server = WatchServer()
    server.open((watch, metrics), {"a": 0, "b": 1}, {"a": 1, "b": 3})
    assert server.decide("b", 1, [5, 6]) == "pruned"
    assert shown == [{1: [None, [5, 6], None]}]  # one sample shown; a decision for another sample is not its
    assert server.decide("zz", 0, [1]) == "keep"  # not in this round
    decisions, got = server.close()
    assert [(d.action, d.weight) for d in decisions[("b", 1)]] == [("keep", 2.0), ("pruned", None)]
    assert list(decisions) == [("b", 1)] and got == {"before": 1.0, "calls": 1}


def test_rollwise_agent_loop_runs_in_verl_agent_loop_machinery(transfer_queue):
    """The registered agent loop itself (verl's AgentLoopBase: continuous-token prompt building and response
    merging) on CPU, with a character tokenizer, the stand-in server and a WatchServer actor: a watcher that
    prunes at 4 tokens ends the session after the second 2-token segment, marked pruned."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry

    from rollwise.control.base import Decision
    from rollwise.integrations.verl_agent_loop import RollwiseAgentLoop
    from rollwise.policy.tokenizer import char_tokenizer

    assert _agent_loop_registry[AGENT_NAME]["_target_"].endswith("verl_agent_loop.RollwiseAgentLoop")
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 64, "response_length": MAX_TOKENS}},
                            "data": {}})
    server = StandInServer()
    watch = ray.remote(WatchServer).options(name="rollwise-watch-test").remote()

    def prune_at_4(running):
        return [Decision(i, j, "pruned") for i, ss in running.items() for j, s in enumerate(ss)
                if s is not None and len(s) >= 4]

    ray.get(watch.open.remote((prune_at_4, {}), {"u": 0}, {"u": 2}))

    async def run():
        loop = RollwiseAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok,
                                 processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data))
        server.samples["u_1"] = (1, 1)
        return await loop.run({"temperature": 1.0}, raw_prompt=[{"role": "user", "content": "12+3="}], uid="u",
                              session_id=1, **{WATCH_FIELD: "rollwise-watch-test", SEGMENT_FIELD: 2})

    out = asyncio.run(run())
    assert out.response_ids == [0, 1, 2, 3] and out.response_logprobs == pytest.approx([-0.01, -0.02, -0.03, -0.04])
    assert out.extra_fields["rollwise_status"] == "pruned" and out.extra_fields["rollwise_segments"] == 2
    decisions, _ = ray.get(watch.close.remote())
    assert [d.action for d in decisions[("u", 1)]] == ["pruned"]
    ray.kill(watch)


def test_segments_carry_the_weight_versions_verls_trainer_reads():
    """verl's trainer reads every trajectory's min/max_global_steps (the weight versions it was generated
    across; verl's own single-turn loop passes the server's on): a watched session reports the first
    segment's min and the last segment's max."""
    versions = iter([(3, 3), (3, 4), (4, 4)])

    async def generate(*, request_id, prompt_ids, sampling_params):
        lo, hi = next(versions)
        n = int(sampling_params["max_tokens"])
        return TokenOutput(token_ids=list(range(n)), log_probs=[-0.1] * n, stop_reason="length",
                           extra_fields={"global_steps": hi, "min_global_steps": lo, "max_global_steps": hi})

    async def keep(tokens):
        return "keep"

    got = asyncio.run(generate_segmented(generate, "r", [1, 2], {}, 12, 4, keep))
    assert (got.segments, got.finish, got.min_global_steps, got.max_global_steps) == (3, "length", 3, 4)
