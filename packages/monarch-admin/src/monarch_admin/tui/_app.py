"""``monarch-tui``'s textual application: it fetches the topology every
refresh, keeps the tree in step with it (expansion and cursor survive a
refresh), and fills the header and the detail pane; ``tui_app`` makes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.app import App
from textual.binding import Binding, BindingType
from textual.theme import Theme
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from ._background import _off_loop
from ._client import AdminClient, AdminError
from ._format import (
    LABELS,
    LANGS,
    _clock,
    _count,
    _is_system_actor,
    _is_system_proc,
    _proc_name,
    _proc_status,
)
from ._topology import _Topology, _walk
from ._views import (
    _actor_detail,
    _actor_label,
    _host_detail,
    _host_label,
    _job_detail,
    _proc_detail,
    _proc_label,
)

EXPAND_PROCS_UP_TO = 32  # a bigger job starts with its processes folded
REFRESH_MS = 2000  # Monarch's default refresh
THEMES = ("nord", "doom-nord-light")  # Monarch's --theme values

_Shape = tuple[str, Text, list[Any]]  # (id, label, children: list[_Shape])


# Monarch's light theme, on nord's colours
DOOM_NORD_LIGHT = Theme(
    name="doom-nord-light",
    primary="#3B6EA8",
    secondary="#5272AF",
    accent="#97365B",
    warning="#9A7500",
    error="#99324B",
    success="#4F894C",
    foreground="#3B4252",
    background="#E5E9F0",
    surface="#ECEFF4",
    panel="#D8DEE9",
    dark=False,
)


class _TUI(App[int]):
    """``monarch-tui``'s application: fetches the topology every refresh and
    keeps the tree in step with it (expansion and cursor survive a refresh)."""

    TITLE = "monarch-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "quit_tui", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        client: AdminClient,
        *,
        refresh_ms: int,
        first: dict[str, Any] | None,
        theme: str = "nord",
        lang: str = "en",
    ) -> None:
        super().__init__()
        self.register_theme(DOOM_NORD_LIGHT)
        self.theme = theme
        self.lang = lang
        self.client = client
        self.refresh_s = refresh_ms / 1000.0
        self.found: dict[str, Any] | None = first
        self.error: str | None = None
        self.updated_at = time.time() if first is not None else 0.0
        self.refreshes = 0
        self.show_system = False
        self.show_stopped = False
        self.expanded: dict[str, bool] = {}
        self.selected = "job"
        self.pinned: str | None = None
        self.items: dict[str, tuple[str, dict[str, Any], dict[str, Any] | None]] = {}
        self.hidden = 0
        self.wake = asyncio.Event()

    def on_mount(self) -> None:
        self.push_screen(_Topology())
        self.run_worker(self._poll(), exclusive=True, group="poll")

    def action_quit_tui(self) -> None:
        self.exit(0)

    async def _poll(self) -> None:
        while True:
            fetch = functools.partial(
                self.client.topology, events=self.selected.startswith("actor:")
            )
            try:
                found = await _off_loop(fetch)
            except AdminError as error:
                self.error = str(error)
            else:
                self.found, self.error, self.updated_at = found, None, time.time()
            self.refreshes += 1
            self.show()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.refresh_s)
            self.wake.clear()

    # -- keeping the tree in step -----------------------------------------------------------

    def _main(self) -> _Topology | None:
        for screen in self.screen_stack:
            if isinstance(screen, _Topology):
                return screen
        return None

    def _shape(self) -> list[_Shape]:
        """What the tree should show now, with the filters applied."""
        self.items = {}
        self.hidden = 0
        if self.found is None:
            return []
        hosts = self.found.get("hosts", [])
        expand_procs = sum(len(host.get("procs", [])) for host in hosts) <= EXPAND_PROCS_UP_TO
        shapes: list[_Shape] = []
        for host in hosts:
            host_id = f"host:{host.get('host')}"
            self.items[host_id] = ("host", host, None)
            self.expanded.setdefault(host_id, True)
            procs: list[_Shape] = []
            for proc in host.get("procs", []):
                proc_id = "proc:" + str(
                    proc.get("address") or f"{proc.get('mesh_id')}/{proc.get('rank')}"
                )
                actors: list[_Shape] = []
                for actor in proc.get("actors", []):
                    status = actor.get("status")
                    if status != "failed" and (
                        (not self.show_system and _is_system_actor(actor))
                        or (not self.show_stopped and status == "stopped")
                    ):
                        self.hidden += 1
                        continue
                    actor_id = f"actor:{proc_id}:{actor.get('key')}:{actor.get('rank')}"
                    self.items[actor_id] = ("actor", actor, proc)
                    actors.append((actor_id, _actor_label(actor), []))
                status = _proc_status(proc)
                if not actors and (
                    (not self.show_system and _is_system_proc(proc) and status == "running")
                    or (not self.show_stopped and status == "stopped")
                ):
                    self.hidden += 1
                    continue
                self.items[proc_id] = ("proc", proc, None)
                self.expanded.setdefault(proc_id, expand_procs)
                procs.append((proc_id, _proc_label(proc), actors))
            shapes.append((host_id, _host_label(host), procs))
        return shapes

    def show(self) -> None:
        """Bring the header, the tree and the detail pane up to date."""
        screen = self._main()
        if screen is None or not screen.is_mounted:
            return
        tree = screen.query_one("#tree", Tree)
        shapes = self._shape()
        tree.root.set_label(self._root_label())
        if self._sync(tree.root, shapes):
            self.pinned = self.selected
            self.call_after_refresh(self._restore_cursor)
        tree.root.expand()
        screen.query_one("#header", Static).update(self._header())
        self._show_detail()

    def _sync(self, parent: TreeNode[str], wanted: list[_Shape]) -> bool:
        """Make ``parent``'s children what ``wanted`` says; True if any node came or went."""
        if [child.data for child in parent.children] == [shape[0] for shape in wanted]:
            changed = False
            for child, (_, label, children) in zip(parent.children, wanted, strict=True):
                child.set_label(label)
                child.allow_expand = bool(children)
                changed = self._sync(child, children) or changed
            return changed
        parent.remove_children()
        for shape in wanted:
            self._add(parent, shape)
        return True

    def _add(self, parent: TreeNode[str], shape: _Shape) -> None:
        node_id, label, children = shape
        node = parent.add(
            label,
            data=node_id,
            expand=self.expanded.get(node_id, False),
            allow_expand=bool(children),
        )
        for child in children:
            self._add(node, child)

    def _restore_cursor(self) -> None:
        screen = self._main()
        wanted, self.pinned = self.pinned, None
        if screen is None or wanted is None:
            return
        tree = screen.query_one("#tree", Tree)
        for node in _walk(tree.root):
            if node.data == wanted:
                tree.move_cursor(node)
                self.selected = wanted
                break
        self._show_detail()

    def highlighted(self, node_id: str | None) -> None:
        """The tree's cursor moved to ``node_id``."""
        if node_id is None or (self.pinned is not None and node_id != self.pinned):
            return  # a rebuild moved the cursor: _restore_cursor puts it back
        before = self.selected
        self.selected = node_id
        self._show_detail()
        item = self.items.get(node_id)
        if (
            node_id != before
            and item is not None
            and item[0] == "actor"
            and "events" not in item[1]
        ):
            self.wake.set()  # the detail pane shows events: fetch them now

    # -- header and detail ------------------------------------------------------------------

    def _root_label(self) -> Text:
        label = Text("job", style="bold")
        label.append(f"  {self.client.url}", style="dim")
        return label

    def _header(self) -> Text:
        text = Text()
        text.append("monarch-tui", style="bold")
        text.append(f"  {self.client.url}")
        if self.found is not None:
            summary = self.found.get("summary", {})
            # the summary's keys are plural ("hosts"); the words singular or plural by count
            counts = [
                _count(summary.get(f"{name}s", 0), name)
                for name in ("host", "proc", "actor", "message")
            ]
            text.append("  ·  " + " · ".join(counts))
            failed = int(summary.get("failed_actors", 0)) + int(summary.get("failed_procs", 0))
            if failed:
                text.append(f" · {failed} failed", style="bold red")
        text.append("\n")
        if self.error is not None:
            text.append(
                f"ERROR: {self.error} Retrying every {self.refresh_s:g} s (q quits).",
                style="bold red",
            )
            return text
        words = LABELS[self.lang]
        text.append(
            f"{words['updated']} {_clock(self.updated_at)} · {words['every']} {self.refresh_s:g} s",
            style="dim",
        )
        text.append(
            f" · system {'shown' if self.show_system else 'hidden'} (s)"
            f" · stopped {'shown' if self.show_stopped else 'hidden'} (h)",
            style="dim",
        )
        if self.hidden:
            text.append(f" · {self.hidden} hidden", style="dim")
        text.append(f" · {words['help']}", style="dim")
        return text

    def _show_detail(self) -> None:
        screen = self._main()
        if screen is None or not screen.is_mounted:
            return
        screen.query_one("#detail", Static).update(self.detail())

    def detail(self) -> RenderableType:
        """What the detail pane shows for the selected node."""
        if self.found is None:
            return Text("no topology yet", style="dim")
        item = self.items.get(self.selected)
        if item is None:
            return _job_detail(self.found, self.client.url)
        kind, data, proc = item
        if kind == "actor" and proc is not None:
            return _actor_detail(data, proc)
        if kind == "proc":
            return _proc_detail(data)
        return _host_detail(data)

    def selected_proc(self) -> dict[str, Any] | None:
        """The selected process, or the selected actor's."""
        item = self.items.get(self.selected)
        if item is None:
            return None
        kind, data, proc = item
        if kind == "actor":
            return proc
        return data if kind == "proc" else None

    def failed_actors(self) -> list[str]:
        """One line per failed actor in the latest topology."""
        lines = []
        for host in (self.found or {}).get("hosts", []):
            for proc in host.get("procs", []):
                for actor in proc.get("actors", []):
                    if actor.get("status") == "failed":
                        reason = [
                            line.strip()
                            for line in str(actor.get("reason") or "").splitlines()
                            if line.strip()
                        ]
                        # the first line says what failed, the last (of a traceback) why
                        why = " … ".join(dict.fromkeys([reason[0], reason[-1]])) if reason else ""
                        lines.append(
                            f"{actor.get('name')}[{actor.get('rank')}] ({actor.get('class')}) "
                            f"on {_proc_name(proc)}: {why or 'failed'}"
                        )
        return lines


