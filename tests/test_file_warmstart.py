"""A supervised warm start for a file task: the tiny model on the user's own data, on a CPU."""
import json
import shutil

import pytest
import torch

from rollwise.cli import main
from rollwise.core import registry
from rollwise.policy.policy import Policy
from rollwise.policy.tiny import TinyConfig, TinyGPT
from rollwise.policy.tokenizer import CHARS, char_tokenizer
from rollwise.policy.warmstart import (SHIPPED, WarmStartConfig, base_alphabet, build_base, fingerprint,
                                       shipped_base)
from rollwise.run.config import load_config
from rollwise.tasks.files import FileTask

TINY = ["--set", "warmstart.steps=30", "--set", "warmstart.n_layer=1", "--set", "warmstart.n_embd=32",
        "--set", "warmstart.n_head=2"]
TRAIN = [{"prompt": "Say hi to Bob:", "answer": "Hi Bob"},
         {"prompt": "Say hi to Ann:", "answer": "Hi Ann"},
         {"prompt": "Two lines:\nok?", "answer": "Yes\nok"},
         {"prompt": "what is 1+1?", "answer": "2"}]
HELDOUT = [{"prompt": "what is 1+1?", "answer": "2"},  # also a train row: never a supervised target
           {"prompt": "Say hi to Cid:", "answer": "Hi Cid"}]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def files(tmp_path):
    return write(tmp_path / "t.jsonl", TRAIN), write(tmp_path / "h.jsonl", HELDOUT)


def test_sft_examples_are_seeded_and_never_a_heldout_prompt(files):
    task = FileTask(*files)
    a, b = task.sft_examples(64, seed=3), task.sft_examples(64, seed=3)
    assert a == b and a != task.sft_examples(64, seed=4)
    heldout = {p.text for p in task.heldout()}
    assert {t for t, _, _ in a} == {r["prompt"] for r in TRAIN} - heldout  # every kept row, none held out
    assert ("Two lines:\nok?", "Yes\nok", -1) in a
    notes = task.sft_notes()
    assert any("sft_path is not set" in n and "3 supervised rows" in n for n in notes)
    assert any(n.startswith("1 supervised row(s) dropped") for n in notes)


def test_sft_path_and_response_field(tmp_path, files):
    sft = write(tmp_path / "s.jsonl", [{"prompt": "Say hi to Eve:", "answer": "x", "solution": "Hi Eve!"},
                                       {"prompt": "Say hi to Cid:", "answer": "x", "solution": "Hi Cid!"}])
    task = FileTask(*files, sft_path=sft, sft_response_field="solution")
    assert task.sft_rows() == [("Say hi to Eve:", "Hi Eve!", -1)]  # the held-out prompt is dropped
    assert task.sft_notes() == ["1 supervised row(s) dropped: their prompt is a held-out prompt"]
    assert "!" in task.alphabet()  # the supervised targets' characters are in the alphabet
    bad = write(tmp_path / "b.jsonl", [{"prompt": "p", "solution": "s"}, {"prompt": "q"}])
    with pytest.raises(ValueError, match=r"b.jsonl: row 2: missing field 'solution'"):
        FileTask(*files, sft_path=bad, sft_response_field="solution").sft_rows()
    with pytest.raises(ValueError, match=r"b.jsonl: row 1: missing field 'answer'"):
        FileTask(*files, sft_path=bad).sft_rows()


def test_fingerprint_follows_the_rows_not_the_paths(tmp_path, files):
    cfg = WarmStartConfig()
    key = fingerprint(FileTask(*files), cfg)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    copies = [shutil.copy(f, moved) for f in files]
    assert fingerprint(FileTask(*copies), cfg) == key  # another path (and mtime), the same rows
    write(tmp_path / "t.jsonl", TRAIN[:1] + [{"prompt": "Say hi to Ann:", "answer": "Hi ann"}] + TRAIN[2:])
    assert fingerprint(FileTask(*files), cfg) != key  # one target changed
    assert fingerprint(FileTask(*copies, sft_response_field="prompt"), cfg) != key  # another target column
    assert fingerprint(FileTask(*copies), WarmStartConfig(extra_chars="#")) != key


