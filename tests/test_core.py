import numpy as np
import pytest
import torch

from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Group, Prompt, Rollout


def make_group(pid, correct, length=3, purpose="train"):
    rs = [Rollout(pid, [1, 2], torch.arange(length), torch.zeros(length), "x", "eos", 0, purpose,
                  entropy=0.5, reward=float(c), correct=bool(c)) for c in correct]
    return Group(Prompt(pid, "p", "a"), rs)


def test_group_properties():
    g = make_group(0, [1, 0, 1, 1], length=2)
    assert (g.n, g.num_correct, g.pass_rate, g.tokens) == (4, 3, 0.75, 8)
    assert not g.zero_variance
    assert make_group(1, [1, 1]).zero_variance and make_group(2, [0, 0, 0]).zero_variance
    assert make_group(3, [1]).zero_variance  # a group of one teaches GRPO nothing


def test_group_statuses_and_prefixes():
    g = make_group(0, [1, 0, 1])
    assert g.statuses() == {"done"} and g.prefixes() == [] and Group(Prompt(1, "", "")).statuses() == set()
    g.rollouts[1].status = "pruned"
    pre = make_group(0, [1]).rollouts[0]
    g.rollouts[2].lineage.prefix = pre  # a resumed row continues its carried part
    assert g.statuses() == {"done", "pruned"} and g.prefixes() == [pre]


def test_group_counts_and_their_columns():
    from rollwise.core.history import GroupStats

    g, h, empty = make_group(4, [1, 0, 1], length=2), make_group(9, [1, 1], length=5), Group(Prompt(2, "", ""))
    assert g.counts() == (3, 2, 6, 0.5, False) and h.counts() == (2, 2, 10, 0.5, True)
    v = GroupStats.of([g, empty, h])  # a group with no rollouts is no visit
    assert v.prompt.tolist() == [4, 9] and v.n.tolist() == [3, 2] and v.correct.tolist() == [2, 2]
    assert v.tokens.tolist() == [6, 10] and v.zero_variance.tolist() == [False, True] and len(v) == 2
    assert len(GroupStats.of([g, empty], drop_empty=False)) == 2 and len(GroupStats.of([])) == 0


def test_history_records_streaks_and_touches_only_batch_rows():
    h = PromptHistory(1000)
    h.record([make_group(5, [1, 1]), make_group(7, [0, 0, 0, 0])], step=0)
    h.record([make_group(5, [1, 1, 1])], step=1)
    assert h.easy_streak[5] == 2 and h.hard_streak[7] == 1 and h.visits[5] == 2
    assert h.total_n[5] == 5 and h.total_correct[5] == 5 and h.last_step[5] == 1 and h.last_n[5] == 3
    h.record([make_group(5, [1, 0])], step=2)  # a mixed visit ends the streak
    assert h.easy_streak[5] == 0 and h.hard_streak[5] == 0
    untouched = np.setdiff1d(np.arange(1000), [5, 7])
    assert (h.visits[untouched] == 0).all() and (h.last_step[untouched] == -1).all()
    assert np.isnan(h.last_pass_rate([0]))[0] and h.last_pass_rate([5])[0] == 0.5
    log = h.log()
    assert log["prompt"].tolist() == [5, 7, 5, 5] and log["step"].tolist() == [0, 0, 1, 2]


def test_zero_variance_persistence_counts_revisits_of_zero_variance_prompts():
    h = PromptHistory(10)
    h.record([make_group(1, [1, 1]), make_group(2, [0, 0]), make_group(3, [1, 0])], step=0)
    assert h.last_zero_variance([1, 2, 3, 4]).tolist() == [True, True, False, False]
    # 1 stays zero-variance, 2 turns mixed, 3 was mixed, 4 is new: 2 revisits of ZV prompts, 1 stayed
    step = [make_group(1, [1, 1, 1]), make_group(2, [0, 1]), make_group(3, [0, 0]), make_group(4, [0])]
    assert h.zero_variance_persistence(step) == {"zv_revisits": 2, "zv_revisits_stayed": 1}


def test_history_save_load_roundtrip(tmp_path):
    h = PromptHistory(50)
    for step in range(300):  # grow the log past its initial capacity
        h.record([make_group(step % 50, [step % 2, 1])], step)
    h.save(tmp_path / "h.npz")
    h2 = PromptHistory.load(tmp_path / "h.npz")
    for k, v in h.state_dict().items():
        assert np.array_equal(v, h2.state_dict()[k]), k
    with pytest.raises(ValueError, match="pool has 10"):
        PromptHistory(10).load_state_dict(h.state_dict())


