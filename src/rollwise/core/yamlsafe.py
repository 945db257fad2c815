"""The one YAML loader for the data files rollwise reads (configs, plans, cost profiles): the safe loader
(no code runs from a file), and a key given twice in one mapping is refused. Plain `yaml.safe_load`
keeps the last of two equal keys without a word, so a plan with two arms of one name, or a config with
`lr` set twice, would run something other than what its reader sees.
"""
from __future__ import annotations

import yaml

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where present: ~20x faster


class DuplicateKey(yaml.YAMLError):
    """A mapping names one key twice; str() is one line naming the key and its line."""

    def __init__(self, key, line: int, first: int):
        super().__init__(f"key {key!r} given twice (line {line}; first on line {first})")
        self.key, self.line, self.first = key, line, first


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKey(key, key_node.start_mark.line + 1, seen[key])
                    seen[key] = key_node.start_mark.line + 1
                except TypeError:  # an unhashable key: the base loader says so
                    continue
        return super().construct_mapping(node, deep=deep)


def load(text: str):
    """The document in `text`; yaml.YAMLError (DuplicateKey among them) for one that is not valid YAML."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
