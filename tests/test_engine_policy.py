import torch
import pytest

from rollwise.core.types import Prompt, Request, SamplingParams
from rollwise.generate.engine import run_sync
from rollwise.generate.torch_engine import TorchEngine
from rollwise.policy.policy import Policy
from rollwise.policy.tiny import TinyConfig, TinyGPT
from rollwise.policy.tokenizer import char_tokenizer


def tiny_policy(seed=0):
    torch.manual_seed(seed)
    tok = char_tokenizer()
    p = Policy(TinyGPT(TinyConfig(vocab_size=len(tok), n_layer=2, n_embd=32, n_head=2)), tok, "tiny")
    p.model.eval()
    return p


def no_eos(pol):
    """A policy that never emits EOS (its logit is -inf in the sampler's and the learner's forward), so
    rows run to their length limits."""
    forward, full = pol.forward, pol.full_logits

    def masked(*a, **k):
        logits, cache, *hidden = forward(*a, **k)
        logits = logits.clone()
        logits[..., pol.eos_id] = float("-inf")
        return (logits, cache, *hidden)

    def masked_full(ids, mask, output_hidden=False):
        out = full(ids, mask, output_hidden)
        logits = (out[0] if output_hidden else out).clone()
        logits[..., pol.eos_id] = -1e9  # finite: the learner's entropy multiplies exp(logp) by logp
        return (logits, out[1]) if output_hidden else logits

    pol.forward, pol.full_logits = masked, masked_full
    return pol


def hf_checkpoint(tmp_path):
    """A small Llama built from transformers classes, with the char tokenizer, saved locally."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    return tmp_path / "hf"


PROMPTS = [Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350"), Prompt(2, "7=", "7")]


def generate(engine, requests):
    """Synchronous generation through the Engine protocol: (rollouts per request, prompt tokens prefilled)."""
    for i, r in enumerate(requests):
        r.id = i
    events = run_sync(engine, requests)
    return [e.group.rollouts for e in events], sum(e.prompt_tokens for e in events)


def check_engine(pol):
    eng = TorchEngine(pol, temperature=1.0, max_new_tokens=6, seed=1)
    res, prefilled = generate(eng, [Request(PROMPTS[0], 3), Request(PROMPTS[1], 1), Request(PROMPTS[2], 5)])
    assert [len(g) for g in res] == [3, 1, 5]  # n varies across prompts in one call
    assert prefilled == 5 + 8 + 2  # each distinct prompt is prefilled once
    rows = [r for g in res for r in g]
    for r in rows:
        assert 0 < r.num_tokens <= 6 and r.logprobs_T.shape == r.token_ids_T.shape
        assert (r.logprobs_T <= 0).all()
        assert (r.finish_reason == "eos") == (r.token_ids_T[-1].item() == pol.eos_id)
        assert pol.eos_id not in r.token_ids_T[:-1].tolist()  # sampling stops at EOS
    # the behaviour log-probs are the learner's log-probs (left-padded cache vs right-padded full pass)
    lp, _, mask = pol.response_logprobs([r.prompt_ids for r in rows], [r.token_ids_T.tolist() for r in rows])
    mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in rows], batch_first=True)
    assert torch.allclose(lp * mask, mu, atol=1e-4)
    # same seed, same samples
    res2, _ = generate(TorchEngine(pol, temperature=1.0, max_new_tokens=6, seed=1),
        [Request(PROMPTS[0], 3), Request(PROMPTS[1], 1), Request(PROMPTS[2], 5)])
    assert [r.token_ids_T.tolist() for g in res2 for r in g] == [r.token_ids_T.tolist() for r in rows]


def test_tiny_engine_samples_with_correct_logprobs():
    check_engine(tiny_policy())


def test_local_hf_checkpoint_runs_engine_and_learner(tmp_path):
    from rollwise.core.types import Batch, Group
    from rollwise.learn.learner import Learner, LearnerConfig

    pol = Policy.load(hf_checkpoint(tmp_path))
    assert pol.kind == "hf"
    pol.model.eval()
    check_engine(pol)
    res, _ = generate(TorchEngine(pol, max_new_tokens=5, seed=3), [Request(PROMPTS[0], 4)])
    for i, r in enumerate(res[0]):
        r.reward, r.correct = float(i % 2), bool(i % 2)
    before = [p.detach().clone() for p in pol.model.parameters()]
    stats = Learner(pol, LearnerConfig(lr=1e-2, minibatches=1)).update(Batch([Group(PROMPTS[0], res[0])]))
    assert stats["updated"] == 1 and pol.version == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, pol.model.parameters()))


def test_finished_rows_leave_the_running_batch():
    pol = tiny_policy()
    sizes = []
    fwd = pol.forward

    def spy(ids, mask, pos, cache=None):
        sizes.append(ids.shape[0])
        return fwd(ids, mask, pos, cache)

    pol.forward = spy
    eng = TorchEngine(pol, temperature=1.0, max_new_tokens=12, seed=0)
    # Make EOS likely so rows finish at different times.
    with torch.no_grad():
        pol.model.head.weight[pol.eos_id] += 0.05 * pol.model.head.weight.norm(dim=1).mean()
    res, _ = generate(eng, [Request(PROMPTS[0], 16)])
    lengths = sorted(r.num_tokens for r in res[0])
    assert lengths[0] < lengths[-1], "need rows of different lengths for this test"
    assert sizes[0] == 1  # the one distinct prompt is prefilled once, then repeated 16 times
    decode_sizes = sizes[1:]
    # decode call t (t = 1, 2, ...) runs exactly the rows that have not finished: those longer than t
    assert decode_sizes == [sum(L > t for L in lengths) for t in range(1, lengths[-1])]
    assert decode_sizes[-1] < 16


def test_greedy_and_top_p_small_are_argmax():
    pol = tiny_policy()
    g1, _ = generate(TorchEngine(pol, temperature=0.0, max_new_tokens=5), [Request(PROMPTS[0], 2)])
    g2, _ = generate(TorchEngine(pol, temperature=1.0, top_p=1e-6, max_new_tokens=5, seed=7), [Request(PROMPTS[0], 2)])
    g3, _ = generate(TorchEngine(pol, temperature=1.0, max_new_tokens=5, seed=7),
                     [Request(PROMPTS[0], 2, sampling=SamplingParams(temperature=0.0))])  # greedy by request
    assert g1[0][0].token_ids_T.tolist() == g1[0][1].token_ids_T.tolist() == g2[0][0].token_ids_T.tolist()
    assert g3[0][0].token_ids_T.tolist() == g1[0][0].token_ids_T.tolist()


def test_checkpoint_dir_roundtrip_and_vocab_error(tmp_path):
    pol = tiny_policy()
    pol.save(tmp_path / "ck")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (tmp_path / "ck" / f).exists()
    p2 = Policy.load(tmp_path / "ck")
    ids = torch.tensor([pol.encode("12+3=")])
    assert torch.equal(pol.model(ids)[0], p2.model(ids)[0])
    with pytest.raises(ValueError, match="outside the tiny model's vocabulary"):
        p2.encode("12+3=Z")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Policy.load(tmp_path)
