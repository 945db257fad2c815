"""Staged sampling and response reuse (AR3PO) inside verl's v1 trainer, checked token by token against the
same steps in rollwise's own driver on the same samples.

Both sides draw sample j of prompt x from one script (`outcome`): rollwise's StepDriver through a scripted
engine, verl through its own prompt-submission methods on a stub trainer and a fake agent loop that
writes the trajectories to a real (CPU) TransferQueue as verl's AgentLoopWorkerTQ does. AR3PO's later
stages reach verl as refill rounds with new uids; the buffer merges them per prompt before the batch is
materialised, and inserts AR3PO's reused responses with their behaviour log-probs and their step.
Skipped unless verl's v1 trainer and transferqueue are installed (`bash scripts/setup.sh --with verl-v1`).
"""
import numpy as np
import pytest
import torch

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)

from rollwise.control.base import build_planner  # noqa: E402
from rollwise.core.types import Group, Rollout  # noqa: E402
from rollwise.generate.engine import Finished  # noqa: E402

from fakes import Engine, make_ctx, run_step as driver_step  # noqa: E402
from test_integrations_verl import make_buffer, make_trainer, train_keys_left, transfer_queue  # noqa: E402,F401

POOL = 4
AR3PO = {"ar3po": {"k": 2, "stages": 3}}


def outcome(pid: int, j: int):
    """Sample j of prompt pid: its tokens, behaviour log-probs and correctness. Prompt 0 is always right,
    1 never, 2 only at its first sample (solved in step 1, unsolved in step 2: reuse), 3 only at its sixth
    (the third stage of step 1)."""
    toks = [100 * pid + 10 * j + t for t in range(2 + (pid + j) % 3)]
    correct = {0: True, 1: False, 2: j == 0, 3: j == 5}[pid]
    return toks, [-0.01 * (t % 97) - 0.001 * j for t in toks], correct


def mixed(pid: int, j: int):
    """outcome's tokens; prompts 0 mod 4 always right, 1 mod 4 never, the others right at every other sample."""
    toks = [100 * pid + 10 * j + t for t in range(2 + (pid + j) % 3)]
    return toks, [-0.01 * (t % 97) - 0.001 * j for t in toks], {0: True, 1: False}.get(pid % 4, j % 2 == 0)


def staged(pid: int, j: int):
    """mixed, but prompts 2 mod 4 are right only at samples 2, 5, 8, ...: in AR3PO's second stage (k = 2), so
    their merged group has 4 rows with one right, which PODS (m = 2) cuts to one right and one wrong."""
    toks, lps, ok = mixed(pid, j)
    return toks, lps, j % 3 == 2 if pid % 4 == 2 else ok


class ScriptEngine(Engine):
    """rollwise's side: the j-th sample of prompt x (counted over the whole run) is script(x, j)."""

    def __init__(self, script=outcome):
        super().__init__(rates=None)
        self.script = script

    def poll(self, max_steps=None):
        out = []
        for q in self._drain():
            rows = []
            for _ in range(q.n):
                j = self.seen.get(q.prompt.id, 0)
                self.seen[q.prompt.id] = j + 1
                toks, lps, ok = self.script(q.prompt.id, j)
                rows.append(Rollout(q.prompt.id, [1, 2], torch.tensor(toks), torch.tensor(lps), "x", "eos",
                                    self.version, q.purpose, reward=float(ok), correct=ok))
            out.append(Finished(q, Group(q.prompt, rows), 2))
        return out


class ScriptAgentLoop:
    """verl's side: writes, per session, what AgentLoopWorkerTQ writes (fields and tags) for outcome(x, j),
    j counted per prompt over the run in submission order, as the scripted engine counts it."""

    def __init__(self, script=outcome):
        self.seen = {}
        self.rounds = []
        self.script = script

    def generate_sequences(self, batch):
        self.rounds.append([(int(batch["index"][i]), int(batch["__rollout_n__"][i])) for i in range(len(batch))])
        for i in range(len(batch)):
            uid, idx, n = batch["uid"][i], int(batch["index"][i]), int(batch["__rollout_n__"][i])
            for s in range(n):
                j = self.seen.get(idx, 0)
                self.seen[idx] = j + 1
                toks, lps, ok = self.script(idx, j)
                scores = torch.zeros(len(toks))
                scores[-1] = float(ok)
                tq.kv_put(key=f"{uid}_{s}_0", partition_id="train",
                          fields={"responses": torch.tensor(toks), "rollout_log_probs": torch.tensor(lps),
                                  "rm_scores": scores, "response_mask": torch.ones(len(toks), dtype=torch.long),
                                  "uid": uid, "session_id": s, "index": idx},
                          tag={"status": "success", "prompt_len": 2, "response_len": len(toks),
                               "seq_len": 2 + len(toks), "global_steps": int(batch["global_steps"])})
            tq.kv_put(key=uid, partition_id="train", tag={"status": "finished"})