def test_the_shipped_bases_are_still_found_and_their_tokenizer_is_unchanged():
    for name in ("arithmetic", "chain"):
        cfg = load_config(None, {"task": name})
        task = registry.get("task", name).obj()
        assert shipped_base(fingerprint(task, cfg.warmstart)) == SHIPPED / name
        assert base_alphabet(task, cfg.warmstart) == CHARS
        shipped = Policy.load(SHIPPED / name).tokenizer
        assert char_tokenizer(base_alphabet(task, cfg.warmstart)).get_vocab() == shipped.get_vocab()


def test_the_alphabet_grows_with_the_data_and_keeps_the_default_ids(files):
    task = FileTask(*files)
    chars = base_alphabet(task, WarmStartConfig(extra_chars="#"))
    assert chars == CHARS + "\n#ABCHSTY"  # the data's capitals and newline and the extra, sorted, after CHARS
    tok, default = char_tokenizer(chars), char_tokenizer()
    assert all(tok.convert_tokens_to_ids(c) == default.convert_tokens_to_ids(c) for c in CHARS)
    ids = tok("Hi\n\nBob", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7 and tok.unk_token_id not in ids and tok.decode(ids) == "Hi\n\nBob"  # one per character
    assert ids[2] == ids[3] == tok.convert_tokens_to_ids("\n")
    small = TinyGPT(TinyConfig(vocab_size=len(default), n_layer=1, n_head=1, n_embd=8, block_size=16))
    with pytest.raises(ValueError, match=r"outside the tiny model's vocabulary: \['\\n', 'H'\]"):
        Policy(small, default, "tiny").encode("Hi\n\nyou")


def test_a_row_longer_than_the_context_names_file_row_and_lengths(tmp_path, files, capsys):
    write(tmp_path / "t.jsonl", TRAIN + [{"prompt": "Say hi to everyone here:", "answer": "Hi everyone"}])
    rc = main(["warmstart", "--task", "file", "--set", f"task_options.train_path={files[0]}",
               "--set", f"task_options.heldout_path={files[1]}", *TINY, "--set", "warmstart.block_size=30",
               "--out", str(tmp_path / "base")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "t.jsonl: row 5: prompt 24 + response 11 + EOS = 36 tokens, more than the base's context " \
           "warmstart.block_size=30" in err and "--set warmstart.block_size=36" in err


def test_warm_start_then_train_on_a_file(tmp_path, files, cache_dir, monkeypatch, capsys):
    monkeypatch.setattr(FileTask, "report_pool_size", 2)  # the report samples the train pool
    torch.set_num_threads(1)
    data = ["--set", f"task_options.train_path={files[0]}", "--set", f"task_options.heldout_path={files[1]}"]
    base = tmp_path / "base"
    assert main(["warmstart", "--task", "file", *data, *TINY, "--out", str(base)]) == 0
    out = capsys.readouterr().out
    assert "sft_path is not set" in out and "1 supervised row(s) dropped" in out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["base"] == str(base) and report["pool_prompts"] == 2 and not report["shipped"]
    vocab = json.loads((base / "tokenizer.json").read_text())["model"]["vocab"]
    assert {"H", "B", "\n"} <= set(vocab)
    run = ["train", "--task", "file", *data, "--steps", "2", "--set", "batch_size=2", "--set", "n=2",
           "--set", "eval_every=2"]
    assert main(run + ["--model", str(base), "--out", str(tmp_path / "run")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval_acc" in r] == [0, 2] and any(r.get("tokens") for r in rows)
    # without --model: the file task's base is built once into the cache, as the arithmetic task's is
    assert main(run + TINY + ["--out", str(tmp_path / "run2")]) == 0
    assert "building the base checkpoint" in capsys.readouterr().out
    built = [d for d in cache_dir.iterdir() if (d / "report.json").exists()
             and json.loads((d / "build.json").read_text())["task"] == "file"]
    assert len(built) == 1 and (tmp_path / "run2" / "metrics.jsonl").exists()
    assert main(run + TINY + ["--out", str(tmp_path / "run3")]) == 0
    assert "building the base checkpoint" not in capsys.readouterr().out
