"""Heartbeat deadlines on a fake clock, and exit statuses in words."""

import signal

import pytest

from monarch_supervision import HeartbeatMonitor, exit_reason


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_peer_that_beats_is_never_overdue():
    clock = Clock()
    monitor = HeartbeatMonitor(5.0, clock)
    monitor.watch("p0")
    for _ in range(20):
        clock.now += monitor.interval
        monitor.beat("p0")
        assert monitor.overdue() == []


def test_a_silent_peer_is_reported_once_after_the_deadline():
    clock = Clock()
    monitor = HeartbeatMonitor(5.0, clock)
    monitor.watch("p0")
    monitor.watch("p1")
    clock.now += 4.0
    monitor.beat("p1")
    assert monitor.overdue() == []
    clock.now += 1.5
    assert monitor.overdue() == [("p0", 5.5)]
    assert monitor.overdue() == []  # reported once, then no longer watched
    assert monitor.watching() == ["p1"]


def test_beats_of_unwatched_or_forgotten_peers_are_ignored():
    clock = Clock()
    monitor = HeartbeatMonitor(1.0, clock)
    monitor.beat("stranger")
    monitor.watch("p0")
    monitor.forget("p0")
    clock.now += 10
    assert monitor.overdue() == []


@pytest.mark.parametrize("deadline", [0, -1.0])
def test_the_deadline_must_be_positive(deadline):
    with pytest.raises(ValueError, match="positive"):
        HeartbeatMonitor(deadline)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (3, "exited with non-zero code 3"),
        (
            -signal.SIGKILL,
            "the process this actor was running on failed: Killed(sig=9) "
            "(killed by SIGKILL: by a user, a timeout, or the kernel",
        ),
        (-signal.SIGSEGV, "failed: Killed(sig=11) (killed by SIGSEGV: a segmentation fault"),
        (-signal.SIGTERM, "Killed(sig=15) (killed by SIGTERM)"),
        (0, "exited with code 0 before it was stopped"),
        (-200, "signal 200"),
    ],
)
def test_exit_statuses_in_words(code, words):
    assert words in exit_reason(code)


def test_exit_reason_details_follow_monarchs_words():
    assert exit_reason(1, "process p-0, pid 7") == (
        "the process this actor was running on exited with non-zero code 1 (process p-0, pid 7)"
    )
    assert exit_reason(-signal.SIGTERM, "process p-0") == (
        "the process this actor was running on failed: Killed(sig=15) "
        "(killed by SIGTERM; process p-0)"
    )
