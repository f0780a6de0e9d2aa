"""Processes: started by the host agent, reaped on stop(), at exit and when the
controller is killed; scripts whose actors live in ``__main__``."""

import asyncio
import logging
import os
import signal
import socket
import threading

import pytest
from script_runner import run_script

from monarch_actor import Actor, endpoint, this_host
from monarch_actor.extension import background_thread
from monarch_actor.testing import Failures, alive, blocks_ctrl_c, gone, threads_named


def test_stop_reaps_the_processes():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    from actors import Probe

    pids = [s["pid"] for s in procs.spawn("p", Probe).where.call().get().values()]
    assert all(alive(p) for p in pids)
    procs.stop().get(timeout=30)
    assert gone(pids, 1.0) == []


@pytest.mark.parametrize("how", ["exit", "sigkill", "sigterm"])
def test_no_orphans_when_the_controller_ends(how):
    """However the script ends, its processes end with it, without a line
    each on its terminal (a mesh of 256 would print 256)."""
    script = run_script(
        """
        procs = this_host().spawn_procs(per_host={"gpus": 32})
        pids = procs.spawn("pids", Pid).pid.call().get().values()
        print(" ".join(map(str, [host_agent().process.pid, *pids])), flush=True)
        if sys.argv[-1] == "sleep":
            time.sleep(600)
        """.replace("sys.argv[-1]", repr("exit" if how == "exit" else "sleep"))
    )
    try:
        line = script.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 33, (line, script.stderr.read() if script.poll() is not None else "")
        if how != "exit":
            os.kill(script.pid, signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        script.wait(30)
        assert gone(pids) == []
        assert script.stderr.read() == ""  # every writer is gone: it reads to the end
    finally:
        script.kill()
        script.wait()


def test_a_script_that_ends_with_messages_in_flight_ends_quietly():
    """Broadcasts still travelling down the tree and the answers of a call
    that failed fast are dropped at the end without a word: each proc said
    "dropped a message" for each one (hundreds of lines on nng), and a proc
    dialing another as it stopped left a traceback."""
    script = run_script(
        """
        class Hit(Actor):
            @endpoint
            def hit(self, n: int) -> None:
                pass

            @endpoint
            def boom(self) -> None:
                raise ValueError("bad input")

        hits = this_host().spawn_procs(per_host={"gpus": 32}).spawn("hits", Hit)
        try:  # the first call: the procs dial one another to pass it down the tree
            hits.boom.call().get()  # fails at the first answer: 31 are still coming
        except Exception as error:
            print(type(error).__name__, flush=True)
        for n in range(50):
            hits.hit.broadcast(n)
        """
    )
    out, err = script.communicate(timeout=120)
    assert (script.returncode, out, err) == (0, "ActorError\n", "")


@pytest.mark.parametrize("end", ["return", "ctrl-c"])
def test_a_script_ends_without_waiting_for_actors_busy_in_a_message(end, tmp_path):
    """Monarch ends a script at once, busy actors or not: so does this. Idle
    actors still run their __cleanup__; the busy ones are cut short (their
    stop would wait behind a message that, here, never returns)."""
    script = run_script(
        f"""
        from monarch_actor import this_proc

        class Sleeper(Actor):
            @endpoint
            def nap(self) -> None:
                time.sleep(600)

            @endpoint
            def pid(self) -> int:
                return os.getpid()

            def __cleanup__(self, exc) -> None:
                open(os.path.join({str(tmp_path)!r}, f"cleaned-{{os.getpid()}}"), "w").close()

        procs = this_host().spawn_procs(per_host={{"gpus": 2}})
        sleepers = procs.spawn("sleepers", Sleeper)
        pids = list(sleepers.pid.call().get().values())
        sleepers.slice(gpus=0).nap.call_one()  # busy from now on; rank 1 stays idle
        this_proc().spawn("local", Sleeper).nap.call_one()  # busy in this process too
        print(" ".join(map(str, [host_agent().process.pid, *pids])), flush=True)
        if {end == "ctrl-c"!r}:
            sleepers.slice(gpus=0).nap.call_one().get()  # interrupted by the test
        """
    )
    try:
        line = script.stdout.readline()
        agent, busy, idle = [int(p) for p in line.split()]
        if end == "ctrl-c":
            script.send_signal(signal.SIGINT)
        # waiting for the busy actors would take 8 s (a proc's, STOP_TIMEOUT - 2)
        # and 4 s (this process's, the cleanup timeout and 1 s)
        script.wait(3)
        assert gone([agent, busy, idle]) == []
        assert (tmp_path / f"cleaned-{idle}").exists()
        assert not (tmp_path / f"cleaned-{busy}").exists()
    finally:
        script.kill()
        script.wait()


def test_ctrl_c_reaches_a_get_whichever_thread_the_kernel_gives_it_to():
    """Python runs signal handlers on the main thread only; a SIGINT the
    kernel hands to another thread (here, forced: an actor's of the script's
    own process) must still end the main thread's `.get()`."""
    script = run_script(
        """
        import signal, threading
        from monarch_actor import this_proc

        class Poker(Actor):
            @endpoint
            def poke_once_main_waits(self) -> None:
                main = threading.main_thread().ident
                while not sys._current_frames()[main].f_code.co_filename.endswith("reply.py"):
                    time.sleep(0.001)  # the script is on its way into .get()
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread
                time.sleep(600)

        try:
            this_proc().spawn("poker", Poker).poke_once_main_waits.call_one().get()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    try:
        assert script.stdout.readline() == "interrupted\n"
        script.wait(30)
    finally:
        script.kill()
        script.wait()


def test_the_runtimes_threads_leave_ctrl_c_to_the_main_thread_and_actors_take_it():
    from actors import Victim

    from monarch_actor import this_proc

    this_proc().spawn("local", Victim).pid.call_one().get()
    assert blocks_ctrl_c(threads_named("monarch-control")[0])  # and the threads it starts
    # an actor runs the user's code, whose child processes inherit its mask
    assert not blocks_ctrl_c(threads_named("monarch-actor-driver")[0])
    assert not blocks_ctrl_c(threading.main_thread())


def test_a_background_thread_started_by_the_script_leaves_ctrl_c_to_it():
    assert not blocks_ctrl_c(threading.current_thread())  # the main thread: its mask inherited
    seen: list[bool] = []
    thread = background_thread("monarch-test", lambda: seen.append(blocks_ctrl_c(thread)))
    thread.start()
    thread.join(10)
    assert seen == [True] and thread.daemon and thread.name == "monarch-test"


def test_output_streams_to_the_controller_tagged_with_rank():
    script = run_script(
        """
        import io
        from monarch_actor.testing import wait_for

        class Tee(io.StringIO):  # what reaches this stdout, kept to wait on
            def write(self, text):
                sys.__stdout__.write(text)
                return super().write(text)

        sys.stdout = shown = Tee()
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=None))
        actors = procs.spawn("talk", Pid)
        actors.slice(gpus=1).say.call_one("hello from one").get()
        # output travels on its own path: it arrives before the switch
        assert wait_for(lambda: "hello from one" in shown.getvalue())
        asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=1))
        actors.say.call("same everywhere").get()
        assert wait_for(lambda: "similar log lines" in shown.getvalue())
        procs.stop().get()
        sys.__stdout__.flush()
        """
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert "] [1] hello from one" in out
    assert "[2 similar log lines] same everywhere" in out


def test_a_window_counts_every_line_and_belongs_to_its_own_proc_mesh():
    # Monarch's count: 5 lines said by each of 2 ranks are 10 similar lines; a
    # mesh whose owner never asked for a window shows its lines one by one
    script = run_script(
        """
        windowed = this_host().spawn_procs(per_host={"gpus": 2})
        plain = this_host().spawn_procs(per_host={"gpus": 2})
        asyncio.run(windowed.logging_option(stream_to_client=True, aggregate_window_sec=600))
        asyncio.run(plain.logging_option(stream_to_client=True, aggregate_window_sec=None))
        talk = windowed.spawn("talk", Pid)
        for _ in range(5):
            talk.say.call("five times each").get()
        plain.spawn("talk", Pid).slice(gpus=0).say.call_one("said alone").get()
        # a shorter window shows what the long one held, before the new one starts
        asyncio.run(windowed.logging_option(stream_to_client=True, aggregate_window_sec=1))
        print("CHANGED", flush=True)
        talk.say.call("after the change").get()
        windowed.stop().get()
        plain.stop().get()
        """
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert out.count("[10 similar log lines] five times each") == 1, out
    assert out.index("five times each") < out.index("CHANGED"), out
    assert "[2 similar log lines] after the change" in out, out
    assert "] [0] said alone" in out and "similar log lines] said alone" not in out, out


@pytest.mark.parametrize("end", ["stop", "exit"])
def test_the_last_aggregation_window_is_shown_at_stop_and_at_exit(end):
    # a window far longer than the script: only stop() or the exit can show the lines
    script = run_script(
        f"""
        procs = this_host().spawn_procs(per_host={{"gpus": 2}})
        asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=600))
        procs.spawn("talk", Pid).say.call("said in the last window").get()
        if {end == "stop"!r}:
            procs.stop().get()
            print("STOPPED", flush=True)
        """
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert "[2 similar log lines] said in the last window" in out, (out, err)
    if end == "stop":
        assert out.index("said in the last window") < out.index("STOPPED"), out


def test_an_error_nobody_awaits_fails_the_script_fast():
    script = run_script(
        """
        class Bad(Actor):
            @endpoint
            def boom(self) -> None:
                raise RuntimeError("nobody waits for me")

        procs = this_host().spawn_procs(per_host={"gpus": 2})
        procs.spawn("bad", Bad).boom.broadcast()
        time.sleep(30)
        print("not reached")
        """
    )
    out, err = script.communicate(timeout=60)
    assert "not reached" not in out
    assert "nobody waits for me" in err
    assert "KeyboardInterrupt" in err


def test_the_fault_hook_can_be_replaced():
    from actors import Counter

    import monarch_actor

    # a mesh of its own: a process that hosted a failed actor takes no new
    # ones, so the session's shared mesh must not be the one that fails
    procs = monarch_actor.this_host().spawn_procs(per_host={"gpus": 4})

    seen = Failures()
    original = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = seen.append
    try:
        procs.spawn("counters", Counter, 0).slice(gpus=2).boom.broadcast("told nobody")
        assert seen.wait(10)
    finally:
        monarch_actor.unhandled_fault_hook = original
    assert seen and "told nobody" in seen[0].report()
    assert seen[0].crashed_ranks == [2]
    procs.stop().get(timeout=30)


def test_broadcasts_travel_down_a_tree():
    script = run_script(
        """
        class Count(Actor):
            def __init__(self):
                self.n = 0
            @endpoint
            def bump(self) -> None:
                self.n += 1
            @endpoint
            def get(self) -> int:
                return self.n

        procs = this_host().spawn_procs(per_host={"hosts": 3, "gpus": 3})
        counts = procs.spawn("counts", Count)
        for _ in range(5):
            counts.bump.broadcast()
        counts.slice(hosts=1).bump.broadcast()
        print(counts.get.call().get().values(), flush=True)
        procs.stop().get()
        """,
        env={**os.environ, "MONARCH_CAST_FANOUT": "2"},
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert out.strip() == str([5, 5, 5, 6, 6, 6, 5, 5, 5])


def test_a_direct_call_never_overtakes_an_earlier_broadcast():
    """FIFO per (sender, actor) holds across paths: a broadcast that reaches
    an actor through the tree's forwarders arrives before a later call_one
    that goes straight to it."""
    script = run_script(
        """
        class Count(Actor):
            def __init__(self):
                self.n = 0
            @endpoint
            def bump(self) -> None:
                self.n += 1
            @endpoint
            def get(self) -> int:
                return self.n

        procs = this_host().spawn_procs(per_host={"gpus": 7})
        counts = procs.spawn("counts", Count)
        counts.get.call().get()
        late = []
        for i in range(1, 151):
            counts.bump.broadcast()
            for rank in (6, 4, 2):  # leaves of the fan-out-2 tree
                seen = counts.slice(gpus=rank).get.call_one().get()
                if seen != i:
                    late.append((i, rank, seen))
        print("late", late[:5], len(late), flush=True)
        procs.stop().get()
        """,
        env={**os.environ, "MONARCH_CAST_FANOUT": "2"},
    )
    out, err = script.communicate(timeout=120)
    assert script.returncode == 0, err
    assert out.strip() == "late [] 0"


def test_stopping_a_slice_stops_only_its_processes():
    from actors import Probe

    procs = this_host().spawn_procs(per_host={"gpus": 3})
    probes = procs.spawn("p", Probe)
    pids = [s["pid"] for s in probes.where.call().get().values()]
    procs.slice(gpus=slice(0, 2)).stop().get(timeout=30)
    assert gone(pids[:2], 1.0) == []
    assert alive(pids[2])
    assert probes.slice(gpus=2).echo.call_one("still here").get(timeout=10) == "still here"
    procs.slice(gpus=2).stop().get(timeout=30)
    assert gone(pids[2:], 1.0) == []


def test_bootstrap_runs_before_actors_and_its_failure_is_clear():
    from actors import Env, Probe, fail_bootstrap, set_flag

    import monarch_actor
    from monarch_actor import ActorError, SupervisionError

    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=set_flag)
    seen = procs.spawn("p", Probe).echo.call(os.environ.get("BOOTSTRAPPED")).get(timeout=30)
    assert seen.values() == [None, None]  # the controller's own environment is untouched
    env = procs.spawn("q", Env).get.call("BOOTSTRAPPED").get(timeout=30)
    assert env.values() == ["yes", "yes"]
    procs.stop().get(timeout=30)

    # as in Monarch: a bootstrap that raises fails `initialized` (every time, with
    # the same ActorError) and every spawn there; it is no supervision failure
    faults = []
    original = monarch_actor.unhandled_fault_hook
    monarch_actor.unhandled_fault_hook = faults.append
    try:
        broken = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=fail_bootstrap)
        probe = broken.spawn("p", Probe)  # before the processes have started
        errors = []
        for _ in range(2):
            with pytest.raises(ActorError, match=r"(?s)Actor call setup\.setup failed.*no GPUs"):
                broken.initialized.get(timeout=30)
            errors.append(broken.initialized.exception(timeout=30))
        assert str(errors[0]) == str(errors[1])
        with pytest.raises(ActorError, match="no GPUs here"):
            probe.initialized.get(timeout=30)
        with pytest.raises(SupervisionError, match=r"p was not started: the bootstrap raised"):
            probe.echo.call(1).get(timeout=30)
        broken.stop().get(timeout=30)
    finally:
        monarch_actor.unhandled_fault_hook = original
    assert faults == []


def test_proc_bind_pins_each_process_to_its_cpus():
    from actors import Affinity

    from monarch_actor._procs.binding import cpu_list

    usable = sorted(os.sched_getaffinity(0))
    first, last = usable[0], usable[-1]
    procs = this_host().spawn_procs(
        per_host={"gpus": 2}, proc_bind=[{"cpus": str(first)}, {"physcpubind": f"{first}-{last}"}]
    )
    seen = procs.spawn("a", Affinity).cpus.call().get(timeout=30).values()
    assert seen == [[first], usable]
    procs.stop().get(timeout=30)
    with pytest.raises(ValueError, match=r"must equal procs_per_host \(2\)"):
        this_host().spawn_procs(per_host={"gpus": 2}, proc_bind=[{"cpus": "0"}])
    with pytest.raises(ValueError, match="membind"):
        this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"membind": "0"}])
    with pytest.raises(ValueError, match="unknown"):
        this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"cpu": "0"}])
    assert cpu_list("0-2, 5") == {0, 1, 2, 5}
    with pytest.raises(ValueError, match="CPU list"):
        cpu_list("3-1")


def test_shutting_down_the_host_stops_its_processes_and_a_new_mesh_still_starts():
    # in a script of its own: shutdown() stops every mesh of the process
    script = run_script(
        """
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        pids = procs.spawn("pids", Pid).pid.call().get().values()
        this_host().shutdown().get(timeout=30)
        print(" ".join(map(str, pids)), flush=True)
        again = this_host().spawn_procs(per_host={"gpus": 1})
        print(again.spawn("pids", Pid).pid.call_one().get(timeout=30) not in pids, flush=True)
        again.stop().get()
        """
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    first, second = out.strip().splitlines()
    assert gone([int(p) for p in first.split()], 5.0) == []
    assert second == "True"


def test_shutdown_context_stops_the_processes_once_and_the_script_goes_on():
    script = run_script(
        """
        from monarch_actor import shutdown_context
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        pids = list(procs.spawn("pids", Pid).pid.call().get().values())
        try:
            shutdown_context(host_timeout=float("nan"))
        except ValueError as error:
            print("refused:", error, flush=True)
        first, again = shutdown_context(host_timeout=5), shutdown_context()
        assert again.get(timeout=0) is None  # already resolved: a later call does not wait
        first.get(timeout=30)
        print(" ".join(map(str, pids)), flush=True)
        print("still running", flush=True)
        """
    )
    out, err = script.communicate(timeout=60)
    lines = out.splitlines()
    assert lines[0].startswith("refused: shutdown_context: host_timeout must be"), (out, err)
    assert lines[-1] == "still running", (out, err)
    assert gone([int(p) for p in lines[1].split()]) == []


class RootLevel(Actor):
    @endpoint
    def level(self) -> int:
        import logging

        return logging.getLogger().level


@pytest.mark.parametrize("level", [logging.INFO, logging.ERROR])
def test_logging_option_sets_the_processes_root_logger_level(level):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        asyncio.run(procs.logging_option(level=level))
        assert set(procs.spawn("lv", RootLevel).level.call().get().values()) == {level}
    finally:
        procs.stop().get(timeout=30)


def test_a_process_stopped_cleanly_runs_finalizers_and_atexit_handlers(tmp_path):
    from actors import FinalizerMarker

    marker = tmp_path / "marker"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    pid = procs.spawn("marker", FinalizerMarker, str(marker)).pid.call_one().get()
    procs.stop().get(timeout=30)
    assert gone([pid]) == []
    assert marker.read_text() == "finalized"  # a module global's __del__ ran
    assert (tmp_path / "marker.atexit").exists()


def test_a_forked_process_keeps_what_it_inherits_out_of_the_collector():
    # the fork server freezes its objects before it forks: a proc's full
    # collections walk only what the proc made, and leave the pages it
    # shares with the server and the other procs alone
    from actors import Collector

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        frozen, walked = procs.spawn("gc", Collector).collect.call_one().get()
        assert frozen > 10_000  # the runtime's modules, classes and functions
        assert walked < frozen // 2
    finally:
        procs.stop().get(timeout=30)


def test_the_fork_server_prepares_what_each_proc_would_at_start_and_exit():
    # each proc makes an event loop as it starts: the module that implements
    # it (uvloop) is the fork server's already, so no proc imports it again;
    # each proc's clean exit tells the user's modules from installed ones,
    # which the server worked out once
    from actors import Inherited, Probe

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        pid = procs.spawn("probe", Probe).where.call_one().get(timeout=60)["pid"]
        with open(f"/proc/{pid}/stat") as stat:
            server = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{server}/maps") as maps:
            assert any("/uvloop/" in line for line in maps)
        ready = procs.spawn("inherited", Inherited).exit_paths_ready.call_one()
        assert ready.get(timeout=60) is True
    finally:
        procs.stop().get(timeout=30)


def test_a_process_at_an_address_an_earlier_one_had_is_reached():
    # ports are reused: a proc may listen where a stopped one did; what the
    # controller held for the old one (its failed connection, the numbering
    # of its messages) must not stand in the way of the new one
    from actors import Probe

    from monarch_actor import default_bootstrap_cmd

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fixed = default_bootstrap_cmd().with_env({"MONARCH_LISTEN_ADDRESS": f"tcp://127.0.0.1:{port}"})
    for _ in range(2):
        procs = this_host().spawn_procs(bootstrap_command=fixed)
        try:
            probes = procs.spawn("probe", Probe)
            for _ in range(3):  # numbered messages, each answered
                assert probes.where.call_one().get(timeout=60)["pid"] > 0
        finally:
            procs.stop().get(timeout=60)