def verl_step(trainer, buffer, step):
    """verl's sync step around the buffer; returns the trained groups {prompt: [(session, tokens,
    log-probs, global_steps of the row)]} as the trainer would read them, and the metrics."""
    trainer.global_steps = step
    trainer.prepare_step()
    meta, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=POOL)
    data = tq.kv_batch_get(keys=list(meta.keys), partition_id="train",
                           select_fields=["uid", "session_id", "index", "responses", "rollout_log_probs"])
    groups, uid_of = {}, {}
    for k, key in enumerate(meta.keys):
        uid, session, _ = key.split("_")
        pid = int(data["index"][k])
        assert data["uid"][k] == uid and int(data["session_id"][k]) == int(session)  # fields follow the keys
        assert uid_of.setdefault(pid, uid) == uid  # one uid per prompt: verl's advantage sees one group
        groups.setdefault(pid, []).append((int(session), data["responses"][k].tolist(),
                                           data["rollout_log_probs"][k].tolist(), meta.tags[k]["global_steps"]))
    tq.kv_clear(keys=list(meta.keys), partition_id="train")  # as PPOTrainer.fit does after the update
    return {pid: sorted(rows) for pid, rows in groups.items()}, metrics


def test_ar3po_step_in_verl_equals_rollwise_driver_token_by_token(transfer_queue):
    # rollwise's own driver: the same planner, seed and steps
    ctx, engine = make_ctx(POOL, B=POOL, n=2, seed=0), ScriptEngine()
    planner = build_planner("ar3po", POOL, ctx.rng, AR3PO)
    driver = {}
    for step in (1, 2):
        ctx.step = step
        batch, _, rounds = driver_step(planner, ctx, engine)
        driver[step] = ({g.prompt.id: [r.token_ids_T.tolist() for r in g.rollouts] for g in batch.groups},
                        {g.prompt.id: [r.logprobs_T.tolist() for r in g.rollouts] for g in batch.groups}, rounds)
    # verl
    trainer = make_trainer(train_batch_size=POOL, n=2)
    trainer.train_dataset = trainer.train_dataset[:POOL]
    trainer.agent_loop_manager = loop = ScriptAgentLoop()
    buffer = make_buffer(trainer, "ar3po", seed=0, planner_options=AR3PO)
    for step in (1, 2):
        before = len(loop.rounds)
        groups, metrics = verl_step(trainer, buffer, step)
        tokens, logps, rounds = driver[step]
        # the same rounds: prompts and n per round (stages of the unsolved prompts)
        assert [dict(r) for r in loop.rounds[before:]] == rounds
        # merged groups: the same prompts, rows in the same order, token by token; sessions 0..n-1
        assert {pid: [t for _, t, _, _ in rows] for pid, rows in groups.items()} == tokens
        assert {pid: [lp for _, _, lp, _ in rows] for pid, rows in groups.items()} == logps  # float32 on both sides
        assert all([s for s, _, _, _ in rows] == list(range(len(rows))) for rows in groups.values())
        assert metrics["training/rollwise/rounds"] == len(rounds)
    # step 1: prompt 3 needed three stages and trains 6 rows; 0 (all right) and 1 (all wrong) do not train
    assert sorted(driver[1][0]) == [2, 3] and len(driver[1][0][3]) == 6
    # step 2: prompts 2 and 3 were never right in 3 stages; each got its stored correct response back, with
    # its behaviour log-probs and its step (1): AR3PO's reuse, inserted into verl's group
    reused = {pid: rows[-1] for pid, rows in groups.items()}
    for pid, j in ((2, 0), (3, 5)):
        toks, lps, _ = outcome(pid, j)
        assert reused[pid][1:] == (toks, torch.tensor(lps).tolist(), 1)
    assert all(gs == 2 for rows in groups.values() for _, _, _, gs in rows[:-1])
    # charges: the same ledger, fate by fate (the reused rows are counted as reused, not generated again)
    for fate in ("open", "trained", "discarded", "pruned", "scored"):
        assert buffer.ledger.count(fate=fate) == ctx.ledger.count(fate=fate), fate
        assert buffer.ledger.count_rollouts(fate=fate) == ctx.ledger.count_rollouts(fate=fate), fate
    assert buffer.ledger.reused_tokens == ctx.ledger.reused_tokens == len(outcome(2, 0)[0]) + len(outcome(3, 5)[0])
    assert buffer.ledger.prompt_tokens == ctx.ledger.prompt_tokens
    assert metrics["training/rollwise/tokens_reused"] == buffer.ledger.reused_tokens  # all in step 2
    assert (buffer.host.history.visits == ctx.history.visits).all()
    assert not train_keys_left()  # every stage and filtered group was cleared


