"""Real data: the math-verify reward, the file task's column mapping and answer extraction, chat
templates, the no-variance warning, --reward from the current directory."""
import json

import pytest

from rollwise.run.config import load_config
from rollwise.tasks.reward import Scorer, builtin_reward

math_verify = pytest.importorskip("math_verify")


# ---- --reward math ----------------------------------------------------------------------------------

def test_math_answer_extraction():
    from rollwise.tasks._answers import extract

    text = "so \\boxed{\\frac{1}{2}} ... #### 7 and then 3, 1,234 apples"
    assert extract(text, "boxed") == "\\frac{1}{2}"
    assert extract(text, "####") == "7 and then 3, 1,234 apples"
    assert extract(text, "number") == "1,234"
    assert extract(text, "auto") == "\\frac{1}{2}"  # boxed first
    assert extract("#### 42", "auto") == "42" and extract("it is 5, not -3.5", "auto") == "-3.5"
    assert extract("\\boxed{a{b}c} then \\boxed{x^{2}}", "boxed") == "x^{2}"  # the last, braces matched
    assert extract("\\boxed{1/2", "boxed") is None and extract("no answer", "auto") is None


@pytest.mark.parametrize("how,response,answer,reward", [
    ("auto", "The answer is \\boxed{1/2}.", "0.5", 1.0),
    ("auto", "The answer is \\boxed{\\frac{1}{2}}.", "1/2", 1.0),
    ("auto", "steps...\n#### 42", "42", 1.0),
    ("auto", "she has 3 + 4 = 7 apples", "7", 1.0),
    ("auto", "\\boxed{1/3}", "0.5", 0.0),  # wrong
    ("auto", "#### 41", "42", 0.0),
    ("number", "1,234 apples", "1234", 1.0),
    ("boxed", "the answer is 42", "42", 0.0),  # no \boxed: nothing to check
    ("####", "#### 42", "42", 1.0),
    ("####", "42", "42", 0.0),
    ("auto", "}{\\boxed{\\frac{", "1", 0.0),  # garbage
    ("auto", "\\boxed{}}}}\\\\$$", "1", 0.0),
    ("auto", "\\boxed{2}", "not math at all ###", 0.0),  # a reference it cannot parse
    ("auto", "", "1", 0.0),
])
def test_math_reward_hand_cases(how, response, answer, reward):
    from rollwise.tasks import _math_reward

    spec, _ = builtin_reward("math", {"extract": how})
    assert getattr(_math_reward, spec.split(":")[1])(response, answer) == reward


def test_math_reward_runs_in_the_worker_and_never_fails():
    spec, path = builtin_reward("math", {})
    s = Scorer(spec, trusted=False, timeout_s=30, path=path, own=True)
    try:
        scores = s.judge_many([("\\boxed{1/2}", "0.5"), ("#### 42", "42"), ("\\frac{", "1"), ("7", "8"),
                               ("\x00\\boxed{" * 50, "1")])
        assert [x.reward for x in scores] == [1.0, 1.0, 0.0, 0.0, 0.0]
        assert s.errors == 0  # a parse failure is a wrong answer, not a reward error
        assert "rollwise" not in s.worker.spec  # imported as a top-level module: the worker never imports torch
    finally:
        s.close()


def test_math_reward_options_are_checked_at_load():
    assert load_config(None, {"reward": "math", "reward_options": {"extract": "####"}}).reward == "math"
    with pytest.raises(ValueError, match="reward_options.extract must be one of auto, boxed, ####, number"):
        load_config(None, {"reward": "math", "reward_options": {"extract": "last"}})
    with pytest.raises(ValueError, match="reward_options: unknown key 'strict'"):
        load_config(None, {"reward": "math", "reward_options": {"strict": True}})
    with pytest.raises(ValueError, match="only the built-in reward 'math' takes options"):
        load_config(None, {"reward": "mymod:fn", "reward_options": {"extract": "boxed"}})
    with pytest.raises(ValueError, match="'module:function' or 'math'"):
        load_config(None, {"reward": "maths"})


# ---- the file task: column mapping, answer extraction, saved datasets ---------------------------------

