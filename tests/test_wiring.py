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
