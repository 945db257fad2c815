"""`rollwise export`: a trained tiny policy becomes a GPT-2 checkpoint that plain `transformers` loads and
that computes the same function."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollwise.cli import main
from rollwise.core.types import Request, SamplingParams
from rollwise.generate.engine import run_sync
from rollwise.generate.torch_engine import TorchEngine
from rollwise.policy.policy import Policy
from rollwise.tasks.arithmetic import ArithmeticTask

SHIPPED = "src/rollwise/assets/bases/arithmetic"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """Two RL steps from the shipped base: weights that differ from any file in the repo."""
    out = tmp_path_factory.mktemp("run") / "r"
    assert main(["train", "--steps", "2", "--out", str(out), "--set", "eval_every=0",
                 "--set", "batch_size=8"]) == 0
    return out


def test_export_of_a_run_loads_with_from_pretrained_and_matches_logits(trained_run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", "--model", str(trained_run), "--out", str(out)]) == 0
    assert "from_pretrained" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt2"
    hf = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    policy = Policy.load(trained_run / "model")
    assert not torch.equal(policy.model.head.weight, Policy.load(SHIPPED).model.head.weight)  # trained
    prompts = [p.text for p in ArithmeticTask().heldout()[:32]]
    for text in prompts[:8]:
        assert tok(text, add_special_tokens=False)["input_ids"] == policy.encode(text)
    seqs = [policy.encode(t) for t in prompts]
    ids, mask = policy._right_padded(seqs)
    with torch.no_grad():
        ours = policy.full_logits(ids, mask)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-4), (ours[real] - theirs[real]).abs().max()


def test_exported_model_generates_what_rollwise_generates(trained_run, tmp_path):
    """Greedy answers from `transformers.generate` on the export equal rollwise's engine on the original."""
    out = tmp_path / "hf"
    main(["export", "--model", str(trained_run / "model"), "--out", str(out)])
    hf = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).eval()
    policy = Policy.load(trained_run / "model")
    prompts = ArithmeticTask().heldout()[:12]
    res = run_sync(TorchEngine(policy, seed=0, max_new_tokens=8),
                   [Request(p, 1, "eval", SamplingParams(temperature=0.0), id=i) for i, p in enumerate(prompts)])
    for e, p in zip(res, prompts):
        ids = torch.tensor([policy.encode(p.text)])
        with torch.no_grad():
            g = hf.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=policy.eos_id,
                            pad_token_id=policy.pad_id)
        assert policy.decode(g[0, ids.shape[1]:].tolist()) == e.group.rollouts[0].text


def test_export_loads_back_as_a_rollwise_model(tmp_path):
    """The export is an ordinary Hugging Face checkpoint to rollwise too (`--model DIR`)."""
    out = tmp_path / "hf"
    main(["export", "--model", SHIPPED, "--out", str(out)])
    back = Policy.load(out)
    assert back.kind == "hf" and back.encode("1+2=") == Policy.load(SHIPPED).encode("1+2=")


def test_export_refuses_to_overwrite_and_names_a_bad_source(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", "--model", SHIPPED, "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err and (out / "keep.txt").read_text() == "mine"
    assert main(["export", "--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "new")]) == 2
    assert "not a checkpoint directory" in capsys.readouterr().err
