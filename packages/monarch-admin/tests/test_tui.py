"""monarch-tui against the mesh admin server of a real job: a script started
here that spawns two processes with actors (one failed on purpose), serves
the admin API and takes commands on its stdin."""

from __future__ import annotations

import asyncio
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from monarch_actor.testing import wait_for
from monarch_admin.tui import AdminClient, AdminError, tui_app

DOCS_IMG = Path(__file__).resolve().parents[3] / "docs" / "img"
WAIT = 90.0  # seconds any one awaited change may take on a loaded machine

JOB = """
import os
import signal
import sys
import threading

import monarch_actor
from monarch_actor import Actor, endpoint, this_host
from monarch_admin import enable_admin


class Counter(Actor):
    def __init__(self):
        self.count = 0

    @endpoint
    def incr(self) -> int:
        self.count += 1
        return self.count

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Fragile(Actor):
    @endpoint
    def explode(self) -> None:
        raise ValueError("exploded on purpose")


faulted = threading.Event()


def on_fault(failure):
    # the failures here are on purpose: the job goes on
    print(f"fault: {failure}", file=sys.stderr, flush=True)
    faulted.set()


monarch_actor.unhandled_fault_hook = on_fault
procs = this_host().spawn_procs(per_host={"gpus": 2}, name="workers")
counters = procs.spawn("counter", Counter)
fragile = procs.spawn("fragile", Fragile)
counters.incr.call().get(timeout=60)
fragile.slice(gpus=0).explode.broadcast()
assert faulted.wait(60), "fragile[0] did not fail"
enable_admin(sys.argv[1])
for line in sys.stdin:
    command = line.strip()
    if command == "call":
        counters.incr.call().get(timeout=60)
        print("called", flush=True)
    elif command == "kill":
        pid = counters.slice(gpus=1).pid.call_one().get(timeout=60)
        faulted.clear()
        os.kill(pid, signal.SIGKILL)
        assert faulted.wait(60), "the supervisor did not hear of the killed process"
        print("killed", flush=True)
    else:
        break
procs.stop().get(timeout=60)
"""


