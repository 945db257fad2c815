"""Stages, response reuse and in-flight abort inside TRL's GRPOTrainer, checked against rollwise's own driver.

Each test runs planner steps inside `RollwiseGRPOTrainer` (TRL's own generation and scoring of a tiny
Llama), records every sample TRL generated, then replays exactly those samples through rollwise's
StepDriver (a scripted token engine with in-flight control, tests/fakes.py) driving a planner built the
same way. What the planner decides must then be the same in both: the merged groups, the reused
responses, the pruned rows and their charges; and TRL's batch must hold what rollwise's learner would
train on: the same rows, loss mask, token counts and advantages (rollwise's grpo estimator with TRL's
eps, times the in-flight importance weights). Skipped unless TRL is installed.
"""
import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from fakes import TokenEngine  # noqa: E402
from test_integrations_trl import G, KINDS, generation_batch, make_trainer  # noqa: E402

from rollwise.control.base import StepContext, build_planner  # noqa: E402
from rollwise.core.history import PromptHistory  # noqa: E402
from rollwise.core.ledger import Ledger  # noqa: E402
from rollwise.integrations import trl as rt  # noqa: E402
from rollwise.learn.advantages import batch_input, grpo  # noqa: E402
from rollwise.run.driver import StepDriver  # noqa: E402


def rare_reward(prompts, completions, kind, **kwargs):
    """easy: 1, hard: 0, coin: 1 for about a third of the completions (by a checksum of the text), so that
    a prompt solved once is often unsolved the next time: AR3PO stages and reuse both happen."""
    return [1.0 if k == "easy" else 0.0 if k == "hard" else float(zlib.crc32(c.encode()) % 3 == 0)
            for c, k in zip(completions, kind)]


def record_trl_steps(trainer, steps):
    """Run `steps` planner steps inside TRL; return per step the rounds (each: the groups TRL generated, as
    (prompt id, [(tokens, reward, correct, finish_reason)]), pruned rows included), the trained groups and
    TRL's batch."""
    host = trainer.rollwise
    send, finish = host.send, host.finish
    rounds, results = [], []

    def spy_send(groups):
        rounds[-1].append([(g.prompt.id, [(r.token_ids_T.tolist(), r.reward, r.correct, r.finish_reason)
                                          for r in g.rollouts]) for g in groups])
        return send(groups)

    def spy_finish():
        results.append(finish())
        return results[-1]

    host.send, host.finish = spy_send, spy_finish
    batches = []
    for step in range(steps):
        trainer.state.global_step = step  # the policy version a response was generated at
        rounds.append([])
        batches.append(generation_batch(trainer))
    return rounds, results, batches


class Replay:
    """TRL's samples as a script for TokenEngine: per prompt, its rows in the order TRL generated them.
    A row the watcher ended gets one token more, so that it is still running when the driver's watcher
    sees the tokens TRL's saw; the watcher must end it there again."""

    def __init__(self, rounds):
        self.rows: dict[int, list] = {}
        self.rewards: dict[tuple, tuple] = {}
        for step in rounds:
            for rnd in step:
                for pid, rows in rnd:
                    for toks, reward, correct, finish in rows:
                        extra = [0] if finish in ("stop", "pruned") else []
                        self.rows.setdefault(pid, []).append(toks + extra)
                        self.rewards[(pid, tuple(toks))] = (reward, correct)
        self.current: dict[tuple, list] = {}

    def lengths(self, pid, j):
        self.current[(pid, j)] = self.rows[pid].pop(0)
        return len(self.current[(pid, j)])

    def script(self, pid, j):
        return self.current[(pid, j)]

    def score(self, groups):  # the driver's scorer: TRL's reward for the same tokens
        for g in groups:
            for r in g.rollouts:
                r.reward, r.correct = self.rewards[(g.prompt.id, tuple(r.token_ids_T.tolist()))]


