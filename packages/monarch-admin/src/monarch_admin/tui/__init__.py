"""``monarch-tui``: a running job's hosts, processes and actors in a terminal,
refreshed live, with probes of every process and the stacks of any one.

It is a client of the mesh admin server (``enable_admin``): it reads the
server's JSON API over HTTP, so it runs anywhere the server can be reached,
and it never joins the job itself.

Keys (``?`` shows them in the UI), as Monarch's own TUI has them: ``j``/``k``
move, ``Tab`` expands or collapses the selected node, ``c`` collapses all,
``s`` shows or hides system processes and actors, ``h`` shows or hides stopped
ones (failed ones always show), ``d`` runs the diagnostics, ``p`` shows the
stacks of the selected process, ``q`` quits. Added here: ``Shift+Tab`` moves
between the tree and the detail pane, ``r`` refreshes at once.

A server that cannot be reached when ``monarch-tui`` starts ends it with a
message and exit status 1; one that goes away later (the job ended) is named
in the header and retried every refresh until ``q``.

Every request carries the job's admin token. Run by the job's user,
``monarch-tui`` needs nothing pasted: the server leaves a record of its URL
and token that only this user may read (``read_records("admin")``), and the
record for the address asked (or the newest one, when no address is given)
supplies the token. ``--token``/``$MONARCH_ADMIN_TOKEN`` or the job's secret
(``$MONARCH_JOB_SECRET``) serve from another machine.

Examples:
    In the job's script: ``enable_admin()`` prints ``Mesh admin server
    listening on http://127.0.0.1:1729/#token=...``; in another terminal::

        monarch-tui                                    # the newest job of this user
        monarch-tui --addr 127.0.0.1:1729
        monarch-tui --addr 127.0.0.1:1729 --diagnose   # JSON; exit 1 if unhealthy
"""

# The package's modules, each importing only those below it (pyproject.toml's
# import-linter contract checks it): _cli (the command) > _app (the textual
# app) > _topology (its main screen) > _overlays (diagnostics, stacks, help) >
# _views, _reports (rich renderings of the server's JSON) > _format (shared
# words and styles) > _client (HTTP) > _records, _background.
from ._app import tui_app
from ._cli import main
from ._client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError", "main", "tui_app"]
