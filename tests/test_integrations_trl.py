"""rollwise planners inside TRL's GRPOTrainer, on CPU with a tiny local Llama (a few seconds per step).

The reward is scripted per prompt so that groups are zero-variance or not by design: "easy" prompts
always earn 1, "hard" always 0, "coin" prompts earn 1 for an even-length completion (the untrained
model's lengths vary, so their groups usually have a learning signal).
Skipped unless TRL is installed (`bash scripts/setup.sh --with trl`).
"""
import functools
import math

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rollwise.control.base import Component  # noqa: E402
from rollwise.integrations import trl as rt  # noqa: E402
from rollwise.policy.tokenizer import char_tokenizer  # noqa: E402

KINDS = ["easy", "hard", "coin", "coin"] * 8  # prompt i has kind KINDS[i]
G = 4


class Staircase(Component):
    """A test allocator: prompt i gets 1 + i % 4 samples."""

    def allocate(self, prompts, ns, ctx):
        return [1 + p.id % 4 for p in prompts]


def scripted_reward(prompts, completions, kind, **kwargs):
    return [1.0 if k == "easy" else 0.0 if k == "hard" else float(len(c) % 2 == 0) for c, k in zip(completions, kind)]


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    return LlamaForCausalLM(cfg), tok


def make_trainer(tmp_path, planner, prompts_per_batch=4, max_steps=2, pool=len(KINDS), save_steps=None,
                 reward=scripted_reward, mask_truncated_completions=False, config=None, **kw):
    model, tok = tiny_llama()
    ds = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(pool)], "kind": KINDS[:pool]})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=prompts_per_batch * G, num_generations=G, max_completion_length=6,
                      max_steps=max_steps, save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                      learning_rate=1e-3, seed=0, logging_steps=1, mask_truncated_completions=mask_truncated_completions,
                      disable_tqdm=True, **(config or {}))
    return rt.RollwiseGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                                  processing_class=tok, planner=planner, **kw)


def generation_batch(trainer):
    """One generation batch as TRL's _prepare_inputs makes it (the dataloader's rows are not used)."""
    trainer.model.train()
    return trainer._generate_and_score_completions(None)


def test_contract_with_installed_trl():
    rt.check_trl()  # the hooks the integration overrides still have the parameters it relies on
    assert trl.__version__ == rt.TESTED, (
        f"trl {trl.__version__} is not the version rollwise's integration was tested with ({rt.TESTED}): "
        "re-run tests/test_integrations_trl.py against it, then update TESTED/SUPPORTED and scripts/extras/trl.sh")


def test_a_changed_hook_fails_loudly(monkeypatch):
    def _generate_single_turn(self, prompts, images, multimodal_fields, num_generations):  # a renamed parameter
        pass

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", _generate_single_turn)
    with pytest.raises(RuntimeError, match=r"_generate_single_turn.*no longer starts with"):
        rt.check_trl()
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    with pytest.raises(RuntimeError, match=r"_calculate_rewards is gone"):
        rt.check_trl()


@pytest.mark.parametrize("planner, needs", [("treepo", "treepo needs an engine that continues rows"),
                                            ("april", "april carries unfinished rows"),
                                            ("e3", "e3 sets sampling parameters per step")])
def test_refuses_what_trl_cannot_serve_by_name(tmp_path, planner, needs):
    with pytest.raises(ValueError, match=r"^TRL .* GRPOTrainer \(transformers generation\) cannot run planner .*" + needs):
        make_trainer(tmp_path, planner)


@pytest.mark.parametrize("planner, needs", [("frontier", "frontier sets per-prompt group sizes"),
                                            ("ar3po", "ar3po needs on-demand sampling"),
                                            ("duet-abort", "duet-abort needs in-flight control")])
def test_refused_where_trl_generates_through_a_rollout_func(tmp_path, planner, needs):
    def rollout_func(prompts, trainer):  # a custom generator samples every row: no padding, stages or stops
        raise AssertionError("not called")

    with pytest.raises(ValueError, match=r"\(rollout_func\) cannot run planner .*" + needs):
        make_trainer(tmp_path, planner, rollout_func=rollout_func)


