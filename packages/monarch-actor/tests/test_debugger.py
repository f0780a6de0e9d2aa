"""``breakpoint()`` in actors, end to end: real procs stop in pdb, the debug
controller in this (the controller's) process serves them over TCP, and a
``DebugClient`` drives them as ``monarch debug`` does. (The ``monarch debug``
command itself is tested with monarch-launcher.)"""

import os
import socket
import subprocess
import sys
import textwrap

import pytest
from debug_actors import AsyncDebugee, Debugee, loop_body_line

import monarch_config
from monarch_actor import (
    Actor,
    ActorError,
    DebugClient,
    DebugConnectionError,
    DebugController,
    debug_controller,
    endpoint,
    this_host,
    this_proc,
)
from monarch_actor._debugger.commands import CommandError, parse_command, parse_ranks, selects
from monarch_transport import job_secret

WAIT = 60  # seconds: the most any step here may take


@pytest.fixture
def client(server):
    with DebugClient("127.0.0.1", server, timeout=WAIT) as c:
        yield c


def send(client: DebugClient, line: str) -> str:
    return client.send(line, timeout=WAIT)


def attach(client: DebugClient, actor: str, rank: int) -> str:
    """Attach; on Python 3.13+, where pdb stops on the ``breakpoint()`` line
    itself, step to the line after it, where older versions stop."""
    shown = send(client, f"attach {actor} {rank}")
    if shown.rstrip().endswith("-> breakpoint()"):
        shown += send(client, "n")
    return shown


def stopped(count: int):
    """Wait (on the controller's own event) until ``count`` sessions wait for pdb commands."""
    return debug_controller().wait_pending_session.call_one(count, WAIT).get(timeout=WAIT + 10)


def test_breakpoints_in_two_ranks_are_listed_attached_cast_and_continued(procs, client):
    debugee = procs.spawn("debugee", Debugee)
    other = procs.spawn("other", Debugee)
    results = debugee.slice(gpus=slice(0, 2)).to_debug.call(5)

    infos = stopped(2)
    assert [(i.actor_name, i.rank, i.function, i.waiting) for i in infos] == [
        ("debugee", 0, "Debugee.to_debug", True),
        ("debugee", 1, "Debugee.to_debug", True),
    ]
    assert infos[0].coords == {"gpus": 0} and infos[0].pid != infos[1].pid
    # the mesh goes on: the other ranks of the same mesh, another actor in the
    # stopped processes, and this controller all answer
    assert debugee.slice(gpus=2).ping.call_one().get(timeout=WAIT) == "pong"
    assert other.slice(gpus=0).ping.call_one().get(timeout=WAIT) == "pong"
    assert not results.done()

    assert "MONARCH DEBUGGER" in client.greeting and client.prompt == "monarch_dbg> "
    listed = send(client, "list")
    rows = [row.split() for row in listed.splitlines()[2:]]
    assert [row[:3] for row in rows] == [["debugee", "0", "gpus=0"], ["debugee", "1", "gpus=1"]]
    assert all("Debugee.to_debug" in row and "waiting" in row for row in rows)

    attached = attach(client, "debugee", 0)
    assert "Attached to debug session for debugee 0" in attached
    assert "-> doubled = some_local * 2" in attached
    assert client.prompt == "(Pdb) "
    assert send(client, "p some_local").strip() == "5"
    assert "-> return doubled + 1" in send(client, "n")
    assert send(client, "p doubled").strip() == "10"
    assert "Detached from debug session for debugee 0" in send(client, "detach")
    assert client.prompt == "monarch_dbg> "
    assert "to_debug" in send(client, "list")  # where rank 0 stands now

    cast = send(client, "cast debugee ranks(0,1) p some_local * 100")
    assert cast.splitlines() == ["[debugee 0] 500", "[debugee 1] 1500"]

    # attaching again shows where the session stopped, and what pdb printed last
    again = attach(client, "debugee", 1)
    assert "1500" in again
    assert send(client, "p rank").strip() == "1"
    send(client, "detach")

    continued = send(client, "continue")
    assert continued.splitlines() == ["[debugee 0] continued", "[debugee 1] continued"]
    assert sorted(results.get(timeout=WAIT).values()) == [11, 31]
    assert "No debug sessions" in send(client, "list")
    debugee.stop().get(timeout=WAIT)
    other.stop().get(timeout=WAIT)