def driver_steps(trainer, spec, options, rounds, replay=None):
    """The same planner steps in rollwise's StepDriver on TRL's samples (`replay`: a Replay of them, by
    default without hidden states). Returns per step the driver's outcome and charges (with the step's
    planner metrics), and the planner."""
    replay = replay or Replay(rounds)
    engine = TokenEngine(replay.lengths, max_tokens=trainer.max_completion_length, script=replay.script,
                         hidden=getattr(replay, "hidden", None))
    pool = [trainer._rollwise_prompt(i) for i in range(len(trainer.train_dataset))]
    rng = np.random.default_rng(trainer.args.seed)
    planner = build_planner(spec, len(pool), rng, options)
    history, ledger = PromptHistory(len(pool)), Ledger()
    driver = StepDriver(engine, ledger, history, scorer=replay)
    host = trainer.rollwise
    outs, charges = [], []
    for step in range(len(rounds)):
        engine.version = step
        before = {k: dict(v) if isinstance(v, dict) else v for k, v in vars(ledger).items()}
        ctx = StepContext(step, host.batch_size, host.n, pool, history, ledger, rng, policy=host.policy)
        out = driver.collect(planner, ctx, step)
        planner.observe(out.batch, ctx)
        outs.append(out)
        charges.append({"decoded": ledger.count(kind="decoded") - sum(v for (p, f, k), v in before["tokens"].items()
                                                                      if k == "decoded"),
                        "pruned_tokens": ledger.count(fate="pruned") - sum(v for (p, f, k), v in before["tokens"].items()
                                                                           if f == "pruned"),
                        "pruned_samples": ledger.count_rollouts(fate="pruned") - sum(
                            v for (p, f), v in before["rollouts"].items() if f == "pruned"),
                        "reused_tokens": ledger.reused_tokens - before["reused_tokens"],
                        "metrics": dict(ctx.metrics)})
    assert all(not rows for rows in replay.rows.values())  # the driver asked for every sample TRL generated
    return outs, charges, planner


def as_groups(groups):
    return [(g.prompt.id, [r.token_ids_T.tolist() for r in g.rollouts], [r.reward for r in g.rollouts]) for g in groups]


def check_batch(batch, trained, tol=1e-5):
    """TRL's batch holds the trained groups' rows first, then rows that do not train; each row's loss mask
    covers its response; advantages = rollwise's grpo (TRL's eps 1e-4) times the row's importance weight."""
    rows = [r for g in trained.groups for r in g.rollouts]
    n = len(rows)
    mask = batch["completion_mask"]
    assert mask[:n].sum(1).tolist() == [r.num_tokens for r in rows]
    assert mask[n:].sum() == 0 and int(batch["num_items_in_batch"]) == sum(r.num_tokens for r in rows)
    for i, r in enumerate(rows):
        assert batch["completion_ids"][i][: r.num_tokens].tolist() == r.token_ids_T.tolist()
    expected = grpo(batch_input(trained), eps=1e-4) if n else torch.zeros(0)
    weights = torch.tensor([float(r.meta.get("is_weight", 1.0)) for r in rows], dtype=torch.float64)
    adv = batch["advantages"] if batch["advantages"].dim() == 1 else batch["advantages"][:, 0]
    assert torch.allclose(adv[:n].double(), expected.double() * weights, atol=tol)
    assert (adv[n:] == 0).all()


def check_inflight_step(res, batch, out, charge, e):
    """One step with in-flight control, inside TRL and in the driver: the same trained groups and their
    importance weights, TRL's batch as rollwise's learner would train it, the same pruned rows and charges."""
    assert as_groups(res.trained) == as_groups(out.batch.groups)
    assert [[r.meta.get("is_weight") for r in g.rollouts] for g in res.trained] == \
        [[r.meta.get("is_weight") for r in g.rollouts] for g in out.batch.groups]
    check_batch(batch, out.batch)
    assert e["pruned_samples"] == charge["pruned_samples"] and e["pruned_tokens"] == charge["pruned_tokens"]
    assert e["generated_tokens"] == charge["decoded"]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_over_whole_groups_match_trls_own_code(tmp_path, scale):
    """trl_advantages (which the merge uses) against the advantages TRL's own _generate_and_score_completions
    computes, on groups of 1 to 4 live rows padded with NaN rewards (TRL's nan-aware statistics)."""
    trainer = make_trainer(tmp_path, "test_integrations_trl:Staircase", n=2)
    trainer.scale_rewards = scale
    trainer.model.train()
    requests = trainer.rollwise.start()
    out, groups = trainer._rollwise_round(requests, None, 0)
    assert sorted(g.n for g in groups) != [G] * len(groups)  # groups of several sizes, NaN-padded in TRL
    ours = rt.trl_advantages([[r.reward for r in g.rollouts] for g in groups], scale)
    live = [b * G + j for b, g in enumerate(groups) for j in range(g.n)]
    assert torch.allclose(out["advantages"][live], ours, atol=1e-6)
    assert ours.abs().sum() > 0  # some group has a learning signal: the check is not vacuous


