"""The bench-wide family (issue 47, item 4): every confirmatory hypothesis of every record, Holm over all."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_holm import hypotheses  # noqa: E402

from rollwise.bench.stats import holm  # noqa: E402


def test_every_confirmatory_family_joins_and_the_bench_wide_p_is_never_below_the_plans():
    hs = hypotheses()
    records = {f.parent.name: json.loads(f.read_text()) for f in (ROOT / "benchmarks/results").glob("*/summary.json")}
    confirmatory = {k: s for k, s in records.items() if s.get("kind") == "confirmatory"}
    assert sorted((h["record"], h["arm"]) for h in hs) == sorted((k, a) for k, s in confirmatory.items()
                                                                  for a in s["family"])
    for h, adj in zip(hs, holm([h["p"] for h in hs])):
        assert adj >= h["p_plan"] - 1e-12, h  # a larger family is never less strict
