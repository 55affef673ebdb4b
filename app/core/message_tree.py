"""A conversation's messages as a tree: every version kept, one path shown.

Each message has a parent (the message it follows; None for the first) and an active flag
(the version shown among its siblings). The conversation shown, and sent to the model, is
the path of active children from the root.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class TreeNode(Protocol):
    """What the tree needs of a message (a store Message, an imported one, a Node)."""

    @property
    def id(self) -> int: ...

    @property
    def parent_id(self) -> int | None: ...

    @property
    def active(self) -> bool: ...


N = TypeVar("N", bound=TreeNode)


def same_nodes(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


@dataclass
class Node:
    id: int
    parent_id: int | None
    active: bool


def _choose(siblings: list[N]) -> N:  # the shown one of the siblings
    return next((m for m in reversed(siblings) if m.active), siblings[-1])


def chosen_versions(tree: Sequence[TreeNode]) -> set[int]:
    """id() of the version shown in each group of siblings (one per group)."""
    children: dict[int | None, list[TreeNode]] = {}
    for m in tree:
        children.setdefault(m.parent_id, []).append(m)
    return {id(_choose(siblings)) for siblings in children.values()}


def active_path(tree: Sequence[N]) -> list[N]:
    """The shown conversation: from the root, the active child of each message (the newest
    child if none is marked). Also numbers every message's version among its siblings."""
    children: dict[int | None, list[N]] = {}
    for m in tree:  # tree is in creation order, so siblings are oldest first
        children.setdefault(m.parent_id, []).append(m)
    for siblings in children.values():
        for i, m in enumerate(siblings, 1):
            if hasattr(m, "version") and hasattr(m, "versions"):
                m.version, m.versions = i, len(siblings)
    path: list[N] = []
    parent: int | None = None
    seen: set[int | None] = set()
    while parent not in seen and children.get(parent):
        seen.add(parent)
        siblings = children[parent]
        node = _choose(siblings)
        path.append(node)
        parent = node.id
    return path
