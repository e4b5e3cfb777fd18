"""A run's state at one revision as a tree, and the diff between two revisions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from desktop_app.app.state_diff import Change, change_text, shorten, value_text
from desktop_app.app.widgets.row_table import RowTable

#: Characters of a string value shown in the tree before it is cut.
STRING_CHARS = 60
#: Children shown under one object or list; the rest are summed up in one line.
MAX_CHILDREN = 200


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def _plain(label: str | Text) -> str:
    return label.plain if isinstance(label, Text) else label


def node_label(key: str, value: Any) -> Text:
    """``key: value`` for a leaf, ``key {n}`` / ``key [n]`` for an object or a list."""
    text = Text()
    text.append(key, style="bold")
    if isinstance(value, Mapping):
        text.append(f" {{{len(value)}}}", style="dim")
    elif _is_list(value):
        text.append(f" [{len(value)}]", style="dim")
    else:
        text.append(": ")
        if isinstance(value, str):
            text.append(value_text(value, STRING_CHARS), style="green")
        else:
            text.append(value_text(value, STRING_CHARS), style="cyan")
    return text


class StateTree(Tree[Any]):
    """A JSON-mode state: objects and lists expand, long strings are cut."""

    DEFAULT_CSS = """
    StateTree {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("state", id=id)
        self.show_root = False
        self.state: Mapping[str, Any] | None = None
        self._filled: set[int] = set()

    def show_state(self, label: str, state: Mapping[str, Any] | None) -> None:
        """Show ``state`` (``None`` shows nothing). Objects and lists get their
        children when first expanded, so a large state costs nothing unseen."""
        self.state = state
        self.clear()
        self._filled = set()
        self.root.set_label(Text(label))
        if state is not None:
            self.root.data = state
            self.fill(self.root)
        self.root.expand()

    def fill(self, node: TreeNode[Any]) -> None:
        """Add ``node``'s children (once) from the object or list it holds."""
        if node.id in self._filled:
            return
        self._filled.add(node.id)
        value: Any = node.data
        items: list[tuple[str, Any]]
        if isinstance(value, Mapping):
            items = [(str(k), v) for k, v in value.items()]
        elif _is_list(value):
            items = [(f"[{i}]", v) for i, v in enumerate(value)]
        else:
            return
        for key, child in items[:MAX_CHILDREN]:
            if (isinstance(child, Mapping) or _is_list(child)) and len(child):
                node.add(node_label(key, child), child)
            else:
                node.add_leaf(node_label(key, child), child)
        if len(items) > MAX_CHILDREN:
            node.add_leaf(Text(f"… {len(items) - MAX_CHILDREN} more", style="dim italic"))

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Any]) -> None:
        if event.node.tree is self:
            self.fill(event.node)

    def labels(self, node: TreeNode[Any] | None = None) -> list[str]:
        """Plain labels of ``node``'s children (the top-level fields by default)."""
        parent = self.root if node is None else node
        self.fill(parent)
        return [_plain(child.label) for child in parent.children]

    def find(self, path: Sequence[str]) -> TreeNode[Any] | None:
        """The node at ``path`` (keys as labelled: ``("files", "[0]", "name")``)."""
        node: TreeNode[Any] = self.root
        for key in path:
            for child in node.children:
                plain = _plain(child.label)
                if plain == key or plain.startswith((f"{key}: ", f"{key} {{", f"{key} [")):
                    node = child
                    break
            else:
                return None
            self.fill(node)
        return node


class DiffTable(RowTable):
    """Changes from a base revision to the selected one: path, kind, old → new."""

    DEFAULT_CSS = """
    DiffTable {
        height: 1fr;
    }
    """

    COLUMNS = (("path", "Field"), ("kind", "Change"), ("values", "Old → new"))
    STYLES = {"added": "green", "removed": "red", "changed": "yellow"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.changes: list[Change] = []

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, changes: list[Change]) -> None:
        self.changes = list(changes)
        self.clear()
        for i, change in enumerate(changes):
            self.add_row(
                Text(shorten(change.path, 60)),
                Text(change.kind, style=self.STYLES[change.kind]),
                Text(change_text(change)),
                key=str(i),
            )

    def plain_rows(self) -> list[tuple[str, str, str]]:
        """The rows as plain text (path, kind, values)."""
        out: list[tuple[str, str, str]] = []
        for i in range(self.row_count):
            path, kind, values = (c.plain for c in self.get_row_at(i))
            out.append((path, kind, values))
        return out