GSM8K_ROWS = [{"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
              {"question": "What is 6 times 7?", "answer": "6 * 7 = 42\n#### 42"}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_task_maps_columns_and_extracts_answers(tmp_path):
    from rollwise.tasks.files import FileTask

    f = _jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)
    t = FileTask(f, f, prompt_field="question", answer_field="answer", answer_extract="####")
    assert [(p.text, p.answer) for p in t.train_pool()] == [(GSM8K_ROWS[0]["question"], "7"),
                                                            (GSM8K_ROWS[1]["question"], "42")]
    b = _jsonl(tmp_path / "math.jsonl", [{"problem": "1/2 + 1/2?",
                                          "solution": "so \\boxed{\\frac{2}{2}} = \\boxed{1}"}])
    assert FileTask(b, b, prompt_field="problem", answer_field="solution",
                    answer_extract="boxed").heldout()[0].answer == "1"


NO_ANSWER = "row 1: field 'answer' has no answer after"


@pytest.mark.parametrize("rows,opts,msg", [
    ([{"question": "q", "answer": "no marker"}], {"answer_extract": "####"}, f"{NO_ANSWER} '####'"),
    ([{"question": "q", "answer": "x ####  "}], {"answer_extract": "####"}, f"{NO_ANSWER} '####'"),
    ([{"question": "q", "answer": "\\boxed{1"}], {"answer_extract": "boxed"}, f"{NO_ANSWER} '\\boxed{{...}}'"),
    ([{"prompt": "q", "answer": "1"}], {}, "row 1: missing field 'question'"),
    ([{"question": "q", "answer": "#### 1"}], {"answer_extract": "last"}, "answer_extract must be one of none, ####"),
])
def test_file_task_mapping_errors_name_file_row_field(tmp_path, rows, opts, msg):
    from rollwise.tasks.files import FileTask

    f = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError) as e:
        FileTask(f, f, prompt_field="question", **opts)
    assert msg in str(e.value)


