"""The screens shown over the topology: diagnostics (``d``), a process's
stacks (``p``) and the keys (``?``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ._background import _off_loop
from ._client import AdminClient, AdminError
from ._format import LABELS, _proc_name, _proc_status
from ._reports import _diagnostics_view, _stacks_view

HELP = [
    ("j / ↓", "move down"),
    ("k / ↑", "move up"),
    ("g / Home, G / End", "first / last node"),
    ("PgDn, PgUp", "a page down / up"),
    ("Tab (Enter, Space)", "expand or collapse the selected node"),
    ("c", "collapse every node"),
    ("s", "show or hide system processes (the controller, host workers) and actors"),
    ("h", "show or hide stopped actors and processes (failed ones always show)"),
    ("d", "diagnostics: a round trip to every process, with its latency"),
    ("p", "stacks of the selected process (of an actor's process)"),
    ("r", "refresh now"),
    ("Shift+Tab", "move between the tree and the detail pane (j/k then scroll it)"),
    ("?", "this help"),
    ("Esc", "close an overlay"),
    ("q / Ctrl+C", "quit"),
]


# -- the screens --------------------------------------------------------------------------------


class _Overlay(ModalScreen[None]):
    """A scrollable overlay over the tree; Esc closes it, q quits."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close"),
        Binding("j,down", "scroll(1)", "scroll", show=False),
        Binding("k,up", "scroll(-1)", "scroll", show=False),
        Binding("q", "app.quit_tui", "quit"),
    ]
    DEFAULT_CSS = """
    _Overlay { align: center middle; }
    _Overlay > VerticalScroll {
        width: 94%; height: 90%; border: thick $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = Static(Text("…", style="dim"), id="overlay-body")

    def compose(self) -> ComposeResult:
        scroll = VerticalScroll(self.body, id="overlay")
        scroll.border_title = self.title_text
        yield scroll

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, lines: int) -> None:
        scroll = self.query_one("#overlay", VerticalScroll)
        scroll.scroll_relative(y=lines, animate=False)


class _Diagnostics(_Overlay):
    """The diagnostics overlay (``d``): probes every node, ``d``/``r`` probes again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d,r", "run", "run again"),
    ]

    def __init__(self, client: AdminClient, failed_actors: list[str], lang: str = "en") -> None:
        super().__init__(LABELS[lang]["diagnostics"])
        self.lang = lang
        self.client = client
        self.failed_actors = failed_actors
        self.report: dict[str, Any] | None = None

    def on_mount(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        self.body.update(Text(LABELS[self.lang]["probing"], style="dim"))
        self.run_worker(self._probe(), exclusive=True, group="diagnostics")

    async def _probe(self) -> None:
        try:
            report = await _off_loop(self.client.diagnostics)
        except AdminError as error:
            self.body.update(Text(f"unavailable: {error}", style="bold red"))
            return
        self.report = report
        self.body.update(_diagnostics_view(report, self.failed_actors, self.lang))


class _Stacks(_Overlay):
    """The stacks overlay (``p``) of one process; ``p`` fetches them again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "run", "fetch again"),
    ]

    def __init__(self, client: AdminClient, proc: dict[str, Any]) -> None:
        super().__init__(f"stacks · {_proc_name(proc)}")
        self.client = client
        self.proc = proc
        self.answer: dict[str, Any] | None = None

    def on_mount(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        status = _proc_status(self.proc)
        if status != "running" or not self.proc.get("address"):
            problem = f"the process is {status}: it has no stacks to show"
            self.body.update(_stacks_view(self.proc, None, problem))
            return
        self.body.update(Text(f"asking {_proc_name(self.proc)} for its stacks…", style="dim"))
        self.run_worker(self._fetch(), exclusive=True, group="stacks")

    async def _fetch(self) -> None:
        address = str(self.proc["address"])
        try:
            answer = await _off_loop(lambda: self.client.stacks(address))
        except AdminError as error:
            self.body.update(_stacks_view(self.proc, None, str(error)))
            return
        self.answer = answer
        self.body.update(_stacks_view(self.proc, answer, None))


class _Help(ModalScreen[None]):
    """The keys (``?``); any key closes it, ``q`` quits."""

    DEFAULT_CSS = """
    _Help { align: center middle; }
    _Help > Static { width: auto; height: auto; border: thick $accent; background: $surface;
                     padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 3))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for keys, what in HELP:
            table.add_row(keys, what)
        notes = Text(
            "\nBadges: idle (green), busy <handler> <for how long> (yellow), FAILED (red), "
            "stopped (grey);\nN msgs = messages handled, N queued = mailbox depth.\n"
            "A server that stops answering is named in the header and retried until q.\n"
            "Any key closes this help.",
            style="dim",
        )
        help_text = Static(Group(Text("monarch-tui keys\n", style="bold"), table, notes))
        help_text.border_title = "help"
        yield help_text

    def on_key(self, event: events.Key) -> None:
        event.stop()
        if event.key in ("q", "ctrl+c"):
            self.app.exit(0)
        else:
            self.dismiss(None)
