"""ARRoL inside TRL's GRPOTrainer: hidden states in flight from a forward hook on the model's decoder.

The trainer runs ARRoL steps with TRL's own transformers generation of a tiny Llama; a spy records every
(tokens, hidden state) pair the watcher was shown. The hidden states are checked against an independent
forward pass of the model (the last layer after the final norm, at the row's last token: what rollwise's
torch engine shows), then the same samples, with the same hidden states, are replayed through rollwise's
StepDriver: the pruned rows, their charges, the head's training rows and TRL's batch (rows, loss mask,
advantages) must be the driver's. Skipped unless TRL is installed.
"""
import pytest
import torch

pytest.importorskip("trl")

from test_integrations_trl import G, generation_batch, make_trainer  # noqa: E402
from test_integrations_trl_stages import (Replay, as_groups, check_inflight_step, driver_steps,  # noqa: E402
                                          record_trl_steps)

from rollwise.integrations import trl as rt  # noqa: E402

SPEC, OPTIONS = "arrol", {"arrol": {"prune_at": 2, "ratio": 2}}  # n = 2 kept of 4 started, decided at 2 tokens


def record_hidden(trainer):
    """Spy on each round's watcher: per round, per request, per sample {tokens shown: (prompt ids, tokens,
    h_D)}, in the order TRL generated them."""
    seen = []
    round_ = trainer._rollwise_round

    def spy_round(requests, watch, k, hidden=False):
        rec = [[{} for _ in range(r.n)] for r in requests]

        def spy_watch(running):
            assert hidden  # ARRoL's wave asks for hidden states
            for i, samples in running.items():
                for j, s in enumerate(samples):
                    if s is not None:
                        toks, h = s
                        rec[i][j][len(toks)] = (toks.tolist(), h.clone())
            return watch(running)

        out, groups = round_(requests, spy_watch if watch is not None else None, k, hidden)
        for i, g in enumerate(groups):
            for j, r in enumerate(g.rollouts):
                rec[i][j] = {n: (r.prompt_ids, t, h) for n, (t, h) in rec[i][j].items()}
        seen.append(rec)
        return out, groups

    trainer._rollwise_round = spy_round
    return seen


class HiddenReplay(Replay):
    """TRL's samples and the hidden states its watcher saw, as a script for the driver's TokenEngine."""

    def __init__(self, rounds, seen):
        super().__init__(rounds)
        flat = [rnd for step in rounds for rnd in step]
        assert len(flat) == len(seen)
        self.hs: dict[int, list] = {}
        for rnd, rec in zip(flat, seen):
            for (pid, _), per_sample in zip(rnd, rec):
                self.hs.setdefault(pid, []).extend(per_sample)
        self.current_h: dict[tuple, dict] = {}

    def lengths(self, pid, j):
        self.current_h[(pid, j)] = self.hs[pid].pop(0)
        return super().lengths(pid, j)

    def hidden(self, pid, j, k):  # the driver shows a row at k tokens only where TRL's watcher did
        return self.current_h[(pid, j)][k][2]


def decoder_hooks(trainer):
    return dict(rt._decoder(trainer.accelerator.unwrap_model(trainer.model))._forward_hooks)


def run_both(tmp_path, spec, options, steps):
    """`steps` planner steps inside TRL, then the same samples and hidden states through the driver; checks
    that the hook is gone, that the hidden states shown are the model's own at each row's last token
    (after the final norm), and that groups, pruned rows, charges, arrol metrics and TRL's batch match."""
    trainer = make_trainer(tmp_path, spec, planner_options=options, n=2)
    seen = record_hidden(trainer)
    rounds, results, batches = record_trl_steps(trainer, steps)
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert not decoder_hooks(trainer) and "generate" not in vars(model)  # hook and bound generate are gone
    shown = [v for rec in seen for req in rec for sample in req for v in sample.values()]
    assert len(shown) > 20
    with torch.no_grad():
        for prompt_ids, toks, h in shown:
            ids = torch.tensor([list(prompt_ids) + toks])
            full = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
            assert torch.allclose(full.float(), h, atol=1e-5), (prompt_ids, toks)

    outs, charges, planner = driver_steps(trainer, spec, options, rounds, HiddenReplay(rounds, seen))
    log = trainer.rollwise_log
    for res, batch, out, charge, e in zip(results, batches, outs, charges, log):
        check_inflight_step(res, batch, out, charge, e)
        assert as_groups(res.rejected) == as_groups(out.assembled.rejected)
        assert {k: v for k, v in e.items() if "/" in k} == {k: v for k, v in charge["metrics"].items() if "/" in k}
    # the head learned from the same rows: the same (h, correct) labels, the same weights
    ours, theirs = trainer.rollwise.planner.components[0].head, planner.components[0].head
    assert len(ours.y_N) == sum(e["arrol/labels"] for e in log) and 0 < ours.y_N.sum() < len(ours.y_N)
    assert torch.equal(ours.X_ND, theirs.X_ND) and torch.equal(ours.y_N, theirs.y_N)
    assert torch.equal(ours.w_D, theirs.w_D) and ours.b == theirs.b
    return rounds, log