def test_ar3po_reuse_keeps_only_what_the_planner_keeps(transfer_queue):
    """The trajectory of a response AR3PO stores is copied out of TransferQueue (verl clears it after the
    update); one AR3PO lets go of (keep=1: a newer correct response replaces it) is freed with it."""
    trainer = make_trainer(train_batch_size=POOL, n=2)
    trainer.train_dataset = trainer.train_dataset[:POOL]
    trainer.agent_loop_manager = ScriptAgentLoop()
    buffer = make_buffer(trainer, "ar3po", seed=0, planner_options=AR3PO)
    verl_step(trainer, buffer, 1)
    (ar3po,) = buffer.host.planner.components
    stored = {pid: rs[-1] for pid, rs in ar3po.buffer.items()}
    assert sorted(stored) == [0, 2, 3]  # every prompt with a correct response this step
    for pid, r in stored.items():
        data, tags = r.saved
        assert data["responses"][0].tolist() == outcome(pid, {0: 1, 2: 0, 3: 5}[pid])[0]
        assert tags[0]["global_steps"] == 1
    import weakref

    first = weakref.ref(stored[0])
    del stored, r
    verl_step(trainer, buffer, 2)  # prompt 0 is right again: its newer response replaces the stored one
    assert first() is None


# pods+ar3po (Bench 3.0's first passing arm, task 1): AR3PO's staged groups cut to their max-variance 2 rows
PODS_AR3PO = {"ar3po": {"k": 2, "stages": 3}, "pods": {"m": 2}}


@pytest.mark.parametrize("planner, options", [(p, None) for p in ("aero", "dars", "pilot-commit", "pvpo", "sgpo",
                                                                  "cures", "greso+oracle")]
                         + [("pods+ar3po", PODS_AR3PO)])
def test_every_sampling_planner_runs_in_verl_as_in_rollwise_driver(transfer_queue, planner, options):
    """Stages (aero, dars, ar3po), pilots (pilot-commit), profiles (pvpo, sgpo, cures), the oracle's measurements
    and PODS's down-sampling of AR3PO's merged groups: the same rounds, the same trained rows and the same
    charges as rollwise's driver, for two steps; one uid per trained prompt; nothing left in TransferQueue.
    16 prompts, 4 per step."""
    script = staged if planner == "pods+ar3po" else mixed
    ctx, engine = make_ctx(16, B=4, n=2, seed=1), ScriptEngine(script)
    mine = build_planner(planner, 16, ctx.rng, options)
    trainer = make_trainer(train_batch_size=4, n=2)
    trainer.agent_loop_manager = loop = ScriptAgentLoop(script)
    buffer = make_buffer(trainer, planner, seed=1, **({"planner_options": options} if options else {}))
    cut = []
    for step in (1, 2):
        ctx.step = step
        rounds_before = len(engine.submitted)
        batch, _, _ = driver_step(mine, ctx, engine)
        assert batch.groups  # verl cannot train an empty batch
        groups, _ = verl_step(trainer, buffer, step)
        assert {pid: [t for _, t, _, _ in rows] for pid, rows in groups.items()} == \
            {g.prompt.id: [r.token_ids_T.tolist() for r in g.rollouts] for g in batch.groups}
        if planner == "pods+ar3po":  # PODS cut a merged group: more rows generated for it than trained
            generated = {}
            for sub in engine.submitted[rounds_before:]:
                for q in sub:
                    generated[q.prompt.id] = generated.get(q.prompt.id, 0) + q.n
            assert all(len(rows) <= 2 for rows in groups.values())
            cut.append(any(generated[pid] > 2 for pid in groups))
    assert any(cut) or planner != "pods+ar3po"
    assert [[(q.prompt.id, q.n) for q in sub] for sub in engine.submitted] == loop.rounds[:len(engine.submitted)]
    assert len(loop.rounds) == len(engine.submitted)
    for fate in ("trained", "discarded", "scored"):
        assert buffer.ledger.count(fate=fate) == ctx.ledger.count(fate=fate), fate
    assert buffer.ledger.reused_tokens == ctx.ledger.reused_tokens
    assert not train_keys_left()