def test_ar3po_inside_trl_equals_rollwise_driver(tmp_path):
    """AR3PO (stages of k=2 until a correct response, reuse of a stored correct response) inside TRL: the
    same rounds, merged groups, reused responses, advantages, loss mask and token counts as the driver."""
    spec, options = "ar3po", {"ar3po": {"k": 2, "stages": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options, pool=8, prompts_per_batch=2, reward=rare_reward)
    rounds, results, batches = record_trl_steps(trainer, 8)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    log = trainer.rollwise_log
    assert max(e["rounds"] for e in log) > 1  # stages ran: later rounds asked for more samples of a prompt
    assert any(g.n > 2 for res in results for g in res.trained)  # a trained group merged from several stages
    assert sum(e["reused_samples"] for e in log) > 0  # a stored correct response was reused
    for res, batch, out, charge, e in zip(results, batches, outs, charges, log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        assert as_groups(res.rejected) == as_groups(out.assembled.rejected)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"] and e["reused_tokens"] == charge["reused_tokens"]
        reused = [r for g in res.trained for r in g.rollouts if r.policy_version < e["step"]]
        assert len(reused) == e["reused_samples"]
        for r in reused:  # with its behaviour log-probs from when it was generated
            assert r.logprobs_T.shape == r.token_ids_T.shape and (r.logprobs_T < 0).all()


def test_pods_ar3po_inside_trl_equals_rollwise_driver(tmp_path):
    """PODS over AR3PO (Bench 3.0's first passing arm, task 1) inside TRL: AR3PO's merged groups cut to their
    max-reward-variance m = 2 rows, the same trained and rejected groups, advantages and charges as the driver."""
    spec, options = "pods+ar3po", {"ar3po": {"k": 2, "stages": 2}, "pods": {"m": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options, pool=8, prompts_per_batch=2, reward=rare_reward)
    rounds, results, batches = record_trl_steps(trainer, 8)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    cut = False
    for step_rounds, res, batch, out, charge, e in zip(rounds, results, batches, outs, charges, trainer.rollwise_log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        assert as_groups(res.rejected) == as_groups(out.assembled.rejected)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"] and e["reused_tokens"] == charge["reused_tokens"]
        assert all(g.n <= 2 for g in res.trained)
        generated = {}
        for rnd in step_rounds:
            for pid, rows in rnd:
                generated[pid] = generated.get(pid, 0) + len(rows)
        cut |= any(generated.get(g.prompt.id, 0) > g.n for g in res.trained)
    assert cut  # some trained group was merged from stages and cut by PODS: the check is not vacuous


@pytest.mark.parametrize("spec, options", [
    ("duet-abort", {"duet-abort": {"h_abort": 2, "grace": 0, "q": 0.5}}),
    # composed with stages of 2 rows in blocks of G = 4: the watcher's rows are not TRL's rows one for one
    ("ar3po+duet-abort", {"ar3po": {"k": 2, "stages": 2}, "duet-abort": {"h_abort": 2, "grace": 0, "q": 0.5}})])
def test_duet_abort_inside_trl_equals_rollwise_driver(tmp_path, spec, options):
    """DUET's abort as a stopping criterion of TRL's transformers generation: the same rows pruned at the
    same token, charged as pruned, the survivors' importance weights 1/q, and the same batch as the driver."""
    trainer = make_trainer(tmp_path, spec, planner_options=options)
    rounds, results, batches = record_trl_steps(trainer, 2)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    log = trainer.rollwise_log
    assert sum(e["pruned_samples"] for e in log) > 0 and sum(e.get("duet/kept", 0) for e in log) > 0
    for rnd in (r for step in rounds for r in step):  # pruned rows were cut at the gate: h_abort + grace + 1 tokens
        for _, rows in rnd:
            assert all(len(t) == 3 for t, _, _, f in rows if f == "pruned")
    for step in zip(results, batches, outs, charges, log):
        check_inflight_step(*step)
    weights = {r.meta.get("is_weight") for res in results for g in res.trained for r in g.rollouts}
    assert weights <= {None, 2.0} and (2.0 in weights or spec != "duet-abort")  # kept past the gate w.p. q: 1/q


def test_reused_response_carries_its_behaviour_logprobs_and_the_named_correction(tmp_path):
    """A response reused from an earlier step trains with the correction the trainer names (here TIS,
    rollwise's tis-token: min(pi_old / mu, 2) per token), from the log-probs it was sampled with (mu) and the
    current policy's (pi_old). The stored mu are lowered by 0 to 1.5 along the response (as if an older
    policy had sampled it), so the weights run from 1 to the cap."""
    spec, options = "ar3po", {"ar3po": {"k": 2, "stages": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options, pool=8, prompts_per_batch=2, reward=rare_reward,
                           correction="tis-token")
    ar3po = trainer.rollwise.planner.components[0]
    aged = set()
    for step in range(8):
        for r in (r for rs in ar3po.buffer.values() for r in rs if id(r) not in aged):
            r.logprobs_T = r.logprobs_T - torch.linspace(0, 1.5, r.num_tokens)
            aged.add(id(r))
        trainer.state.global_step = step
        batch = generation_batch(trainer)
        if trainer.rollwise_log[-1]["reused_samples"]:
            break
    else:
        pytest.fail("no response was reused in 8 steps")
    assert batch["advantages"].dim() == 2  # per-token weights: (rows, tokens) advantages, as TRL's loss takes them
    (row,) = [i for i in range(batch["advantages"].shape[0]) if not torch.allclose(
        batch["advantages"][i], batch["advantages"][i, :1].expand_as(batch["advantages"][i]))]
    assert trainer.rollwise_log[-1]["reused_age"] >= 1
    from rollwise.learn.corrections import CorrectionInput, tis_token

    mask = batch["completion_mask"][row:row + 1].float()
    rows = {k: batch[k][row:row + 1] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    current = trainer._rollwise_logps(rows).float()
    k = int(mask.sum())
    (stored,) = [r for rs in ar3po.buffer.values() for r in rs
                 if r.token_ids_T.tolist() == batch["completion_ids"][row][:k].tolist()][:1] or [None]
    assert stored is not None  # the reused row is a stored response, tokens and all
    mu = torch.zeros_like(current)
    mu[0, :k] = stored.logprobs_T
    w, keep = tis_token(CorrectionInput(current, current, mu, mask))
    factor = (w * keep)[0, :k]
    assert not torch.allclose(factor, torch.ones_like(factor))
    adv = batch["advantages"][row, :k]
    assert torch.allclose(adv / adv[0], factor / factor[0], atol=1e-4)


@pytest.mark.parametrize("spec", ["aero", "dars", "pilot-commit", "speed-rl", "pvpo", "sgpo", "cures", "oracle", "dots"])
def test_planners_that_sample_on_demand_run_inside_trl(tmp_path, spec):
    """Every planner that asks for samples of its own (stages, pilots, profiles, oracle measurements) runs a
    step inside TRL: its rounds are TRL generations, measurements are charged and do not train unless the
    planner commits them, and the batch keeps TRL's shape."""
    trainer = make_trainer(tmp_path, spec, pool=8, prompts_per_batch=2, reward=rare_reward)
    batch = generation_batch(trainer)
    (e,) = trainer.rollwise_log
    assert e["generated_tokens"] >= e["tokens"] > 0 and e["rounds"] >= 1
    assert batch["completion_ids"].shape[0] >= 2 * G
    assert int(batch["num_items_in_batch"]) == e["trained_tokens"]
    if spec not in ("aero", "dars"):  # pilots, profiles, oracle samples: generated, charged as measurements
        assert e["measurement_tokens"] > 0
