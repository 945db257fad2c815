"""Train / validation / test splits by a data seed (tasks/_splits.py) for the embedded tasks and file tasks."""
import hashlib
import json
from pathlib import Path

import pytest

from rollwise.policy.warmstart import WarmStartConfig, fingerprint
from rollwise.tasks._splits import carve
from rollwise.tasks.arithmetic import ArithmeticTask
from rollwise.tasks.chain import ChainTask
from rollwise.tasks.files import FileTask

BASES = Path(__file__).resolve().parent.parent / "src" / "rollwise" / "assets" / "bases"


def digest(prompts) -> str:
    return hashlib.sha256(json.dumps([[p.id, p.text, p.answer, p.level] for p in prompts]).encode()).hexdigest()[:16]


# Digests of the prompts the tasks gave before splits existed (computed at commit 4f1b348): without a data
# seed they must not move, or no recorded run would rerun as recorded.
BEFORE = {
    ("arithmetic", ()): ("4e51595f91cc0400", "673fbc6b9539a73d"),
    ("arithmetic", (("seed", 3), ("level_weights", (4, 4, 2, 1, 0.5, 0.5)))): ("02b88bd78689ab8f", "6b99615066079705"),
    ("chain", ()): ("81459e342ab1c859", "651da65964dddcc2"),
    ("chain", (("seed", 1), ("pool_size", 300))): ("b40653789add92a4", "cd550ca227ec7667"),
}
TASKS = {"arithmetic": ArithmeticTask, "chain": ChainTask}


@pytest.mark.parametrize("key", list(BEFORE))
def test_without_a_data_seed_the_prompts_are_those_of_before_splits(key):
    name, options = key
    task = TASKS[name](**dict(options))
    assert (digest(task.heldout()), digest(task.train_pool())) == BEFORE[key]
    assert task.notes() == []


@pytest.mark.parametrize("cls", [ArithmeticTask, ChainTask])
def test_splits_are_disjoint_inside_the_base_heldout_set_and_fixed_by_the_data_seed(cls):
    universe = {p.text for p in cls().heldout()}
    val, test = cls(data_seed=5).heldout(), cls(data_seed=5, split="test").heldout()
    train = cls(data_seed=5).train_pool()
    v, t, tr = ({p.text for p in s} for s in (val, test, train))
    assert len(v) == len(val) and len(t) == len(test)  # distinct prompts
    assert v | t <= universe and not v & t and not (v | t) & tr
    assert [p.id for p in val] == list(range(len(val)))  # ids index the split
    again = cls(data_seed=5)
    assert digest(again.heldout()) == digest(val) and digest(again.train_pool()) == digest(train)
    other = cls(data_seed=6)
    assert {p.text for p in other.heldout()} != v and {p.text for p in other.train_pool()} != tr
    # the held-out set the base avoids does not depend on the data seed: the same base serves every seed
    assert cls(data_seed=5).base_fingerprint() == cls().base_fingerprint()


def test_chain_default_splits_halve_its_heldout_set():
    task = ChainTask(data_seed=0)
    assert len(task.split_prompts("validation")) == 200 and len(task.split_prompts("test")) == 200
    assert task.notes() == []


def test_arithmetic_level_1_is_shared_in_proportion_and_noted():
    task = ArithmeticTask(data_seed=0, validation_size=200, test_size=200)
    # level 1: a, b in 0..9 with + (100) and - with a >= b after the swap (55)
    assert task.level_supply()[1] == 155
    h1 = sum(p.level == 1 for p in ArithmeticTask().heldout())  # 105 of the 1000 held-out prompts
    ask_v = 200 * h1 / 1000  # validation's natural share of level 1
    ask = 2000 / 6 + 2 * ask_v  # the default train pool (2000, uniform levels) + validation + test
    cap = int(155 * ask_v / ask)  # 155 * 21 / 375.3 -> 8
    assert cap == 8
    for split in ("validation", "test"):
        prompts = task.split_prompts(split)
        assert len(prompts) == 200 and sum(p.level == 1 for p in prompts) == cap
    assert any("level 1 has 155 distinct prompts" in n and "in proportion" in n for n in task.notes())
    # the held-out splits do not move with the run's pool (its size or mix): every bench tests alike
    other = ArithmeticTask(data_seed=0, validation_size=200, test_size=200, pool_size=300,
                           level_weights=(4, 4, 2, 1, 0.5, 0.5))
    assert digest(other.split_prompts("test")) == digest(task.split_prompts("test"))
    train_l1 = sum(p.level == 1 for p in task.train_pool())
    before_l1 = sum(p.level == 1 for p in ArithmeticTask().train_pool())
    assert train_l1 > before_l1  # the pool keeps most of level 1 (before splits: what the held-out set left)


