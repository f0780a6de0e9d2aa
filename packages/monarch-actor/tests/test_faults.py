"""Fault injection with real processes: what dies, who hears of it, how fast,
and that nothing hangs. (Run alone in a loop to check that it is stable:
see docs/concepts/supervision-guarantees.md.)"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from actors import (
    AsyncOwner,
    AsyncPanicker,
    AsyncSupervisor,
    AsyncVictim,
    BadInit,
    Probe,
    Supervisor,
    Victim,
)

from monarch_actor import ActorError, SupervisionError, this_host
from monarch_actor.testing import alive, wait_for

DETECT = 2.0  # seconds: a dead process on this host fails pending calls within this


def read(path):
    return Path(path).read_text() if os.path.exists(path) else ""


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("sigkill", "failed: Killed(sig=9) (killed by SIGKILL"),
        ("exit", "exited with non-zero code 3"),
        ("segfault", "failed: Killed(sig=11) (killed by SIGSEGV: a segmentation fault"),
    ],
)
def test_a_process_dying_in_a_call_fails_the_call_and_tells_the_owner(failures, how, words):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    victims = procs.spawn("victims", Victim)
    victim = victims.slice(gpus=1)
    victim.pid.call_one().get(timeout=30)
    started = time.monotonic()
    first = (
        r"Endpoint call victims\.die\(\) failed, The actor .*Victim victims.* and all its "
        r"descendants have failed:\n  the process this actor was running on "
        r".*(SIGKILL|code 3|SIGSEGV)"
    )
    with pytest.raises(SupervisionError, match=first):
        victim.die.call_one(how).get(timeout=DETECT)
    assert time.monotonic() - started < DETECT
    assert wait_for(lambda: failures)
    (failure,) = failures
    assert failure.mesh_name == victims._key and failure.crashed_ranks == [1]
    assert words in failure.report() and "Victim victims{'gpus': 1/2}" in failure.report()
    # later calls to the dead rank fail at once, and say why; the others still answer
    started = time.monotonic()
    later = (
        r"Endpoint call victims\.pid\(\) failed, The actor .*Victim victims.* and all its "
        r"descendants have failed:\n  the process this actor was running on "
    )
    with pytest.raises(SupervisionError, match=later + re.escape(words.split(" (")[0])):
        victim.pid.call_one().get(timeout=1)
    with pytest.raises(SupervisionError):
        victims.pid.call().get(timeout=1)
    assert time.monotonic() - started < 1
    assert victims.slice(gpus=0).pid.call_one().get(timeout=10) > 0
    procs.stop().get(timeout=30)
    assert len(failures) == 1  # once per failed rank, and a stop is no failure


def test_sigkill_while_blocked_in_a_sync_endpoint_fails_every_waiting_call(failures, tmp_path):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    victim = procs.spawn("blocked", Victim)
    pid = victim.pid.call_one().get(timeout=30)
    started = str(tmp_path / "started")
    busy = victim.block.call_one(60.0, started)
    queued = [victim.pid.call_one() for _ in range(5)]  # behind the busy one
    assert wait_for(lambda: read(started))
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    for future in [busy, *queued]:
        with pytest.raises(SupervisionError, match="SIGKILL"):
            future.get(timeout=DETECT)
    assert time.monotonic() - started < DETECT
    assert wait_for(lambda: failures) and failures[0].crashed_ranks == [0]
    procs.stop().get(timeout=30)


def state_of(pid):
    """The process's state letter (Z: exited, not yet reaped), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def test_a_send_to_a_killed_process_waits_for_its_exit_status(failures, monkeypatch):
    """A message sent after a process died finds a broken socket before the
    process's exit is reported: the call still fails with the exit status."""
    from monarch_actor._core import router

    monkeypatch.setattr(router, "EXIT_REPORT_GRACE", 30.0)  # the report is held back below
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    victim = procs.spawn("victim", Victim)
    pid = victim.pid.call_one().get(timeout=30)
    fork_server = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    os.kill(fork_server, signal.SIGSTOP)  # it reaps the process and reports its exit
    try:
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: state_of(pid) in ("Z", ""))  # its sockets are closed
        call = victim.pid.call_one()  # its write fails: the peer is gone
        with pytest.raises(TimeoutError):
            call.get(timeout=0.5)  # held for the exit report, not failed with the socket
    finally:
        os.kill(fork_server, signal.SIGCONT)
    with pytest.raises(SupervisionError, match="SIGKILL"):
        call.get(timeout=30)
    procs.stop().get(timeout=30)


