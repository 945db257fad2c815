"""Generate the docs pages that restate code, so they cannot drift from it:

- docs/methods.md, between <!-- registry:begin --> and <!-- registry:end -->: every registered component,
  by kind, with its provenance, summary, paper, facts and options (from the registry);
- docs/configuration.md: every config field with its type, default and help (from the dataclasses).

    python scripts/gen_docs.py           # rewrite them
    python scripts/gen_docs.py --check   # exit 1 if a committed page differs (tests/test_docs.py runs it)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollwise.core import registry
from rollwise.core.describe import OPTIONS_KEY, cites, options, paper
from rollwise.core.generated import between, sync
from rollwise.core.settings import settings
from rollwise.policy.warmstart import WarmStartConfig
from rollwise.run.config import Config

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- registry:begin -->", "<!-- registry:end -->"
TITLES = {"planner": "Planner components (Control, Generate, Replay)", "advantage": "Advantage estimators",
          "loss": "Policy losses", "aggregation": "Loss aggregations", "correction": "Off-policy corrections",
          "recompose": "Batch recomposition", "engine": "Engines", "task": "Tasks", "shaping": "Reward shaping"}


def cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def methods_block() -> str:
    out = ["*Generated from the registry by `python scripts/gen_docs.py`; do not edit by hand. "
           "`rollwise list --options NAME` prints the same for one component.*", ""]
    for kind in registry.KINDS:
        entries = registry.entries(kind)
        out += [f"### {TITLES[kind]} ({len(entries)})", "",
                f"Options are set with `--set {OPTIONS_KEY[kind].format(name='NAME')}.OPTION=VALUE`.", "",
                "| name | provenance | what it does | paper | options (default) |", "|---|---|---|---|---|"]
        for e in entries:
            ref = paper(e)
            facts = "".join(f" *{k}: {v}*" for k, v in sorted(e.facts.items()))
            opts = ", ".join(f"`{o.name}`={o.default}" for o in options(e)) or "none"
            out.append(f"| `{e.name}` | {e.provenance} | {cell(e.summary)}{cell(facts)} | "
                       f"{cell(ref) if cites(ref) else ''} | {cell(opts)} |")
        out.append("")
    return "\n".join(out[:-1])


def configuration_page() -> str:
    out = ["# Configuration", "",
           "*Generated from the config dataclasses (`run/config.py`, `learn/learner.py`, `policy/warmstart.py`) by "
           "`python scripts/gen_docs.py`; `rollwise train --help` prints the same.*", "",
           "A run's configuration is one typed dataclass. A YAML file (`--config FILE`) sets it, `--set KEY=VALUE` "
           "overrides it (dotted keys nest: `--set learner.lr=3e-4` is `learner: {lr: 3e-4}`; the value is YAML), "
           "and an unknown key is an error that names it. Every `*_options` mapping is checked against its "
           "component's parameters when the config loads; `rollwise list --options NAME` lists them.", "",
           "| key | type | default | meaning |", "|---|---|---|---|"]
    for s in settings(Config, nested={"warmstart": WarmStartConfig}):
        out.append(f"| `{s.key}` | `{cell(s.type)}` | `{s.default!r}` | {cell(s.help)} |")
    out += ["", "`warmstart.*` defaults are the arithmetic task's; a task may declare its own (task 2's base uses a "
            "larger context), and the keys a user sets win."]
    return "\n".join(out) + "\n"


def rendered() -> dict[Path, str]:
    methods = ROOT / "docs" / "methods.md"
    return {methods: between(methods.read_text(), BEGIN, END, methods_block()),
            ROOT / "docs" / "configuration.md": configuration_page()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a committed page differs from the code")
    return sync(rendered(), ROOT, ap.parse_args(argv).check, "python scripts/gen_docs.py")


if __name__ == "__main__":
    sys.exit(main())