def test_no_such_actor_or_rank_and_bad_commands_are_clear_errors(procs, client):
    debugee = procs.spawn("debugee_errors", Debugee)
    results = debugee.slice(gpus=0).to_debug.call(1)
    stopped(1)

    assert send(client, "attach debugee_errors 3") == (
        "error: debugee_errors has no debug session at rank 3; its sessions are at ranks 0 "
        "('list' shows them)\n"
    )
    assert send(client, "attach nobody 0").startswith(
        "error: no actor named 'nobody' is stopped at breakpoint(); these are: debugee_errors"
    )
    assert "select no session of debugee_errors" in send(client, "cast debugee_errors ranks(2:4) n")
    assert "not a rank" in send(client, "cast debugee_errors ranks(x) n")
    assert "no pdb command" in send(client, "cast debugee_errors ranks(0)")
    assert "usage: attach <actor> <rank>" in send(client, "attach debugee_errors")
    assert "unknown command 'frobnicate'" in send(client, "frobnicate")
    assert "Not attached" in send(client, "detach")
    assert "attach <actor> <rank>" in send(client, "help")
    assert client.prompt == "monarch_dbg> "

    send(client, "continue")
    assert results.get(timeout=WAIT).item() == 2 * 1 + 1
    debugee.stop().get(timeout=WAIT)


def test_an_async_endpoint_stepped_past_its_end_returns_its_value(procs, client):
    debugee = procs.spawn("adebugee", AsyncDebugee)
    result = debugee.slice(gpus=1).to_debug.call_one(1)
    stopped(1)
    # the async actor's loop thread waits in pdb; its siblings answer
    assert debugee.slice(gpus=0).ping.call_one().get(timeout=WAIT) == "pong"

    assert "-> await asyncio.sleep(0)" in attach(client, "adebugee", 1)
    assert "-> value += 1" in send(client, "n")  # over an await
    assert "-> return value" in send(client, "n")
    ended = send(client, "n")
    assert "Debug session for adebugee 1 ended: the endpoint returned" in ended
    assert client.prompt == "monarch_dbg> "
    assert result.get(timeout=WAIT) == 3
    assert "No debug sessions" in send(client, "list")
    debugee.stop().get(timeout=WAIT)


def test_a_sync_endpoint_stepped_past_its_end_returns_its_value(procs, client):
    debugee = procs.spawn("stepper", Debugee)
    result = debugee.slice(gpus=2).to_debug.call_one(1)
    stopped(1)
    assert "-> doubled = some_local * 2" in attach(client, "stepper", 2)
    assert "-> return doubled + 1" in send(client, "n")
    assert "--Return--" in send(client, "n")  # pdb stops as the frame returns, as usual
    assert "Debug session for stepper 2 ended: the endpoint returned" in send(client, "n")
    assert result.get(timeout=WAIT) == 1 * 2 + 1  # current_rank() is 0 in a one-rank slice
    assert "No debug sessions" in send(client, "list")
    debugee.stop().get(timeout=WAIT)


def test_quit_in_pdb_fails_that_call_only(procs, client):
    debugee = procs.spawn("quitter", Debugee)
    result = debugee.slice(gpus=1).to_debug.call_one(1)
    stopped(1)
    attach(client, "quitter", 1)
    assert "ended: quit (the endpoint raises bdb.BdbQuit)" in send(client, "q")
    with pytest.raises(ActorError, match="BdbQuit"):
        result.get(timeout=WAIT)
    assert debugee.slice(gpus=1).ping.call_one().get(timeout=WAIT) == "pong"  # it lives on
    debugee.stop().get(timeout=WAIT)