def test_sigkill_during_an_async_call(failures, tmp_path):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    victim = procs.spawn("napping", AsyncVictim)
    pid = victim.pid.call_one().get(timeout=30)
    started = str(tmp_path / "started")
    napping = victim.nap.call_one(60.0, started)
    assert wait_for(lambda: read(started))
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SupervisionError, match="SIGKILL"):
        napping.get(timeout=DETECT)
    assert wait_for(lambda: failures)
    procs.stop().get(timeout=30)


def test_sigkill_during_a_broadcast_reaches_the_owner(failures, tmp_path):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    victims = procs.spawn("victims", Victim)
    pids = victims.pid.call().get(timeout=30)
    started = str(tmp_path / "started")
    victims.block.broadcast(60.0, started)
    assert wait_for(lambda: len(read(started).splitlines()) == 3)  # every rank is busy
    os.kill(pids[{"gpus": 2}], signal.SIGKILL)
    assert wait_for(lambda: failures, DETECT)
    assert failures[0].crashed_ranks == [2] and "SIGKILL" in failures[0].report()
    with pytest.raises(SupervisionError, match="and all its descendants have failed"):
        victims.slice(gpus=2).pid.call_one().get(timeout=1)
    procs.stop().get(timeout=30)
    assert len(failures) == 1


def test_sigkill_during_spawn_fails_the_spawn(failures, tmp_path):
    log = str(tmp_path / "log")
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    slow = procs.spawn("slow", Victim, log, 60.0)  # __init__ sleeps a minute
    assert wait_for(lambda: read(log).startswith("init"))
    pid = int(read(log).split()[1])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SupervisionError, match="SIGKILL"):
        slow.initialized.get(timeout=DETECT)
    assert wait_for(lambda: failures)
    refused = r"(?s)cannot spawn .* Killed\(sig=9\) \(killed by SIGKILL"
    with pytest.raises(SupervisionError, match=refused):
        procs.spawn("again", Victim)
    procs.stop().get(timeout=30)