def tui_app(
    client: AdminClient,
    *,
    refresh_ms: int = REFRESH_MS,
    first: dict[str, Any] | None = None,
    theme: str = "nord",
    lang: str = "en",
) -> App[int]:
    """The ``monarch-tui`` application, to run (``.run()``) or drive in tests
    (``.run_test()``).

    Args:
        client: the mesh admin server to show.
        refresh_ms: how often to fetch the topology, in milliseconds.
        first: a topology already fetched, shown before the first refresh.
        theme: ``nord`` (dark) or ``doom-nord-light`` (light), as Monarch's.
        lang: ``en``, or ``zh`` (Simplified Chinese) for the panes' titles,
            the header and the diagnostics.

    Returns:
        A textual ``App``; its return value is the exit status.

    Raises:
        ValueError: ``refresh_ms`` is below 50, or ``theme``/``lang`` is not one of those.

    Examples:
        >>> app = tui_app(AdminClient("127.0.0.1:1729"))  # doctest: +SKIP
        >>> app.run()  # doctest: +SKIP
    """
    if refresh_ms < 50:
        raise ValueError(f"refresh_ms must be at least 50 (milliseconds), got {refresh_ms}")
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, got {theme!r}")
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    return _TUI(client, refresh_ms=refresh_ms, first=first, theme=theme, lang=lang)