def test_in_flight_abort_is_refused_where_trl_would_mask_a_stopped_row(tmp_path):
    with pytest.raises(ValueError, match=r"\(transformers generation with mask_truncated_completions\) cannot run "
                                         r"planner 'duet-abort': duet-abort needs in-flight control"):
        make_trainer(tmp_path, "duet-abort", mask_truncated_completions=True)


def test_refuses_an_unsupported_trl_version_and_a_dataset_without_prompts(tmp_path, monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    with pytest.raises(RuntimeError, match=r"supports trl >=1.16.0,<1.17 .* trl 1.17.0 is installed"):
        rt.check_trl()
    monkeypatch.setattr(trl, "__version__", rt.TESTED)
    model, tok = tiny_llama()
    args = GRPOConfig(output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=G, num_generations=G, max_completion_length=4, max_steps=1)
    ds = datasets.Dataset.from_dict({"question": ["1+1="], "kind": ["easy"]})
    with pytest.raises(ValueError, match=r"train dataset has no 'prompt' column \(its columns: question, kind\)"):
        rt.RollwiseGRPOTrainer(model=model, reward_funcs=scripted_reward, args=args, train_dataset=ds,
                               processing_class=tok, planner="uniform")


def test_dapo_trains_only_groups_with_signal_and_refills(tmp_path):
    trainer = make_trainer(tmp_path, "dapo")
    out = generation_batch(trainer)
    (log,) = trainer.rollwise_log
    assert out["completion_ids"].shape[0] == 4 * G  # TRL's batch shape is kept
    assert log["rounds"] > 1 and log["filtered_groups"] >= log["zero_variance_rolled"] > 0  # refilled
    assert log["zero_variance_trained"] == 0
    host = trainer.rollwise
    visited = host.history.visits.nonzero()[0]
    assert len(visited) == log["prompts"]  # PromptHistory records every group rolled out
    assert all(KINDS[i] == "coin" for i in range(len(KINDS)) if host.history.last_n[i] and
               0 < host.history.last_correct[i] < host.history.last_n[i])
    # the rows that train: trained groups in full; the rest has no loss mask and no weight in the denominator
    trains = out["completion_mask"].sum(1) > 0
    assert trains.sum() == log["trained_samples"] == 4 * log["trained_groups"]
    assert out["num_items_in_batch"] == out["completion_mask"].sum()
    assert (out["advantages"][~trains] == 0).all()
    for b in range(4):  # each trained block's advantages are its group's centred rewards (not all zero)
        block = out["advantages"][b * G:(b + 1) * G]
        if trains[b * G]:
            assert block.abs().sum() > 0 and abs(float(block.sum())) < 1e-3


def test_per_prompt_group_sizes_generate_only_n_rows(tmp_path, monkeypatch):
    generated = []
    original = GRPOTrainer._generate_single_turn

    @functools.wraps(original)
    def spy(self, prompt_ids, *args, **kwargs):
        generated.append(len(prompt_ids))
        return original(self, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", spy)
    trainer = make_trainer(tmp_path, "test_integrations_trl:Staircase", n=2)
    out = generation_batch(trainer)
    (log,) = trainer.rollwise_log
    ns = [int(trainer.rollwise.history.last_n[i]) for i in range(len(KINDS)) if trainer.rollwise.history.visits[i]]
    assert sorted(ns) != [G] * 4 and generated == [sum(ns)] == [log["samples"]]  # padding rows not generated
    live = out["completion_mask"].sum(1) > 0
    assert live.sum() == sum(ns)
    rewards = trainer._metrics["train"]["reward"][-1]
    assert not math.isnan(rewards)  # TRL's nanmean skipped the padding rows' NaN rewards
    for b in range(4):  # within a block the live rows come first: n real samples, then padding
        rows = live[b * G:(b + 1) * G].tolist()
        assert rows == sorted(rows, reverse=True)


def test_greso_dapo_trains_inside_trl(tmp_path):
    trainer = make_trainer(tmp_path, "greso+dapo", max_steps=3, pool=12,  # small: prompts come back at step 2
                           save_steps=3)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 3 and len(trainer.rollwise_log) == 3
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))
    assert sum(e["zero_variance_trained"] for e in trainer.rollwise_log) == 0
    logged = [h for h in trainer.state.log_history if "rollwise/trained_groups" in h]
    assert len(logged) == 3
    h = trainer.rollwise.history
    assert h.visits.sum() == sum(e["prompts"] for e in trainer.rollwise_log)
    # GRESO acts on that history: the prompts that were always zero-variance get skipped from step 2 on
    assert sum(e.get("skipped", 0) for e in trainer.rollwise_log) > 0
    # the checkpoint carries the planner: a resumed trainer starts from the same history and GRESO state
    resumed = make_trainer(tmp_path, "greso+dapo", max_steps=3, pool=12)
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-3"))  # nothing left to train
    assert (resumed.rollwise.history.visits == h.visits).all() and resumed.rollwise.step_count == 3
    greso = trainer.rollwise.planner.components[0]
    assert resumed.rollwise.planner.components[0].state_dict() == greso.state_dict()


