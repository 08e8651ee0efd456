"""YAML as the project reads it: safe (no Python objects) and strict (a key given twice in one mapping is
an error naming both lines, instead of PyYAML's silent "the last one wins")."""
from __future__ import annotations

from typing import IO, Any, Union

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one mapping."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:  # `<<: *defaults`: merged keys may be overridden, as YAML says
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKeyError(f"key {key!r} is given twice in one mapping (lines {first.line + 1} "
                                            f"and {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep=deep)


def load(stream: Union[str, bytes, IO[Any]]) -> Any:
    """`yaml.safe_load`, refusing duplicate keys (yaml.YAMLError, with the lines)."""
    return yaml.load(stream, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