def test_a_breakpoint_set_in_pdb_stops_the_endpoint_again(procs, client):
    debugee = procs.spawn("looper", Debugee)
    result = debugee.slice(gpus=3).loop.call_one(3)
    stopped(1)

    line = loop_body_line()
    attach(client, "looper", 3)
    assert "Breakpoint 1 at" in send(client, f"b {line}")
    first = send(client, "c")  # it runs on, and stops at the breakpoint
    assert f"({line})loop()" in first
    assert send(client, "p i").strip() == "0"
    assert f"({line})loop()" in send(client, "c")
    assert send(client, "p i, total").strip() == "(1, 0)"
    send(client, "detach")
    [info] = debug_controller().list.call_one().get(timeout=WAIT)
    assert (info.actor_name, info.rank, info.lineno) == ("looper", 3, line)

    assert send(client, "continue") == "[looper 3] continued\n"  # clears it first
    assert result.get(timeout=WAIT) == 0 + 1 + 2
    debugee.stop().get(timeout=WAIT)


def test_a_breakpoint_in_an_actor_of_the_controllers_process(client):
    local = this_proc().spawn("local_debugee", Debugee)
    neighbour = this_proc().spawn("local_neighbour", AsyncDebugee)
    result = local.to_debug.call_one(7)
    stopped(1)
    assert neighbour.ping.call_one().get(timeout=WAIT) == "pong"
    assert send(client, "cast local_debugee ranks(0) p some_local") == "[local_debugee 0] 7\n"
    send(client, "continue")
    assert result.get(timeout=WAIT) == 15
    local.stop().get(timeout=WAIT)
    neighbour.stop().get(timeout=WAIT)


def test_an_actor_class_that_travels_by_value_shows_its_source(procs, client):
    class Local(Actor):  # defined here: cloudpickle carries it by value, without its file
        @endpoint
        def run(self, x: int) -> int:
            breakpoint()
            y = x + 1  # BY_VALUE_LINE
            return y

        @endpoint
        def code_file(self) -> str:
            return sys._getframe().f_code.co_filename

    local = procs.spawn("by_value", Local)
    assert local.slice(gpus=1).code_file.call_one().get(timeout=WAIT) == "<dynamic-code>"
    result = local.slice(gpus=0).run.call_one(4)
    [info] = stopped(1)
    assert info.filename == __file__
    attached = attach(client, "by_value", 0)
    assert f"> {__file__}(" in attached and "-> y = x + 1  # BY_VALUE_LINE" in attached
    assert "-> return y" in send(client, "n")
    assert "y = x + 1" in debug_controller().source.call_one(__file__).get(timeout=WAIT)
    send(client, "continue")
    assert result.get(timeout=WAIT) == 5
    local.stop().get(timeout=WAIT)


def test_a_second_client_is_refused_unless_it_takes_over_and_quit_leaves_sessions(procs, server):
    debugee = procs.spawn("takeover", Debugee)
    result = debugee.slice(gpus=0).to_debug.call_one(2)
    stopped(1)
    first = DebugClient("127.0.0.1", server, timeout=WAIT)
    attach(first, "takeover", 0)
    # a second client is refused, and says how to replace the first; the first goes on
    with pytest.raises(
        DebugConnectionError,
        match=rf"another monarch debug client is attached \(since .*, pid {os.getpid()} on .*, "
        r"peer 127\.0\.0\.1:\d+\); pass --takeover",
    ):
        DebugClient("127.0.0.1", server, timeout=WAIT)
    assert send(first, "p 2 + 2") == "4\n" and first.prompt == "(Pdb) "
    with DebugClient("127.0.0.1", server, timeout=WAIT, takeover=True) as second:
        assert "Another `monarch debug` attached" in first.send("p 1", timeout=WAIT)
        assert first.closed
        assert "Leaving the debugger" in send(second, "quit")
        assert second.closed
    with DebugClient("127.0.0.1", server, timeout=WAIT) as third:
        assert "takeover" in send(third, "list")
        assert send(third, "continue") == "[takeover 0] continued\n"
    assert result.get(timeout=WAIT) == 5
    debugee.stop().get(timeout=WAIT)