class Job:
    """The job script, running: its admin address and a way to command it."""

    def __init__(
        self, folder: Path, *, admin: str = "127.0.0.1:0", env: dict[str, str] | None = None
    ) -> None:
        script = folder / "tui_job.py"
        script.write_text(JOB)
        self.process = subprocess.Popen(
            [sys.executable, str(script), admin],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=folder,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_errors, daemon=True).start()
        first = self.next_line()
        prefix = "Mesh admin server listening on http://"
        assert first.startswith(prefix), first
        where, fragment, self.token = first.removeprefix(prefix).strip().partition("/#token=")
        assert fragment and len(self.token) == 64, first
        host, _, port = where.rpartition(":")
        # a server on every interface is reached on loopback
        self.addr = f"{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line)

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=WAIT)
        except queue.Empty:
            pytest.fail("the job said nothing for a while:\n" + "".join(self.errors[-40:]))
        if line is None:
            pytest.fail("the job ended:\n" + "".join(self.errors[-40:]))
        return line

    def command(self, what: str, answer: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        line = self.next_line()
        assert line.strip() == answer, line

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    running = Job(tmp_path_factory.mktemp("tui-job"))
    yield running
    running.close()


@pytest.fixture
def own_job(tmp_path: Path) -> Iterator[Job]:
    """A job of its own, for a test that kills a process or the whole job."""
    running = Job(tmp_path)
    yield running
    running.close()


# -- helpers -------------------------------------------------------------------------------------


def plain(renderable: object, width: int = 160) -> str:
    """What a rich renderable shows, as text."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def labels(app) -> dict[str, str]:
    """Every tree node's id and label."""
    from textual.widgets import Tree

    tree = app.screen_stack[1].query_one("#tree", Tree)
    found = {}
    stack = [tree.root]
    while stack:
        node = stack.pop()
        found[node.data] = node.label.plain
        stack.extend(node.children)
    return found


def label_of(app, name: str) -> str | None:
    for label in labels(app).values():
        if label.startswith(name + " ") or label == name:
            return label
    return None


def header(app) -> str:
    from textual.widgets import Static

    return plain(app.screen_stack[1].query_one("#header", Static).content)


def node_label(app, name: str) -> Text:
    from textual.widgets import Tree

    tree = app.screen_stack[1].query_one("#tree", Tree)
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if node.label.plain.startswith(name + " "):
            return node.label
        stack.extend(node.children)
    raise AssertionError(f"no {name} in the tree")


def style_of(text: Text, word: str) -> str:
    """The style of ``word`` in ``text``."""
    start = text.plain.index(word)
    return " ".join(str(span.style) for span in text.spans if span.start <= start < span.end)


def detail(app) -> str:
    from textual.widgets import Static

    return plain(app.screen_stack[1].query_one("#detail", Static).content)


def overlay(app) -> str:
    from textual.widgets import Static

    return plain(app.screen.query_one("#overlay-body", Static).content)


async def until(pilot, condition: Callable[[], object], what: str, show: Callable[[], str]):
    """Wait (bounded) for the UI to reach a state; fail with what it shows."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out waiting for {what}; the UI shows:\n{show()}")


async def until_tree(pilot, app, condition: Callable[[], object], what: str) -> None:
    """``until``, showing the tree's labels when it times out."""
    await until(pilot, condition, what, lambda: "\n".join(labels(app).values()))


async def select(pilot, app, name: str) -> None:
    """Move the cursor with j until it is on the node labelled ``name``."""
    from textual.widgets import Tree

    tree = app.screen_stack[1].query_one("#tree", Tree)
    await pilot.press("g")
    for _ in range(len(labels(app)) + 1):
        node = tree.cursor_node
        if node is not None and node.label.plain.startswith(name + " "):
            await pilot.pause()
            return
        await pilot.press("j")
    pytest.fail(f"j never reached {name}: {sorted(labels(app).values())}")


def messages_of(app, name: str) -> int:
    label = label_of(app, name) or ""
    return int(label.split(" msgs")[0].rsplit(" ", 1)[-1]) if " msgs" in label else -1


def screenshot(app, name: str) -> None:
    if os.environ.get("MONARCH_WRITE_SCREENSHOTS") == "1":
        app.save_screenshot(filename=name, path=str(DOCS_IMG))


# -- the UI, driven headless ----------------------------------------------------------------------


def test_tree_shows_hosts_procs_actors_and_the_selected_actor(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=200)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(
                pilot,
                app,
                lambda: label_of(app, "fragile[0]") and "FAILED" in label_of(app, "fragile[0]"),
                "the failed actor in the tree",
            )
            assert "1 host · 2 procs · 4 actors · " in header(app), header(app)
            assert " messages" in header(app) and "0 messages" not in header(app)
            found = labels(app)
            hosts = [label for key, label in found.items() if key.startswith("host:")]
            assert len(hosts) == 1 and "3 procs" in hosts[0], hosts  # the controller too
            for proc in ("workers-0", "workers-1"):
                assert "running" in (label_of(app, proc) or ""), found
            for actor in ("counter[0]", "counter[1]", "fragile[1]"):
                assert "idle" in (label_of(app, actor) or ""), found
            assert "red" in style_of(node_label(app, "fragile[0]"), "FAILED")
            assert "green" in style_of(node_label(app, "counter[0]"), "idle")
            assert label_of(app, "controller") is None, found  # a system proc, until s

            await select(pilot, app, "counter[0]")
            await until(
                pilot,
                lambda: "handled" in detail(app),
                "the selected actor's recent events",
                lambda: detail(app),
            )
            shown = detail(app)
            for expected in (
                "Counter",
                "idle",
                "messages",
                "busy",
                "mailbox",
                "last handler",
                "incr",
                "running now",
                "gpus=0",
                "workers-0",
                "started",
            ):
                assert expected in shown, (expected, shown)
            screenshot(app, "tui-topology.svg")

            await select(pilot, app, "fragile[0]")
            await until(
                pilot,
                lambda: "exploded on purpose" in detail(app),
                "the failed actor's reason",
                lambda: detail(app),
            )
            assert "failed" in detail(app) and "Fragile" in detail(app)

            await select(pilot, app, "workers-1")
            shown = detail(app)
            for expected in ("pid", "address", "ipc://", "host", "workers", "rank 1", "running"):
                assert expected in shown, (expected, shown)

            await pilot.press("g")
            await pilot.press("j")  # the host
            assert "processes" in detail(app) and "actors" in detail(app), detail(app)

            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_refresh_picks_up_new_messages(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=200)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(
                pilot, app, lambda: messages_of(app, "counter[1]") >= 1, "counter[1] in the tree"
            )
            before = messages_of(app, "counter[1]")
            for _ in range(3):
                job.command("call", "called")
            await until_tree(
                pilot,
                app,
                lambda: messages_of(app, "counter[1]") >= before + 3,
                f"counter[1]'s messages to go from {before} to {before + 3}",
            )
            await pilot.press("q")

    asyncio.run(drive())


def test_d_shows_every_process_probe_and_the_failures(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=500)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(pilot, app, lambda: label_of(app, "fragile[0]"), "the tree")
            await pilot.press("d")
            await until(
                pilot,
                lambda: "processes answered" in overlay(app),
                "the diagnostics",
                lambda: overlay(app),
            )
            shown = overlay(app)
            assert "3/3 processes answered" in shown, shown
            # every node: the admin server, the processes and their actors, in two phases
            for expected in (
                "Admin infrastructure",
                "Mesh ",
                "admin server",
                "controller",
                "workers-0",
                "workers-1",
                "counter[0] on workers-0",
                "fragile[1] on workers-1",
                " ms",
                "PASS",
                "failed: ValueError: exploded on purpose",
            ):
                assert expected in shown, (expected, shown)
            assert "FAIL " not in shown, shown  # a failed actor answers: its check passes
            assert "fragile[0] (Fragile) on workers-0" in shown, shown
            assert "ValueError: exploded on purpose" in shown, shown
            screenshot(app, "tui-diagnostics.svg")
            await pilot.press("escape")
            assert app.screen is app.screen_stack[1]
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_p_shows_the_stacks_of_the_selected_process(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=500)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(pilot, app, lambda: label_of(app, "counter[0]"), "the tree")
            await select(pilot, app, "counter[0]")
            await pilot.press("p")
            await until(
                pilot,
                lambda: "Thread" in overlay(app) or "unavailable:" in overlay(app),
                "the stacks",
                lambda: overlay(app),
            )
            shown = overlay(app)
            assert "Stacks of workers-0" in shown, shown
            assert "Thread" in shown, shown  # py-spy's or the interpreter's own
            if shutil.which("py-spy") is None:
                assert "unavailable: py-spy is not installed" in shown, shown
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(drive())


def test_keys_toggle_system_collapse_expand_and_help(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=200)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(pilot, app, lambda: label_of(app, "counter[0]"), "the tree")
            await pilot.press("s")
            assert label_of(app, "controller") is not None, labels(app)
            await pilot.press("s")
            assert label_of(app, "controller") is None, labels(app)
            # stopped actors and processes hide until h (this runtime forgets them
            # at once, so only the header tells)
            assert "stopped hidden (h)" in header(app), header(app)
            await pilot.press("h")
            assert "stopped shown (h)" in header(app), header(app)
            await pilot.press("h")

            from textual.widgets import Tree

            tree = app.screen_stack[1].query_one("#tree", Tree)
            await pilot.press("c")
            host = tree.root.children[0]
            assert not host.is_expanded
            await pilot.press("j", "tab")  # the host, expanded again
            assert host.is_expanded and not host.children[0].is_expanded
            await pilot.press("j", "tab")  # its first process
            assert host.children[0].is_expanded
            await pilot.press("tab")
            assert not host.children[0].is_expanded

            await pilot.press("question_mark")
            assert type(app.screen).__name__ == "_Help"
            await pilot.press("x")
            assert app.screen is app.screen_stack[-1] and type(app.screen).__name__ == "_Topology"
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_the_ui_names_a_server_that_went_away(own_job: Job) -> None:
    gone = own_job

    async def drive() -> None:
        app = tui_app(AdminClient(gone.addr), refresh_ms=100)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(pilot, app, lambda: label_of(app, "counter[0]"), "the tree")
            gone.close()
            await until(
                pilot,
                lambda: "cannot reach the mesh admin server" in header(app),
                "the header to name the lost server",
                lambda: header(app),
            )
            assert gone.addr in header(app) and "Retrying" in header(app), header(app)
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


# -- the command ---------------------------------------------------------------------------------


def tui_command() -> list[str]:
    script = Path(sys.executable).with_name("monarch-tui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "monarch_admin.tui"]


def run_tui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tui_command(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_diagnose_prints_json_and_succeeds(job: Job) -> None:
    done = run_tui("--addr", job.addr, "--diagnose")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["summary"]["healthy"], report
    assert {node["name"] for node in report["nodes"]} >= {"controller", "workers-0", "workers-1"}
    assert all(node["latency_ms"] is not None for node in report["nodes"]), report
    # Monarch's report: every node probed, admin infrastructure apart from the mesh
    checks = {(c["phase"], c["node"], c["label"]): c for c in report["checks"]}
    assert ("admin_infra", "admin_server", "admin server") in checks, sorted(checks)
    assert ("admin_infra", "controller", "controller") in checks, sorted(checks)
    for label in ("counter[0]", "counter[1]", "fragile[0]", "fragile[1]"):
        assert ("mesh", "actor", label) in checks, (label, sorted(checks))
    assert checks[("mesh", "actor", "fragile[0]")]["status"] == "failed"
    assert {c["outcome"] for c in report["checks"]} <= {"pass", "slow"}
    summary = report["summary"]
    assert summary["total"] == len(report["checks"]) == summary["passed"] == 8, summary
    assert (summary["admin_infra_total"], summary["mesh_total"]) == (2, 6), summary
    assert summary["failed_actors"] == 1 and summary["failed"] == 0, summary


def test_diagnose_fails_on_a_dead_process(own_job: Job) -> None:
    own_job.command("kill", "killed")
    done = run_tui("--addr", own_job.addr, "--diagnose")
    assert done.returncode == 1, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    # the process and its two actors
    assert not report["summary"]["healthy"] and report["summary"]["failed"] == 3, report
    failed = {c["label"] for c in report["checks"] if c["outcome"] == "fail"}
    assert failed == {"workers-1", "counter[1]", "fragile[1]"}, failed
    assert "failed its probe" in done.stderr and "workers-1" in done.stderr, done.stderr

    async def drive() -> None:
        app = tui_app(AdminClient(own_job.addr), refresh_ms=500)
        async with app.run_test(size=(150, 42)) as pilot:
            await until_tree(
                pilot,
                app,
                # named, with its pid and actors, as it was last seen
                lambda: "exited" in (label_of(app, "workers-1") or ""),
                "the dead process in the tree",
            )
            await pilot.press("d")
            await until(
                pilot,
                lambda: "processes answered" in overlay(app),
                "the diagnostics",
                lambda: overlay(app),
            )
            shown = overlay(app)
            assert "2/3 processes answered" in shown, shown
            assert "FAIL" in shown and "process exited" in shown, shown
            body = app.screen.query_one("#overlay-body").content
            tables = [part for part in body.renderables if isinstance(part, Table)]
            styles = [row.style for table in tables for row in table.rows]
            assert styles.count("red") == 3  # the failed probes: the process, its actors
            await pilot.press("escape")
            assert "pid " in (label_of(app, "workers-1") or "")
            assert "FAILED" in (label_of(app, "counter[1]") or ""), labels(app)
            await select(pilot, app, "workers-1")
            await pilot.press("p")
            shown = overlay(app)
            assert "unavailable: the process is exited" in shown, shown
            await pilot.press("q")

    asyncio.run(drive())


def test_an_unreachable_server_is_named_with_exit_status_1(tmp_path: Path) -> None:
    import socket

    with socket.socket() as free:  # a port nobody listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for args in (["--diagnose"], []):
        done = run_tui("--addr", f"127.0.0.1:{port}", *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert f"cannot reach the mesh admin server at http://127.0.0.1:{port}" in done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bad_arguments_say_what_is_wrong() -> None:
    done = run_tui("--addr", "nowhere")
    assert done.returncode == 2 and "HOST:PORT" in done.stderr, done.stderr
    done = run_tui("--addr", "127.0.0.1:1", "--refresh-ms", "0")
    assert done.returncode == 2 and "--refresh-ms" in done.stderr, done.stderr
    done = run_tui("--help")
    assert done.returncode == 0
    for expected in ("--addr", "--diagnose", "--token", "--refresh-ms", "examples:", "q quit"):
        assert expected in done.stdout, (expected, done.stdout)
    # Monarch's options, and its refresh default
    for expected in (
        "--theme",
        "doom-nord-light",
        "--lang",
        "zh",
        "--tls-ca",
        "--tls-cert",
        "--tls-key",
        "default 2000",
    ):
        assert expected in done.stdout, (expected, done.stdout)
    done = run_tui("--addr", "127.0.0.1:1", "--theme", "solarized")
    assert done.returncode == 2 and "--theme" in done.stderr, done.stderr
    done = run_tui("--addr", "127.0.0.1:1", "--tls-ca", "/nonexistent.pem")
    assert done.returncode == 2 and "https://" in done.stderr, done.stderr


def test_theme_and_lang(job: Job) -> None:
    async def drive() -> None:
        app = tui_app(AdminClient(job.addr), refresh_ms=500, theme="doom-nord-light", lang="zh")
        async with app.run_test(size=(150, 42)) as pilot:
            from textual.widgets import Tree

            await until_tree(pilot, app, lambda: label_of(app, "counter[0]"), "the tree")
            assert app.theme == "doom-nord-light" and not app.current_theme.dark
            assert app.screen_stack[1].query_one("#tree", Tree).border_title == "拓扑"
            assert "更新于" in header(app), header(app)
            await pilot.press("d")
            await until(
                pilot, lambda: "项检查通过" in overlay(app), "the diagnostics", lambda: overlay(app)
            )
            assert "管理" in overlay(app) and "网格" in overlay(app), overlay(app)
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())
    with pytest.raises(ValueError, match="theme"):
        tui_app(AdminClient(job.addr), theme="solarized")


def test_tls_options_for_an_https_address(tmp_path: Path) -> None:
    ssl = pytest.importorskip("ssl")
    client = AdminClient("https://127.0.0.1:8443")
    assert isinstance(client.ssl_context, ssl.SSLContext)
    assert AdminClient("127.0.0.1:1729").ssl_context is None
    with pytest.raises(ValueError, match="https://"):
        AdminClient("127.0.0.1:1729", tls_ca=str(tmp_path / "ca.pem"))
    with pytest.raises(ValueError, match="--tls-cert"):
        AdminClient("https://127.0.0.1:8443", tls_key=str(tmp_path / "key.pem"))
    with pytest.raises(ValueError, match="cannot load"):
        AdminClient("https://127.0.0.1:8443", tls_ca=str(tmp_path / "missing.pem"))


NO_CREDENTIALS = {"MONARCH_JOB_SECRET": "", "MONARCH_ADMIN_TOKEN": ""}


def test_the_tui_finds_the_token_in_the_jobs_record(tmp_path: Path) -> None:
    state = tmp_path / "state"  # this user's records, for this test alone
    job = Job(tmp_path, env={"MONARCH_STATE_DIR": str(state)})
    try:
        mine = {**NO_CREDENTIALS, "MONARCH_STATE_DIR": str(state)}
        # no address: the newest server this user's jobs recorded, with its token
        done = run_tui("--diagnose", env=mine)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["server"] == f"http://{job.addr}"
        port = job.addr.rpartition(":")[2]
        for addr in (job.addr, f"localhost:{port}", f"http://127.0.0.1:{port}"):
            done = run_tui("--addr", addr, "--diagnose", env=mine)
            assert done.returncode == 0, (addr, done.stderr)
        # the printed URL, fragment and all, gives the token too
        printed = f"http://{job.addr}/#token={job.token}"
        done = run_tui("--addr", printed, "--diagnose", env={**mine, "MONARCH_STATE_DIR": ""})
        assert done.returncode == 0, done.stderr

        # no record here: a 401 that says where monarch-tui looked
        elsewhere = tmp_path / "elsewhere"
        env = {**mine, "MONARCH_STATE_DIR": str(elsewhere)}
        done = run_tui("--addr", job.addr, "--diagnose", env=env)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "HTTP 401" in done.stderr and "--token" in done.stderr, done.stderr
        assert str(elsewhere / "jobs") in done.stderr and "MONARCH_ADMIN_TOKEN" in done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    finally:
        job.close()
    # the job took its record back when it ended
    assert not list((state / "jobs").glob("*-admin.json"))


def test_off_loopback_the_token_is_needed_and_a_401_says_what_to_do(tmp_path: Path) -> None:
    from monarch_admin import admin_token

    secret = bytes(range(32))
    # every interface: reached from elsewhere, the TUI has no record of the job
    job = Job(tmp_path, admin="0.0.0.0:0", env={"MONARCH_JOB_SECRET": secret.hex()})
    try:
        without = {**NO_CREDENTIALS, "MONARCH_STATE_DIR": str(tmp_path / "no-records")}
        done = run_tui("--addr", job.addr, "--diagnose", env=without)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "HTTP 401" in done.stderr and "--token" in done.stderr, done.stderr
        with pytest.raises(AdminError, match="HTTP 401") as refused:
            AdminClient(job.addr, token="").topology()
        assert refused.value.status == 401
        with pytest.raises(AdminError, match="not this job's"):
            AdminClient(job.addr, token="0" * 64).topology()

        token = admin_token(secret)
        assert token == job.token
        done = run_tui("--addr", job.addr, "--diagnose", "--token", token, env=without)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["summary"]["healthy"]
        done = run_tui(
            "--addr", job.addr, "--diagnose", env={**without, "MONARCH_ADMIN_TOKEN": token}
        )
        assert done.returncode == 0, done.stderr
        # the token derived from the job's secret
        done = run_tui(
            "--addr", job.addr, "--diagnose", env={**without, "MONARCH_JOB_SECRET": secret.hex()}
        )
        assert done.returncode == 0, done.stderr
        assert AdminClient(job.addr, token=token).topology()["summary"]["actors"] == 4
    finally:
        job.close()


# -- a real terminal ---------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt install tmux)")
def test_in_a_real_terminal_under_tmux(job: Job, tmp_path: Path) -> None:
    socket_name = f"monarch-tui-test-{os.getpid()}"
    status_file = tmp_path / "status"
    command = " ".join([*tui_command(), "--addr", job.addr, "--refresh-ms", "300"])
    tmux = ["tmux", "-L", socket_name, "-f", "/dev/null"]

    def screen() -> str:
        done = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "tui"], capture_output=True, text=True
        )
        return done.stdout

    def shows(condition: Callable[[], bool], what: str) -> None:
        if not wait_for(condition, WAIT):
            pytest.fail(f"timed out waiting for {what}; the terminal shows:\n{screen()}")

    subprocess.run(
        [
            *tmux,
            "new-session",
            "-d",
            "-s",
            "tui",
            "-x",
            "140",
            "-y",
            "40",
            f"{command}; echo $? > {status_file}.part; mv {status_file}.part {status_file}",
        ],
        check=True,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    try:
        shows(lambda: "counter[0]" in screen() and "fragile[0]" in screen(), "the actors")
        assert "FAILED" in screen()
        subprocess.run([*tmux, "send-keys", "-t", "tui", "d"], check=True)
        shows(lambda: "processes answered" in screen(), "the diagnostics")
        assert "workers-1" in screen()
        subprocess.run([*tmux, "send-keys", "-t", "tui", "q"], check=True)
        shows(status_file.exists, "monarch-tui to exit")
        assert status_file.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
