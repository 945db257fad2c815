"""LoRA through peft (learner.lora, policy/lora.py) on a small Llama on the CPU: adapter-only training, the
engine sampling from base + adapter, resume, and export of the merged model or the adapter."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.policy.policy import Policy
from rollwise.run.config import load_config

from conftest import SMALL, kill_and_resume
from test_engine_policy import hf_checkpoint, tiny_policy
from test_learner_gpu_options import batch_of, llama_policy

pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parent.parent

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}


def test_adapter_only_training_and_engine_logprobs_equal_the_learners():
    pol = llama_policy()
    base = {k: v.clone() for k, v in pol.model.state_dict().items()}
    learner = Learner(pol, LearnerConfig(lora=LORA, lr=1e-2), seed=0)
    trained = {n for n, p in pol.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    assert sum(len(g["params"]) for g in learner.opt.param_groups) == len(trained)  # AdamW sees the adapters only
    assert learner.update(batch_of(pol))["updated"] == 1
    state = pol.model.get_base_model().state_dict()
    for k, v in base.items():  # the base weights did not move (peft names them base_layer.weight)
        w = state.get(k, state.get(k.replace(".weight", ".base_layer.weight")))
        assert torch.equal(v, w), k
    assert any(float(p.detach().abs().max()) > 0 for n, p in pol.model.named_parameters() if "lora_B" in n)  # adapter moved
    # the engine samples from base + adapter: its log-probs are the learner's (same module, one in memory)
    rs = batch_of(pol).rollouts
    logp, _, mask = pol.response_logprobs([r.prompt_ids for r in rs], [r.token_ids_T.tolist() for r in rs])
    for i, r in enumerate(rs):
        assert torch.allclose(r.logprobs_T, logp[i, : r.num_tokens].detach(), atol=1e-5), i
    plain = llama_policy()  # and they are not the base model's
    lp0, _, _ = plain.response_logprobs([r.prompt_ids for r in rs], [r.token_ids_T.tolist() for r in rs])
    assert float(((lp0 - logp).detach().abs() * mask).max()) > 1e-3


def test_lora_on_the_tiny_model_and_bad_options_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError) as e:
        Learner(tiny_policy(), LearnerConfig(lora={"r": 4}))
    assert str(e.value).startswith("learner.lora: the tiny model does not support LoRA") and "\n" not in str(e.value)
    for bad, msg in (({"rank": 4}, r"^learner.lora: unknown key 'rank'; expected r, alpha, dropout, target_modules$"),
                     ({"r": 0}, r"^learner.lora.r must be >= 1, got 0$"),
                     ({"r": "4"}, r"^learner.lora.r: got '4' of the wrong type$")):
        with pytest.raises(ValueError, match=msg):
            load_config(None, {"out": str(tmp_path), "learner": {"lora": bad}})


def read(path):
    return [{k: v for k, v in json.loads(x).items() if not k.endswith("_s")} for x in open(path).read().splitlines()]


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_lora_bf16_checkpointed_run_resumes_exactly_after_a_kill_and_exports(tmp_path):
    """SIGKILL a real `rollwise train` of a small Llama (LoRA + bf16 + gradient checkpointing + token-budget
    micro-batches) after step 2, rerun the same command: the metrics and the trained weights equal an
    uninterrupted run's. Then both exports load and give the trained policy's logits."""
    hf_checkpoint(tmp_path)
    learner = {"lora": LORA, "precision": "bf16", "gradient_checkpointing": True, "micro_batch_tokens": 64}
    args = [sys.executable, "-m", "rollwise.cli", "train", "--model", str(tmp_path / "hf"), "--steps", "4",
            "--reward", "rewards_for_tests:by_length",  # varies within a group: every step learns
            "--set", "eval_every=0", "--set", "batch_size=4", "--set", f"learner={json.dumps(learner)}"]
    for k, v in SMALL.items():
        if k not in ("eval_every", "batch_size"):
            args += ["--set", f"{k}={json.dumps(v)}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    subprocess.run(args + ["--out", str(tmp_path / "full")], env=env, check=True, capture_output=True)
    killed = tmp_path / "killed"
    done_before, res = kill_and_resume(args, killed, env, rows=2)
    if done_before < 4:  # the kill landed before the end (almost always)
        assert "resuming" in res.stdout
    a, b = read(tmp_path / "full" / "metrics.jsonl"), read(killed / "metrics.jsonl")
    assert len(a) == 4 and a == b and all(r.get("learn_rows", 0) > 0 for r in a)
    ck = torch.load(killed / "checkpoint.pt", weights_only=True)
    assert any("lora_A" in k for k in ck["model"])  # the checkpoint holds the adapter (and the frozen base)
    full_ck = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    assert all(torch.equal(full_ck["model"][k], v) for k, v in ck["model"].items())

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rollwise.cli import main
    from rollwise.policy.export import export_checkpoint

    assert main(["export", "--model", str(killed), "--out", str(tmp_path / "merged")]) == 0
    assert main(["export", "--model", str(killed), "--out", str(tmp_path / "adapter"), "--adapter"]) == 0
    trained = Policy.load(tmp_path / "hf")
    Learner(trained, LearnerConfig(lora=LORA))  # the same peft wrapping, then the checkpoint's weights
    trained.model.load_state_dict(ck["model"])
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = trained.model.eval()(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", local_files_only=True).eval()
        assert torch.allclose(merged(input_ids=ids).logits, want, atol=1e-5)
        base = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True)
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        assert torch.allclose(adapted(input_ids=ids).logits, want, atol=1e-5)
    assert Policy.load(tmp_path / "merged").kind == "hf"
    with pytest.raises(ValueError, match=r"--adapter: .* holds no LoRA adapter"):
        export_checkpoint(tmp_path / "hf", tmp_path / "x", adapter=True)


def test_sampling_weights_are_the_merged_model_under_base_names():
    import copy

    from rollwise.policy.lora import sampling_weights

    pol = llama_policy()
    plain = sampling_weights(pol)
    assert plain.keys() == dict(pol.model.named_parameters()).keys()
    Learner(pol, LearnerConfig(lora=LORA, lr=1e-2), seed=0).update(batch_of(pol))
    got, want = sampling_weights(pol), dict(copy.deepcopy(pol.model).merge_and_unload().named_parameters())
    assert got.keys() == want.keys() == plain.keys()  # what vLLM loads by name
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-6), k
    assert any(not torch.equal(got[k], plain[k]) for k in want)  # the adapter is in them


def test_lora_with_async_mode_is_one_line_error(tmp_path):
    from rollwise.run.async_loop import check_async

    cfg = load_config(None, {"out": str(tmp_path), "mode": "async", "learner": {"lora": {"r": 4}}})
    with pytest.raises(ValueError, match=r"^learner.lora: not supported with mode async yet"):
        check_async(cfg)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_lora_bf16_checkpointed_update_on_cuda_and_engine_logprobs():
    pol = llama_policy().to("cuda")
    cfg = LearnerConfig(lora=LORA, precision="bf16", gradient_checkpointing=True, lr=1e-2)
    assert Learner(pol, cfg, seed=0).update(batch_of(pol))["updated"] == 1
    rs = batch_of(pol).rollouts
    logp, _, _ = pol.response_logprobs([r.prompt_ids for r in rs], [r.token_ids_T.tolist() for r in rs])
    for i, r in enumerate(rs):  # float32 sampling and scoring of the same module (TF32 off by default)
        assert torch.allclose(r.logprobs_T, logp[i, : r.num_tokens].detach().cpu(), atol=1e-4), i


def test_lora_trains_on_a_file_task_and_exports_the_adapter(tmp_path):
    """`rollwise train --task file --model HF` with learner.lora: 2 steps that learn, a checkpoint holding the
    adapter, and `rollwise export --adapter` giving a peft adapter that loads over the base and carries the
    trained weights (its logits are the run's, not the base model's)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rollwise.cli import main

    hf = hf_checkpoint(tmp_path)
    rows = [{"prompt": f"what is {a}+{b}?", "answer": str(a + b)} for a, b in ((1, 2), (3, 4), (5, 6), (7, 1))]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "h.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    run = tmp_path / "run"
    args = ["train", "--task", "file", "--model", str(hf), "--out", str(run), "--steps", "2",
            "--reward", "rewards_for_tests:by_length",  # varies within a group: every step learns
            "--set", f"task_options.train_path={tmp_path / 't.jsonl'}",
            "--set", f"task_options.heldout_path={tmp_path / 'h.jsonl'}",
            "--set", "batch_size=2", "--set", "n=4", "--set", "max_new_tokens=6", "--set", "eval_every=0",
            "--set", f"learner={json.dumps({'lora': LORA, 'lr': 1e-2})}"]
    assert main(args) == 0
    metrics = read(run / "metrics.jsonl")
    assert [r["updated"] for r in metrics] == [1, 1] and all(r["learn_rows"] > 0 for r in metrics)
    ck = torch.load(run / "checkpoint.pt", weights_only=True)
    assert any("lora_B" in k for k in ck["model"])
    assert main(["export", "--model", str(run), "--out", str(tmp_path / "adapter"), "--adapter"]) == 0
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    trained = Policy.load(hf)
    Learner(trained, LearnerConfig(lora=LORA))  # the run's peft wrapping, then its checkpointed weights
    trained.model.load_state_dict(ck["model"])
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = trained.model.eval()(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(hf, local_files_only=True).eval()
        before = base(input_ids=ids).logits
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        got = adapted(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, before, atol=1e-3)