def test_carve_shares_a_short_universe_between_validation_and_test():
    texts = [f"p{i}" for i in range(10)] + ["p0"]  # 10 distinct prompts
    c = carve(texts, [0] * 11, 3, validation_size=8, test_size=12)
    assert (len(c.validation), len(c.test)) == (4, 6)  # 10 * 8 // 20 = 4, the rest to test
    assert not set(c.validation) & set(c.test) and 10 not in c.validation + c.test  # the duplicate counts once
    assert "split in proportion" in c.notes[0]


@pytest.mark.parametrize("options, error", [
    ({"split": "test"}, "split needs task_options.data_seed"),
    ({"data_seed": 0, "split": "train"}, "split must be one of validation, test"),
    ({"data_seed": -1}, "data_seed must be an integer >= 0"),
    ({"data_seed": 0, "test_size": 0}, "test_size must be an integer >= 1"),
])
def test_bad_split_options_are_one_line_errors(options, error):
    with pytest.raises(ValueError, match=error):
        ArithmeticTask(**options)


@pytest.mark.parametrize("name, cls", [("arithmetic", ArithmeticTask), ("chain", ChainTask)])
def test_no_validation_or_test_prompt_was_in_the_shipped_base_warm_start(name, cls):
    """Regenerate each shipped base's supervised rows from its build.json (warmstart.py's rule: steps x
    batch_size examples from seed 10_000 + seed) and check no split of any data seed meets them."""
    build = json.loads((BASES / name / "build.json").read_text())
    ws = WarmStartConfig(**build["warmstart"])
    fp = build["task_fingerprint"]
    options = {"seed": fp[0], "heldout_size": fp[1], "heldout_level_weights": fp[2]}
    if name == "arithmetic":
        options.update(ops=fp[3], answer_width=fp[4])
    assert cls(**options).base_fingerprint() == fp
    sft = {text for text, *_ in cls(**options).sft_examples(ws.steps * ws.batch_size, seed=10_000 + ws.seed)}
    for data_seed in (0, 1, 1000):
        for split in ("validation", "test"):
            task = cls(**options, data_seed=data_seed, split=split)
            assert fingerprint(task, ws) == build["fingerprint"]  # the shipped base serves it
            texts = {p.text for p in task.heldout()}
            assert texts and not texts & sft


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def files(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"t{i}", "answer": "1"} for i in range(5)])
    rows = [{"prompt": f"h{i}", "answer": str(i)} for i in range(9)] + [{"prompt": "h3", "answer": "3"}]
    return train, write_jsonl(tmp_path / "heldout.jsonl", rows)


def test_file_task_splits_the_heldout_file_by_data_seed(files):
    train, held = files
    plain = FileTask(str(train), str(held))
    assert len(plain.heldout()) == 10 and plain.notes() == []  # unchanged without a data seed
    val = FileTask(str(train), str(held), data_seed=2)
    test = FileTask(str(train), str(held), data_seed=2, split="test")
    assert (len(val.heldout()), len(test.heldout())) == (4, 5)  # 9 distinct prompts: 9 // 2 and the rest
    v, t = {p.text for p in val.heldout()}, {p.text for p in test.heldout()}
    assert not v & t and v | t == {f"h{i}" for i in range(9)}
    for i, p in enumerate(test.heldout()):  # each split prompt still names its own file row
        assert test.describe_prompt("held-out", i) == f"{held}: row {int(p.text[1:]) + 1}"
        assert p.answer == p.text[1:]
    assert {p.text for p in FileTask(str(train), str(held), data_seed=2).heldout()} == v
    assert {p.text for p in FileTask(str(train), str(held), data_seed=3).heldout()} != v
    assert val.train_pool() == plain.train_pool() and val.base_fingerprint() == plain.base_fingerprint()


def test_file_task_split_sizes_beyond_the_file_are_shared_and_noted(files):
    train, held = files
    task = FileTask(str(train), str(held), data_seed=0, validation_size=6, test_size=12, split="test")
    assert len(task.heldout()) == 6  # 9 * 6 // 18 = 3 validation, 6 test
    assert any("split in proportion, 3 validation and 6 test" in n for n in task.notes())