def test_file_task_reads_a_saved_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    from rollwise.tasks.files import FileTask

    d = datasets.DatasetDict({"train": datasets.Dataset.from_list(GSM8K_ROWS),
                              "test": datasets.Dataset.from_list(GSM8K_ROWS[:1])})
    d.save_to_disk(str(tmp_path / "gsm8k"))
    t = FileTask(str(tmp_path / "gsm8k" / "train"), str(tmp_path / "gsm8k" / "test"), prompt_field="question",
                 answer_extract="####")
    # the held-out row is also a train row: it leaves the RL pool, and a note counts it
    assert [p.answer for p in t.train_pool()] == ["42"] and len(t.heldout()) == 1
    assert [p.id for p in t.train_pool()] == [0] and "1 train row(s)" in t.notes()[0]
    with pytest.raises(ValueError, match="holds the splits train, test; name one split's directory"):
        FileTask(str(tmp_path / "gsm8k"), str(tmp_path / "gsm8k"), prompt_field="question")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: not a dataset saved with save_to_disk"):
        FileTask(str(tmp_path / "empty"), str(tmp_path / "empty"))
    datasets.Dataset.from_list([{"question": "q", "answer": None}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="bad: row 1: missing field 'answer'"):
        FileTask(str(tmp_path / "bad"), str(tmp_path / "bad"), prompt_field="question")


# ---- chat templates ---------------------------------------------------------------------------------

# a template in the tiny alphabet (lowercase letters, ':' and spaces), so the char tokenizer can encode it
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")


def chat_llama(path, template=TEMPLATE):
    """A small Llama over the char tokenizer, saved locally with a chat template."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    tok.chat_template = template
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_file_task_prompts_go_through_the_chat_template(tmp_path):
    from rollwise.policy.tokenizer import char_tokenizer
    from rollwise.tasks.files import FileTask

    f = _jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    tok = char_tokenizer()
    plain = FileTask(f, f, system_prompt=None)
    plain.use_tokenizer(tok)  # no template (the tiny model): unchanged
    assert plain.train_pool()[0].text == "1+1="
    with pytest.raises(ValueError, match="system_prompt: set, but the model's tokenizer has no chat template"):
        FileTask(f, f, system_prompt="be brief").use_tokenizer(tok)
    tok.chat_template = TEMPLATE
    t = FileTask(f, f, system_prompt="be brief")
    t.use_tokenizer(tok)
    t.use_tokenizer(tok)  # once only
    assert t.train_pool()[0].text == t.heldout()[0].text == "system: be brief user: 1+1= assistant: "
    off = FileTask(f, f, chat_template=False)
    off.use_tokenizer(tok)
    assert off.train_pool()[0].text == "1+1="
    with pytest.raises(ValueError, match="system_prompt: set, but chat_template is false"):
        FileTask(f, f, chat_template=False, system_prompt="x").use_tokenizer(tok)
    tok.chat_template = "{{ raise_exception('no system role') }}"
    with pytest.raises(ValueError, match=r"t.jsonl: row 1: the chat template failed on it .*no system role"):
        FileTask(f, f).use_tokenizer(tok)


def test_trainer_samples_from_the_templated_prompt(tmp_path):
    from rollwise.run.loop import Trainer

    model = chat_llama(tmp_path / "llama")
    f = _jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+3=", "answer": "5"}])
    opts = {"train_path": f, "heldout_path": f, "system_prompt": "add"}
    cfg = load_config(None, {"task": "file", "task_options": opts, "model": model, "out": str(tmp_path / "r"),
                             "steps": 1, "batch_size": 2, "n": 2, "max_new_tokens": 4, "eval_every": 0})
    tr = Trainer(cfg, log=lambda *a: None)
    assert [p.text for p in tr.pool] == ["system: add user: 1+1= assistant: ", "system: add user: 2+3= assistant: "]
    seen, submit = [], tr.engine.submit
    tr.engine.submit = lambda reqs, *a, **k: seen.extend(r.prompt.text for r in reqs) or submit(reqs, *a, **k)
    tr.run()
    assert seen and all(s.startswith("system: add user: ") for s in seen)
    cfg.task_options["system_prompt"] = "Add"  # 'A' is outside the char vocabulary: the templated row is checked
    cfg.out = str(tmp_path / "r2")
    with pytest.raises(ValueError, match=r"t.jsonl: row 1: the prompt has text outside the model's vocabulary"):
        Trainer(cfg, log=lambda *a: None)


# ---- the no-variance warning; --reward from the current directory -------------------------------------

def _file_run(tmp_path, model, **over):
    f = _jsonl(tmp_path / "t.jsonl", [{"prompt": f"{i}+1=", "answer": "zzzz"} for i in range(4)])
    return load_config(None, {"task": "file", "task_options": {"train_path": f, "heldout_path": f}, "model": model,
                              "steps": 2, "batch_size": 4, "n": 2, "max_new_tokens": 4, "eval_every": 0, **over})


def test_warns_once_when_no_group_has_reward_variance(tmp_path, monkeypatch):
    from rollwise.run.loop import Trainer

    model = chat_llama(tmp_path / "llama")
    logs = []
    Trainer(_file_run(tmp_path, model, out=str(tmp_path / "none")), log=logs.append).run()
    warnings = [m for m in logs if "equal rewards" in m]
    assert warnings == ["warning: step 1: 4 of 4 groups had equal rewards (4 all wrong, 0 all right): nothing to "
                        "learn; the model solves none of these prompts"]
    (tmp_path / "always_right.py").write_text("def reward(response, answer):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)  # the reward module is in the current directory only
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    logs.clear()
    Trainer(_file_run(tmp_path, model, out=str(tmp_path / "all"), reward="always_right:reward"),
            log=logs.append).run()
    assert [m for m in logs if "equal rewards" in m] == [
        "warning: step 1: 4 of 4 groups had equal rewards (0 all wrong, 4 all right): nothing to learn; the model "
        "solves all of these prompts"]


def test_no_warning_when_groups_vary(tmp_path, monkeypatch):
    from rollwise.run.loop import Trainer

    (tmp_path / "first_char.py").write_text("def reward(response, answer):\n    return float(response[:1] < 'm')\n")
    monkeypatch.chdir(tmp_path)
    logs = []
    rows = Trainer(_file_run(tmp_path, chat_llama(tmp_path / "llama"), out=str(tmp_path / "r"), n=4,
                             reward="first_char:reward"), log=logs.append).run()
    assert rows[0]["zero_var_frac_gen"] < 0.9 and not [m for m in logs if "equal rewards" in m]


def test_no_warning_when_the_trained_groups_vary_though_the_last_generated_do_not(tmp_path, monkeypatch):
    """speed-rl at n = 2 continues each qualified prompt with one row (n_cont = max(1, n - n_init)): the groups
    generated last are single rows, equal by definition, while the trained groups (screen + continuation)
    vary. The warning reads the trained groups, so it stays silent."""
    from rollwise.run.loop import Trainer

    (tmp_path / "first_char.py").write_text("def reward(response, answer):\n    return float(response[:1] < 'm')\n")
    monkeypatch.chdir(tmp_path)
    logs = []
    rows = Trainer(_file_run(tmp_path, chat_llama(tmp_path / "llama"), out=str(tmp_path / "r"), planner="speed-rl",
                             reward="first_char:reward", steps=1), log=logs.append).run()
    assert rows[0]["zero_var_frac_gen"] == 1.0 and rows[0]["zero_var_frac"] < 0.9  # the case this test is about
    assert not [m for m in logs if "equal rewards" in m]


# ---- loggers ----------------------------------------------------------------------------------------

def test_tensorboard_and_wandb_loggers_hold_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rollwise.cli import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # wandb's caches and settings stay in the test's directory
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    model = chat_llama(tmp_path / "llama")
    f = _jsonl(tmp_path / "t.jsonl", [{"prompt": f"{i}+1=", "answer": "2"} for i in range(4)])
    out = tmp_path / "run"
    assert main(["train", "--task", "file", "--model", model, "--out", str(out), "--steps", "2",
                 "--logger", "jsonl,tensorboard,wandb", "--set", f"task_options={{train_path: {f}, heldout_path: {f}}}",
                 "--set", "batch_size=2", "--set", "n=2", "--set", "max_new_tokens=3", "--set", "eval_every=1"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    ea = EventAccumulator(str(out / "tensorboard"))
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("reward_mean")] == [(r["step"], pytest.approx(r["reward_mean"]))
                                                                      for r in rows[1:]]
    assert [e.step for e in ea.Scalars("eval_acc")] == [0, 1, 2]
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    history = wandb_history(next(runs[0].glob("run-*.wandb")))
    assert [h["_step"] for h in history] == [0, 1, 2] and history[0]["eval_acc"] == rows[0]["eval_acc"]
    assert [h["reward_mean"] for h in history[1:]] == [pytest.approx(r["reward_mean"]) for r in rows[1:]]


def wandb_history(path) -> list[dict]:
    """The history rows of an offline W&B run file: protobuf records in LevelDB-log framing (a 7-byte file
    header, then 32 KiB blocks of chunks: crc32 (4), length (2), type (1: full, 2: first, 3: middle,
    4: last)). wandb 0.31 has no Python reader of its own."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, rows = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, n, kind = struct.unpack("<IHB", data[pos: pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # the rest of the block is padding
            pos += left
            continue
        buf, pos = buf + data[pos + 7: pos + 7 + n], pos + 7 + n
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            if record.WhichOneof("record_type") == "history":
                rows.append({"".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item})
            buf = b""
    return rows


def test_a_logger_without_its_package_is_refused_at_load(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"loggers: wandb needs the wandb package: pip install 'rollwise\[logging\]'"):
        load_config(None, {"loggers": ["jsonl", "wandb"]})
    with pytest.raises(ValueError, match="loggers: unknown logger 'mlflow'; known: jsonl, tensorboard, wandb"):
        load_config(None, {"loggers": ["mlflow"]})
    assert load_config(None, {"loggers": ["tensorboard"]}).loggers == ["tensorboard"]


def test_eval_scores_with_the_runs_reward(tmp_path, monkeypatch, capsys):
    from rollwise.cli import main

    (tmp_path / "always_right.py").write_text("def reward(response, answer):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)
    f = _jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": "zzz"}])
    args = ["eval", "--model", chat_llama(tmp_path / "llama"), "--set", "task=file", "--set", "max_new_tokens=3",
            "--set", f"task_options={{train_path: {f}, heldout_path: {f}}}"]
    assert main(args) == 0 and json.loads(capsys.readouterr().out)["eval_acc"] == 0.0  # the task's exact match
    assert main(args + ["--reward", "always_right:reward"]) == 0
    assert json.loads(capsys.readouterr().out)["eval_acc"] == 1.0


def test_a_run_with_reward_math(tmp_path):
    from rollwise.run.loop import Trainer

    f = _jsonl(tmp_path / "t.jsonl", [{"question": f"{i}+1=", "answer": f"so #### {i + 1}"} for i in range(4)])
    opts = {"train_path": f, "heldout_path": f, "prompt_field": "question", "answer_extract": "####"}
    cfg = load_config(None, {"task": "file", "task_options": opts, "model": chat_llama(tmp_path / "llama"),
                             "reward": "math", "reward_options": {"extract": "number"}, "out": str(tmp_path / "r"),
                             "steps": 1, "batch_size": 4, "n": 2, "max_new_tokens": 3, "eval_every": 1})
    tr = Trainer(cfg, log=lambda *a: None)
    assert "_math_reward:number" == tr.scorer.worker.spec and [p.answer for p in tr.pool] == ["1", "2", "3", "4"]
    rows = tr.run()
    assert rows[-1]["reward_errors"] == 0 and rows[-1]["rollouts"] == 8 and "eval_acc" in rows[-1]
