"""The llama warm start (`warmstart.arch: llama`): the same supervised loop builds a Hugging Face
LlamaForCausalLM base over the character tokenizer, saved as a standard HF checkpoint that `rollwise train
--model DIR` and `from_pretrained` load (issue 25, item 9: does a result transfer to a second model family)."""
import json

import pytest
import torch

from rollwise.policy.policy import Policy
from rollwise.policy.warmstart import SHIPPED, WarmStartConfig, build_base, fingerprint, llama_intermediate
from rollwise.tasks.arithmetic import ArithmeticTask
from rollwise.tasks.remainder import RemainderTask

# Tiny dims and a few steps: what is checked is the plumbing, not the base's accuracy.
TINY_LLAMA = dict(arch="llama", n_layer=1, n_head=2, n_embd=16, steps=3, batch_size=4, warmup=1)
CASES = {
    "remainder": (lambda: RemainderTask(pool_size=4, validation_size=4, test_size=2),
                  dict(TINY_LLAMA, block_size=256)),
    "arithmetic": (lambda: ArithmeticTask(pool_size=8, heldout_size=8), dict(TINY_LLAMA, block_size=64)),
}


@pytest.fixture(scope="module")
def llama_bases(tmp_path_factory):
    out = {}
    for name, (make_task, ws) in CASES.items():
        path = tmp_path_factory.mktemp("llama") / name
        report = build_base(make_task(), WarmStartConfig(**ws), path, log=lambda m: None)
        out[name] = path, report
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_a_llama_base_is_a_standard_hf_checkpoint(llama_bases, name):
    from transformers import AutoTokenizer, LlamaForCausalLM

    from rollwise.policy.tokenizer import char_tokenizer

    path, report = llama_bases[name]
    make_task, ws = CASES[name]
    cfg = WarmStartConfig(**ws)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["max_position_embeddings"] == ws["block_size"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (16, 1, 2)
    assert config["intermediate_size"] == 64  # 2/3 of 4 x 16 = 42.7, rounded up to a multiple of 32
    build = json.loads((path / "build.json").read_text())
    assert build["warmstart"]["arch"] == "llama" and build["fingerprint"] == fingerprint(make_task(), cfg)
    assert 0.0 <= report["eval_acc"] <= 1.0 and (path / "report.json").exists()
    # transformers alone reads it back: the weights the policy loads, and the character tokenizer
    model = LlamaForCausalLM.from_pretrained(str(path), local_files_only=True)
    policy = Policy.load(path)
    assert policy.kind == "hf" and policy.max_positions == ws["block_size"]
    theirs, ours = model.state_dict(), policy.model.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    text = make_task().heldout()[0].text
    assert tok(text, add_special_tokens=False)["input_ids"] == char_tokenizer()(text, add_special_tokens=False)["input_ids"]
    assert tok.eos_token_id == policy.eos_id == model.config.eos_token_id
    # the warm start trained it: the weights are not the seeded initialisation's
    torch.manual_seed(cfg.seed)
    from rollwise.policy.warmstart import new_policy

    init = new_policy(cfg, char_tokenizer()).model.state_dict()
    assert any(not torch.equal(init[k], ours[k]) for k in ours)


def test_engine_logprobs_are_the_learners_on_a_llama_base(llama_bases):
    from test_engine_policy import check_engine

    policy = Policy.load(llama_bases["arithmetic"][0])
    policy.model.eval()
    check_engine(policy)  # sampled log-probs (KV cache, left padding) == the learner's full pass


def test_rollwise_train_runs_two_steps_on_a_llama_base(llama_bases, tmp_path):
    from rollwise.cli import main

    path = llama_bases["remainder"][0]
    out = tmp_path / "run"
    assert main(["train", "--task", "remainder", "--model", str(path), "--out", str(out), "--steps", "2",
                 "--set", "task_options={pool_size: 4, validation_size: 4, test_size: 2}", "--set", "batch_size=2",
                 "--set", "n=2", "--set", "max_new_tokens=12", "--set", "eval_every=2"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval_acc" in rows[-1]
    assert Policy.load(out / "model").kind == "hf"  # the trained policy is saved as the same HF checkpoint


def test_llama_defaults_and_the_tiny_fingerprint():
    """The llama default is llama2.c's stories15M shape (about 6.0M parameters over the character
    vocabulary); `arch` enters the fingerprint only when it is not tiny, so the shipped bases are found."""
    from rollwise.policy.tokenizer import char_tokenizer
    from rollwise.policy.warmstart import new_policy, shipped_base
    from rollwise.run.config import load_config

    llama = load_config(None, {"task": "remainder", "warmstart.arch": "llama"}).warmstart
    assert (llama.n_layer, llama.n_head, llama.n_embd, llama.block_size, llama.steps) == (6, 6, 288, 256, 1500)
    assert llama_intermediate(288) == 768 and llama_intermediate(256) == 704
    with torch.device("meta"):  # counted without allocating or initialising the weights
        n = sum(p.numel() for p in new_policy(llama, char_tokenizer()).model.parameters())
    assert 5_000_000 < n < 20_000_000
    tiny = load_config(None, {"task": "remainder"}).warmstart
    assert (tiny.arch, tiny.n_layer, tiny.n_head, tiny.n_embd) == ("tiny", 4, 4, 128)
    build = json.loads((SHIPPED / "remainder" / "build.json").read_text())
    assert "arch" not in build["warmstart"] and fingerprint(RemainderTask(), tiny) == build["fingerprint"]
    assert shipped_base(fingerprint(RemainderTask(), tiny)) == SHIPPED / "remainder"
    assert fingerprint(RemainderTask(), llama) != fingerprint(RemainderTask(), WarmStartConfig(
        **{**vars(llama), "arch": "tiny"}))  # same dims, other family: another base


def test_the_shipped_llama_base_is_found_by_its_settings_and_loads_as_a_llama():
    """The testbed's Llama base (issue 25's second model family) ships, so a plan that sets
    `warmstart.arch: llama` finds it without the hour-long warm start; it is a standard HF Llama checkpoint
    of the default shape, and its recorded report is the base the Llama plans start from."""
    from transformers import LlamaForCausalLM

    from rollwise.policy.warmstart import base_checkpoint
    from rollwise.run.config import load_config

    llama = load_config(None, {"task": "remainder", "warmstart.arch": "llama"}).warmstart
    built = []
    path = base_checkpoint(RemainderTask(), llama, log=built.append)
    assert path == SHIPPED / "remainder-llama" and built == []  # found, nothing built
    build = json.loads((path / "build.json").read_text())
    assert build["warmstart"]["arch"] == "llama" and build["fingerprint"] == fingerprint(RemainderTask(), llama)
    policy = Policy.load(path)
    assert policy.kind == "hf" and isinstance(policy.model, LlamaForCausalLM)
    assert sum(p.numel() for p in policy.model.parameters()) == 6_004_512
    report = json.loads((path / "report.json").read_text())
    assert report["eval_acc"] == pytest.approx(0.855) and report["pool_mixed"] == pytest.approx(0.855)


@pytest.mark.parametrize("sets, error", [
    ({"warmstart.arch": "gpt"}, "warmstart.arch must be one of tiny, llama, got 'gpt'"),
    ({"warmstart.arch": ["llama"]}, "warmstart.arch must be a string, got \\['llama'\\]"),
    ({"warmstart.arch": "llama", "warmstart.n_embd": 30, "warmstart.n_head": 6},
     "warmstart.n_embd / warmstart.n_head must be even for arch llama"),
])
def test_bad_arch_is_a_one_line_error(sets, error, capsys):
    from rollwise.cli import main
    from rollwise.run.config import load_config

    with pytest.raises(ValueError, match=error):
        load_config(None, sets)
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    assert main(["warmstart", "--task", "arithmetic", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollwise: error: warmstart.") and "\n" not in err