def test_init_raising_fails_the_spawn_with_that_error(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    bad = procs.spawn("bad", BadInit)
    with pytest.raises(ActorError, match="no config file") as caught:
        bad.initialized.get(timeout=30)
    assert isinstance(caught.value.exception, ValueError)
    with pytest.raises(SupervisionError, match="__init__ of bad raised"):
        bad.ping.call().get(timeout=10)
    assert wait_for(lambda: len(failures) == 2)  # each rank, once
    assert sorted(r for f in failures for r in f.crashed_ranks) == [0, 1]
    procs.stop().get(timeout=30)


def test_a_failed_sync_actors_thread_ends_after_its_cleanup(failures, tmp_path):
    """As Monarch's driver: once the actor failed and its __cleanup__ ran,
    its thread ends; the process answers its later calls with the failure,
    and stops as usual."""
    log = str(tmp_path / "log")
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    probe = procs.spawn("probe", Probe)
    victim = procs.spawn("victim", Victim, log)
    ident = victim.thread_ident.call_one().get(timeout=30)
    victim.die.broadcast("raise")
    victim.block.broadcast(0.0, str(tmp_path / "after"))  # queued behind: never runs
    assert probe.driver_ended.call_one(ident, 30.0).get(timeout=60)
    assert "cleanup 0 ValueError" in read(log)
    assert not os.path.exists(tmp_path / "after")
    with pytest.raises(SupervisionError, match="a bad batch"):
        victim.pid.call_one().get(timeout=10)
    procs.stop().get(timeout=30)


def test_an_actor_whose_init_raised_has_no_cleanup_and_its_thread_ends(failures, tmp_path):
    log = str(tmp_path / "log")
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    probe = procs.spawn("probe", Probe)
    bad = procs.spawn("bad", BadInit, log)
    with pytest.raises(ActorError, match="no config file"):
        bad.initialized.get(timeout=30)
    ident = int(read(log).split()[1])
    assert probe.driver_ended.call_one(ident, 30.0).get(timeout=60)
    assert "cleanup" not in read(log)
    with pytest.raises(SupervisionError, match="__init__ of bad raised"):
        bad.ping.call_one().get(timeout=10)
    procs.stop().get(timeout=30)


def test_abort_without_a_reason_says_so_in_monarchs_words(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    victims = procs.spawn("aborting", Victim, "")
    victims.initialized.get(timeout=30)
    victims.die.broadcast("abort")
    assert wait_for(lambda: failures)
    assert "actor explicitly aborted due to: no reason provided" in failures[0].report()
    procs.stop().get(timeout=30)


def test_an_endpoint_raising_in_a_broadcast_stops_the_actor_and_runs_its_cleanup(
    failures, tmp_path
):
    log = str(tmp_path / "log")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    victims = procs.spawn("victims", Victim, log)
    victims.initialized.get(timeout=30)
    victims.slice(gpus=1).die.broadcast("raise")
    assert wait_for(lambda: failures)
    assert "actor explicitly aborted due to" in failures[0].report()
    assert "a bad batch" in failures[0].report()
    assert wait_for(lambda: "cleanup 1 ValueError" in read(log))
    procs.stop().get(timeout=30)
    assert "cleanup 0 None" in read(log)  # a normal stop: __cleanup__(None)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_supervisor_respawns_its_failed_workers_and_work_goes_on(failures, kind):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    if kind == "sync":
        boss = procs.spawn("boss", Supervisor, True)
    else:
        boss = procs.spawn("boss", AsyncSupervisor)
    before = boss.work.call_one().get(timeout=60)
    boss.crash_worker.call_one(1, "sigkill").get(timeout=10)
    assert wait_for(lambda: boss.seen.call_one().get(timeout=10), 10)
    after = boss.work.call_one().get(timeout=60)
    assert set(after).isdisjoint(before)  # new worker processes
    (report,) = boss.seen.call_one().get(timeout=10)
    assert "SIGKILL" in report and "worker" in report
    procs.stop().get(timeout=30)
    assert failures == []  # handled in the middle of the tree: the controller heard nothing
    assert wait_for(lambda: not any(alive(p) for p in after))


def test_an_unhandled_failure_climbs_to_the_hook_with_its_chain(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    boss = procs.spawn("boss", Supervisor, False)
    workers = boss.work.call_one().get(timeout=60)
    boss.crash_worker.call_one(0, "exit").get(timeout=10)
    assert wait_for(lambda: failures)
    (failure,) = failures
    assert failure.mesh_name == boss._key
    assert "did not handle a supervision event from its child" in str(failure)
    # the report names the actor that failed first, as Monarch's does
    assert failure.report().startswith(f"The actor {failure.chain[-1].actor} and all its")
    assert "exited with non-zero code 3" in failure.report()
    assert [f.mesh_name.split("-")[0] for f in failure.chain] == ["boss", "worker"]
    assert "exited with non-zero code 3" in failure.chain[-1].reason
    with pytest.raises(SupervisionError, match="did not handle"):
        boss.work.call_one().get(timeout=5)
    # a failed owner stops what it owns: its other worker is gone too
    assert wait_for(lambda: not any(alive(p) for p in workers))
    procs.stop().get(timeout=30)


def test_an_async_endpoint_raising_a_base_exception_fails_the_call_and_the_actor(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    actor = procs.spawn("panicker", AsyncPanicker)
    assert actor.ping.call_one().get(timeout=30) == 1
    first = r"The actor .*panicker.* and all its descendants have failed:.*Panic"
    with pytest.raises(SupervisionError, match=re.compile(first, re.DOTALL)):
        actor.panic.call_one().get(timeout=10)  # answered, not left waiting
    with pytest.raises(SupervisionError, match="and all its descendants have failed"):
        actor.ping.call_one().get(timeout=10)
    assert wait_for(lambda: failures)
    assert "a BaseException: the actor cannot go on" in failures[0].report()
    procs.stop().get(timeout=30)


def test_an_async_owner_supervises_while_its_endpoint_awaits(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", AsyncOwner, True)
    first = owner.fail_child_then_wait.call_one().get(timeout=30)
    assert "The actor" in first and "child" in first
    name, names = owner.mesh_names.call_one().get(timeout=10)
    assert names and all(n == name for n in names)  # `_name` is the failures' mesh_name
    assert name.startswith("child")
    procs.stop().get(timeout=30)
    assert failures == []


def test_a_failure_left_unhandled_fails_the_calls_in_flight_with_the_first_failure(failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", AsyncOwner, False)
    # the call waits for ever unless the owner's failure answers it; as in Monarch,
    # it names the actor that failed first (the child) and why
    words = (
        r"(?s)owner\.fail_child_then_wait\(\) failed, The actor .*AsyncPanicker child.* "
        r"and all its descendants have failed:\n  actor explicitly aborted due to: .*Panic"
    )
    with pytest.raises(SupervisionError, match=words):
        owner.fail_child_then_wait.call_one().get(timeout=30)
    assert wait_for(lambda: failures)
    assert "did not handle a supervision event from its child" in str(failures[0])
    assert "AsyncPanicker child" in failures[0].report()
    procs.stop().get(timeout=30)


def test_cleanup_runs_after_the_meshes_the_actor_owns_were_stopped(tmp_path):
    log = str(tmp_path / "log")
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    boss = procs.spawn("boss", Supervisor, True, log)
    boss.work.call_one().get(timeout=60)
    procs.stop().get(timeout=30)
    lines = read(log).splitlines()
    cleanups = [line for line in lines if "cleanup" in line]
    assert cleanups[-1] == "supervisor cleanup"
    assert sorted(cleanups[:-1]) == ["cleanup 0 None", "cleanup 1 None"]


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    sys.path.insert(0, {tests!r})
    import monarch_actor
    from monarch_actor import this_host
    from monarch_actor.testing import wait_for
    from actors import Victim

    procs = this_host().spawn_procs(per_host={{"gpus": 2}})
    victims = procs.spawn("victims", Victim)
    pids = victims.pid.call().get(timeout=30)
    """
)


def run(body, env=None, timeout=60, sigint=signal.SIG_DFL):
    tests = os.path.dirname(os.path.abspath(__file__))
    code = SCRIPT.format(tests=tests) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        # as from a terminal, even when these tests run as a background job (SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )


def test_a_silent_process_is_found_by_heartbeats():
    done = run(
        """
        seen = []
        monarch_actor.unhandled_fault_hook = seen.append
        os.kill(pids[{"gpus": 1}], signal.SIGSTOP)  # alive, but silent
        started = time.monotonic()
        try:
            victims.slice(gpus=1).block.call_one(0.0).get(timeout=10)
        except monarch_actor.SupervisionError as error:
            print("call failed after", round(time.monotonic() - started, 1), error)
        wait_for(lambda: seen, 10)
        print("hook:", seen[0].report() if seen else None)
        print("survivor:", victims.slice(gpus=0).pid.call_one().get(timeout=10) > 0)
        procs.stop().get(timeout=30)
        """,
        env={"MONARCH_HEARTBEAT_DEADLINE": "1.5"},
    )
    assert "call failed after" in done.stdout, done.stderr
    waited = float(done.stdout.split("call failed after ")[1].split()[0])
    assert waited < 1.5 + 1.0
    assert "no heartbeat for" in done.stdout and "MONARCH_HEARTBEAT_DEADLINE" in done.stdout
    assert "hook: The actor" in done.stdout
    assert "survivor: True" in done.stdout


@pytest.mark.parametrize("hook", ["default", "raises", "returns", "sigint ignored"])
def test_the_root_hook_decides_whether_the_script_goes_on(hook):
    install = {
        "default": "",
        "raises": "def hook(f): raise RuntimeError('not mine')\n"
        "monarch_actor.unhandled_fault_hook = hook",
        "returns": "monarch_actor.unhandled_fault_hook = handled.append",
        "sigint ignored": "",
    }[hook]
    done = run(
        "handled = []\n"
        + install
        + textwrap.dedent(
            """
            victims.slice(gpus=0).die.broadcast("raise")
            wait_for(lambda: handled, 30)
            print("went on", len(handled))
            procs.stop().get(timeout=30)
            """
        ),
        sigint=signal.SIG_IGN if hook == "sigint ignored" else signal.SIG_DFL,
    )
    if hook == "returns":
        assert "went on 1" in done.stdout and done.returncode == 0, done.stderr
    else:
        assert "went on" not in done.stdout, done.stderr
        assert done.returncode != 0
        assert "Unhandled monarch error on the root actor, hostname=" in done.stderr
        assert "a bad batch" in done.stderr
        if hook == "sigint ignored":
            assert "SIGINT is ignored by this process" in done.stderr and done.returncode == 1
        else:
            assert "KeyboardInterrupt" in done.stderr


def test_a_slow_cleanup_does_not_hold_up_a_stop():
    done = run(
        """
        from actors import SlowCleanup
        stuck = procs.spawn("stuck", SlowCleanup)
        stuck.pid.call().get(timeout=30)
        started = time.monotonic()
        procs.stop().get(timeout=30)
        print("stopped after", round(time.monotonic() - started, 1))
        """,
        env={"MONARCH_CLEANUP_TIMEOUT": "1"},
    )
    assert "stopped after" in done.stdout, done.stderr
    assert float(done.stdout.split("stopped after ")[1].split()[0]) < 5
    assert "did not finish in 1 s" in done.stderr


def test_killing_the_controller_leaves_no_orphans():
    script = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
            + textwrap.dedent(
                """
                from monarch_actor._api.proc_control import host_agent
                boss = procs.slice(gpus=0).spawn("boss", __import__("actors").Supervisor, True)
                grandchildren = boss.work.call_one().get(timeout=60)
                everyone = [host_agent().process.pid, *pids.values(), *grandchildren]
                print(" ".join(map(str, everyone)), flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = script.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 5, (line, script.stderr.read() if script.poll() is not None else "")
        os.kill(script.pid, signal.SIGKILL)
        script.wait(30)
        assert wait_for(lambda: not any(alive(p) for p in pids), 15)
    finally:
        script.kill()
        script.wait()
