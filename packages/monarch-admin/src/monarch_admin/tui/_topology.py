"""The main screen: the tree of hosts, processes and actors beside the
selected node's detail, and the keys that move, fold, filter and open the
overlays. What it shows comes from the app (``_TUI``), which keeps the tree in
step with the server; the screen only turns keys into the app's actions.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Protocol, cast

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static, Tree
from textual.widgets.tree import TreeNode

from ._client import AdminClient
from ._format import LABELS
from ._overlays import _Diagnostics, _Help, _Stacks


class _Shown(Protocol):
    """What the topology screen asks of the app that shows it (``_TUI``): the
    screen sits below the app, so it names the app's side by this, not by class."""

    client: AdminClient
    lang: str
    expanded: dict[str, bool]
    show_system: bool
    show_stopped: bool
    wake: asyncio.Event

    def show(self) -> None:
        """Bring the header, the tree and the detail pane up to date."""

    def highlighted(self, node_id: str | None) -> None:
        """The tree's cursor moved to ``node_id``."""

    def selected_proc(self) -> dict[str, Any] | None:
        """The selected process, or the selected actor's."""

    def failed_actors(self) -> list[str]:
        """One line per failed actor in the latest topology."""


class _Topology(Screen[None]):
    """The tree of hosts, processes and actors beside the selected node's detail."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "move(1)", "down", show=False),
        Binding("k,up", "move(-1)", "up", show=False),
        Binding("g,home", "edge(0)", "top", show=False),
        Binding("G,end", "edge(1)", "bottom", show=False),
        Binding("pagedown,ctrl+d", "page(1)", "page down", show=False),
        Binding("pageup,ctrl+u", "page(-1)", "page up", show=False),
        Binding("tab", "toggle_node", "expand"),
        Binding("shift+tab", "switch_pane", "pane", show=False),
        Binding("c", "collapse_all", "collapse"),
        Binding("s", "toggle_system", "system"),
        Binding("h", "toggle_stopped", "stopped"),
        Binding("d", "diagnostics", "diagnostics"),
        Binding("p", "stacks", "stacks"),
        Binding("r", "refresh_now", "refresh", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "app.quit_tui", "quit"),
    ]
    DEFAULT_CSS = """
    #header { height: auto; padding: 0 1; background: $panel; }
    #panes { height: 1fr; }
    #tree { width: 2fr; border: round $primary-darken-2; }
    #detail-pane { width: 3fr; border: round $primary-darken-2; padding: 0 1; }
    #tree:focus, #detail-pane:focus { border: round $accent; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        tree: Tree[str] = Tree("job", data="job", id="tree")
        words = LABELS[self.tui.lang]
        tree.border_title = words["topology"]
        tree.show_root = True
        tree.guide_depth = 3
        detail = VerticalScroll(Static(id="detail"), id="detail-pane")
        detail.border_title = words["detail"]
        with Horizontal(id="panes"):
            yield tree
            yield detail
        yield Footer()

    @property
    def tui(self) -> _Shown:
        """The app showing this screen (always a ``_TUI``)."""
        return cast(_Shown, self.app)

    def on_mount(self) -> None:
        self.query_one("#tree", Tree).focus()
        self.tui.show()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        self.tui.highlighted(event.node.data)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        if event.node.data is not None:
            self.tui.expanded[event.node.data] = True

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[str]) -> None:
        if event.node.data is not None:
            self.tui.expanded[event.node.data] = False

    def _tree(self) -> Tree[str]:
        return self.query_one("#tree", Tree)

    def action_move(self, step: int) -> None:
        if self.focused is self.query_one("#detail-pane"):
            self.query_one("#detail-pane", VerticalScroll).scroll_relative(y=step, animate=False)
        elif step > 0:
            self._tree().action_cursor_down()
        else:
            self._tree().action_cursor_up()

    def action_edge(self, end: int) -> None:
        if end:
            self._tree().action_scroll_end()
        else:
            self._tree().action_scroll_home()

    def action_page(self, step: int) -> None:
        if step > 0:
            self._tree().action_page_down()
        else:
            self._tree().action_page_up()

    def action_toggle_node(self) -> None:
        tree = self._tree()
        node = tree.cursor_node
        if node is not None and node.allow_expand and node.children:
            node.toggle()

    def action_switch_pane(self) -> None:
        pane = self.query_one("#detail-pane")
        (self._tree() if self.focused is pane else pane).focus()

    def action_collapse_all(self) -> None:
        tree = self._tree()
        for node in _walk(tree.root):
            if node is not tree.root and node.data is not None:
                self.tui.expanded[node.data] = False
                node.collapse()
        tree.move_cursor(tree.root)

    def action_toggle_system(self) -> None:
        self.tui.show_system = not self.tui.show_system
        self.tui.show()

    def action_toggle_stopped(self) -> None:
        self.tui.show_stopped = not self.tui.show_stopped
        self.tui.show()

    def action_diagnostics(self) -> None:
        self.app.push_screen(_Diagnostics(self.tui.client, self.tui.failed_actors(), self.tui.lang))

    def action_stacks(self) -> None:
        proc = self.tui.selected_proc()
        if proc is None:
            self.notify("select a process or an actor first: p shows its process's stacks")
            return
        self.app.push_screen(_Stacks(self.tui.client, proc))

    def action_refresh_now(self) -> None:
        self.tui.wake.set()

    def action_help(self) -> None:
        self.app.push_screen(_Help())


def _walk(node: TreeNode[str]) -> list[TreeNode[str]]:
    """``node`` and every node below it, depth first."""
    found = [node]
    for child in node.children:
        found.extend(_walk(child))
    return found
