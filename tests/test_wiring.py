"""The wiring between objects, end to end on the tiny model: what the engine prefills and what the learner
runs reach the ledger and every metrics row (prompt_tokens, learner_tokens and the learner's log-prob
passes), counted independently here from the requests the engine was given and the rows the learner
trained. Dropping the driver's prompt charge, or the learner's charge, fails these tests."""
import pytest


def _trainer(tmp_path, **kw):
    """On the shipped arithmetic base (held-out accuracy ~0.4), so groups have a reward spread to train."""
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {"out": str(tmp_path), "eval_every": 0, "steps": 2, "batch_size": 8, "n": 4, **kw})
    return Trainer(cfg, log=lambda *a: None)


@pytest.mark.parametrize("epochs,kl", [(1, 0.0), (2, 0.1)])
def test_prompt_and_learner_tokens_reach_the_metrics_row(tmp_path, epochs, kl):
    tr = _trainer(tmp_path, **{"learner.epochs": epochs, "learner.kl_coef": kl})
    submitted, trained = [], []
    submit, update = tr.engine.submit, tr.learner.update

    def spy_submit(requests, **kw):  # what the engine is asked to prefill: each request's prompt, once
        submitted.extend(requests)
        return submit(requests, **kw)

    def spy_update(batch):  # the rows the learner trains: with no KL term, GRPO drops zero-advantage rows
        trained.extend(r for g in batch.groups if kl > 0 or not g.zero_variance for r in g.rollouts)
        return update(batch)

    tr.engine.submit, tr.learner.update = spy_submit, spy_update
    rows = []
    for _ in range(2):
        submitted.clear(), trained.clear()
        row = tr.train_step()
        before = rows[-1] if rows else {"prompt_tokens": 0, "learner_tokens": 0, "old_logprob_tokens": 0,
                                        "ref_logprob_tokens": 0}
        prefill = sum(len(tr.policy.encode(q.prompt.text)) for q in submitted)
        assert row["prompt_tokens"] - before["prompt_tokens"] == prefill > 0
        per_pass = sum(len(r.prompt_ids) + r.num_tokens for r in trained)
        assert per_pass > 0
        assert row["learner_tokens"] - before["learner_tokens"] == per_pass * epochs
        assert row["old_logprob_tokens"] - before["old_logprob_tokens"] == per_pass  # recompute_old (default)
        assert row["ref_logprob_tokens"] - before["ref_logprob_tokens"] == (per_pass if kl > 0 else 0)
        rows.append(row)
    assert tr.ledger.learner_tokens == rows[-1]["learner_tokens"]  # the ledger is the one writer


def test_learner_tokens_survive_a_checkpoint(tmp_path):
    tr = _trainer(tmp_path)
    tr.train_step()
    s = tr.ledger.state_dict()
    from rollwise.core.ledger import Ledger

    back = Ledger()
    back.load_state_dict(s)
    assert back.compute_counts() == tr.ledger.compute_counts()


def test_a_compute_budget_ends_the_run_and_spaces_its_evaluations(tmp_path):
    """Every row's `compute` is the profile's formula over the row's own counts (gpu-h100-v1: decode 1,
    prefill 0.40, learner 1.52, log-prob 0.51); the run stops at the first step at or past the budget, and
    is evaluated at the first step after each multiple of eval_every_compute (and at the end)."""
    from rollwise.bench.costs import load_profile

    r = load_profile("gpu-h100-v1").ratios
    tr = _trainer(tmp_path, steps=50, budget_compute=6000.0, eval_every_compute=2500.0, eval_size=8)
    rows = [x for x in tr.run() if x["step"] > 0]
    for x in rows:
        decode = sum(v for k, v in x.items() if k.startswith("tok/") and k.count("/") == 3
                     and k.split("/")[1] not in ("eval", "oracle") and k.split("/")[3] in ("decoded", "shared"))
        want = (r["decode"] * decode + r["prefill"] * x["prompt_tokens"] + r["learner"] * x["learner_tokens"]
                + r["logprob"] * (x["old_logprob_tokens"] + x["ref_logprob_tokens"]) + r["scoring"] * x["scoring_tokens"])
        assert x["compute"] == pytest.approx(want)
    assert rows[-1]["compute"] >= 6000 > rows[-2]["compute"]
    evaluated = [x["step"] for x in rows if "eval_acc" in x]
    crossed = [x["step"] for a, x in zip(rows, rows[1:]) if x["compute"] // 2500 > a["compute"] // 2500]
    if rows[0]["compute"] >= 2500:
        crossed.insert(0, rows[0]["step"])
    assert evaluated == sorted(set(crossed) | {rows[-1]["step"]})