def test_ledger_counts_by_purpose_and_budget_excludes_eval_and_oracle():
    L = Ledger()
    L.charge([make_group(0, [1, 0], length=4)], prompt_tokens=10)
    L.charge([make_group(1, [1], length=5, purpose="eval"), make_group(2, [1], length=7, purpose="oracle")])
    L.charge([make_group(3, [0, 0], length=3, purpose="pilot")])
    assert L.budget_tokens() == 8 + 6 and L.count("eval") == 5 and L.prompt_tokens == 10
    assert L.count(fate="open") == 8 + 5 + 7 + 6  # nothing settled yet
    with pytest.raises(ValueError, match="unknown rollout purpose"):
        L.charge([make_group(5, [1], purpose="bogus")])
    L2 = Ledger()
    L2.load_state_dict(L.state_dict())
    assert L2.state_dict() == L.state_dict()


def test_ledger_settles_fates_and_keeps_the_legacy_view():
    """A trained group, a filtered one and a pilot: fates move, the budget never does."""
    L = Ledger()
    trained, filtered, pilot = make_group(0, [1, 0], length=4), make_group(1, [0, 0], length=2), \
        make_group(2, [1, 1], length=3, purpose="pilot")
    L.charge([trained, filtered, pilot])
    before = L.budget_tokens()
    L.settle([trained], "open", "trained")
    L.settle([filtered], "open", {"train": "discarded"})
    L.settle([pilot], "open", {"train": "discarded"})  # not a train rollout: untouched
    L.settle([pilot], "open", "scored")
    assert L.budget_tokens() == before == 8 + 4 + 6
    assert L.count(fate="trained") == 8 and L.count("train", "discarded") == 4 and L.count("pilot", "scored") == 6
    assert L.count_rollouts("train", "discarded") == 2 and L.count(fate="open") == 0
    assert [r.fate for r in filtered.rollouts] == ["discarded"] * 2 and pilot.rollouts[0].fate == "scored"
    assert L.legacy_tokens() == {"train": 8, "pilot": 6, "discarded": 4, "eval": 0, "profile": 0, "oracle": 0}
    L.settle([trained], "open", "discarded")  # already settled: nothing moves twice
    assert L.count(fate="trained") == 8
    with pytest.raises(ValueError, match="unknown fate"):
        L.settle([trained], "trained", "lost")


def test_ledger_budget_weights_draft_tokens_by_the_cost_ratio():
    """Draft tokens cost a verification prefill, accepted or not: the budget weights every verified draft
    token (here 8 accepted + 4 rejected) by the cost ratio; the accepted ones are also kind "draft"."""
    L = Ledger(draft_cost=0.25)
    g = make_group(0, [1], length=10)
    g.rollouts[0].lineage.tokens_by_kind = {"draft": 8, "decoded": 2}  # 8 accepted from a draft
    L.charge_verified(prompt_tokens=5, draft_tokens=12)  # what the driver's verification pass charges
    L.charge([g, make_group(1, [1], length=4, purpose="eval")])
    assert L.budget_tokens() == 2 + round(0.25 * 12) and L.count(kind="draft") == 8
    assert L.count_rollouts() == 2  # a rollout counts once whatever its kinds
    assert L.breakdown()["tok/verified"] == 12 and L.prompt_tokens == 5


def test_the_ledger_moves_fates_and_groups_only_hold_data():
    """Accounting lives in the ledger (core/ledger.py move_group); a count-level group moves by its
    Segments, all decoded."""
    from rollwise.core.ledger import move_group
    from rollwise.core.types import Segment

    g = make_group(0, [1, 0], length=4)
    assert not hasattr(g, "move")  # the 0.4 shim that named the ledger is gone (0.6)

    class Counted(Group):  # a group known by counts, as the simulator's
        def __init__(self, prompt, segs):
            super().__init__(prompt, [])
            self.segs = segs

        def segments(self):
            return self.segs

    c = Counted(Prompt(1, "p", "a"), [Segment("train", 3, 30), Segment("pilot", 2, 8)])
    acc = {}
    move_group(c, "new", {"train": "open"}, acc)
    assert acc == {("train", "decoded", "new", "open"): [3, 30]} and [s.fate for s in c.segs] == ["open", "new"]
    c = Counted(Prompt(1, "p", "a"), [Segment("train", 3, 30), Segment("pilot", 2, 8)])
    L = Ledger()
    L.charge([c, g])
    L.settle([c, g], "open", {"train": "trained"})
    assert L.count("train", "trained") == 30 + 8 and L.count_rollouts("train", "trained") == 5
    assert L.count("pilot", "open") == 8 and L.count_rollouts("pilot") == 2 and L.count(fate="new") == 0