def test_arrol_inside_trl_equals_rollwise_driver(tmp_path):
    rounds, log = run_both(tmp_path, SPEC, OPTIONS, 3)
    assert all(e["pruned_samples"] > 0 for e in log)
    for rnd in (r for step in rounds for r in step):  # pruned rows end at the checkpoint: prune_at tokens
        for _, rows in rnd:
            assert all(len(t) == 2 for t, _, _, f in rows if f == "pruned")
    # a warm head chose by the hidden states: some request kept rows a cold head (0.5 for every row,
    # ties by index: the first and the last) would have pruned
    pruned = [[j for j, (_, _, _, f) in enumerate(rows) if f == "pruned"]
              for step in rounds[1:] for rnd in step for _, rows in rnd if len(rows) == G]
    assert any(p and p != [1, 2] for p in pruned)


def test_arrol_with_duet_abort_inside_trl_equals_rollwise_driver(tmp_path):
    """Composed watchers: DUET's gate (tokens only) and ARRoL's head (hidden states) over the same rows."""
    options = {**OPTIONS, "duet-abort": {"h_abort": 1, "grace": 0, "q": 0.5}}
    _, log = run_both(tmp_path, "arrol+duet-abort", options, 2)
    assert sum(e["arrol/pruned"] for e in log) > 0 and sum(e.get("duet/kept", 0) for e in log) > 0
    assert sum(e["pruned_samples"] for e in log) > sum(e["arrol/pruned"] for e in log)  # DUET pruned some too


def test_the_hook_is_removed_when_generation_fails(tmp_path):
    trainer = make_trainer(tmp_path, SPEC, planner_options=OPTIONS, n=2)
    round_ = trainer._rollwise_round

    def failing_round(requests, watch, k, hidden=False):
        def boom(running):
            raise RuntimeError("watcher failed")
        return round_(requests, boom, k, hidden)

    trainer._rollwise_round = failing_round
    with pytest.raises(RuntimeError, match="watcher failed"):
        generation_batch(trainer)
    assert not decoder_hooks(trainer)
    assert "generate" not in vars(trainer.accelerator.unwrap_model(trainer.model))


def test_arrol_is_refused_where_generation_cannot_expose_hidden_states(tmp_path, monkeypatch):
    def rollout_func(prompts, trainer):
        raise AssertionError("not called")

    with pytest.raises(ValueError, match=r"\(rollout_func\) cannot run planner 'arrol': arrol needs in-flight"):
        make_trainer(tmp_path, SPEC, rollout_func=rollout_func)
    with pytest.raises(ValueError, match=r"with mask_truncated_completions\) cannot run planner 'arrol'"):
        make_trainer(tmp_path, SPEC, mask_truncated_completions=True)
    # a model without a decoder module to hook: no hidden states in flight
    from transformers import LlamaForCausalLM

    monkeypatch.setattr(LlamaForCausalLM, "get_decoder", lambda self: self)
    with pytest.raises(ValueError, match=r"\(transformers generation\) cannot run planner 'arrol': arrol reads "
                                         r"hidden states in flight"):
        make_trainer(tmp_path, SPEC)
    make_trainer(tmp_path, "duet-abort")  # in-flight control without hidden states still runs