def test_a_session_whose_process_dies_goes_away(client, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    debugee = procs.spawn("doomed", Debugee)
    result = debugee.to_debug.call_one(0)
    [info] = stopped(1)
    os.kill(info.pid, 9)
    with pytest.raises(Exception, match="doomed"):
        result.get(timeout=WAIT)
    # through the control loop, which told the debug controller of the loss before
    assert debug_controller().list.call_one().get(timeout=WAIT) == []
    assert "No debug sessions" in send(client, "list")
    procs.stop().get(timeout=WAIT)


def test_a_server_beyond_loopback_asks_for_the_job_secret(tmp_path):
    with monarch_config.configured(debug_server_host="0.0.0.0", debug_server_port=0):
        guarded = this_proc().spawn("guarded_debug_controller", DebugController)
        host, port = guarded.server_address.call_one().get(timeout=WAIT)
    assert host == "0.0.0.0"
    with pytest.raises(DebugConnectionError, match="did not prove the job's secret"):
        DebugClient("127.0.0.1", port, secret=bytes(32), timeout=WAIT)
    admitted = DebugClient("127.0.0.1", port, secret=job_secret(), timeout=WAIT)
    assert "No debug sessions" in send(admitted, "list")
    code = textwrap.dedent(
        f"""
        from monarch_actor import DebugClient
        try:
            DebugClient("127.0.0.1", {port}, timeout=30)
        except ConnectionError as error:
            print(error)
        """
    )
    # no secret in the environment, and no record of the program's (another state folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONARCH_JOB_SECRET")}
    env["MONARCH_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=WAIT
    )
    assert "asks for the job's secret: set MONARCH_JOB_SECRET" in done.stdout, done.stderr
    guarded.stop().get(timeout=WAIT)
    # a client still connected hears that the program's debug server stops
    assert send(admitted, "list") == "The program is ending: its debug server stops.\n"
    assert admitted.closed


def test_a_port_in_use_is_a_clear_error_at_the_breakpoint(procs):
    with monarch_config.configured(debug_server_host="127.0.0.1", debug_server_port=0):
        first = this_proc().spawn("first_debug_controller", DebugController)
        _, port = first.server_address.call_one().get(timeout=WAIT)
    with monarch_config.configured(debug_server_host="127.0.0.1", debug_server_port=port):
        second = this_proc().spawn("second_debug_controller", DebugController)
        with pytest.raises(Exception, match=f"cannot listen at 127.0.0.1:{port}"):
            second.server_address.call_one().get(timeout=WAIT)
    first.stop().get(timeout=WAIT)
    second.stop().get(timeout=WAIT)


def test_a_breakpoint_the_server_cannot_serve_fails_the_endpoint_clearly():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = textwrap.dedent(
            """
            from debug_actors import Debugee
            from monarch_actor import ActorError, this_host

            procs = this_host().spawn_procs(per_host={"gpus": 1})
            try:
                procs.spawn("unserved", Debugee).to_debug.call_one(1).get(timeout=60)
            except ActorError as error:
                print("RAISED", error.exception)
            print(procs.spawn("after", Debugee).ping.call_one().get(timeout=60))
            """
        )
        env = {
            **os.environ,
            "MONARCH_DEBUG_SERVER_HOST": "127.0.0.1",
            "MONARCH_DEBUG_SERVER_PORT": str(port),
            "PYTHONPATH": os.path.dirname(os.path.abspath(__file__)),
        }
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=WAIT
        )
    assert done.returncode == 0, done.stderr
    raised, after = done.stdout.splitlines()
    assert raised.startswith(
        "RAISED breakpoint() in unserved 0 cannot be served by the debug controller: the debug "
        f"server cannot listen at 127.0.0.1:{port}: "
    )
    assert "Set MONARCH_DEBUG_SERVER_PORT" in raised
    assert after == "pong"


def test_no_server_is_a_clear_error():
    with pytest.raises(DebugConnectionError) as caught:
        DebugClient("127.0.0.1", _closed_port(), timeout=WAIT)
    text = str(caught.value)
    assert text.startswith("no debug server at 127.0.0.1:")
    assert "breakpoint()" in text and "MONARCH_DEBUG_SERVER_PORT" in text