def test_moving_many_groups_at_once_counts_as_one_at_a_time():
    """The ledger moves a list of groups in one call (move_groups, tallied by purpose for count-level
    groups): the same counts and the same fates as moving them one by one, for count-level groups, plain
    ones, and a fate by purpose that leaves some purposes where they are."""
    from rollwise.core.ledger import move_group, move_groups
    from rollwise.core.types import Segment

    class Counted(Group):
        def __init__(self, prompt, segs):
            super().__init__(prompt, [])
            self.segs = segs

        def segments(self):
            return self.segs

    def groups():
        return [Counted(Prompt(1, "p", "a"), [Segment("train", 3, 30), Segment("pilot", 2, 8)]),
                make_group(2, [1, 0], length=4),
                Counted(Prompt(3, "p", "a"), [Segment("train", 4, 41, fate="open"), Segment("train", 1, 5)])]

    for to in ("open", {"train": "open"}):
        one_by_one, at_once = groups(), groups()
        acc1, acc2 = {}, {}
        for g in one_by_one:
            move_group(g, "new", to, acc1)
        move_groups(at_once, "new", to, acc2)
        assert acc1 == acc2
        assert [s.fate for g in (at_once[0], at_once[2]) for s in g.segs] == \
            [s.fate for g in (one_by_one[0], one_by_one[2]) for s in g.segs]
    # by hand: train segments 3 + 1 rollouts (30 + 5 tokens; the "open" one stays) and the plain group's 2 x 4
    assert acc2 == {("train", "decoded", "new", "open"): [3 + 1 + 2, 30 + 5 + 8]}
    assert [s.fate for s in at_once[0].segs] == ["open", "new"]


def test_rollout_state_roundtrip_keeps_reward_parts():
    import io

    r = Rollout(3, [1, 2], torch.arange(2), torch.tensor([-0.5, -1.0]), "x", "eos", 4, reward=0.5,
                reward_parts=(0.0, 1.0))
    buf = io.BytesIO()
    torch.save(r.to_state(), buf)
    back = Rollout.from_state(torch.load(io.BytesIO(buf.getvalue()), weights_only=False))
    assert back.reward_parts == (0.0, 1.0) and isinstance(back.reward_parts, tuple)
    assert back.reward == 0.5 and back.token_ids_T.tolist() == [0, 1] and back.logprobs_T.tolist() == [-0.5, -1.0]
    plain = Rollout.from_state({k: v for k, v in r.to_state().items() if k != "reward_parts"})
    assert plain.reward_parts is None  # states written before reward components existed still load


def test_lineage_is_typed_and_old_checkpoints_load_into_it():
    """Rollout lineage (prefix, tokens by kind, tree) is a typed field; `meta` is a plain dict (the 0.4 shim
    that refused the old lineage keys in it is gone: it sat on every rollout); a checkpoint's rollout state
    from before 0.4 still comes back into the lineage."""
    import torch

    from rollwise.core.types import Lineage, Rollout

    pre = Rollout(0, [1], torch.tensor([5, 6]), torch.tensor([-1.0, -2.0]), "x", "budget", 3, status="partial")
    r = Rollout(0, [1], torch.tensor([5, 6, 7]), torch.tensor([-1.0, -2.0, -3.0]), "x", "eos", 3,
                lineage=Lineage(prefix=pre, tokens_by_kind={"decoded": 1}, tree_path=(1, 0)))
    assert type(r.meta) is dict
    back = Rollout.from_state(r.to_state())
    assert back.lineage.prefix.token_ids_T.tolist() == [5, 6] and back.lineage.tree_path == (1, 0)
    assert back.tokens_by_kind() == {"decoded": 1}
    old = r.to_state()  # as a checkpoint before 0.4 held it: the lineage in meta, the prefix tagged
    old["meta"] = {"prefix": old["lineage"]["prefix"], "tokens_by_kind": {"decoded": 1}, "tree": True,
                   "tree_path": [1, 0], "is_weight": 0.5}
    del old["lineage"]
    was = Rollout.from_state(old)
    assert was.lineage.prefix.token_ids_T.tolist() == [5, 6] and was.lineage.tree_path == (1, 0)
    assert dict(was.meta) == {"is_weight": 0.5}