def test_hive_reads_prompt_entropy_from_the_trl_model(tmp_path):
    trainer = make_trainer(tmp_path, "hive")
    generation_batch(trainer)
    hive = trainer.rollwise.planner.components[0]
    assert len(hive.h_prompt) == 4  # stage 2 measured the chosen prompts with the trainer's model
    tokens = trainer._metrics["train"]["rollwise/prompt_stats_tokens"]
    assert tokens and tokens[0] > 0
    ent, emb = trainer._rollwise_prompt_stats(["1+1=", "12+12="])
    assert ent.shape == (2,) and emb.shape == (2, 32) and (ent > 0).all()
    assert 0 < ent.max() <= math.log(len(trainer.processing_class)) + 1e-4  # an entropy over the vocabulary


def test_zero_variance_normaliser_drops_rows_without_signal_from_the_denominator(tmp_path):
    """drop_zero_adv (rollwise's learner's option, TRL #6367): under plain GRPO (`uniform`) the easy and hard
    prompts' groups have equal rewards; their rows leave the loss mask and num_items_in_batch, the coin
    groups' rows stay, and the advantages are unchanged. Without the option every trained row counts."""
    def alternating(prompts, completions, kind, **kwargs):  # coin rows alternate 1, 0: a signal for sure
        return [1.0 if k == "easy" else 0.0 if k == "hard" else float(j % 2) for j, k in enumerate(kind)]

    plain = make_trainer(tmp_path / "a", "uniform", pool=4, reward=alternating)  # easy, hard, coin, coin
    base = generation_batch(plain)
    trainer = make_trainer(tmp_path / "b", "uniform", pool=4, reward=alternating, drop_zero_adv=True)
    out = generation_batch(trainer)
    assert torch.equal(out["completion_ids"], base["completion_ids"])  # same seed: the same samples
    assert torch.allclose(out["advantages"], base["advantages"])
    kinds = [KINDS[i] for i in range(4) if trainer.rollwise.history.visits[i]]
    assert sorted(kinds) == ["coin", "coin", "easy", "hard"]  # two zero-variance groups by design
    signal = out["advantages"] != 0
    assert int(base["num_items_in_batch"]) == int(base["completion_mask"].sum()) > int(out["num_items_in_batch"])
    assert int(out["num_items_in_batch"]) == int(base["completion_mask"][signal].sum()) > 0
    assert out["completion_mask"][~signal].sum() == 0
    assert trainer.rollwise_log[-1]["zero_adv_rows"] == int((~signal).sum()) >= 2 * G


def test_zero_variance_normaliser_is_refused_with_a_kl_term(tmp_path):
    with pytest.raises(ValueError, match=r"drop_zero_adv=True with beta=0.04: a zero-advantage row still carries"):
        make_trainer(tmp_path, "uniform", drop_zero_adv=True, config={"beta": 0.04})