def test_breakpoint_outside_actors_goes_to_the_hook_in_place_before(server):
    from monarch_actor._debugger import remote_pdb as debugger

    seen = []
    previous = debugger._previous_hook
    debugger._previous_hook = lambda *a, **k: seen.append((a, k))
    try:
        assert sys.breakpointhook is debugger._breakpointhook
        breakpoint(1, x=2)  # the script's own thread: no actor runs here
    finally:
        debugger._previous_hook = previous
    assert seen == [((1,), {"x": 2})]


@pytest.mark.parametrize(
    ("spec", "ranks", "chosen"),
    [
        ("1", 1, [1]),
        ("1,3", [1, 3], [1, 3]),
        ("0:4", range(0, 4), [0, 1, 2, 3]),
        ("1:8:3", range(1, 8, 3), [1, 4, 7]),
        (":2", range(0, 2), [0, 1]),
        ("6:", range(6, sys.maxsize), [6, 7]),
        ("gpus=1", {"gpus": 1}, [1, 3, 5, 7]),
        ("hosts=0:2, gpus=(0,1)", {"hosts": range(0, 2), "gpus": [0, 1]}, [0, 1, 2, 3]),
    ],
)
def test_ranks_specs_select_as_in_monarch(spec, ranks, chosen):
    assert parse_ranks(spec) == ranks
    coords = [{"hosts": r // 2, "gpus": r % 2} for r in range(8)]
    assert [r for r in range(8) if selects(ranks, r, coords[r])] == chosen


@pytest.mark.parametrize("bad", ["", "x", "1:2:3:4", "0:4:0", "-1", "gpus=", "gpus=1,gpus=2"])
def test_bad_ranks_specs_say_what_to_write(bad):
    with pytest.raises(CommandError, match="ranks"):
        parse_ranks(bad)


def test_commands_parse_with_monarchs_short_forms():
    cast = parse_command("cast trainers ranks(hosts=(0,1), gpus=2) p x[0]")
    assert (cast.actor, cast.ranks, cast.command) == (
        "trainers",
        {"hosts": [0, 1], "gpus": 2},
        "p x[0]",
    )
    assert parse_command("a trainers 3") == parse_command("attach  trainers 3")
    assert type(parse_command("c")) is type(parse_command("continue"))
    with pytest.raises(CommandError, match="takes no arguments"):
        parse_command("list all")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_controller_finds_the_source_of_a_notebook_cell(server, monkeypatch):
    """A notebook's ``__main__`` has no ``__file__`` and its cells are no files:
    the kernel keeps their text in ``linecache``. Code of a cell that travelled
    by value is found there by its name, first line and bytecode."""
    import linecache
    import types

    cell = "/tmp/ipykernel_4242/1234567.py"
    source = textwrap.dedent(
        """\
        class Cell(Actor):
            @endpoint
            def step(self, x: int) -> int:
                return x + 1


        def outer():
            def inner():
                return 2

            return inner


        kept = outer()
        """
    )
    main = types.ModuleType("__main__")
    main.__dict__.update(Actor=Actor, endpoint=endpoint)
    exec(compile(source, cell, "exec"), main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setitem(linecache.cache, cell, (len(source), None, source.splitlines(True), cell))

    def ask(code):
        found = debug_controller().main_source.call_one(
            code.co_qualname, code.co_firstlineno, code.co_code
        )
        return found.get(timeout=WAIT)

    import inspect

    step = inspect.unwrap(main.Cell.__dict__["step"].method).__code__  # the method itself
    assert ask(step) == (cell, source)
    assert ask(main.kept.__code__) == (cell, source)  # a nested function: found among the live ones
    assert ask(ask.__code__) is None  # not a function of this __main__

    class Touchy:  # as torch.backends.cuda's module object where there is no CUDA
        def __getattr__(self, name):
            raise AssertionError(f"{name} looked up")

    touchy = Touchy()  # among the live objects the controller looks through
    assert ask(ask.__code__) is None
    del touchy
