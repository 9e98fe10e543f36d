"""Where a tool's parameters schema says a value is secret, whatever its name.

A property is secret when its schema says `writeOnly: true` or
`format: password`; pydantic writes both for `SecretStr` and `SecretBytes`, so
function tools get this from their type hints. Computed once per tool, when it
is made; the executor masks these paths in every call (`masking.mask_paths`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..masking import SecretPath

__all__ = ["secret_paths"]

_BRANCHES = ("anyOf", "oneOf", "allOf")

# Schemas come from MCP servers too: a bound on the work, so that a schema of
# many mutually recursive definitions cannot stall making the tool.
_MAX_NODES = 10_000


def secret_paths(schema: Mapping[str, Any]) -> tuple[SecretPath, ...]:
    """Every path of `schema` whose value is secret, in the order found.

    Follows local `$ref`s (`#/$defs/...`, `#/definitions/...`), `anyOf` /
    `oneOf` / `allOf` (a value that may be secret is), object `properties`,
    `additionalProperties` and `patternProperties`, and array `items` and
    `prefixItems`. A recursive definition is followed twice, so a secret one
    level into the recursion is found; deeper ones are not (their names may
    still mark them).
    """
    walk = _Walk(schema)
    walk.node(schema, (), ())
    return tuple(walk.found)


@dataclass
class _Walk:
    root: Mapping[str, Any]
    found: dict[SecretPath, None] = field(default_factory=dict)
    budget: int = _MAX_NODES

    def node(self, node: Any, path: SecretPath, refs: tuple[str, ...]) -> None:
        self.budget -= 1
        if self.budget < 0 or not isinstance(node, Mapping):
            return  # true / false schemas say nothing about secrets
        if node.get("writeOnly") is True or node.get("format") == "password":
            self.found[path] = None
            return  # everything below is hidden with it
        ref = node.get("$ref")
        if isinstance(ref, str) and refs.count(ref) < 2:
            self.node(_resolve(self.root, ref), path, (*refs, ref))
        for key in _BRANCHES:
            for branch in _list(node.get(key)):
                self.node(branch, path, refs)
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for name, sub in properties.items():
                self.node(sub, (*path, str(name)), refs)
        patterns = node.get("patternProperties")
        items = node.get("items")
        every = [
            node.get("additionalProperties"),
            *(items if isinstance(items, list) else [items]),  # a list: draft 4 tuples
            *_list(node.get("prefixItems")),
            *(patterns.values() if isinstance(patterns, Mapping) else ()),
        ]
        for sub in every:
            self.node(sub, (*path, None), refs)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """The schema a local `$ref` points to, or None (remote refs are not followed)."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for escaped in ref[1:].split("/")[1:]:
        part = escaped.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
